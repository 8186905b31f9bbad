"""The contexts' tables (component ``context``, their own migrations), the operations' statuses and
the row forms :mod:`roost.agent.compaction` reads and writes.

- ``roost_agent_contexts``: one row per session that was compacted or reset — where its model-visible
  history stands (``context_id``, ``generation``, ``cursor``, ``summary``, ``handoff``, and
  ``carried``: the runs at or below the cursor that no operation summarised — open when it ran —, which
  the model still sees).
- ``roost_agent_context_ops``: one row per compaction or reset, pending until its summary is
  recorded; the summary or hand-off it recorded is its ``artifact``, the range it summarised is
  ``from_ordinal``..``to_ordinal`` (run ordinals) with the ``turn_ids`` and, for a chat, the
  ``message_range`` (message ordinals). A compaction of one run's own steps has ``run_id`` and the
  ``hop`` it was made before, and its range is of the run's step indexes.
- ``roost_agent_run_contexts``: one row per run whose steps were compacted — the step index its
  visible steps are above (``cursor``), the ``summary`` the model sees instead, ``generation`` and
  the ``hop`` of the last compaction.

docs/design.md (*Compaction and reset of a context*) draws the state machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from roost.agent.store import Row
from roost.storage import Migration

__all__ = [
    "CONTEXTS",
    "CONTEXT_MIGRATIONS",
    "OPS",
    "RUN_CONTEXTS",
    "OpKind",
    "OpStatus",
    "Trigger",
    "View",
    "decode",
    "encode",
    "op_card",
]

CONTEXT_MIGRATIONS: Sequence[Migration] = (
    """
    CREATE TABLE roost_agent_contexts (
        session_id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        generation INTEGER NOT NULL,
        cursor     INTEGER NOT NULL,
        summary    TEXT NOT NULL,
        handoff    TEXT,
        carried    TEXT NOT NULL DEFAULT '[]',
        started_at REAL NOT NULL,
        updated_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE roost_agent_context_ops (
        op_id         TEXT PRIMARY KEY,
        session_id    TEXT NOT NULL,
        op            TEXT NOT NULL,
        trigger       TEXT NOT NULL,
        status        TEXT NOT NULL,
        trace_id      TEXT NOT NULL,
        context_id    TEXT,
        new_context_id TEXT,
        generation    INTEGER,
        from_ordinal  INTEGER NOT NULL,
        to_ordinal    INTEGER NOT NULL,
        turn_ids      TEXT NOT NULL,
        message_range TEXT,
        note          TEXT,
        attempt       INTEGER NOT NULL DEFAULT 0,
        artifact      TEXT,
        error         TEXT,
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL,
        done_at       REAL
    ) WITHOUT ROWID;
    CREATE INDEX roost_agent_context_ops_session ON roost_agent_context_ops (session_id, created_at);
    CREATE UNIQUE INDEX roost_agent_context_ops_pending ON roost_agent_context_ops (session_id)
        WHERE status = 'pending';
    CREATE UNIQUE INDEX roost_agent_context_ops_generation ON roost_agent_context_ops (session_id, generation)
        WHERE generation IS NOT NULL;
    """,
    # a compaction of one run's own steps (run_id set; from/to_ordinal are then step indexes), and
    # where each such run's steps stand
    """
    ALTER TABLE roost_agent_context_ops ADD COLUMN run_id TEXT;
    ALTER TABLE roost_agent_context_ops ADD COLUMN hop INTEGER;
    CREATE UNIQUE INDEX roost_agent_context_ops_run_hop ON roost_agent_context_ops (run_id, hop)
        WHERE run_id IS NOT NULL;
    CREATE TABLE roost_agent_run_contexts (
        run_id     TEXT PRIMARY KEY,
        cursor     INTEGER NOT NULL,
        summary    TEXT NOT NULL,
        generation INTEGER NOT NULL,
        hop        INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        requested  INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID;
    """,
)

CONTEXTS = "roost_agent_contexts"
OPS = "roost_agent_context_ops"
RUN_CONTEXTS = "roost_agent_run_contexts"
_JSON = ("handoff", "carried", "turn_ids", "message_range", "artifact")


class OpKind(StrEnum):
    """``context_ops.op``: keep the context on a summary, or start a fresh one from a hand-off."""

    COMPACT = "compact"
    RESET = "reset"


class OpStatus(StrEnum):
    """``context_ops.status``: ``pending`` until its summary is recorded (``done``) or cannot be
    (``failed``: the context is unchanged)."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class Trigger(StrEnum):
    """What started an operation: a budget passed (``[agent.context.*]``), or a call."""

    MESSAGES = "messages"
    TOKENS = "tokens"
    HOPS = "hops"
    EXPLICIT = "explicit"


@dataclass(slots=True, frozen=True)
class View:
    """A compacted or reset session's context as the model sees it: ``summary``, then the turns of
    the runs above ``cursor`` and of the ``carried`` runs."""

    summary: str
    cursor: int
    carried: tuple[str, ...]


def encode(col: str, value: Any) -> Any:
    """A value as written to column ``col``."""
    return orjson.dumps(value).decode() if col in _JSON and value is not None else value


def decode(row: Row) -> Row:
    """A row as read, its JSON columns decoded."""
    for col in _JSON:
        if row.get(col) is not None:
            row[col] = orjson.loads(row[col])
    return row


def op_card(r: Row) -> dict[str, Any]:
    """An operation as ``context(...)`` and its events show it."""
    return {
        "op_id": r["op_id"],
        "op": r["op"],
        "run_id": r.get("run_id"),
        "hop": r.get("hop"),
        "trigger": r["trigger"],
        "status": r["status"],
        "context_id": r["context_id"],
        "new_context_id": r["new_context_id"],
        "generation": r["generation"],
        "range": {
            "from_ordinal": r["from_ordinal"],
            "to_ordinal": r["to_ordinal"],
            "turn_ids": r["turn_ids"],
            "message_range": r["message_range"],
        },
        "attempt": r["attempt"],
        "artifact": r["artifact"],
        "error": r["error"],
        "created_at": r["created_at"],
        "done_at": r["done_at"],
    }
