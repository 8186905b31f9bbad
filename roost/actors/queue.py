"""A durable FIFO queue per actor: its records, its table in the actor's file, and the SQL over it.

``await self.enqueue("method", payload, retry=RetryPolicy(...))`` adds an item; the actor's alarm runs
the items one at a time, in order, each in a turn of its own (:mod:`roost.actors.queue_runs`). This is
Cloudflare's ``this.queue(callback, payload)`` without its flaw: there the queue is drained by the
call to ``queue()``, in memory, so items left by an eviction wait for the next ``queue()``; here the
queue's head is due like a wake-up, so the directory's alarm wakes the actor after a restart and the
queue drains with no new enqueue. Names, side by side: ``queue`` → :meth:`Actor.enqueue
<roost.actors.Actor.enqueue>`, ``dequeue`` → ``cancel_queued``, ``getQueue`` → ``get_queued``,
``getQueues`` → ``list_queue``; dead letters (``queue_dead_letters``) have no Cloudflare counterpart.

Guarantees (docs/design.md, *Durable queue*; tests in ``tests/test_queue.py`` and
``tests/test_queue_process.py``, named after them):

- **Enqueued with the turn.** The item is written in the enqueuing turn's transaction: a turn that is
  rolled back enqueues nothing, and no item runs before the turn that made it has committed.
- **Strict FIFO.** Only the head (the live item with the lowest position) runs: item n+1 never starts
  before item n is done, dead or cancelled. A head that waits for its retry **blocks the queue** behind
  it until it succeeds, dies or is cancelled.
- **Exactly once for writes in the actor's file.** An item's callback runs in a savepoint of its own
  turn; its writes commit together with the item's completion. Effects outside the file are at least
  once: the callback may take the item (:class:`QueueItem`) and pass ``item.idempotency_key`` (the
  item's id, the same for every attempt) to the system it calls.
- **Retries, then a dead letter.** A callback that raises or passes its timeout is rolled back and
  retried after ``RetryPolicy``'s full-jitter backoff (the wake-ups' policy); after ``max_attempts`` it
  is dead (``queue_dead_letters()``, with its error; a ``queue_dead`` event) and the queue moves on.
  An attempt is counted durably before its callback runs, so an attempt the process did not survive
  counts as failed ("interrupted"): a callback that kills the process ends dead, not in a crash loop.
- **Survives restarts.** Items live in the actor's file; the directory's alarm points at the head, so
  a restarted server drains the queue by itself.
- **Bounded.** A payload is at most ``Actor.queue_payload_bytes`` of JSON (:class:`PayloadTooLarge`),
  a queue holds at most ``Actor.queue_limit`` live items (:class:`QueueFull`); of finished items the
  done or cancelled ones at most :data:`KEPT_FINISHED` positions behind the newest item (pruned in
  steps of :data:`PRUNE_STEP` at any finish) and the newest :data:`KEPT_DEAD` dead are kept.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors.decorators import check_callback
from roost.actors.errors import PayloadTooLarge, QueueFull, StateError
from roost.actors.schedules import RetryPolicy
from roost.storage import Migration

if TYPE_CHECKING:
    import sqlite3

    from roost.actors.interfaces import HostApi

__all__ = [
    "COMPONENT",
    "KEPT_DEAD",
    "KEPT_FINISHED",
    "MIGRATIONS",
    "PAYLOAD_BYTES",
    "PRUNE_STEP",
    "QUEUE_LIMIT",
    "PayloadTooLarge",
    "QueueFull",
    "QueueItem",
    "QueueStatus",
    "QueueStore",
    "cancel",
    "enqueue",
    "queue_report",
]

#: The actor layer's component in ``roost_migrations`` (applied to every actor file at activation).
COMPONENT = "queue"
MIGRATIONS: Sequence[Migration] = (
    # v1: the items, in order (position = rowid: a new item is always last). Finished rows stay, bounded,
    # for inspection; the partial index finds the head and counts the live items without reading them.
    """
    CREATE TABLE roost_queue (
        position     INTEGER PRIMARY KEY,
        id           TEXT    NOT NULL UNIQUE,
        callback     TEXT    NOT NULL,
        status       TEXT    NOT NULL,
        attempts     INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        backoff_base REAL    NOT NULL,
        backoff_cap  REAL    NOT NULL,
        timeout      REAL    NOT NULL,
        retry_at     REAL,
        last_error   TEXT,
        trace_id     TEXT    NOT NULL,
        enqueued_at  REAL    NOT NULL,
        started_at   REAL,
        finished_at  REAL,
        payload      TEXT    NOT NULL
    );
    CREATE INDEX roost_queue_live ON roost_queue (position) WHERE status IN ('pending', 'running');
    """,
    # the done and cancelled rows, for their pruning (the oldest one is read at every finish)
    "CREATE INDEX roost_queue_finished ON roost_queue (position) WHERE status IN ('done', 'cancelled')",
)

#: Default bound of one payload, in bytes of JSON (``Actor.queue_payload_bytes``).
PAYLOAD_BYTES = 64 * 1024
#: Default bound of live (pending or running) items per actor (``Actor.queue_limit``).
QUEUE_LIMIT = 10_000
#: Finished items kept for inspection: the done or cancelled ones at most this many positions behind
#: the newest item (give or take :data:`PRUNE_STEP`), and the newest dead ones.
KEPT_FINISHED = 1000
KEPT_DEAD = 1000
#: Done or cancelled rows are deleted in batches: once the oldest is this many positions past the
#: bound, at the finish (done, cancel or dead letter) that sees it.
PRUNE_STEP = 100


class QueueStatus(StrEnum):
    """``QueueItem.status`` (the ``status`` column of ``roost_queue``); see docs/design.md."""

    PENDING = "pending"  # waits its turn (or its retry_at)
    RUNNING = "running"  # its attempt was counted and its callback runs (or the process died in it)
    DONE = "done"
    DEAD = "dead"  # used up its attempts: a dead letter, with its last error
    CANCELLED = "cancelled"


_LIVE = "status IN ('pending', 'running')"  # the partial index's condition, spelled the same
_FINISHED = "status IN ('done', 'cancelled')"  # the other partial index's, spelled the same


@dataclass(frozen=True, slots=True)
class QueueItem:
    """An item as stored (``list_queue`` returns these; a callback may take one as its second
    argument). ``attempts`` counts the attempts started; inside a callback, ``attempt`` is the one
    running (1 for the first)."""

    id: str
    position: int
    callback: str
    payload: Any
    status: QueueStatus
    attempts: int
    max_attempts: int
    backoff_base: float
    backoff_cap: float
    timeout: float
    retry_at: float | None
    last_error: str | None
    trace_id: str
    enqueued_at: float
    started_at: float | None
    finished_at: float | None

    @property
    def attempt(self) -> int:
        return self.attempts

    @property
    def idempotency_key(self) -> str:
        """The key for an effect outside the actor's file: the item's id, the same for each attempt,
        so that the system called can tell a retry of the effect from a new one."""
        return self.id

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.backoff_base, self.backoff_cap)

    @property
    def due(self) -> float | None:
        """When it may run, if it is live: its retry time, else when it was enqueued; a running item's
        attempt began at ``started_at`` (past due: if the process died in it, it is looked at again)."""
        if self.status is QueueStatus.RUNNING:
            return self.started_at
        if self.status is QueueStatus.PENDING:
            return self.retry_at if self.retry_at is not None else self.enqueued_at
        return None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_COLUMNS = (
    "id, position, callback, payload, status, attempts, max_attempts, backoff_base, backoff_cap, timeout, "
    "retry_at, last_error, trace_id, enqueued_at, started_at, finished_at"
)


def _item(row: tuple[Any, ...]) -> QueueItem:
    values = list(row)
    values[3] = orjson.loads(values[3])
    values[4] = QueueStatus(values[4])
    return QueueItem(*values)


class QueueStore:
    """The queue of one actor, read and written over its connection (inside turns, or read-only)."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    # -- reading -------------------------------------------------------------------------------------
    def get(self, item_id: str) -> QueueItem | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM roost_queue WHERE id = ?", (item_id,)).fetchone()
        return None if row is None else _item(row)

    def head(self) -> QueueItem | None:
        """The live item with the lowest position: the only one that may run."""
        row = self.conn.execute(
            f"SELECT {_COLUMNS} FROM roost_queue WHERE {_LIVE} ORDER BY position LIMIT 1"
        ).fetchone()
        return None if row is None else _item(row)

    def next_due(self) -> float | None:
        """When the queue next needs the actor (its head's due time), for the actor's alarm."""
        head = self.head()
        return None if head is None else head.due

    def live(self) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM roost_queue WHERE {_LIVE}").fetchone()[0])

    def has_room(self, limit: int) -> bool:
        """Fewer than ``limit`` live items. Counted only when the span from the head to the last item
        (an upper bound of the live items, read from two index ends) reaches the limit."""
        head = self.conn.execute(f"SELECT position FROM roost_queue WHERE {_LIVE} ORDER BY position LIMIT 1")
        first = head.fetchone()
        if first is None:
            return limit > 0
        last = self.conn.execute("SELECT max(position) FROM roost_queue").fetchone()[0]
        return int(last) - int(first[0]) + 1 < limit or self.live() < limit

    def items(self, *, include_finished: bool = False, limit: int = 1000) -> list[QueueItem]:
        """In queue order: the live items, or every kept item (finished ones too)."""
        where = "" if include_finished else f"WHERE {_LIVE}"
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM roost_queue {where} ORDER BY position LIMIT ?", (limit,)
        ).fetchall()
        return [_item(r) for r in rows]

    def dead(self, limit: int = 100) -> list[QueueItem]:
        """Dead letters, newest first."""
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM roost_queue WHERE status = ? ORDER BY position DESC LIMIT ?",
            (QueueStatus.DEAD.value, limit),
        ).fetchall()
        return [_item(r) for r in rows]

    # -- writing (inside a turn) ---------------------------------------------------------------------
    def add(
        self,
        *,
        callback: str,
        payload_json: str,
        retry: RetryPolicy,
        timeout: float,
        trace_id: str,
        now: float,
    ) -> str:
        item_id = f"q-{uuid.uuid4().hex[:16]}"
        self.conn.execute(
            "INSERT INTO roost_queue (id, callback, status, max_attempts, backoff_base, backoff_cap, "
            "timeout, trace_id, enqueued_at, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item_id,
                callback,
                QueueStatus.PENDING.value,
                retry.max_attempts,
                retry.base,
                retry.cap,
                timeout,
                trace_id,
                now,
                payload_json,
            ),
        )
        return item_id

    def start(self, item: QueueItem, now: float) -> QueueItem:
        """Count an attempt of ``item`` (pending → running); the item as it now is."""
        self.conn.execute(
            "UPDATE roost_queue SET status = ?, attempts = ?, started_at = ?, retry_at = NULL "
            "WHERE position = ?",
            (QueueStatus.RUNNING.value, item.attempts + 1, now, item.position),
        )
        return replace(
            item, status=QueueStatus.RUNNING, attempts=item.attempts + 1, started_at=now, retry_at=None
        )

    def complete(self, item: QueueItem, now: float) -> None:
        self._finish(item, QueueStatus.DONE, now)
        self._prune()

    def retry_later(self, item: QueueItem, error: str, at: float) -> None:
        self.conn.execute(
            "UPDATE roost_queue SET status = ?, retry_at = ?, last_error = ? WHERE position = ?",
            (QueueStatus.PENDING.value, at, error[:500], item.position),
        )

    def bury(self, item: QueueItem, error: str, now: float) -> None:
        """The item used up its attempts: a dead letter, with its last error."""
        self.conn.execute(
            "UPDATE roost_queue SET last_error = ? WHERE position = ?", (error[:500], item.position)
        )
        self._finish(item, QueueStatus.DEAD, now)
        self.conn.execute(
            "DELETE FROM roost_queue WHERE status = ? AND position <= ("
            "SELECT position FROM roost_queue WHERE status = ? ORDER BY position DESC LIMIT 1 OFFSET ?)",
            (QueueStatus.DEAD.value, QueueStatus.DEAD.value, KEPT_DEAD),
        )
        self._prune()

    def cancel(self, item_id: str, now: float) -> bool:
        """Cancel a pending item (one waiting for its retry too); False if there was none."""
        cur = self.conn.execute(
            "UPDATE roost_queue SET status = ?, retry_at = NULL, finished_at = ? WHERE id = ? AND status = ?",
            (QueueStatus.CANCELLED.value, now, item_id, QueueStatus.PENDING.value),
        )
        if cur.rowcount == 0:
            return False
        self._prune()
        return True

    def _finish(self, item: QueueItem, status: QueueStatus, now: float) -> None:
        self.conn.execute(
            "UPDATE roost_queue SET status = ?, retry_at = NULL, finished_at = ? WHERE position = ?",
            (status.value, now, item.position),
        )

    def _prune(self) -> None:
        """Done and cancelled items more than :data:`KEPT_FINISHED` positions behind the newest item
        go, in batches: when the oldest of them (one read of its partial index) is
        :data:`PRUNE_STEP` past that bound. Called at every finish, whichever item it is (a cancel
        of any pending item, a dead letter), so the rows kept never pass the bound by more than the
        step."""
        newest = self.conn.execute("SELECT max(position) FROM roost_queue").fetchone()[0]
        oldest = self.conn.execute(
            f"SELECT position FROM roost_queue WHERE {_FINISHED} ORDER BY position LIMIT 1"
        ).fetchone()
        if newest is None or oldest is None or int(oldest[0]) > int(newest) - KEPT_FINISHED - PRUNE_STEP:
            return
        self.conn.execute(
            f"DELETE FROM roost_queue WHERE {_FINISHED} AND position <= ?", (int(newest) - KEPT_FINISHED,)
        )


# -- the Actor API's side (roost.actors.actor calls these with its host) ---------------------------------
def enqueue(
    host: HostApi,
    cls: type,
    callback: str,
    payload: Any,
    *,
    retry: RetryPolicy,
    timeout: float | None,
    payload_bytes: int,
    limit: int,
    turn_timeout: float,
) -> str:
    """Add an item at the end of the actor's queue, in the open turn; its id. Raises ``NotInTurn``,
    ``StateError`` (a read-only turn; a payload that is not JSON), ``ValueError`` (not a ``@wakeup``
    method), :class:`PayloadTooLarge` or :class:`QueueFull`; nothing is enqueued then."""
    host.require_turn()
    if host.read_only_turn:
        raise StateError("a read-only caller's turn cannot write")
    fn = check_callback(cls, callback)
    model = getattr(fn, "__roost_wakeup_model__", None)
    if model is not None:
        payload = model.model_validate(payload).model_dump(mode="json")
    try:
        text = orjson.dumps(payload).decode()
    except TypeError as exc:
        raise StateError(f"payload is not JSON: {exc}") from exc
    if len(text) > payload_bytes:
        raise PayloadTooLarge(
            message=f"the payload is {len(text)} bytes of JSON, over the queue's {payload_bytes} "
            "(Actor.queue_payload_bytes): keep large data elsewhere and enqueue a reference to it"
        )
    store = QueueStore(host.file.conn)
    if not store.has_room(limit):
        raise QueueFull(
            message=f"the queue holds {limit} items, its limit (Actor.queue_limit); wait for it to drain, "
            "or cancel items"
        )
    bound = timeout if timeout is not None else turn_timeout * 0.9
    item_id = store.add(
        callback=callback,
        payload_json=text,
        retry=retry,
        timeout=float(bound),
        trace_id=host.trace_id,
        now=host.turn_now,
    )
    host.alarm_dirty = True
    return item_id


def cancel(host: HostApi, item_id: str) -> bool:
    host.require_turn()
    if host.read_only_turn:
        raise StateError("a read-only caller's turn cannot write")
    done = QueueStore(host.file.conn).cancel(item_id, host.turn_now)
    if done:
        host.alarm_dirty = True
    return done


def queue_report(conn: sqlite3.Connection, limit: int = 100) -> dict[str, Any] | None:
    """What ``roost inspect`` shows of an actor's queue, read over ``conn``; None if the file has no
    queue table (an actor not activated since the queue came). Counts by status, the head, and the
    first ``limit`` live items and the newest ``limit`` finished ones (payloads left out)."""
    if (
        conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'roost_queue'").fetchone()
        is None
    ):
        return None
    counts = dict.fromkeys((s.value for s in QueueStatus), 0)
    counts.update(conn.execute("SELECT status, count(*) FROM roost_queue GROUP BY status").fetchall())
    store = QueueStore(conn)
    fields = (
        "id",
        "position",
        "callback",
        "status",
        "attempts",
        "max_attempts",
        "retry_at",
        "last_error",
        "enqueued_at",
        "started_at",
        "finished_at",
    )

    def brief(item: QueueItem) -> dict[str, Any]:
        return {f: getattr(item, f) for f in fields}

    finished = conn.execute(
        f"SELECT {_COLUMNS} FROM roost_queue WHERE NOT {_LIVE} ORDER BY position DESC LIMIT ?", (limit,)
    ).fetchall()
    head = store.head()
    return {
        "counts": counts,
        "head": None if head is None else brief(head),
        "live": [brief(i) for i in store.items(limit=limit)],
        "finished": [brief(_item(r)) for r in reversed(finished)],
    }
