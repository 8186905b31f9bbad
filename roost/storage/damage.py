"""Whether an actor's file is damaged: missing, empty, or older than what the actor had committed.

The directory keeps each actor's *high-water seq* (``acked_seq``: the highest ``seq`` it is known to
have committed, see :mod:`roost.storage.directory`). A file that the directory lists with a high-water
seq above 0 must hold at least that seq; one that is missing, empty (0 bytes) or behind it lost
acknowledged writes, and is refused rather than re-created or served older. A row at seq 0 has
acknowledged nothing yet: its actor may start afresh (the crash between registering an actor and
creating its file leaves exactly that).

These functions only judge; :meth:`roost.actors.registry.Registry.get` refuses the actor, and the
data tools (``roost inspect``) report the same reasons.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

__all__ = ["KEPT_WAL", "file_seq", "keep_wal", "seq_damage", "unopened_damage"]

#: The suffix of the copy of a damaged file's WAL, kept beside it (:func:`keep_wal`).
KEPT_WAL = "-wal.damaged"


def unopened_damage(path: Path, acked_seq: int) -> str | None:
    """What is wrong with the file at ``path`` before opening it (opening would create it): missing or
    empty while the directory recorded ``acked_seq`` > 0. None if nothing can be told yet."""
    if acked_seq <= 0:
        return None
    if not path.exists():
        wal = path.with_name(path.name + "-wal")
        left = " (its -wal file remains)" if wal.exists() else ""
        return f"its file is missing{left}; it had committed seq {acked_seq}"
    if path.stat().st_size == 0:
        return f"its file is empty (0 bytes); it had committed seq {acked_seq}"
    return None


def file_seq(conn: sqlite3.Connection) -> int:
    """The newest seq an open actor file holds: its log's head, or its state snapshot's seq."""
    head = conn.execute("SELECT coalesce(max(seq), 0) FROM roost_log").fetchone()[0]
    snap = conn.execute("SELECT coalesce(max(seq), 0) FROM roost_state").fetchone()[0]
    return max(int(head), int(snap))


def seq_damage(seq: int, acked_seq: int) -> str | None:
    """What is wrong with a file that holds ``seq`` when the actor had committed ``acked_seq``."""
    if seq >= acked_seq:
        return None
    return (
        f"its file is at seq {seq}, older than the seq {acked_seq} it had committed "
        "(a damaged write-ahead log, or an older copy put back)"
    )


def keep_wal(path: Path) -> None:
    """Copy the WAL of a file refused as older than it should be to ``<file>-wal.damaged`` (once),
    before the file is closed: SQLite's close copies the WAL's readable frames into the file and
    drops the rest, which the copy keeps for whoever looks into it. ``roost delete`` removes it."""
    wal = path.with_name(path.name + "-wal")
    kept = path.with_name(path.name + KEPT_WAL)
    if wal.exists() and not kept.exists():
        shutil.copyfile(wal, kept)
