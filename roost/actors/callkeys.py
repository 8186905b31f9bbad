"""Idempotency keys of calls: a call's outcome recorded under its caller and key in the actor's file.

A call may carry an idempotency key (the ``rpc`` frame's ``idempotency_key``, HTTP's
``Idempotency-Key`` header, :meth:`Registry.call <roost.actors.registry.Registry.call>`'s
``idempotency_key``): a string of 1 to :data:`MAX_KEY` characters that names one logical call of one
caller. The call's turn records ``(caller, key) → outcome`` in ``roost_call_keys``, inside the call's
own transaction, so the record and the call's effects commit together or not at all. A later call of
the same caller with a key the actor has recorded does not run again: it gets the recorded outcome.

Guarantees (tests in ``tests/test_call_keys.py``, ``tests/test_call_key_bounds.py``,
``tests/test_call_keys_crash.py``):

- **One effect per key.** The record commits with the call's writes: a crash before the commit
  leaves neither (the retry runs the call), after it both (the retry gets the record). Turns of one
  actor are serial, so a retry that arrives while the first call still runs waits behind it in the
  mailbox and finds its record.
- **The original outcome.** A recorded result is returned as it was (the same JSON); a recorded
  error is the same error (code and message). An error of the runtime that says the call did not
  happen (``actor_unavailable``: stopping, or the commit failed; ``overloaded``) is not recorded:
  the same key runs the call when it comes again.
- **Keys are the caller's own.** Records are looked up by the caller (:func:`caller_of`: the
  principal's tenant and id) and the key: two principals, or one id in two tenants, use one key
  independently, and neither's call tells anything about the other's. Anonymous clients are one
  principal (``anonymous``): their keys must be unguessable (the clients' are random), an anonymous
  caller's key is as secret as its result.
- **Same caller and key, other call: ``idempotency_conflict``.** The record holds a fingerprint of the
  method and its arguments; a call under a recorded key that differs in either is refused with
  :class:`~roost.actors.errors.IdempotencyConflict` (409) and changes nothing.
- **Retention.** An actor keeps its newest :data:`KEYS_KEPT` records (``Actor.call_keys_kept``
  chooses per kind), whose sizes (:func:`record_size`) sum to at most :data:`KEYS_BYTES`
  (``Actor.call_keys_bytes``), and none older than :data:`KEY_WINDOW` (24 h, as schedule keys). All
  three are pruned, oldest first, in the transaction that records a new key (the records past the
  count or the bytes at once, those past the window up to 8 a record), and a record past the window
  never answers, pruned or not. A key older than that runs the call again. Each record holds its
  size and ``upto``, the sizes of all records up to it summed (a running total), so the bytes kept are
  the newest ``upto`` less the ``upto`` before the oldest (:meth:`CallKeys.total`): the record's one
  statement reads the two rows at the ends of the table, never scans it, and writes no page besides
  its own. A key given to a new call past the window while its old record is still there is counted
  until the records before it are pruned: the count errs high (pruning early), never low.
- **An outcome larger than the whole budget is not kept.** The call's caller gets it; the record
  under its key says only that the call ran: a retry under the key is refused with
  :class:`~roost.actors.errors.IdempotencyResultUnavailable` (``idempotency_result_unavailable``,
  409) and never runs the call again.
- **Which calls.** A key on a read-only method (``@callable(readonly=True)``) or from a read-only
  principal is ignored: such a call changes nothing, so it just runs again. A key on a streaming
  method is refused (``invalid_arguments``): its chunks commit as they go, so a stream cut by a
  crash has effects and no record, and a retry could not be told apart from a new call.
"""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing
from typing import Any, NamedTuple

import orjson

from roost.actors.errors import IdempotencyConflict, IdempotencyResultUnavailable
from roost.actors.schedules import KEY_WINDOW

__all__ = [
    "KEYS_BYTES",
    "KEYS_KEPT",
    "KEY_WINDOW",
    "MAX_KEY",
    "NOT_RECORDED",
    "RECORD_OVERHEAD",
    "CallKeys",
    "Recorded",
    "caller_of",
    "fingerprint",
    "record_size",
]

#: How many call keys an actor keeps by default (the newest; ``Actor.call_keys_kept``).
KEYS_KEPT = 10_000
#: How many bytes of records an actor keeps by default (the newest; ``Actor.call_keys_bytes``): 4 MiB.
KEYS_BYTES = 4 * 1024 * 1024
#: What a record counts besides the bytes of its caller, key and outcome (its id, fingerprint, time).
RECORD_OVERHEAD = 64
#: The longest idempotency key, in characters (as call ids and method names).
MAX_KEY = 128
_AGED = 8
_PRUNE_AGED = (
    "DELETE FROM roost_call_keys WHERE id IN "
    f"(SELECT id FROM roost_call_keys ORDER BY id LIMIT {_AGED}) AND created_at <= ?"
)
#: ``upto`` before the oldest record (what the records before it counted, pruned or not).
_BEFORE_OLDEST = "SELECT upto - size FROM roost_call_keys ORDER BY id LIMIT 1"
_BOUNDS = f"SELECT (SELECT upto FROM roost_call_keys ORDER BY id DESC LIMIT 1), ({_BEFORE_OLDEST})"
#: One statement records a call: its ``upto`` is the newest record's plus its own size, and it
#: returns its id, its ``upto`` and the ``upto`` before the oldest record (itself included).
_INSERT = (
    "INSERT OR REPLACE INTO roost_call_keys "
    "(caller, key, fingerprint, ok, size, upto, created_at, outcome) VALUES (?, ?, ?, ?, ?, "
    "coalesce((SELECT upto FROM roost_call_keys ORDER BY id DESC LIMIT 1), 0) + ?, ?, ?) "
    f"RETURNING id, upto, ({_BEFORE_OLDEST})"
)
_OLDEST = "SELECT id, upto - size FROM roost_call_keys WHERE id < ? ORDER BY id"
#: Runtime errors that mean the call did not happen: not recorded, so the same key runs it later.
NOT_RECORDED = frozenset({"actor_unavailable", "overloaded"})


class Recorded(NamedTuple):
    """A recorded outcome: ``ok`` and the result's JSON text, or ``code`` and ``message``."""

    ok: bool
    result_json: str
    code: str
    message: str


def fingerprint(method: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    """What makes two calls of one caller under one key the same call: the method and its arguments
    (``kwargs`` in key order), hashed (32 hex digits)."""
    text = orjson.dumps([method, args, kwargs], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(text, digest_size=16).hexdigest()


def caller_of(tenant: str | None, principal: str | None) -> str:
    """Whose keys a call's are: its principal's tenant and id, as JSON text (``[null,"anonymous"]``;
    ``[null,null]`` for an in-process call without a principal). Distinct callers never share one."""
    return orjson.dumps([tenant, principal]).decode()


def record_size(caller: str, key: str, outcome: str) -> int:
    """The bytes a record counts against ``call_keys_bytes``: its caller, key and outcome in UTF-8,
    and :data:`RECORD_OVERHEAD`."""
    return len(caller.encode()) + len(key.encode()) + len(outcome.encode()) + RECORD_OVERHEAD


class CallKeys:
    """The records of one actor's file (``roost_call_keys``). Every method runs inside the current
    turn's transaction (the host's ``file.conn``)."""

    __slots__ = ("_conn", "_cur", "kept", "max_bytes", "window")

    def __init__(
        self,
        conn: sqlite3.Connection,
        kept: int = KEYS_KEPT,
        max_bytes: int = KEYS_BYTES,
        window: float = KEY_WINDOW,
    ) -> None:
        self._conn = conn
        self._cur = conn.cursor()
        self.kept = max(1, kept)
        self.max_bytes = max(1, max_bytes)
        self.window = window

    def lookup(self, caller: str, key: str, fp: str, now: float) -> Recorded | None:
        """The outcome recorded under ``caller``'s ``key`` less than the window ago, or None. Raises
        :class:`IdempotencyConflict` if it was recorded for another call (``fp``), and
        :class:`IdempotencyResultUnavailable` if the call ran and its outcome was too large to keep."""
        row = self._cur.execute(
            "SELECT fingerprint, ok, outcome, created_at FROM roost_call_keys WHERE caller = ? AND key = ?",
            (caller, key),
        ).fetchone()
        if row is None or now - float(row[3]) >= self.window:
            return None
        if row[0] != fp:
            raise IdempotencyConflict(
                message=f"idempotency key {key!r} was used for another call (another method or arguments)"
            )
        if row[1]:
            return Recorded(True, str(row[2]), "", "")
        error = orjson.loads(row[2])
        if error["code"] == IdempotencyResultUnavailable.code:
            raise IdempotencyResultUnavailable(message=str(error["message"]))
        return Recorded(False, "", str(error["code"]), str(error["message"]))

    def record_result(self, caller: str, key: str, fp: str, result_json: str, now: float) -> None:
        """Record a call's result (JSON text) under ``caller``'s ``key``; prune to the retention."""
        self._record(caller, key, fp, 1, result_json, now)

    def record_error(self, caller: str, key: str, fp: str, code: str, message: str, now: float) -> None:
        """Record a call's error under ``caller``'s ``key``; prune to the retention."""
        self._record(caller, key, fp, 0, orjson.dumps({"code": code, "message": message}).decode(), now)

    def total(self) -> int:
        """The bytes the records kept count (:func:`record_size`), from the running sums: the newest
        record's ``upto`` less the ``upto`` before the oldest one. Exact, except that a record that gave
        its key to a new call (past the window, not yet pruned) is still counted until the records
        before it are pruned: the count may err high, never low."""
        newest, before = self._cur.execute(_BOUNDS).fetchone()
        return int(newest or 0) - int(before or 0)

    def _record(self, caller: str, key: str, fp: str, ok: int, outcome: str, now: float) -> None:
        size = record_size(caller, key, outcome)
        if size > self.max_bytes:  # kept: that the call ran; not kept: its outcome
            ok, outcome = 0, self._unavailable(key, size)
            size = record_size(caller, key, outcome)
        cur = self._cur
        # REPLACE: a record past the window (not pruned yet) gives its key to the new call. The bounds
        # come back with the insert, before the pruning below, which only raises the oldest's: the
        # check after it may err high (then _prune_bytes finds nothing to cut), never low
        ((newest, upto, before),) = cur.execute(_INSERT, (caller, key, fp, ok, size, size, now, outcome))
        if newest > self.kept:  # ids grow by one per record: all below the newest `kept` go
            cur.execute("DELETE FROM roost_call_keys WHERE id <= ?", (newest - self.kept,))
        # the oldest records (lowest ids) past the window: at most _AGED per record, more than it adds,
        # so the expired ones drain; a record past the window that is still there never answers
        cur.execute(_PRUNE_AGED, (now - self.window,))
        if upto - before > self.max_bytes:
            self._prune_bytes(upto - self.max_bytes, newest)

    def _prune_bytes(self, floor: int, newest: int) -> None:
        """Delete the oldest records until the oldest kept starts at ``floor`` or later (so the records
        from it to the newest fit); never the newest (the one just recorded, which fits alone unless
        the budget is smaller than a record that only says the call ran)."""
        cut = 0
        with closing(self._conn.execute(_OLDEST, (newest,))) as oldest:  # read only as far as it deletes
            for rid, before in oldest:
                if before >= floor:
                    break
                cut = int(rid)
        self._cur.execute("DELETE FROM roost_call_keys WHERE id <= ?", (cut,))

    def _unavailable(self, key: str, size: int) -> str:
        message = (
            f"the call under idempotency key {key!r} ran once; its outcome ({size:,} bytes) was larger "
            f"than the {self.max_bytes:,} bytes of records this actor keeps, so it was not kept "
            "(the call is not run again)"
        )
        return orjson.dumps({"code": IdempotencyResultUnavailable.code, "message": message}).decode()
