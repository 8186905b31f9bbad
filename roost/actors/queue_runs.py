"""Queue turns: running an actor's queued items, head first, inside its mailbox.

The records and their guarantees are :mod:`roost.actors.queue`'s; this module runs them (the flow and
the item states are in docs/design.md, *Durable queue*). A ``Wake`` input (the dispatcher's, after
the actor's alarm came due, or ``ActorKit.fire_due``) runs the due wake-ups and then :func:`run_due`:
one turn per item, each one:

1. The head (the live item with the lowest position) is read. If it is ``running``, its last attempt
   never finished (the process died during it, or its turn was rolled back as a whole): that attempt
   failed, "interrupted", and the policy decides (a retry later, or a dead letter).
2. If it is due, its attempt is counted (``running``, ``attempts + 1``) and committed before the
   callback runs (``turn.checkpoint()``): an attempt the process does not survive is not lost count of.
3. The callback runs in a savepoint, bounded by the item's timeout on the runtime's clock. It returned:
   the item is ``done`` in the same commit as the callback's writes. It raised or timed out: the
   savepoint is rolled back (its writes, state, frames), and the item waits for ``retry_at`` (full
   jitter) or, at ``max_attempts``, is dead (a ``queue_dead`` event says so) and the queue moves on.

At most :data:`BATCH` items run per wake; the actor's alarm then stays due (the head's due time is
the past) and the next wake queues behind the inputs that came meanwhile.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING

from roost.actors.decorators import check_callback
from roost.actors.queue import QueueItem, QueueStatus, QueueStore
from roost.actors.turn import log_failure, report

if TYPE_CHECKING:
    from roost.actors.parts import HostCore

__all__ = ["BATCH", "run_due"]

log = logging.getLogger("roost.queue")

#: Items run per wake at most (each in its own turn); the rest follow on the next wake.
BATCH = 100
#: What an attempt the process (or its turn) did not survive is recorded as.
INTERRUPTED = "interrupted: the attempt did not finish (the process stopped, or its turn was aborted)"


async def run_due(host: HostCore) -> int:
    """Run the due items of ``host``'s actor's queue in order, each in its own turn; how many turns
    ran. Stops at the first item not yet due (the head blocks the queue), or after :data:`BATCH`."""
    ran = 0
    aborted = 0
    store = QueueStore(host.file.conn)
    while ran < BATCH and not host.file.closed:  # closed: the actor failed (a commit did)
        head = store.head()
        if head is None:
            break
        due = head.due
        if due is None or due > host.clock.now():
            break
        ok = await _turn(host, store, head)
        ran += 1
        if not ok:  # rolled back whole: the item is still running; the next turn records it failed
            aborted += 1
            if aborted > 1:
                break  # not even that could be recorded: the next wake tries again
        await asyncio.sleep(0)  # a long queue does not keep the event loop to itself
    if ran:
        host.alarm_dirty = True  # the directory gets the actor's true next alarm with the batch
    return ran


async def _turn(host: HostCore, store: QueueStore, head: QueueItem) -> bool:
    """One item's turn. ``head`` was read just before it, in the mailbox task: no other turn ran
    between (this task is the only one that runs the actor's turns), so it is the head still."""
    with host.turn.run(None, _turn_failed, head) as turn:
        await _attempt(host, store, head)
    return turn.ok


def _turn_failed(host: HostCore, item: QueueItem, exc: BaseException) -> None:
    log.error("queue item %s of %s/%r could not be handled", item.id, host.kind, host.name, exc_info=exc)


async def _attempt(host: HostCore, store: QueueStore, item: QueueItem) -> None:
    now = host.turn.now
    if item.status is QueueStatus.RUNNING:  # counted, never finished
        _failed(host, store, item, INTERRUPTED, now)
        return
    if item.due is None or item.due > now:
        return
    # the attempt is counted, durably, before the callback runs. The alarm is not synced for it: the
    # head's due time only moves later (from enqueued_at to now), and a directory alarm may be early
    item = store.start(item, now)
    host.turn.checkpoint()
    savepoint = host.turn.savepoint("queue_item")
    try:
        async with host.clock.timeout(min(item.timeout, host.turn_timeout * 0.9)):
            await _invoke(host, item)
    except Exception as exc:  # includes the timeout; cancellation of the turn goes up
        savepoint.rollback()
        if isinstance(exc, TimeoutError):
            error = "timeout"
        else:
            log_failure(host, exc, f"queue item {item.id} ({item.callback})")
            error = f"{type(exc).__name__}: {exc}"
        _failed(host, store, item, error, host.clock.now())
        report(host, exc, None)
        return
    savepoint.release()
    store.complete(item, host.clock.now())


def _failed(host: HostCore, store: QueueStore, item: QueueItem, error: str, now: float) -> None:
    """The attempt counted in ``item.attempts`` failed: retry it later, or bury it."""
    host.alarm_dirty = True
    if item.attempts >= item.max_attempts:
        store.bury(item, error, now)
        host.emit(
            {
                "type": "queue_dead",
                "item_id": item.id,
                "callback": item.callback,
                "attempts": item.attempts,
                "error": error[:500],
            }
        )
        return
    store.retry_later(item, error, now + item.retry.delay(item.attempts, host.registry.rng))


#: How many arguments each callback takes besides ``self``, by kind and method (bounded by the code).
_ARITY: dict[tuple[type, str], int] = {}


def _arity(cls: type, name: str) -> int:
    found = _ARITY.get((cls, name))
    if found is None:
        static = isinstance(inspect.getattr_static(cls, name, None), staticmethod | classmethod)
        found = len(inspect.signature(getattr(cls, name)).parameters) - (0 if static else 1)
        _ARITY[(cls, name)] = found
    return found


async def _invoke(host: HostCore, item: QueueItem) -> None:
    """``callback(payload, item)``, ``callback(payload)`` or ``callback()``, as its signature takes."""
    fn = check_callback(type(host.actor), item.callback)
    model = getattr(fn, "__roost_wakeup_model__", None)
    payload = model.model_validate(item.payload) if model is not None else item.payload
    bound = getattr(host.actor, item.callback)
    takes = _arity(type(host.actor), item.callback)
    result = bound(payload, item) if takes >= 2 else bound(payload) if takes == 1 else bound()
    if inspect.isawaitable(result):
        await result
