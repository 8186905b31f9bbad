"""The agent runtime's tables, in the agent's own SQLite file, written inside the current turn.

Tables are named ``roost_agent_*``: the runtime writes them through the turn's connection; an agent's
``self.sql`` can read them but not write them (the actor authorizer refuses writes to ``roost_*``).
JSON columns are encoded and decoded here, nowhere else.
"""

from __future__ import annotations

import secrets
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from roost.storage import Migration

__all__ = ["AGENT_MIGRATIONS", "JSON_COLUMNS", "TEXT_COLUMNS", "Row", "Store", "new_id"]

Row = dict[str, Any]

AGENT_MIGRATIONS: Sequence[Migration] = (
    """
    CREATE TABLE roost_agent_turns (
        turn_id            TEXT PRIMARY KEY,
        run_id             TEXT NOT NULL,
        session_id         TEXT NOT NULL,
        input_text         TEXT NOT NULL,
        normalized_command TEXT NOT NULL,
        status             TEXT NOT NULL,
        needs_confirmation INTEGER NOT NULL DEFAULT 0,
        output_text        TEXT,
        error              TEXT,
        trace_id           TEXT NOT NULL,
        created_at         REAL NOT NULL,
        updated_at         REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX roost_agent_turns_session ON roost_agent_turns (session_id, created_at);
    CREATE TABLE roost_agent_runs (
        run_id              TEXT PRIMARY KEY,
        turn_id             TEXT NOT NULL,
        session_id          TEXT NOT NULL,
        tenant              TEXT,
        principal           TEXT,
        status              TEXT NOT NULL,
        waiting             TEXT,
        mode                TEXT NOT NULL,
        trace_id            TEXT NOT NULL,
        hops                INTEGER NOT NULL DEFAULT 0,
        model_done          INTEGER NOT NULL DEFAULT 0,
        model_text          TEXT,
        question            TEXT,
        inputs              TEXT NOT NULL,
        stop_condition      TEXT NOT NULL,
        verification_result TEXT,
        verifier            TEXT,
        evidence_refs       TEXT NOT NULL,
        output              TEXT,
        error               TEXT,
        retryable           INTEGER NOT NULL DEFAULT 0,
        created_at          REAL NOT NULL,
        updated_at          REAL NOT NULL,
        finished_at         REAL
    ) WITHOUT ROWID;
    CREATE INDEX roost_agent_runs_waiting ON roost_agent_runs (waiting, created_at)
        WHERE waiting IS NOT NULL;
    CREATE TABLE roost_agent_items (
        item_id       TEXT PRIMARY KEY,
        run_id        TEXT NOT NULL,
        turn_id       TEXT NOT NULL,
        step_index    INTEGER NOT NULL,
        tool_name     TEXT NOT NULL,
        args          TEXT NOT NULL,
        approval_mode TEXT NOT NULL,
        status        TEXT NOT NULL,
        result        TEXT,
        error         TEXT,
        grant_id      TEXT,
        runs          INTEGER NOT NULL DEFAULT 0,
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL,
        UNIQUE (run_id, step_index)
    ) WITHOUT ROWID;
    CREATE TABLE roost_agent_approvals (
        approval_id    TEXT PRIMARY KEY,
        run_id         TEXT NOT NULL,
        turn_id        TEXT NOT NULL,
        item_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        project_id     TEXT NOT NULL,
        tool_name      TEXT NOT NULL,
        mode           TEXT NOT NULL,
        args           TEXT NOT NULL,
        proposed_scope TEXT NOT NULL,
        status         TEXT NOT NULL,
        grant_id       TEXT,
        created_at     REAL NOT NULL,
        decided_at     REAL
    ) WITHOUT ROWID;
    CREATE TABLE roost_agent_grants (
        grant_id    TEXT PRIMARY KEY,
        approval_id TEXT NOT NULL,
        session_id  TEXT NOT NULL,
        project_id  TEXT NOT NULL,
        tool_name   TEXT NOT NULL,
        mode        TEXT NOT NULL,
        scope       TEXT NOT NULL,
        expires_at  REAL NOT NULL,
        created_at  REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX roost_agent_grants_lookup ON roost_agent_grants (session_id, project_id, tool_name, mode);
    CREATE TABLE roost_agent_sessions (
        session_id          TEXT PRIMARY KEY,
        principal           TEXT,
        profile             TEXT NOT NULL,
        summary             TEXT NOT NULL,
        active_turn_id      TEXT,
        pending_approval_id TEXT,
        turns               INTEGER NOT NULL DEFAULT 0,
        created_at          REAL NOT NULL,
        updated_at          REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE roost_agent_project (
        project_id   TEXT PRIMARY KEY,
        settings     TEXT NOT NULL,
        files        TEXT NOT NULL,
        heavy_run_id TEXT,
        heavy_since  REAL,
        updated_at   REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE roost_agent_jobs (
        job_id           TEXT PRIMARY KEY,
        run_id           TEXT NOT NULL,
        turn_id          TEXT NOT NULL,
        item_id          TEXT,
        job_kind         TEXT NOT NULL,
        tool_name        TEXT NOT NULL,
        args             TEXT NOT NULL,
        status           TEXT NOT NULL,
        attempt          INTEGER NOT NULL DEFAULT 0,
        max_attempts     INTEGER NOT NULL,
        lease_owner      TEXT,
        lease_expires_at REAL,
        heartbeat_at     REAL,
        progress         TEXT NOT NULL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        result           TEXT,
        error            TEXT,
        retryable        INTEGER NOT NULL DEFAULT 0,
        created_at       REAL NOT NULL,
        updated_at       REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX roost_agent_jobs_run ON roost_agent_jobs (run_id, status);
    """,
    # v2: secrets a step needs to run, kept out of events and cards (see roost.agent.payloads)
    """
    CREATE TABLE roost_agent_secrets (
        digest     TEXT PRIMARY KEY,
        value      TEXT NOT NULL,
        created_at REAL NOT NULL
    ) WITHOUT ROWID;
    """,
    # v3: runs in creation order (ties of created_at broken), and the request as the planner needs it
    # (credentials kept in the vault, see roost.agent.payloads)
    """
    ALTER TABLE roost_agent_runs ADD COLUMN ordinal INTEGER;
    ALTER TABLE roost_agent_runs ADD COLUMN request TEXT;
    UPDATE roost_agent_runs SET ordinal = (
        SELECT count(*) FROM roost_agent_runs AS r
        WHERE r.created_at < roost_agent_runs.created_at
           OR (r.created_at = roost_agent_runs.created_at AND r.run_id <= roost_agent_runs.run_id)
    );
    CREATE UNIQUE INDEX roost_agent_runs_ordinal ON roost_agent_runs (ordinal);
    """,
    # v4: one spelling of a status (roost.agent.status): runs and jobs were written "canceled"
    """
    UPDATE roost_agent_runs SET status = 'cancelled' WHERE status = 'canceled';
    UPDATE roost_agent_jobs SET status = 'cancelled' WHERE status = 'canceled';
    """,
    # v5: a job's outcome as its run needs it (jobs on the workflow core, roost.agent.jobs): a model
    # step's decision with its tool calls' arguments kept (the vault holds their secrets), the
    # question of a tool that needs input; the workflow core's records hold flags only
    "ALTER TABLE roost_agent_jobs ADD COLUMN outcome TEXT",
    # v6: a run that is a workflow of the core (roost.agent.loop): 1 for every run begun since; 0 for
    # a run of an earlier release, which finishes on the state machine it began on
    "ALTER TABLE roost_agent_runs ADD COLUMN on_core INTEGER NOT NULL DEFAULT 0",
)

#: Columns stored as JSON text, per table suffix.
JSON_COLUMNS = frozenset(
    {
        "normalized_command",
        "inputs",
        "evidence_refs",
        "args",
        "result",
        "proposed_scope",
        "scope",
        "profile",
        "settings",
        "files",
        "progress",
        "request",
        "outcome",
    }
)

#: Free-text columns: every value passes the store's text cleaner (redaction, size) on its way in.
TEXT_COLUMNS = frozenset(
    {"input_text", "output_text", "error", "output", "question", "summary", "model_text"}
)

_KEYS = {
    "turns": "turn_id",
    "runs": "run_id",
    "items": "item_id",
    "approvals": "approval_id",
    "grants": "grant_id",
    "sessions": "session_id",
    "project": "project_id",
    "jobs": "job_id",
    "streams": "message_id",
    "chat_messages": "message_id",
    "sandboxes": "sandbox_session_id",
}


def new_id(prefix: str) -> str:
    """A fresh id such as ``turn_3f2a…`` (random, 64 bits: unique within one agent)."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def _encode(col: str, value: Any) -> Any:
    if col in JSON_COLUMNS and value is not None:
        return orjson.dumps(value).decode()
    return value


def _decode(cols: Sequence[str], row: Sequence[Any]) -> Row:
    out: Row = {}
    for col, value in zip(cols, row, strict=True):
        out[col] = orjson.loads(value) if col in JSON_COLUMNS and value is not None else value
    return out


class Store:
    """Row access for one turn's connection. Tables are named by suffix: ``"runs"``, ``"jobs"``…

    ``clean_text`` is applied to every value of a :data:`TEXT_COLUMNS` column written through
    :meth:`insert` or :meth:`update`: the one place free text (errors, outputs, questions, summaries)
    passes the payload policy.
    """

    __slots__ = ("_clean", "_conn")

    def __init__(self, conn: sqlite3.Connection, clean_text: Callable[[str], str] | None = None) -> None:
        self._conn = conn
        self._clean = clean_text

    def _value(self, col: str, value: Any) -> Any:
        if col in TEXT_COLUMNS and isinstance(value, str) and self._clean is not None:
            value = self._clean(value)
        return _encode(col, value)

    def insert(self, table: str, row: Row) -> None:
        cols = list(row)
        self._conn.execute(
            f"INSERT INTO roost_agent_{table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [self._value(c, row[c]) for c in cols],
        )

    def update(self, table: str, key: str, **values: Any) -> None:
        cols = list(values)
        self._conn.execute(
            f"UPDATE roost_agent_{table} SET {', '.join(f'{c} = ?' for c in cols)} WHERE {_KEYS[table]} = ?",
            [*(self._value(c, values[c]) for c in cols), key],
        )

    def put_secret(self, digest: str, value: str, now: float) -> None:
        self._conn.execute(
            "INSERT OR IGNORE INTO roost_agent_secrets (digest, value, created_at) VALUES (?, ?, ?)",
            (digest, value, now),
        )

    def salt(self, now: float) -> str:
        """This agent's random salt for secret digests, made on first use."""
        row = self._conn.execute("SELECT value FROM roost_agent_secrets WHERE digest = '#salt'").fetchone()
        if row is not None:
            salt: str = orjson.loads(row[0])
            return salt
        salt = secrets.token_hex(16)
        self.put_secret("#salt", orjson.dumps(salt).decode(), now)
        return salt

    def get_secret(self, digest: str) -> Any:
        row = self._conn.execute(
            "SELECT value FROM roost_agent_secrets WHERE digest = ?", (digest,)
        ).fetchone()
        if row is None:
            raise LookupError(f"no kept secret {digest}")
        return orjson.loads(row[0])

    def get(self, table: str, key: str) -> Row | None:
        rows = self.select(table, f"{_KEYS[table]} = ?", (key,))
        return rows[0] if rows else None

    def fields(self, table: str, key: str, cols: Sequence[str]) -> Row | None:
        """Only ``cols`` of the row ``key`` (decoded as :meth:`get` decodes them), for a path that
        needs a few columns of a wide row many times (a streamed batch's turn)."""
        row = self._conn.execute(
            f"SELECT {', '.join(cols)} FROM roost_agent_{table} WHERE {_KEYS[table]} = ?", (key,)
        ).fetchone()
        return None if row is None else _decode(cols, row)

    def select(self, table: str, where: str = "1", params: Sequence[Any] = (), order: str = "") -> list[Row]:
        sql = f"SELECT * FROM roost_agent_{table} WHERE {where}"
        if order:
            sql += f" ORDER BY {order}"
        cur = self._conn.execute(sql, params)
        cols = [d[0] for d in cur.description]
        return [_decode(cols, r) for r in cur.fetchall()]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        return self._conn.execute(sql, params).rowcount

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self._conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of ``sql`` as tuples (a read of a few columns)."""
        return [tuple(r) for r in self._conn.execute(sql, params).fetchall()]

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of ``sql`` as a tuple (None: no row), e.g. an ``UPDATE … RETURNING``."""
        row = self._conn.execute(sql, params).fetchone()
        return None if row is None else tuple(row)
