"""One actor's SQLite file: opened inline on the event loop thread, held exclusively, written in turns.

Why inline ``sqlite3`` and not aiosqlite: every aiosqlite call is a thread hop (~36 µs on the reference
machine) while an inline WAL commit with ``synchronous=NORMAL`` costs ~14 µs and never fsyncs. The actor
runtime therefore calls this class directly from its mailbox task and commits once per batch of turns.

Guarantees:

- **Single activation across processes (guarantee 1).** The file is opened with
  ``locking_mode=EXCLUSIVE`` and a write transaction is taken at open, so the OS lock is held until
  :meth:`close`. A second process (or a second open in this one) gets :class:`ActorLocked` at once.
  The lock dies with the process, SIGKILL included.
- **Durability.** WAL mode. ``durability="normal"`` (``synchronous=NORMAL``) survives a crash of the
  process; ``"full"`` (``synchronous=FULL``) also survives power loss, at the cost of an fsync per
  commit.
- **Atomic turns.** :meth:`begin_turn` / :meth:`end_turn` / :meth:`abort_turn` bracket one turn:
  the first turn of a batch is the transaction itself, later ones are SAVEPOINTs inside it; a failed
  turn leaves nothing behind.
- **Checkpoints off the event loop.** SQLite's automatic checkpoint is off: it would copy the WAL
  back and fsync twice inside whichever commit crossed 1,000 pages, stalling every actor of the
  process. :attr:`checkpoint_due` says when the WAL holds about that much; the actor runtime then runs
  :meth:`checkpoint` in a thread while the actor takes no turn. The WAL is then rewritten from its
  start, which costs less than growing it.
- **State lives in the log.** Each state change is one row of ``roost_log`` (the frame carries the
  whole state); ``roost_state`` is a snapshot written when the actor closes or the log is pruned.
  The current state is the newer of the two (:meth:`load_state`, :meth:`latest_frame`).
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import orjson

from roost.storage.damage import Witness
from roost.storage.errors import ActorLocked
from roost.storage.migrations import FRAMEWORK_MIGRATIONS, Migration, apply_migrations

__all__ = ["ActorFile", "Durability", "LogRow"]

Durability = Literal["normal", "full"]
LogRow = tuple[int, str, str]  # (seq, kind, frame)

#: WAL pages after which a checkpoint is due (SQLite's own automatic threshold).
CHECKPOINT_PAGES = 1000
#: If no checkpoint could run between turns by this many times the threshold, a commit runs one itself.
_INLINE_FACTOR = 4
_PAGE_SIZES = frozenset(1 << n for n in range(9, 17))
log = logging.getLogger("roost.storage")
#: Default page size of new actor files (``Actor.page_size`` chooses per kind). A turn usually changes
#: one page of the log, and a commit writes each changed page whole to the WAL (and checksums it): 1 KiB
#: pages make the commit of one small state change 8.7 → 6.7 µs here; frames of several KB commit
#: faster with SQLite's default 4 KiB. Files keep the size they were created with.
PAGE_SIZE = 1024


class ActorFile:
    """An open, exclusively locked actor file. Not thread-safe: one owner (the actor's mailbox)."""

    def __init__(self, conn: sqlite3.Connection, path: Path, created: bool) -> None:
        self.conn = conn
        self.path = path
        self.created = created
        self.in_transaction = False
        self._in_savepoint = False
        self._closed = False
        self._lock = threading.Lock()  # held by a checkpoint in its thread; close() waits for it
        # one cursor for the turn's own row-less statements (BEGIN, INSERT, COMMIT …): a cursor made
        # per statement costs a fifth of a microsecond each, three times a turn
        self._cur = conn.cursor()
        self._commits = 0  # commits that wrote something, since the last checkpoint
        self._changes = conn.total_changes
        self._pages_per_commit = 2.0  # learnt from each checkpoint
        #: The actor's high-water seq sidecar, opened by the registry once the file passed its checks
        #: (:mod:`roost.storage.damage`); closed with the file.
        self.witness: Witness | None = None

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: Path,
        kind: str,
        name: str,
        *,
        kind_migrations: Sequence[Migration] = (),
        components: Sequence[tuple[str, Sequence[Migration]]] = (),
        durability: Durability = "normal",
        initial_state: str = "{}",
        state_version: int = 1,
        page_size: int = PAGE_SIZE,
    ) -> ActorFile:
        """Open (creating if needed) and lock the file, migrate it, and return it.

        Raises ``ActorLocked`` if another connection holds the file.
        """
        if page_size not in _PAGE_SIZES:
            raise ValueError(f"page_size must be a power of two from 512 to 65536, not {page_size!r}")
        created = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
        try:
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            if created:  # only before the first write; an existing file keeps its page size
                conn.execute(f"PRAGMA page_size={int(page_size)}")
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise ActorLocked(kind, name)
            conn.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
            conn.execute("PRAGMA wal_autocheckpoint=0")  # the runtime checkpoints, off the loop
            conn.execute("BEGIN IMMEDIATE")
            apply_migrations(conn, "roost", FRAMEWORK_MIGRATIONS)
            for component, steps in components:  # e.g. the agent runtime's tables
                apply_migrations(conn, component, steps)
            apply_migrations(conn, f"kind:{kind}", kind_migrations)
            now = time.time()
            conn.execute(
                "INSERT OR IGNORE INTO roost_meta (key, value) VALUES "
                "('kind', ?), ('name', ?), ('created_at', ?)",
                (kind, name, repr(now)),
            )
            fresh = conn.execute(
                "INSERT OR IGNORE INTO roost_state (id, state, seq, updated_at) VALUES (1, ?, 0, ?)",
                (initial_state, now),
            ).rowcount
            if fresh:  # a new actor starts at its kind's current state version, in the same commit;
                # files from before versions existed lack the key and count as 1 (ActorHost._migrate_state)
                conn.execute(
                    "INSERT OR IGNORE INTO roost_meta (key, value) VALUES ('state_version', ?)",
                    (str(state_version),),
                )
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" in str(exc) or "busy" in str(exc):
                raise ActorLocked(kind, name) from exc
            raise
        except BaseException:
            conn.close()
            raise
        return cls(conn, path, created)

    # -- reading ---------------------------------------------------------------------------------
    def load_state(self) -> tuple[str, int]:
        """The state snapshot row (JSON text) and the ``seq`` of the frame that set it.

        The snapshot may be older than the log: see :meth:`latest_frame`.
        """
        row = self.conn.execute("SELECT state, seq FROM roost_state WHERE id = 1").fetchone()
        return str(row[0]), int(row[1])

    def latest_frame(self, kind: str, after: int) -> tuple[int, str] | None:
        """The newest logged frame of ``kind`` with ``seq > after``, as ``(seq, frame)``."""
        row = self.conn.execute(
            "SELECT seq, frame FROM roost_log WHERE kind = ? AND seq > ? ORDER BY seq DESC LIMIT 1",
            (kind, after),
        ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def current_state(self) -> tuple[str, int]:
        """The actor's state (JSON text) and the ``seq`` that set it: the newest state frame of the
        log if it is newer than the snapshot row (a state change writes only its frame)."""
        state_json, seq = self.load_state()
        newest = self.latest_frame("state", after=seq)
        if newest is None:
            return state_json, seq
        return orjson.dumps(orjson.loads(newest[1])["state"]).decode(), newest[0]

    def log_bounds(self) -> tuple[int, int]:
        """``(oldest, head)`` seq of the log; ``(1, 0)`` when nothing was ever logged.

        Pruning always keeps at least the newest frame, so an empty log means a new actor.
        """
        row = self.conn.execute("SELECT min(seq), max(seq) FROM roost_log").fetchone()
        if row[1] is None:
            return 1, 0
        return int(row[0]), int(row[1])

    def replay(self, after: int) -> list[LogRow]:
        """Logged frames with ``seq > after``, in order."""
        return [
            (int(s), str(k), str(f))
            for s, k, f in self.conn.execute(
                "SELECT seq, kind, frame FROM roost_log WHERE seq > ? ORDER BY seq", (after,)
            )
        ]

    def replay_page(self, after: int, rows: int, nbytes: int) -> list[LogRow]:
        """Logged frames with ``seq > after``, in order: at most ``rows`` of them, and no more once
        their frames' size in memory (``sys.getsizeof``) reaches ``nbytes`` (at least one row). One
        page of a replay: the query stops there, so it costs the page, not the log."""
        page: list[LogRow] = []
        size = 0
        for s, k, f in self.conn.execute(
            "SELECT seq, kind, frame FROM roost_log WHERE seq > ? ORDER BY seq LIMIT ?", (after, rows)
        ):
            page.append((int(s), str(k), str(f)))
            size += sys.getsizeof(f)
            if size >= nbytes:
                break
        return page

    # -- writing (inside a batch transaction) -------------------------------------------------------
    def commit(self) -> None:
        if self.in_transaction:
            self._cur.execute("COMMIT")
            self.in_transaction = False
            changes = self.conn.total_changes
            if changes != self._changes:  # a commit that wrote nothing adds nothing to the WAL
                self._changes = changes
                self._commits += 1
                if self._wal_pages >= CHECKPOINT_PAGES * _INLINE_FACTOR:
                    # no checkpoint could run between turns (one long streaming call, or no thread
                    # to run it): bound the WAL here, on the caller's thread, as SQLite itself would.
                    # The commit has succeeded whatever happens to the checkpoint
                    try:
                        self.checkpoint()
                    except sqlite3.Error:
                        log.warning("checkpoint of %s failed; tried again later", self.path, exc_info=True)

    @property
    def _wal_pages(self) -> float:
        """The WAL's pages, estimated from the commits that wrote something since the last checkpoint
        and the pages per such commit that checkpoint found (at least one)."""
        return self._commits * self._pages_per_commit

    @property
    def checkpointing(self) -> bool:
        """A checkpoint holds the file right now (in its worker thread)."""
        return self._lock.locked()

    @property
    def checkpoint_due(self) -> bool:
        """The WAL holds about :data:`CHECKPOINT_PAGES` pages or more."""
        return self._wal_pages >= CHECKPOINT_PAGES

    def checkpoint(self) -> None:
        """Copy the WAL into the database file. Runs in a worker thread; the caller guarantees that
        nothing else uses the file meanwhile (:meth:`close` waits for it). If it fails, it is due
        again at once."""
        with self._lock:
            if self._closed:
                return
            row = self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            commits, self._commits = self._commits, 0
        pages = int(row[1]) if row is not None else -1
        if commits and pages > 0:
            self._pages_per_commit = max(1.0, pages / commits)

    def begin_turn(self) -> None:
        """Start a turn: the batch transaction if none is open (nothing else to protect), else a
        SAVEPOINT inside it, so that a failing turn undoes only itself."""
        if self.in_transaction:
            self._cur.execute("SAVEPOINT turn")
            self._in_savepoint = True
        else:
            self._cur.execute("BEGIN")
            self.in_transaction = True
            self._in_savepoint = False

    def end_turn(self) -> None:
        """The turn succeeded: its writes join the batch (committed by :meth:`commit`)."""
        if self._in_savepoint:
            self._cur.execute("RELEASE turn")
            self._in_savepoint = False

    def abort_turn(self) -> None:
        """The turn failed: undo its writes, and only its writes."""
        if self._in_savepoint:
            self._cur.execute("ROLLBACK TO turn")
            self._cur.execute("RELEASE turn")
            self._in_savepoint = False
        elif self.in_transaction:
            self._cur.execute("ROLLBACK")
            self.in_transaction = False

    def save_state(self, state_json: str, seq: int, now: float) -> None:
        """Write the state snapshot row, in its own transaction if none is open."""
        if self.in_transaction:
            self.write_state(state_json, seq, now)
            return
        self.conn.execute("BEGIN")
        try:
            self.write_state(state_json, seq, now)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def write_state(self, state_json: str, seq: int, now: float) -> None:
        self.conn.execute(
            "UPDATE roost_state SET state = ?, seq = ?, updated_at = ? WHERE id = 1",
            (state_json, seq, now),
        )

    def append_log(self, seq: int, kind: str, frame: str, now: float) -> None:
        self._cur.execute(
            "INSERT INTO roost_log (seq, kind, frame, created_at) VALUES (?, ?, ?, ?)",
            (seq, kind, frame, now),
        )

    def prune_log(self, keep_from: int) -> None:
        """Delete logged frames with ``seq < keep_from``."""
        self.conn.execute("DELETE FROM roost_log WHERE seq < ?", (keep_from,))

    # -- closing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Commit what is pending and close, releasing the lock. Idempotent."""
        release = self.begin_close()
        if release is not None:
            release()

    def begin_close(self, last_state: tuple[str, int, float] | None = None) -> Callable[[], None] | None:
        """Mark the file closed (:attr:`closed`: nothing may use it any more) and return what
        releases it: the snapshot row brought up to ``last_state`` (state JSON, seq, time) if given,
        the commit of anything pending, and SQLite's close, which checkpoints the WAL into the
        database, fsyncs and removes the WAL — most of a close's cost. The caller may run it in a
        worker thread; the file's lock is held until it has run. ``None`` if already closed."""
        with self._lock:
            if self._closed:
                return None
            self._closed = True
        return functools.partial(self._release, last_state)

    def _release(self, last_state: tuple[str, int, float] | None = None) -> None:
        with self._lock:
            try:
                if last_state is not None:
                    try:  # only a shortcut for activation, which also reads the newest state frame
                        self.save_state(*last_state)
                    except sqlite3.Error as exc:
                        log.warning("state snapshot of %s not saved at close: %s", self.path.name, exc)
                if self.in_transaction:
                    self.conn.execute("COMMIT")
            finally:
                self.in_transaction = False
                # the cursor first: a statement it still holds (a failed COMMIT's) would keep the
                # connection, and with it the file's exclusive lock, open after conn.close()
                self._cur.close()
                self.conn.close()
                if self.witness is not None:
                    self.witness.close()

    @property
    def closed(self) -> bool:
        return self._closed
