"""How a connection resumes from the cursor it sent (``docs/protocol.md``, *Resume*).

A pure decision on three numbers, so that every case is tested without a socket or a file.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

__all__ = ["Resume", "ResumeMode", "decide_resume"]


class ResumeMode(StrEnum):
    """The welcome's ``resume`` field."""

    FRESH = "fresh"  #: no cursor: the state, then live frames
    REPLAY = "replay"  #: every logged frame after the cursor, then live ones
    SNAPSHOT = "snapshot"  #: the cursor cannot be honoured: take the state as the new start


class Resume(NamedTuple):
    mode: ResumeMode
    #: Why a snapshot: ``cursor_ahead`` (newer than the log) or ``cursor_expired`` (older than it).
    reason: str | None = None
    #: Replay the frames after this seq (set for a replay with something to replay).
    replay_after: int | None = None


def decide_resume(cursor: int | None, seq: int, oldest: int) -> Resume:
    """The resume rule for a client at ``cursor`` and a log holding ``oldest`` … ``seq``.

    - no cursor: ``fresh``;
    - a cursor beyond ``seq``: ``snapshot`` (``cursor_ahead``; the client saw a future that was lost,
      or another actor's log);
    - a cursor before ``oldest - 1``: ``snapshot`` (``cursor_expired``; frames it missed were pruned);
    - otherwise ``replay`` of the frames after the cursor (nothing to replay when it is ``seq``).
    """
    if cursor is None:
        return Resume(ResumeMode.FRESH)
    if cursor > seq:
        return Resume(ResumeMode.SNAPSHOT, "cursor_ahead")
    if cursor < oldest - 1:
        return Resume(ResumeMode.SNAPSHOT, "cursor_expired")
    return Resume(ResumeMode.REPLAY, None, cursor if cursor < seq else None)
