"""The actor's wake-up schedules and its alarm in the directory.

An actor's schedules live in its own file (:class:`~roost.actors.schedules.ScheduleStore`), as does
its queue (:class:`~roost.actors.queue.QueueStore`, whose head is due like a wake-up); the
directory keeps one alarm per actor, the earliest due time of either, so that the dispatcher can wake dormant
actors. These functions are :class:`~roost.actors.host.ActorHost` methods (bound in its class body).

Guarantee (``tests/test_scheduler.py``): **a directory alarm may be early, never late.** A batch that
makes the actor's next wake-up earlier lowers the directory's alarm *before* its commit; one that
makes it later (or removes it) raises it only after the commit. Whatever crashes when, a wake-up is at
worst delivered spuriously early (and finds nothing due), never missed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from roost.actors import wakeups
from roost.actors.errors import StateError
from roost.actors.queue import QueueStore
from roost.actors.statelog import to_json
from roost.storage import DirectoryBusy

if TYPE_CHECKING:
    from roost.actors.parts import HostCore

__all__ = ["add_schedule", "alarm_after_commit", "alarm_before_commit", "cancel_schedule"]

log = logging.getLogger("roost.actor")


def alarm_before_commit(host: HostCore) -> float | None:
    """The actor's earliest wake-up as this batch leaves it. If earlier than the directory's, the
    directory is lowered *before* the commit: a directory alarm may be early (a spurious wake) but
    never later than the truth, whatever crashes when."""
    alarm = host.schedules.next_alarm()
    queued = QueueStore(host.file.conn).next_due()  # the queue's head is due like a wake-up
    if queued is not None and (alarm is None or queued < alarm):
        alarm = queued
    directory = host.registry.directory
    if alarm is not None and directory is not None and (host.dir_alarm is None or alarm < host.dir_alarm):
        directory.lower_alarm(host.kind, host.name, alarm)
    return alarm


def alarm_after_commit(host: HostCore, alarm: float | None) -> None:
    """After the commit: the directory takes the true alarm (later or none), dropping any claim."""
    directory = host.registry.directory
    host.alarm_dirty = False
    if directory is None:
        return
    try:
        directory.set_alarm(host.kind, host.name, alarm)
    except DirectoryBusy:  # another process holds the lock: the next batch writes it
        log.info("alarm of %s/%r not written: the directory is busy", host.kind, host.name)
        host.alarm_dirty = True
        return
    except Exception:  # a later alarm not written only means a spurious wake-up
        log.exception("could not write the alarm of %s/%r", host.kind, host.name)
        host.alarm_dirty = True
        return
    host.dir_alarm = alarm
    if alarm is not None:
        host.registry.alarm_set(alarm)


def add_schedule(host: HostCore, trigger: dict[str, Any], callback: str, payload: Any, **options: Any) -> Any:
    """Add (or find, by key) a wake-up schedule, in the turn."""
    host.require_writable()
    host.require_turn()
    fn = wakeups.check_callback(type(host.actor), callback)
    model = getattr(fn, "__roost_wakeup_model__", None)
    if model is not None:
        payload = model.model_validate(payload).model_dump(mode="json")
    try:
        to_json(payload)
    except TypeError as exc:
        raise StateError(f"payload is not JSON: {exc}") from exc
    timeout = options.pop("timeout", None)
    schedule, new = host.schedules.add(
        callback=callback,
        payload=payload,
        trigger=trigger,
        timeout=float(timeout if timeout is not None else host.turn_timeout * 0.9),
        trace_id=host.turn.trace_id,
        now=host.turn.now,
        **options,
    )
    if new:
        host.alarm_dirty = True
    return schedule


def cancel_schedule(host: HostCore, id_or_key: str) -> bool:
    host.require_writable()
    host.require_turn()
    done = host.schedules.cancel(id_or_key)
    if done:
        host.alarm_dirty = True
    return done
