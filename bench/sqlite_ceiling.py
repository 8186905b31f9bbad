"""Section ``sqlite``: the raw SQLite WAL commit ceilings, stdlib ``sqlite3``, one fresh file per cell.

Cells (``synchronous=NORMAL``, Roost's default durability; each cell runs for a fixed time and at most
a fixed number of commits; cells are interleaved over repetitions):

- ``row1``: one 100-byte row INSERTed per commit;
- ``rowN``: ``N`` such rows per commit (``executemany``), the batched ceiling;
- ``opN``: ``N`` counter-increment equivalents per commit, each what one durable ``increment`` writes
  in Roost (INSERT one ~60-byte log frame; the state lives in the log): the batched ceiling expressed in
  durable ops/s, which the hot-actor figure is compared against.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from bench.procs import log
from bench.settings import Settings
from bench.stats import pct

__all__ = ["CELLS", "run"]

CELLS = ("row1", "rowN", "opN")
_MAX_COMMITS = 5_000_000
_BODY = "x" * 100
_FRAME = '{"type":"state","seq":%d,"state":{"count":%d}}'


def _fresh(path: Path) -> sqlite3.Connection:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, actor TEXT, body TEXT)")
    conn.execute("CREATE TABLE state (id INTEGER PRIMARY KEY, state TEXT, seq INTEGER, updated_at REAL)")
    conn.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, kind TEXT, frame TEXT, created_at REAL)")
    conn.execute("INSERT INTO state VALUES (1, '{\"count\":0}', 0, 0)")
    return conn


def _cell(path: Path, cell: str, batch: int, seconds: float) -> dict[str, Any]:
    conn = _fresh(path)
    rows = [("counter/000042", _BODY)] * batch
    seq = 0
    lat: list[float] = []
    commits = 0
    clock = time.perf_counter
    start = clock()
    deadline = start + seconds
    try:
        while commits < _MAX_COMMITS:
            t0 = clock()
            conn.execute("BEGIN")
            if cell == "row1":
                conn.execute("INSERT INTO rows (actor, body) VALUES (?, ?)", rows[0])
            elif cell == "rowN":
                conn.executemany("INSERT INTO rows (actor, body) VALUES (?, ?)", rows)
            else:
                for _ in range(batch):
                    seq += 1
                    now = time.time()
                    conn.execute(
                        "INSERT INTO log (seq, kind, frame, created_at) VALUES (?, 'state', ?, ?)",
                        (seq, _FRAME % (seq, seq), now),
                    )
            conn.execute("COMMIT")
            t1 = clock()
            lat.append(t1 - t0)
            commits += 1
            if t1 >= deadline:
                break
        secs = clock() - start
    finally:
        conn.close()
    per_commit = 1 if cell == "row1" else batch
    return {
        "commits_s": commits / secs,
        "items_s": commits * per_commit / secs,
        "commit_p50_us": pct(lat, 50) * 1e6,
        "commit_p99_us": pct(lat, 99) * 1e6,
        "per_commit": per_commit,
    }


def run(s: Settings) -> dict[str, Any]:
    """``{"reps": [{cell: result}], "batch": N, "sync": "NORMAL"}``."""
    folder = s.data_dir / "sqlite"
    folder.mkdir(parents=True, exist_ok=True)
    reps: list[dict[str, Any]] = []
    for rep in range(s.reps):
        one: dict[str, Any] = {}
        for cell in CELLS[rep % len(CELLS) :] + CELLS[: rep % len(CELLS)]:
            one[cell] = _cell(folder / f"{cell}.sqlite", cell, s.sqlite_batch, s.sqlite_s)
        reps.append(one)
        log(
            f"sqlite rep {rep + 1}/{s.reps}: 1 row/commit {one['row1']['commits_s']:,.0f}/s · "
            f"{s.sqlite_batch} rows/commit {one['rowN']['items_s']:,.0f} rows/s · "
            f"{s.sqlite_batch} increments/commit {one['opN']['items_s']:,.0f} ops/s"
        )
    for cell in CELLS:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{folder / cell}.sqlite{suffix}")
    return {"reps": reps, "batch": s.sqlite_batch, "sync": "NORMAL", "folder": str(folder)}
