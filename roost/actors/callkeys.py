"""Idempotency keys of calls: a call's outcome recorded under its key in the actor's own file.

A call may carry an idempotency key (the ``rpc`` frame's ``idempotency_key``, HTTP's
``Idempotency-Key`` header, :meth:`Registry.call <roost.actors.registry.Registry.call>`'s
``idempotency_key``): a string of 1 to :data:`MAX_KEY` characters that names one logical call. The
call's turn records ``key → outcome`` in ``roost_call_keys``, inside the call's own transaction, so
the record and the call's effects commit together or not at all. A later call with a key the actor
has recorded does not run again: it gets the recorded outcome.

Guarantees (tests in ``tests/test_call_keys.py``, ``tests/test_call_keys_crash.py``):

- **One effect per key.** The record commits with the call's writes: a crash before the commit
  leaves neither (the retry runs the call), after it both (the retry gets the record). Turns of one
  actor are serial, so a retry that arrives while the first call still runs waits behind it in the
  mailbox and finds its record.
- **The original outcome.** A recorded result is returned as it was (the same JSON); a recorded
  error is the same error (code and message). An error of the runtime that says the call did not
  happen (``actor_unavailable``: stopping, or the commit failed; ``overloaded``) is not recorded:
  the same key runs the call when it comes again.
- **Same key, other call: ``idempotency_conflict``.** The record holds a fingerprint of the method,
  its arguments and the caller's principal; a call under a recorded key that differs in any of them
  is refused with :class:`~roost.actors.errors.IdempotencyConflict` (409) and changes nothing.
- **Retention.** An actor keeps its newest :data:`KEYS_KEPT` records (``Actor.call_keys_kept``
  chooses per kind) and none older than :data:`KEY_WINDOW` (24 h, as schedule keys); both are
  pruned in the transaction that records a new key (the records past the count at once, those past
  the window up to 8 a record, oldest first), and a record past the window never answers, pruned or
  not. A key older than that runs the call again.
- **Which calls.** A key on a read-only method (``@callable(readonly=True)``) or from a read-only
  principal is ignored: such a call changes nothing, so it just runs again. A key on a streaming
  method is refused (``invalid_arguments``): its chunks commit as they go, so a stream cut by a
  crash has effects and no record, and a retry could not be told apart from a new call.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any, NamedTuple

import orjson

from roost.actors.errors import IdempotencyConflict
from roost.actors.schedules import KEY_WINDOW

__all__ = ["KEYS_KEPT", "KEY_WINDOW", "MAX_KEY", "NOT_RECORDED", "CallKeys", "Recorded", "fingerprint"]

#: How many call keys an actor keeps by default (the newest; ``Actor.call_keys_kept``).
KEYS_KEPT = 10_000
#: The longest idempotency key, in characters (as call ids and method names).
MAX_KEY = 128
_AGED = 8
_PRUNE_AGED = (
    "DELETE FROM roost_call_keys WHERE id IN "
    f"(SELECT id FROM roost_call_keys ORDER BY id LIMIT {_AGED}) AND created_at <= ?"
)
#: Runtime errors that mean the call did not happen: not recorded, so the same key runs it later.
NOT_RECORDED = frozenset({"actor_unavailable", "overloaded"})


class Recorded(NamedTuple):
    """A recorded outcome: ``ok`` and the result's JSON text, or ``code`` and ``message``."""

    ok: bool
    result_json: str
    code: str
    message: str


def fingerprint(method: str, args: list[Any], kwargs: dict[str, Any], principal: str | None) -> str:
    """What makes two calls under one key the same call: the method, its arguments (``kwargs``
    in key order) and the caller's principal id, hashed (32 hex digits)."""
    text = orjson.dumps([method, args, kwargs, principal], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(text, digest_size=16).hexdigest()


class CallKeys:
    """The records of one actor's file (``roost_call_keys``). Every method runs inside the current
    turn's transaction (the host's ``file.conn``)."""

    __slots__ = ("_cur", "kept", "window")

    def __init__(self, conn: sqlite3.Connection, kept: int = KEYS_KEPT, window: float = KEY_WINDOW) -> None:
        self._cur = conn.cursor()
        self.kept = max(1, kept)
        self.window = window

    def lookup(self, key: str, fp: str, now: float) -> Recorded | None:
        """The outcome recorded under ``key`` less than the window ago, or None. Raises
        :class:`IdempotencyConflict` if it was recorded for another call (``fp``)."""
        row = self._cur.execute(
            "SELECT fingerprint, ok, outcome, created_at FROM roost_call_keys WHERE key = ?", (key,)
        ).fetchone()
        if row is None or now - float(row[3]) >= self.window:
            return None
        if row[0] != fp:
            raise IdempotencyConflict(
                message=f"idempotency key {key[:MAX_KEY]!r} was used for another call "
                "(another method, arguments or principal)"
            )
        if row[1]:
            return Recorded(True, str(row[2]), "", "")
        error = orjson.loads(row[2])
        return Recorded(False, "", str(error["code"]), str(error["message"]))

    def record_result(self, key: str, fp: str, result_json: str, now: float) -> None:
        """Record a call's result (JSON text) under ``key``; prune to the retention."""
        self._record(key, fp, 1, result_json, now)

    def record_error(self, key: str, fp: str, code: str, message: str, now: float) -> None:
        """Record a call's error under ``key``; prune to the retention."""
        self._record(key, fp, 0, orjson.dumps({"code": code, "message": message}).decode(), now)

    def _record(self, key: str, fp: str, ok: int, outcome: str, now: float) -> None:
        cur = self._cur
        # REPLACE: a record past the window (not pruned yet) gives its key to the new call
        cur.execute(
            "INSERT OR REPLACE INTO roost_call_keys (key, fingerprint, ok, outcome, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (key, fp, ok, outcome, now),
        )
        newest = cur.lastrowid or 0
        if newest > self.kept:  # ids grow by one per record: all below the newest `kept` go
            cur.execute("DELETE FROM roost_call_keys WHERE id <= ?", (newest - self.kept,))
        # the oldest records (lowest ids) past the window: at most _AGED per record, more than it adds,
        # so the expired ones drain; a record past the window that is still there never answers
        cur.execute(_PRUNE_AGED, (now - self.window,))
