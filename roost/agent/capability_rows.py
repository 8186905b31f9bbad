"""The capability sessions' table (component ``capability``), its statuses and its row forms.

The state machine over these rows is :mod:`roost.agent.capabilities`; docs/design.md draws it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from roost.agent.store import Row
from roost.storage import Migration

__all__ = [
    "CAPABILITY_MIGRATIONS",
    "LIVE",
    "RESEND_ALLOWED",
    "RESEND_ASKED",
    "RESEND_DECLINED",
    "TABLE",
    "CapabilityStatus",
    "Opened",
    "card",
    "decode",
    "encode",
    "gives_leave",
]

CAPABILITY_MIGRATIONS: Sequence[Migration] = (
    """
    CREATE TABLE roost_agent_capability_sessions (
        capability_session_id TEXT PRIMARY KEY,
        run_id          TEXT NOT NULL,
        trace_id        TEXT NOT NULL,
        server          TEXT NOT NULL,
        transport       TEXT NOT NULL,
        status          TEXT NOT NULL,
        reason          TEXT,
        expires_at      REAL,
        resume_token    TEXT,
        approval_state  TEXT NOT NULL,
        elicitation     TEXT,
        answer          TEXT,
        reinit_allowed  INTEGER NOT NULL DEFAULT 0,
        job_id          TEXT,
        attempt         INTEGER NOT NULL DEFAULT 0,
        initialized     INTEGER NOT NULL DEFAULT 0,
        calls           INTEGER NOT NULL DEFAULT 0,
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL,
        UNIQUE (run_id, server)
    ) WITHOUT ROWID;
    """,
    # the result of the handshake that made the session (JSON): with ``resume_token``, what
    # rejoining the session of a streamable HTTP server takes
    "ALTER TABLE roost_agent_capability_sessions ADD COLUMN handshake TEXT;",
    # the item whose call was opened and not answered yet (it may have had its effect), and the
    # user's leave to make such a call again (RESEND_ASKED, RESEND_ALLOWED)
    "ALTER TABLE roost_agent_capability_sessions ADD COLUMN in_flight TEXT;",
    "ALTER TABLE roost_agent_capability_sessions ADD COLUMN resend TEXT;",
)

#: ``resend``: the run waits for the user's leave to make a call that may have had its effect again.
RESEND_ASKED = "asked"
#: ``resend``: the user gave it (``provide_input`` ``{"resend": true}``); spent by the open that
#: makes the call again.
RESEND_ALLOWED = "allowed"
#: ``resend``: the user said no (any other answer): the step fails, the call not made again.
RESEND_DECLINED = "declined"


def gives_leave(answer: Any) -> bool:
    """Whether ``answer`` to the question of :data:`RESEND_ASKED` gives the leave: exactly ``true``
    or ``{"resend": true}`` (not ``1``, not ``"yes"``)."""
    if isinstance(answer, dict):
        return len(answer) == 1 and answer.get("resend") is True
    return answer is True


TABLE = "roost_agent_capability_sessions"
_JSON = ("approval_state", "elicitation", "answer", "handshake")


class CapabilityStatus(StrEnum):
    """``capability_sessions.status`` (docs/design.md draws the machine)."""

    IN_PROGRESS = "in_progress"
    WAITING_FOR_INPUT = "waiting_for_input"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    RESUMABLE = "resumable"
    REINITIALIZE_REQUIRED = "reinitialize_required"
    CLOSED = "closed"


#: A row in one of these has (or may have) a live MCP session.
LIVE = (CapabilityStatus.IN_PROGRESS, CapabilityStatus.WAITING_FOR_INPUT)


@dataclass(slots=True, frozen=True)
class Opened:
    """What :meth:`Capabilities.open` decided for the worker of an MCP call."""

    capability_session_id: str
    job_id: str | None
    #: ``reuse`` the connection this process holds, ``connect`` anew (a new MCP session), ``rejoin``
    #: the session this process no longer holds (``resume_token``, ``handshake``), ``wait`` for the
    #: user's leave (``question`` says for what), or ``declined``: the user said no to making a call
    #: that may have had its effect again.
    action: str
    question: str | None = None
    resume_token: str | None = None
    handshake: dict[str, Any] | None = None


def decode(row: Row) -> Row:
    """A row as read, its JSON columns decoded."""
    for col in _JSON:
        if row.get(col) is not None:
            row[col] = orjson.loads(row[col])
    return row


def digest(token: str | None) -> str | None:
    """How a card shows a session id: a digest (the id itself lets anyone holding it use the session)."""
    return None if token is None else "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:16]


def encode(col: str, value: Any) -> Any:
    """A value as written to column ``col``."""
    return orjson.dumps(value).decode() if col in _JSON and value is not None else value


def card(r: Row) -> dict[str, Any]:
    """A row as ``get_run`` shows it: the session id as a digest, the kept answer left out."""
    return {
        "capability_session_id": r["capability_session_id"],
        "run_id": r["run_id"],
        "trace_id": r["trace_id"],
        "server": r["server"],
        "transport": r["transport"],
        "status": r["status"],
        "reason": r["reason"],
        "expires_at": r["expires_at"],
        "resume_token": digest(r["resume_token"]),
        "approval_state": r["approval_state"],
        "elicitation": r["elicitation"],
        "job_id": r["job_id"],
        "attempt": r["attempt"],
        "initialized": r["initialized"],
        "calls": r["calls"],
        "in_flight": r.get("in_flight") is not None,
        "resend": r.get("resend"),
    }
