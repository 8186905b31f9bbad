"""Versioned forward migrations, for the framework's tables and for each actor kind's tables.

A component (``"roost"`` for the framework, ``"kind:<kind>"`` for an actor kind) has an ordered list of
steps; step ``i`` (0-based) is version ``i + 1``. A step is SQL text (may hold several statements) or a
callable taking the ``sqlite3.Connection``. Applied versions are recorded in ``roost_migrations`` in the
same transaction as the steps, so a crash mid-migration leaves the file at the previous version.

Guarantees:

- Forward only: a file at a higher version than the code knows is refused with ``MigrationError``
  (running old code on new data would silently misread it).
- Each step runs at most once per file.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence

from roost.storage.errors import MigrationError

__all__ = ["FRAMEWORK_MIGRATIONS", "Migration", "apply_migrations", "current_version"]

Migration = str | Callable[[sqlite3.Connection], None]

_BOOTSTRAP = """
CREATE TABLE IF NOT EXISTS roost_migrations (
    component  TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    applied_at REAL    NOT NULL,
    PRIMARY KEY (component, version)
) WITHOUT ROWID
"""

FRAMEWORK_MIGRATIONS: Sequence[Migration] = (
    # v1: identity, current state, and the resumable log of durable frames.
    """
    CREATE TABLE roost_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE roost_state (
        id         INTEGER PRIMARY KEY CHECK (id = 1),
        state      TEXT    NOT NULL,
        seq        INTEGER NOT NULL,
        updated_at REAL    NOT NULL
    );
    CREATE TABLE roost_log (
        seq        INTEGER PRIMARY KEY,
        kind       TEXT    NOT NULL,
        frame      TEXT    NOT NULL,
        created_at REAL    NOT NULL
    );
    """,
    # v2: wake-ups (scheduler): schedules, completed fires, dead letters.
    """
    CREATE TABLE roost_schedules (
        id            TEXT PRIMARY KEY,
        key           TEXT UNIQUE,
        callback      TEXT    NOT NULL,
        payload       TEXT    NOT NULL,
        trigger       TEXT    NOT NULL,
        next_fire     REAL,
        retry_at      REAL,
        misfire       TEXT    NOT NULL,
        misfire_grace REAL    NOT NULL,
        max_attempts  INTEGER NOT NULL,
        backoff_base  REAL    NOT NULL,
        backoff_cap   REAL    NOT NULL,
        timeout       REAL    NOT NULL,
        attempts      INTEGER NOT NULL DEFAULT 0,
        status        TEXT    NOT NULL,
        runs          INTEGER NOT NULL DEFAULT 0,
        last_fire     REAL,
        last_lateness REAL,
        last_error    TEXT,
        trace_id      TEXT    NOT NULL,
        created_at    REAL    NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX roost_schedules_due ON roost_schedules (coalesce(retry_at, next_fire))
        WHERE status = 'active';
    CREATE TABLE roost_fires (
        schedule_id  TEXT NOT NULL,
        nominal      REAL NOT NULL,
        started_at   REAL NOT NULL,
        lateness     REAL NOT NULL,
        PRIMARY KEY (schedule_id, nominal)
    ) WITHOUT ROWID;
    CREATE TABLE roost_dead_letters (
        id          INTEGER PRIMARY KEY,
        schedule_id TEXT NOT NULL,
        callback    TEXT NOT NULL,
        payload     TEXT NOT NULL,
        nominal     REAL NOT NULL,
        attempts    INTEGER NOT NULL,
        error       TEXT NOT NULL,
        at          REAL NOT NULL
    );
    """,
    # v3: idempotency keys of calls (roost.actors.callkeys): key -> the call's recorded outcome. Rows
    # are pruned from the lowest ids (the oldest), so no index on the time: each one is a page more to
    # write in every keyed call's commit.
    """
    CREATE TABLE roost_call_keys (
        id          INTEGER PRIMARY KEY,
        key         TEXT    NOT NULL UNIQUE,
        fingerprint TEXT    NOT NULL,
        ok          INTEGER NOT NULL,
        outcome     TEXT    NOT NULL,
        created_at  REAL    NOT NULL
    );
    """,
    # v4: call keys are each caller's own, and bounded in bytes (roost.actors.callkeys): a record is
    # found by (caller, key), and holds its size and upto, the running total of the sizes up to it, so
    # a record costs no scan and no page besides its own. The small columns come before the outcome,
    # which may overflow its page: reading them (the pruning does) never reads the outcome. The v3
    # table came in the same release: dropped, its records with it (a retry under a key recorded
    # before the upgrade runs the call again).
    """
    DROP TABLE roost_call_keys;
    CREATE TABLE roost_call_keys (
        id          INTEGER PRIMARY KEY,
        caller      TEXT    NOT NULL,
        key         TEXT    NOT NULL,
        fingerprint TEXT    NOT NULL,
        ok          INTEGER NOT NULL,
        size        INTEGER NOT NULL,
        upto        INTEGER NOT NULL,
        created_at  REAL    NOT NULL,
        outcome     TEXT    NOT NULL,
        UNIQUE (caller, key)
    );
    """,
)


def current_version(conn: sqlite3.Connection, component: str) -> int:
    """The highest applied version of ``component`` (0 if none)."""
    row = conn.execute(
        "SELECT max(version) FROM roost_migrations WHERE component = ?", (component,)
    ).fetchone()
    return int(row[0] or 0)


def apply_migrations(conn: sqlite3.Connection, component: str, steps: Sequence[Migration]) -> list[int]:
    """Apply the steps of ``component`` not yet applied; return the versions applied.

    Must be called inside an open transaction; the caller commits.
    """
    conn.execute(_BOOTSTRAP)
    have = current_version(conn, component)
    if have > len(steps):
        raise MigrationError(component, have, RuntimeError(f"file is at v{have}, code knows v{len(steps)}"))
    applied: list[int] = []
    for version in range(have + 1, len(steps) + 1):
        step = steps[version - 1]
        conn.execute(f"SAVEPOINT migrate_{version}")
        try:
            if isinstance(step, str):
                for statement in _split(step):
                    conn.execute(statement)
            else:
                step(conn)
            conn.execute(
                "INSERT INTO roost_migrations (component, version, applied_at) VALUES (?, ?, ?)",
                (component, version, time.time()),
            )
        except Exception as exc:
            conn.execute(f"ROLLBACK TO migrate_{version}")
            conn.execute(f"RELEASE migrate_{version}")
            raise MigrationError(component, version, exc) from exc
        conn.execute(f"RELEASE migrate_{version}")
        applied.append(version)
    return applied


def _split(script: str) -> list[str]:
    """Split SQL text into complete statements (``executescript`` would commit the transaction)."""
    statements: list[str] = []
    buf = ""
    for piece in script.split(";"):
        buf += piece
        if sqlite3.complete_statement(buf + ";"):
            if buf.strip():
                statements.append(buf.strip())
            buf = ""
        else:
            buf += ";"
    if buf.strip():
        statements.append(buf.strip())
    return statements
