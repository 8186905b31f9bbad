"""Fire turns: running an actor's due wake-ups inside its mailbox.

Guarantees (docs/design.md, *Wake-ups*; tests in ``tests/test_scheduler.py``):

- **Exactly-once effect per ``(schedule_id, nominal time)``.** The callback runs inside a SAVEPOINT of
  its fire turn; on success, the completion row (``roost_fires``) and the schedule's advance are written
  in the same transaction as the callback's own writes. A crash before the commit leaves the fire due (it
  is delivered again); after it, the fire is done and its completion row stops a second delivery.
- **Failures retry, then dead-letter.** A callback that raises or exceeds its ``timeout`` is rolled back
  (its writes, state changes and frames), counted, and retried after full-jitter exponential backoff; at
  ``max_attempts`` the fire becomes a dead letter (listed by ``dead_letters()``, announced by a durable
  ``wakeup_dead`` event) and a recurring schedule goes on with its next time.
- **Misfires are never silent**: see :class:`~roost.actors.schedules.Misfire`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING

from roost.actors.decorators import check_callback
from roost.actors.schedules import MAX_CATCH_UP, Misfire, Schedule, ScheduleStatus
from roost.actors.turn import log_failure, report

if TYPE_CHECKING:
    from roost.actors.parts import HostCore


__all__ = ["check_callback", "run_due"]

log = logging.getLogger("roost.wakeups")


async def run_due(host: HostCore) -> int:
    """Fire every due wake-up of ``host``'s actor, each in its own turn; return how many turns ran.

    Bounded: at most MAX_CATCH_UP fires per call (a ``run_all`` catch-up continues on the next wake).
    """
    now = host.clock.now()
    fired = 0
    while fired < MAX_CATCH_UP:
        due = host.schedules.due(now, limit=1)
        if not due:
            break
        if not await _fire(host, due[0], now) and not await _record_abort(host, due[0], now):
            break  # not even its failure could be recorded: stop here, the next wake tries again
        fired += 1
        await asyncio.sleep(0)  # a long catch-up does not keep the event loop to itself
    host.alarm_dirty = True  # whatever happened, the directory gets the actor's true next alarm
    return fired


async def _fire(host: HostCore, sid: str, now: float) -> bool:
    """One fire turn; False if the turn itself had to be rolled back (a bug, or the actor stopping)."""
    with host.turn.run(None, _fire_failed, sid) as turn:
        s = host.schedules.get(sid)
        if s is not None and s.status == ScheduleStatus.ACTIVE and s.due is not None and s.due <= now:
            await _fire_schedule(host, s, now)
    return turn.ok


def _fire_failed(host: HostCore, sid: str, exc: BaseException) -> None:
    log.error("wake-up %s of %s/%r could not be handled", sid, host.kind, host.name, exc_info=exc)


async def _fire_schedule(host: HostCore, s: Schedule, now: float) -> None:
    """One fire of ``s``, for its nominal time ``s.next_fire`` (a retry keeps the same nominal time)."""
    assert s.next_fire is not None
    store = host.schedules
    nominal = s.next_fire
    if s.retry_at is None and now - nominal > s.misfire_grace and s.misfire != Misfire.RUN_ALL:
        missed = store.missed(s, now)
        event = {
            "schedule_id": s.id,
            "callback": s.callback,
            "missed": len(missed),
            "at_least": len(missed) > MAX_CATCH_UP,  # counted up to a bound
            "first": missed[0],
        }
        if s.misfire == Misfire.SKIP:
            store.advance_past(s, now)
            host.emit({"type": "wakeup_skipped", **event})
            return
        if len(missed) > 1:  # run once: this run, for the latest missed time, stands for all of them
            nominal = missed[-1]
            store.set_nominal(s, nominal)  # a retry of it keeps this nominal time
            host.emit({"type": "wakeup_coalesced", **event, "run_for": nominal})
    if store.completed(s.id, nominal):  # its effect is already there: only move on
        _move_on(host, s, nominal, now)
        return
    due = s.retry_at if s.retry_at is not None else nominal
    lateness = max(0.0, now - due)
    if host.observer is not None:
        host.observer.wake(host.kind, lateness)
    savepoint = host.turn.savepoint("fire")
    try:
        async with host.clock.timeout(min(s.timeout, host.turn_timeout * 0.9)):
            await _invoke(host, s)
    except Exception as exc:  # includes the timeout; cancellation of the turn goes up
        savepoint.rollback()
        if isinstance(exc, TimeoutError):
            error = "timeout"
        else:
            log_failure(host, exc, f"wake-up {s.callback}")
            error = f"{type(exc).__name__}: {exc}"
        _failed(host, s, nominal, error, now)
        report(host, exc, None)
        return
    savepoint.release()
    store.record_fire(s, nominal, now, lateness)
    _move_on(host, s, nominal, now)
    if (s.runs + 1) % 100 == 0:
        store.prune_fires(s.id)


def _move_on(host: HostCore, s: Schedule, nominal: float, now: float) -> None:
    """After the fire for ``nominal``: the next nominal time, unless the callback cancelled the schedule.
    Under ``run_once`` and ``skip``, times already missed are covered by this run (no run per missed
    time; only ``run_all`` catches up one by one)."""
    store = host.schedules
    if s.misfire == Misfire.RUN_ALL:
        store.advance(s, nominal, now)
        return
    nxt = store.peek_next(s, nominal, now)
    if nxt is not None and now - nxt > s.misfire_grace:
        store.advance_past(s, now)
    else:
        store.advance(s, nominal, now)


def _failed(host: HostCore, s: Schedule, nominal: float, error: str, now: float) -> None:
    store = host.schedules
    attempt = s.attempts + 1
    if attempt >= s.max_attempts:
        letter = store.dead_letter(s, nominal, error, now)
        _move_on(host, s, nominal, now)
        if s.trigger["type"] == "date":
            host.file.conn.execute(
                "UPDATE roost_schedules SET status = ? WHERE id = ?", (ScheduleStatus.DEAD, s.id)
            )
        host.emit(
            {
                "type": "wakeup_dead",
                "schedule_id": s.id,
                "callback": s.callback,
                "nominal": nominal,
                "attempts": attempt,
                "error": error,
                "dead_letter": letter,
            }
        )
        return
    store.record_failure(s, error, now + s.retry.delay(attempt, host.registry.rng))


async def _record_abort(host: HostCore, sid: str, now: float) -> bool:
    """A fire turn was rolled back as a whole (its callback raised something that is not an Exception,
    or the turn's own deadline struck): count it as a failed attempt, in a turn of its own, so that it
    backs off and ends as a dead letter instead of being redelivered at once, forever."""
    with host.turn.run(None, _record_failed, sid) as turn:
        s = host.schedules.get(sid)
        if s is not None and s.status == ScheduleStatus.ACTIVE and s.next_fire is not None:
            _failed(host, s, s.next_fire, "the fire turn was aborted", now)
    return turn.ok


def _record_failed(host: HostCore, sid: str, exc: BaseException) -> None:
    log.error("could not record the failure of wake-up %s", sid, exc_info=exc)


async def _invoke(host: HostCore, s: Schedule) -> None:
    fn = check_callback(type(host.actor), s.callback)
    model = getattr(fn, "__roost_wakeup_model__", None)
    payload = model.model_validate(s.payload) if model is not None else s.payload
    bound = getattr(host.actor, s.callback)
    takes_payload = len(inspect.signature(bound).parameters) > 0
    result = bound(payload) if takes_payload else bound()
    if inspect.isawaitable(result):
        await result
