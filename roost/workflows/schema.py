"""The workflow tables' schema: the migrations of the ``workflows`` component of an actor's file.

Each entry is applied once, in order, by the actor's file (``Actor.components``); a change to the tables
is a new entry at the end, never an edit of one that shipped. The SQL that reads and writes these
tables is :mod:`roost.workflows.store`.
"""

from __future__ import annotations

from collections.abc import Sequence

from roost.storage import Migration

__all__ = ["MIGRATIONS", "WORKFLOW_COMPONENT"]

MIGRATIONS: Sequence[Migration] = (
    """
    CREATE TABLE roost_wf (
        id          TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        input       TEXT NOT NULL,
        status      TEXT NOT NULL,
        generation  INTEGER NOT NULL,
        result      TEXT,
        error       TEXT,
        reason      TEXT,
        waiting     TEXT,
        created_by  TEXT,
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX roost_wf_by_status ON roost_wf (status, created_at);
    CREATE TABLE roost_wf_steps (
        workflow_id TEXT NOT NULL,
        position    INTEGER NOT NULL,
        name        TEXT NOT NULL,
        kind        TEXT NOT NULL,
        status      TEXT NOT NULL,
        attempt     INTEGER NOT NULL,
        run         INTEGER NOT NULL,
        retryable   INTEGER NOT NULL DEFAULT 1,
        result      TEXT,
        error       TEXT,
        wake_at     REAL,
        started_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        PRIMARY KEY (workflow_id, position)
    ) WITHOUT ROWID;
    CREATE TABLE roost_wf_events (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        workflow_id TEXT NOT NULL,
        name        TEXT NOT NULL,
        payload     TEXT NOT NULL,
        sent_by     TEXT,
        sent_at     REAL NOT NULL
    );
    CREATE INDEX roost_wf_events_by_name ON roost_wf_events (workflow_id, name, id);
    CREATE TABLE roost_wf_history (
        workflow_id TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        at          REAL NOT NULL,
        generation  INTEGER NOT NULL,
        event       TEXT NOT NULL,
        position    INTEGER,
        name        TEXT,
        attempt     INTEGER,
        detail      TEXT,
        PRIMARY KEY (workflow_id, seq)
    ) WITHOUT ROWID;
    """,
    # the branches of a ``step.parallel`` join: one row per branch of the join at ``position``
    """
    CREATE TABLE roost_wf_branches (
        workflow_id TEXT NOT NULL,
        position    INTEGER NOT NULL,
        branch      TEXT NOT NULL,
        ord         INTEGER NOT NULL,
        status      TEXT NOT NULL,
        attempt     INTEGER NOT NULL,
        run         INTEGER NOT NULL,
        retryable   INTEGER NOT NULL DEFAULT 1,
        result      TEXT,
        error       TEXT,
        wake_at     REAL,
        updated_at  REAL NOT NULL,
        PRIMARY KEY (workflow_id, position, branch)
    ) WITHOUT ROWID;
    """,
    # a random nonce per workflow, drawn at start: in every step id, so two actors' workflows of one
    # id, or a workflow deleted and started again, never share an idempotency key
    "ALTER TABLE roost_wf ADD COLUMN nonce TEXT NOT NULL DEFAULT ''",
    # an outside attempt's last progress report (of the attempt running now) and the step's
    # checkpoint (kept for its later attempts and runs): ``StepAttempt.progress``
    """
    ALTER TABLE roost_wf_steps ADD COLUMN progress TEXT;
    ALTER TABLE roost_wf_steps ADD COLUMN checkpoint TEXT;
    ALTER TABLE roost_wf_branches ADD COLUMN progress TEXT;
    ALTER TABLE roost_wf_branches ADD COLUMN checkpoint TEXT;
    """,
    # the concurrency slot an outside step runs in (``step.external(..., slot=)``), shared by the
    # actor's workflows: its running steps are counted and its waiting ones admitted oldest first
    """
    ALTER TABLE roost_wf_steps ADD COLUMN slot TEXT;
    ALTER TABLE roost_wf_steps ADD COLUMN slot_seq INTEGER;
    CREATE INDEX roost_wf_steps_by_slot ON roost_wf_steps (status, slot, slot_seq) WHERE slot IS NOT NULL;
    """,
)
#: ``Actor.components`` entry of a kind with workflows (``Workflows`` declares it).
WORKFLOW_COMPONENT: tuple[str, Sequence[Migration]] = ("workflows", MIGRATIONS)
