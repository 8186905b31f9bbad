"""Reading an actor's file after the process that served it is gone: what its wake-ups and its queue did.

::

    with server_process(data_dir) as server:
        ...                                  # wait until the wake-up is done (a positive condition)
    assert [f.schedule_id for f in fires(data_dir, "counter", "c1")] == [sid]   # it fired once

A wake-up's effect and its completion row (``roost_fires``, one per ``(schedule_id, nominal time)``) are
committed together (:mod:`roost.actors.wakeups`), so the rows are the record of what fired; so are
a queue item's effects and its ``done`` (:mod:`roost.actors.queue`).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from roost.storage import actor_path

__all__ = ["Fire", "QueueRow", "ScheduleRow", "fires", "queue_rows", "schedule_rows"]


@dataclass(frozen=True)
class Fire:
    """One completed fire of a wake-up."""

    schedule_id: str
    nominal: float
    started_at: float


@dataclass(frozen=True)
class ScheduleRow:
    """A wake-up as its actor's file holds it."""

    id: str
    key: str | None
    status: str
    runs: int


def _open(data_dir: Path, kind: str, name: str) -> sqlite3.Connection:
    path = actor_path(data_dir, kind, name)
    if not path.exists():
        raise FileNotFoundError(f"no actor file for {kind}/{name!r}: {path}")
    # timeout=0: a process that still has the actor open holds its file exclusively; say so at once
    return sqlite3.connect(path, timeout=0)


def fires(data_dir: Path, kind: str, name: str) -> list[Fire]:
    """Every completed fire of the actor's wake-ups, oldest nominal time first.

    Guarantees: the rows are those committed (a fire cut short by a crash left none); only for an actor
    no process has open (``sqlite3.OperationalError`` otherwise, at once, rather than a stale read).
    The runtime keeps the last 100 completions of each schedule.
    """
    with closing(_open(data_dir, kind, name)) as db:
        rows = db.execute(
            "SELECT schedule_id, nominal, started_at FROM roost_fires ORDER BY nominal, schedule_id"
        ).fetchall()
    return [Fire(str(r[0]), float(r[1]), float(r[2])) for r in rows]


def schedule_rows(data_dir: Path, kind: str, name: str) -> list[ScheduleRow]:
    """Every wake-up of the actor, finished ones included, in id order (same conditions as :func:`fires`)."""
    with closing(_open(data_dir, kind, name)) as db:
        rows = db.execute("SELECT id, key, status, runs FROM roost_schedules ORDER BY id").fetchall()
    return [ScheduleRow(str(r[0]), r[1], str(r[2]), int(r[3])) for r in rows]


@dataclass(frozen=True)
class QueueRow:
    """A queued item as its actor's file holds it."""

    id: str
    callback: str
    status: str
    attempts: int
    last_error: str | None


def queue_rows(data_dir: Path, kind: str, name: str) -> list[QueueRow]:
    """Every item the actor's queue keeps, finished ones included, in queue order (same conditions
    as :func:`fires`)."""
    with closing(_open(data_dir, kind, name)) as db:
        rows = db.execute(
            "SELECT id, callback, status, attempts, last_error FROM roost_queue ORDER BY position"
        ).fetchall()
    return [QueueRow(str(r[0]), str(r[1]), str(r[2]), int(r[3]), r[4]) for r in rows]
