"""The retention of an actor's finished workflows: the newest ``workflow_retention`` are kept, the
older ones deleted a bounded batch at a time (docs/design.md, *Workflow core*, the bounds row of the
checkpoint rules): by the start that finds them when they fit in a batch, else by prune wake-ups.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from roost.actors import Actor, ScheduleStatus
from roost.workflows.store import WorkflowStore
from roost.workflows.wakes import schedule_wake

__all__ = ["Retaining", "bound_finished", "prune"]


class Retaining(Protocol):
    """What the retention needs of an actor's engine (:class:`roost.workflows.engine.Engine`)."""

    actor: Actor
    retention: int
    prune_batch: int
    prune_rows: int

    @property
    def store(self) -> WorkflowStore: ...

    @property
    def now(self) -> float: ...


#: Keys a prune wake-up tries for one oldest finished workflow before it goes without one.
_PRUNE_KEYS = 8


async def bound_finished(engine: Retaining, store: WorkflowStore) -> None:
    """At a start: once a tenth of the retention more finished workflows have gathered, delete
    those past it here if they are at most a batch; more, and a prune wake-up deletes them."""
    over = store.finished_count() - engine.retention
    if over < max(1, engine.retention // 10):
        return
    if over <= engine.prune_batch and store.prune_finished(over, engine.prune_rows) == over:
        return
    await _prune_later(engine, store)


async def prune(engine: Retaining) -> None:
    """A prune wake-up: delete a batch of the finished workflows past the retention, and wake
    again while some are left."""
    store = engine.store
    over = store.finished_count() - engine.retention
    if over <= 0:
        return
    if store.prune_finished(min(over, engine.prune_batch), engine.prune_rows) < over:
        await _prune_later(engine, store)


async def _prune_later(engine: Retaining, store: WorkflowStore) -> None:
    """A prune wake-up at once, unless one is pending: keyed by the finished workflow it deletes
    first, so the starts that come before it runs find it rather than add another. (A key whose
    wake-up has run and left that workflow — it found none past the retention then — is spent:
    the next of its numbered variants is taken.)"""
    oldest = store.oldest_finished()
    if oldest is None:
        return
    digest = hashlib.sha256(f"{oldest[0]}\x00{oldest[1]!r}".encode()).hexdigest()[:24]
    key: str | None = None
    for n in range(_PRUNE_KEYS):
        key = f"wf:prune:{digest}:{n}"
        found = await engine.actor.get_schedule(key)
        if found is None:
            break
        if found.status is ScheduleStatus.ACTIVE:
            return
    else:
        key = None  # every variant spent: a wake-up of no key
    await schedule_wake(engine.actor, engine.now, {"why": "prune"}, key=key)
