"""Whether an actor's file is damaged: missing, empty, unreadable, or older than what it had committed.

Two witnesses say what an actor had committed, and a file must hold at least that:

- **The directory lists it, so its file existed.** A new actor's file is created (opened, its schema
  committed) before its directory row is written (:meth:`roost.actors.registry.Registry.prepare`), so
  an actor the directory lists whose file is missing or empty (0 bytes) lost it, whatever it had
  committed. A crash between the file and the row leaves a file with no row: adopted as it is.
- **The high-water seq.** Every commit of a live actor writes its seq to a sidecar file beside its
  actor file (:class:`Witness`, ``<file>-seq``, 8 bytes) *after* the commit and *before* the batch's
  outputs are released: no acknowledged write is ever ahead of it, and a crash between the commit
  and the write leaves it lower (never a false refusal). It is written with ``os.pwrite`` on a
  descriptor kept open while the actor is live, not fsynced: like the WAL under
  ``synchronous=NORMAL`` it survives a SIGKILL through the page cache. The directory's
  ``acked_seq`` (carried by the batched touches, up to a sweep behind) is the second witness, read
  when the sidecar is gone. A file whose seq is below the higher of the two lost acknowledged writes.

A file SQLite cannot read (``file is not a database``, ``database disk image is malformed``) is
damaged too (:func:`corrupt_damage`). These functions only judge; the registry refuses the actor
(``actor_damaged``), and the data tools (``roost inspect``, ``roost delete``) report the same reasons.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

__all__ = [
    "KEPT_WAL",
    "WITNESS",
    "Witness",
    "corrupt_damage",
    "file_seq",
    "header_damage",
    "keep_wal",
    "read_witness",
    "seq_damage",
    "unopened_damage",
]

#: The suffix of the copy of a damaged file's WAL, kept beside it (:func:`keep_wal`).
KEPT_WAL = "-wal.damaged"
#: The suffix of an actor's high-water seq sidecar (:class:`Witness`).
WITNESS = "-seq"
#: SQLite's primary result codes of a file that is not (or no longer) a readable database.
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def witness_path(path: Path) -> Path:
    return path.with_name(path.name + WITNESS)


def read_witness(path: Path) -> int:
    """The seq the sidecar of the actor file ``path`` records (0 if there is none, or it is short)."""
    try:
        data = witness_path(path).read_bytes()
    except FileNotFoundError:
        return 0
    return int.from_bytes(data[:8], "big") if len(data) >= 8 else 0


class Witness:
    """The open sidecar of a live actor: :meth:`write` records a committed seq (one ``pwrite`` of 8
    bytes, no fsync). One descriptor while the actor is live; :meth:`close` is idempotent."""

    __slots__ = ("_fd", "seq")

    def __init__(self, path: Path, seq: int) -> None:
        self._fd: int | None = os.open(witness_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.seq = -1
        self.write(seq)

    def write(self, seq: int) -> None:
        """Record ``seq`` (committed already) if it is above the last one written: it only rises."""
        if seq > self.seq and self._fd is not None:
            os.pwrite(self._fd, seq.to_bytes(8, "big"), 0)
            self.seq = seq

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def unopened_damage(path: Path, listed: bool, acked_seq: int) -> str | None:
    """What is wrong with the file at ``path`` before opening it (opening would create it): missing or
    empty while the directory lists the actor (``listed``) or it had committed ``acked_seq`` > 0;
    not an SQLite file or truncated (:func:`header_damage`). None if nothing can be told yet."""
    if not listed and acked_seq <= 0:
        if path.exists() and (size := path.stat().st_size) > 0:
            return header_damage(path, size)
        return None
    had = f"; it had committed seq {acked_seq}" if acked_seq > 0 else "; the directory lists it"
    if not path.exists():
        wal = path.with_name(path.name + "-wal")
        left = " (its -wal file remains)" if wal.exists() else ""
        return f"its file is missing{left}{had}"
    size = path.stat().st_size
    if size == 0:
        return f"its file is empty (0 bytes){had}"
    return header_damage(path, size)


#: The first 16 bytes of every SQLite database file.
_MAGIC = b"SQLite format 3\x00"


def header_damage(path: Path, size: int) -> str | None:
    """What the first 100 bytes of a non-empty file tell without opening it as a database: not an
    SQLite file, or shorter than the pages its header counts (truncated). None if they look whole.

    Never call it on a file this process has open through SQLite: closing the descriptor it reads
    with drops every POSIX lock the process holds on the file (the actor's exclusive lock). Other
    processes' locks are their own: the offline tools may read a file a server holds."""
    with open(path, "rb") as f:
        header = f.read(100)
    if len(header) < 100 or header[:16] != _MAGIC:
        return "its file cannot be read: file is not a database"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96]  # the page count is kept up to date (SQLite >= 3.7.0)
    if valid and size < pages * page_size and not _has_wal(path):
        # (with a WAL beside it, a checkpoint killed midway may have written page 1 before the
        # pages past the end: the WAL still holds them, and SQLite's reading judges)
        return f"its file cannot be read: truncated to {size} of its {pages * page_size} bytes"
    return None


def _has_wal(path: Path) -> bool:
    wal = path.with_name(path.name + "-wal")
    return wal.exists() and wal.stat().st_size > 0


def corrupt_damage(exc: BaseException) -> str | None:
    """The damage an error of SQLite reading an actor file tells (not a database, malformed), or None
    for any other error (locked, out of descriptors, a full disk)."""
    if isinstance(exc, sqlite3.DatabaseError) and getattr(exc, "sqlite_errorcode", None) is not None:
        if exc.sqlite_errorcode & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            return f"its file cannot be read: {exc}"
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
