"""The directory database: which actors exist, so that listing and inspecting never open every file.

``<data>/directory.sqlite`` holds one row per actor: kind, name, the digest that names its file, when it
was created, when it was last active, its next alarm (filled by the scheduler) and its *high-water
seq*, the highest ``seq`` the actor is known to have committed (acknowledged: a reply, state or event
leaves only after its commit). It is shared by every process on the data directory (ordinary WAL
locking).

Write discipline, to stay off the hot path:

- :meth:`register` is written and committed at once, *before* a new actor's file is created, so a crash
  can never leave a file the directory does not know.
- :meth:`touch` (last activity and high-water seq) only queues; :meth:`flush` writes every queued touch
  in one transaction. The registry flushes on deactivation and periodically, so a crash loses at most
  one period of ``last_active_at`` precision and of the high-water seq, and nothing else. The
  high-water seq only ever rises (``max``), so a late flush never lowers it.

**Waiting on another process's lock.** ``Directory(..., waits=False)`` (the one the actor runtime uses
on its event loop) never waits for a lock another process holds: a write that meets one raises
:class:`DirectoryBusy` at once, and :meth:`flush` puts its touches back in the queue for the next
flush instead. ``waits=True`` (the default: the command line, and the runtime's directory thread) waits
up to ``busy_timeout`` seconds, as SQLite does.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from roost.storage.errors import StorageError
from roost.storage.migrations import Migration, apply_migrations

__all__ = ["ActorEntry", "Directory", "DirectoryBusy", "WorkerEntry"]

log = logging.getLogger("roost.storage")


class DirectoryBusy(StorageError):
    """Another process holds the directory's write lock, and this directory does not wait for it."""


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


_MIGRATIONS: tuple[Migration, ...] = (
    """
    CREATE TABLE actors (
        kind           TEXT NOT NULL,
        name           TEXT NOT NULL,
        digest         TEXT NOT NULL,
        created_at     REAL NOT NULL,
        last_active_at REAL NOT NULL,
        next_alarm_at  REAL,
        PRIMARY KEY (kind, name)
    ) WITHOUT ROWID;
    CREATE INDEX actors_next_alarm ON actors (next_alarm_at) WHERE next_alarm_at IS NOT NULL;
    """,
    # v2: which dispatcher claimed an actor's due alarm (the claim postpones the alarm by a lease).
    "ALTER TABLE actors ADD COLUMN alarm_owner TEXT",
    # v3: presence and load of each worker process (the agent runtime's background jobs).
    """
    CREATE TABLE workers (
        worker_id    TEXT PRIMARY KEY,
        pid          INTEGER NOT NULL,
        hostname     TEXT    NOT NULL,
        started_at   REAL    NOT NULL,
        heartbeat_at REAL    NOT NULL,
        running_jobs INTEGER NOT NULL
    ) WITHOUT ROWID;
    """,
    # v4: how long a worker may go without a heartbeat before it is stale, and when it stopped.
    "ALTER TABLE workers ADD COLUMN lease_s REAL",
    "ALTER TABLE workers ADD COLUMN stopped_at REAL",
    # v5: the highest seq each actor is known to have committed (its file must not come back older).
    "ALTER TABLE actors ADD COLUMN acked_seq INTEGER NOT NULL DEFAULT 0",
)

_ENTRY = "kind, name, digest, created_at, last_active_at, next_alarm_at, acked_seq"


@dataclass(frozen=True, slots=True)
class ActorEntry:
    kind: str
    name: str
    digest: str
    created_at: float
    last_active_at: float
    next_alarm_at: float | None
    #: The highest seq the actor is known to have committed (0: none recorded yet).
    acked_seq: int = 0


class WorkerStatus(StrEnum):
    """What ``roost workers`` says of a worker (``docs/protocol.md``, *Statuses*)."""

    ALIVE = "alive"  #: its last heartbeat is within its lease
    STALE = "stale"  #: no heartbeat for longer than its lease (killed, hung, or its host is gone)
    STOPPED = "stopped"  #: it stopped cleanly and said so


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    worker_id: str
    pid: int
    hostname: str
    started_at: float
    heartbeat_at: float
    running_jobs: int
    #: How long it may go without a heartbeat before it is stale (None: rows of older versions).
    lease_s: float | None = None
    stopped_at: float | None = None

    def status(self, now: float) -> WorkerStatus:
        """Alive, stale past its lease, or stopped; a row without a lease is stale after 60 s."""
        if self.stopped_at is not None:
            return WorkerStatus.STOPPED
        lease = self.lease_s if self.lease_s is not None else 60.0
        return WorkerStatus.STALE if now - self.heartbeat_at > lease else WorkerStatus.ALIVE


class Directory:
    """The directory database of one data directory. One instance per process."""

    def __init__(self, data_dir: Path, *, busy_timeout: float = 5.0, waits: bool = True) -> None:
        """Open (creating and migrating) the directory of ``data_dir``. Opening waits up to
        ``busy_timeout`` for the migrations' lock whatever ``waits`` says; with ``waits=False`` every
        later call that meets another process's write lock raises :class:`DirectoryBusy` at once."""
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / "directory.sqlite"
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, timeout=busy_timeout, check_same_thread=False
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        # no checkpoint (and its fsync) inline on the event loop: :meth:`checkpoint` does it, from a
        # thread, on a connection of its own
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            apply_migrations(self._conn, "directory", _MIGRATIONS)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            self._conn.close()
            raise
        if not waits:
            self._conn.execute("PRAGMA busy_timeout=0")
        self._touched: dict[tuple[str, str], tuple[float, int, float | None]] = {}
        self._closed = False
        #: Writes refused because another process held the lock (``waits=False`` only).
        self.busy = 0

    def register(self, kind: str, name: str, digest: str, now: float) -> None:
        """Record a new actor (idempotent), committed before returning."""
        self._write(
            "INSERT INTO actors (kind, name, digest, created_at, last_active_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (kind, name) DO NOTHING",
            (kind, name, digest, now, now),
        )

    def touch(self, kind: str, name: str, now: float, seq: int = 0, created_at: float | None = None) -> None:
        """Queue a last-activity update and the actor's committed ``seq`` (its high-water seq rises to
        it); written by the next :meth:`flush`. ``created_at`` names the row it is for (the actor's
        ``created_at`` as its activation read it): **a touch for a deleted actor never lands on a new
        actor of the same name**, whichever process deleted and re-created it."""
        key = (kind, name)
        queued = self._touched.get(key)
        if queued is not None and queued[2] == created_at:
            now, seq = max(now, queued[0]), max(seq, queued[1])
        self._touched[key] = (now, seq, created_at)

    @property
    def pending(self) -> int:
        """Touches queued for the next :meth:`flush`."""
        return len(self._touched)

    def discard(self, kind: str, name: str) -> None:
        """Drop the actor's queued touch (it was deleted: a new actor of that name starts at seq 0)."""
        self._touched.pop((kind, name), None)

    def flush(self) -> int:
        """Write every queued touch in one transaction; return how many. If another process holds the
        lock and this directory does not wait, nothing is written and the touches stay queued (0)."""
        if not self._touched:
            return 0
        touched, self._touched = self._touched, {}
        rows = [(t, s, k, n, c, c) for (k, n), (t, s, c) in touched.items()]
        try:
            with self._transaction():
                self._conn.executemany(
                    "UPDATE actors SET last_active_at = max(last_active_at, ?), "
                    "acked_seq = max(acked_seq, ?) WHERE kind = ? AND name = ? "
                    "AND (? IS NULL OR created_at = ?)",
                    rows,
                )
        except DirectoryBusy:
            for (kind, name), (t, s, c) in touched.items():  # back in the queue for the next flush
                self.touch(kind, name, t, s, c)
            return 0
        return len(rows)

    # -- alarms (the scheduler) -----------------------------------------------------------------------
    def lower_alarm(self, kind: str, name: str, at: float) -> None:
        """Make the actor's alarm no later than ``at`` (committed at once). Written *before* the actor
        commits a new earlier wake-up, so the directory is never later than the truth."""
        self._write(
            "UPDATE actors SET next_alarm_at = ? WHERE kind = ? AND name = ? "
            "AND (next_alarm_at IS NULL OR next_alarm_at > ?)",
            (at, kind, name, at),
        )

    def set_alarm(self, kind: str, name: str, at: float | None) -> None:
        """Set the actor's alarm to its true earliest wake-up (or none) and drop any claim on it.
        Written *after* the actor committed the change."""
        self._write(
            "UPDATE actors SET next_alarm_at = ?, alarm_owner = NULL WHERE kind = ? AND name = ?",
            (at, kind, name),
        )

    def defer_claim(self, kind: str, name: str, owner: str, at: float) -> None:
        """Give back a claim this dispatcher could not serve, due again at ``at``."""
        self._write(
            "UPDATE actors SET next_alarm_at = ?, alarm_owner = NULL "
            "WHERE kind = ? AND name = ? AND alarm_owner = ?",
            (at, kind, name, owner),
        )

    def renew_claims(self, owner: str, keys: list[tuple[str, str]], until: float) -> None:
        """Extend this dispatcher's claims on actors it is still waking."""
        if not keys:
            return
        with self._transaction():
            self._conn.executemany(
                "UPDATE actors SET next_alarm_at = ? WHERE kind = ? AND name = ? AND alarm_owner = ?",
                [(until, kind, name, owner) for kind, name in keys],
            )

    def count_alarms(self) -> int:
        row = self._conn.execute("SELECT count(*) FROM actors WHERE next_alarm_at IS NOT NULL").fetchone()
        return int(row[0])

    def next_alarm(self, kinds: Collection[str] | None = None) -> float | None:
        """The earliest alarm of any actor (one lookup in a partial index, whatever the count); of an
        actor of ``kinds`` only, if given (the index is read in order up to the first of them)."""
        if kinds is not None and not kinds:
            return None
        if kinds is None:
            row = self._conn.execute(
                "SELECT min(next_alarm_at) FROM actors WHERE next_alarm_at IS NOT NULL"
            ).fetchone()
        else:
            row = self._conn.execute(
                "SELECT next_alarm_at FROM actors WHERE next_alarm_at IS NOT NULL "
                f"AND kind IN ({_marks(kinds)}) ORDER BY next_alarm_at LIMIT 1",
                tuple(kinds),
            ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def claim_due(
        self, now: float, owner: str, lease_until: float, limit: int, kinds: Collection[str] | None = None
    ) -> list[tuple[str, str, float]]:
        """Claim up to ``limit`` actors whose alarm is due (of ``kinds`` only, if given: a process
        never takes the wake-ups of a kind it does not serve, which another process on the same data
        directory may): their alarm moves to ``lease_until``, so that no other dispatcher takes them
        while this one works, and a crashed claimer's alarms come due again when the lease ends.
        Returns ``(kind, name, alarm)`` of each claimed actor."""
        if kinds is not None and not kinds:
            return []
        among = "" if kinds is None else f"AND kind IN ({_marks(kinds)}) "
        rows = self._conn.execute(
            "SELECT kind, name, next_alarm_at FROM actors WHERE next_alarm_at IS NOT NULL "
            f"AND next_alarm_at <= ? {among}ORDER BY next_alarm_at LIMIT ?",
            (now, *(kinds or ()), limit),
        ).fetchall()
        if not rows:
            return []
        claimed = []
        with self._transaction():
            for kind, name, alarm in rows:
                cur = self._conn.execute(
                    "UPDATE actors SET next_alarm_at = ?, alarm_owner = ? "
                    "WHERE kind = ? AND name = ? AND next_alarm_at = ?",
                    (lease_until, owner, kind, name, alarm),
                )
                if cur.rowcount:  # else another dispatcher (or the actor itself) got there first
                    claimed.append((str(kind), str(name), float(alarm)))
        return claimed

    def alarms(self, limit: int = 1000) -> list[ActorEntry]:
        """Actors with a pending alarm, earliest first."""
        cur = self._conn.execute(
            f"SELECT {_ENTRY} FROM actors WHERE next_alarm_at IS NOT NULL ORDER BY next_alarm_at LIMIT ?",
            (limit,),
        )
        return [ActorEntry(*row) for row in cur]

    def worker_heartbeat(self, worker: WorkerEntry) -> None:
        """Record that a worker process is alive, with its load."""
        self._write(
            "INSERT INTO workers (worker_id, pid, hostname, started_at, heartbeat_at, running_jobs, "
            "lease_s, stopped_at) VALUES (?, ?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (worker_id) DO UPDATE SET "
            "heartbeat_at = excluded.heartbeat_at, running_jobs = excluded.running_jobs, "
            "lease_s = excluded.lease_s, stopped_at = NULL",
            (
                worker.worker_id,
                worker.pid,
                worker.hostname,
                worker.started_at,
                worker.heartbeat_at,
                worker.running_jobs,
                worker.lease_s,
            ),
        )

    def worker_stopped(self, worker_id: str, at: float) -> None:
        """Record that a worker stopped cleanly (``roost workers`` then says ``stopped``)."""
        self._write(
            "UPDATE workers SET stopped_at = ?, running_jobs = 0 WHERE worker_id = ?", (at, worker_id)
        )

    def prune_workers(self, before: float) -> int:
        """Forget workers stopped, or last seen, before ``before``; how many rows went."""
        with self._transaction():
            cur = self._conn.execute(
                "DELETE FROM workers WHERE coalesce(stopped_at, heartbeat_at) < ?", (before,)
            )
            return cur.rowcount

    def workers(self) -> list[WorkerEntry]:
        """Every worker that reported and was not pruned, the most recently seen first."""
        cur = self._conn.execute(
            "SELECT worker_id, pid, hostname, started_at, heartbeat_at, running_jobs, lease_s, stopped_at "
            "FROM workers ORDER BY heartbeat_at DESC"
        )
        return [WorkerEntry(*row) for row in cur]

    def _write(self, sql: str, params: tuple[object, ...]) -> None:
        with self._transaction():
            self._conn.execute(sql, params)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction on the directory: committed, or rolled back if the block raises.
        :class:`DirectoryBusy` if another process holds the write lock (and this one does not wait)."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            self.busy += 1
            raise DirectoryBusy(f"the directory is locked by another process: {exc}") from exc
        try:
            yield
        except BaseException:
            if self._conn.in_transaction:  # SQLite may have rolled back already (a full disk)
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def get(self, kind: str, name: str) -> ActorEntry | None:
        row = self._conn.execute(
            f"SELECT {_ENTRY} FROM actors WHERE kind = ? AND name = ?",
            (kind, name),
        ).fetchone()
        return ActorEntry(*row) if row else None

    def list(self, kind: str | None = None, *, limit: int = 1000, offset: int = 0) -> list[ActorEntry]:
        """Actors ordered by (kind, name), optionally of one kind."""
        if kind is None:
            cur = self._conn.execute(
                f"SELECT {_ENTRY} FROM actors ORDER BY kind, name LIMIT ? OFFSET ?",
                (limit, offset),
            )
        else:
            cur = self._conn.execute(
                f"SELECT {_ENTRY} FROM actors WHERE kind = ? ORDER BY name LIMIT ? OFFSET ?",
                (kind, limit, offset),
            )
        return [ActorEntry(*row) for row in cur]

    def checkpoint(self) -> None:
        """Copy the WAL back into the database (PASSIVE: never waits for writers). Safe from any thread:
        it opens a connection of its own."""
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=1.0)
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def forget(self, kind: str, name: str) -> bool:
        """Remove an actor's row (its file was deleted); False if there was none."""
        with self._transaction():
            cur = self._conn.execute("DELETE FROM actors WHERE kind = ? AND name = ?", (kind, name))
        self._touched.pop((kind, name), None)
        return cur.rowcount > 0

    def backup(self, target: Path) -> None:
        """A consistent copy of the directory database at ``target`` (SQLite's online backup)."""
        dst = sqlite3.connect(target)
        try:
            self._conn.backup(dst)
        finally:
            dst.close()

    def count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM actors").fetchone()[0])

    def close(self) -> None:
        """Flush queued touches and close. Idempotent. The final flush waits up to five seconds for
        another process's lock, whatever ``waits`` said: call it off the event loop."""
        if self._closed:
            return
        self._closed = True
        try:
            self._conn.execute("PRAGMA busy_timeout=5000")
            self.flush()
            if self._touched:  # flush gave up: another process held the lock past the timeout
                log.warning(
                    "directory %s: the last activity and high-water seq of %d actors were not "
                    "written (another process held its lock for more than 5 s)",
                    self.path,
                    len(self._touched),
                )
        finally:
            self._conn.close()


def _marks(values: Collection[str]) -> str:
    """``?, ?, …``: one parameter per value."""
    return ", ".join("?" * len(values))
