"""The sandbox workspaces' table (component ``sandbox``), its statuses and its row forms.

One row per run that owns a workspace, beside the run's ``run_id`` and ``trace_id``. The state machine
over these rows is :mod:`roost.agent.workspaces`; docs/design.md (*Sandbox workspaces*) draws it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import orjson

from roost.agent.sandbox import total
from roost.agent.store import Row
from roost.storage import Migration

__all__ = ["SANDBOX_MIGRATIONS", "TABLE", "WorkspaceStatus", "card", "decode", "encode"]

SANDBOX_MIGRATIONS: Sequence[Migration] = (
    """
    CREATE TABLE roost_agent_sandboxes (
        sandbox_session_id  TEXT PRIMARY KEY,
        run_id              TEXT NOT NULL UNIQUE,
        trace_id            TEXT NOT NULL,
        manifest_version    TEXT NOT NULL,
        manifest_ref        TEXT NOT NULL,
        permissions_profile TEXT NOT NULL,
        disposition         TEXT NOT NULL,
        status              TEXT NOT NULL,
        snapshot_id         TEXT,
        started_from        TEXT,
        entries             TEXT NOT NULL,
        version             INTEGER NOT NULL DEFAULT 1,
        reopened            INTEGER NOT NULL DEFAULT 0,
        directory           TEXT NOT NULL,
        created_at          REAL NOT NULL,
        updated_at          REAL NOT NULL
    ) WITHOUT ROWID;
    """,
)

TABLE = "roost_agent_sandboxes"
#: JSON columns (``roost.transport.admin`` exports them as objects too).
JSON = ("permissions_profile", "entries")


class WorkspaceStatus(StrEnum):
    """``roost_agent_sandboxes.status``."""

    #: The directory exists (or is put back at the next step, by the disposition).
    ACTIVE = "active"
    #: The run ended: the final snapshot is kept, the directory removed (``continue_run`` restores it).
    CLOSED = "closed"


def decode(row: Row) -> Row:
    for col in JSON:
        if row.get(col) is not None:
            row[col] = orjson.loads(row[col])
    return row


def encode(col: str, value: Any) -> Any:
    return orjson.dumps(value).decode() if col in JSON and value is not None else value


def card(r: Row) -> dict[str, Any]:
    """A row as ``get_run`` shows it: the entries as paths with digests and sizes."""
    return {
        "sandbox_session_id": r["sandbox_session_id"],
        "run_id": r["run_id"],
        "trace_id": r["trace_id"],
        "manifest_version": r["manifest_version"],
        "manifest_ref": r["manifest_ref"],
        "permissions_profile": r["permissions_profile"],
        "disposition": r["disposition"],
        "status": r["status"],
        "snapshot_id": r["snapshot_id"],
        "started_from": r["started_from"],
        "version": r["version"],
        "reopened": r["reopened"],
        "files": len(r["entries"]),
        "bytes": total(r["entries"].values()),
        "entries": [{"path": p, "digest": e[0], "size": e[1]} for p, e in sorted(r["entries"].items())],
    }
