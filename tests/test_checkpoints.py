"""Checkpoints and page sizes (``roost.storage.actor_file``): the WAL stays bounded without SQLite's
automatic checkpoint, checkpoints run off the event loop, and each file keeps its page size.

- **The WAL stays bounded**: SQLite's automatic checkpoint is off; ``checkpoint_due`` follows the WAL
  (commits that write nothing do not put it off) and ``checkpoint`` empties it; one long turn that
  commits again and again, with no point between turns to checkpoint at, bounds it at its commits.
- **Checkpoints run off the loop**: in a worker thread, while the actor takes no turn, and the file
  stays sound; an actor whose checkpoint cannot start keeps serving, and a commit stands when the
  checkpoint it ran itself fails.
- **Page sizes**: new files of small-state kinds use 1 KiB pages, agent kinds SQLite's 4 KiB
  (``Actor.page_size``), and older files keep theirs; a page size SQLite would ignore is refused.

Real servers on 127.0.0.1 in this process, real SQLite files (opened directly where no server is
needed). Waiting is on frames and conditions; the only timeouts bound how long a failure takes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import websockets

from roost.examples.kinds import Counter
from roost.storage import ActorFile, actor_path
from roost.storage.actor_file import CHECKPOINT_PAGES, PAGE_SIZE
from roost.testing import encode
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.support import Statements, actor_state, call, recv, serve_in_process


# -- helpers ------------------------------------------------------------------------------------------
def file_size(path: Path) -> int:
    return path.stat().st_size


def commit_one(file: ActorFile, seq: int) -> None:
    file.begin_turn()
    file.append_log(seq, "state", encode({"type": "state", "seq": seq, "state": {"count": seq}}), 0.0)
    file.end_turn()
    file.commit()


# -- the WAL bounded by checkpoints off the loop, page sizes ------------------------------------------
async def test_the_wal_stays_bounded_checkpoints_run_in_a_worker_thread_and_the_file_stays_sound(
    data_dir: Path,
) -> None:
    increments = 8000
    app = create_app([Counter], data_dir=data_dir, limits=NO_RATE_LIMITS)
    path = actor_path(data_dir, "counter", "wal")
    wal = Path(f"{path}-wal")
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/counter/wal?subscribe=none") as ws:
            assert (await recv(ws))["type"] == "welcome"
            host = app.registry.hosts[("counter", "wal")]
            stats = Statements(host.file.conn, host.file, lambda: int(host.state["count"]))
            largest = 0
            for i in range(1, increments + 1):
                assert (await call(ws, str(i), "increment"))["result"] == i
                if i % 250 == 0:
                    largest = max(largest, file_size(wal))
            largest = max(largest, file_size(wal))
    frame_bytes = PAGE_SIZE + 24  # a WAL frame: a page and its header
    unbounded = stats.commits * frame_bytes  # at least one page per commit, were nothing checkpointed
    bound = 2 * CHECKPOINT_PAGES * frame_bytes
    assert stats.commits >= increments
    assert unbounded > 2 * bound, "too few commits for the check to mean anything"
    assert largest <= bound, f"WAL grew to {largest} bytes over {stats.commits} commits"
    assert stats.checkpoint_threads, "no checkpoint ran"
    assert stats.loop_thread not in stats.checkpoint_threads, "a checkpoint ran on the event loop"
    assert stats.turns_during_checkpoint == 0, "a turn began while a checkpoint held the file"
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE
    finally:
        db.close()
    assert actor_state(data_dir, "counter", "wal") == {"count": increments}


def test_checkpoint_due_follows_the_wal_and_checkpoint_clears_it(data_dir: Path) -> None:
    file = ActorFile.open(actor_path(data_dir, "counter", "due"), "counter", "due")
    try:
        assert file.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0, "SQLite checkpoints itself"
        seq = 0
        assert not file.checkpoint_due
        while not file.checkpoint_due:
            seq += 1
            commit_one(file, seq)
            assert seq <= CHECKPOINT_PAGES, "never due"
        assert seq > 10, f"due after {seq} one-page commits"
        busy, log, done = file.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        file.checkpoint()
        assert not file.checkpoint_due
        assert log >= seq, "SQLite checkpointed on its own"
        # everything in the WAL was copied back: a checkpoint now has nothing left to do
        busy, log, done = file.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (busy, log) == (0, done)
        # with the pages per commit it learnt, it is due again when the WAL holds about CHECKPOINT_PAGES
        first = seq
        while not file.checkpoint_due:
            seq += 1
            commit_one(file, seq)
            assert seq - first <= 4 * CHECKPOINT_PAGES, "never due again"
        frames = file.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        assert CHECKPOINT_PAGES // 2 <= frames <= 2 * CHECKPOINT_PAGES, frames
        file.checkpoint()
        assert not file.checkpoint_due
        assert file.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert file.log_bounds() == (1, seq)
    finally:
        file.close()


async def test_new_actor_files_use_1k_pages_and_older_files_keep_theirs(data_dir: Path) -> None:
    legacy = actor_path(data_dir, "counter", "legacy")
    legacy.parent.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(legacy)  # a file from before 1 KiB pages: SQLite's default 4096, WAL
    old.execute("PRAGMA page_size=4096")
    old.execute("PRAGMA journal_mode=WAL")
    old.execute("CREATE TABLE notes (x TEXT)")
    old.execute("INSERT INTO notes VALUES ('kept')")
    old.commit()
    old.close()
    app = create_app([Counter], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        for name in ("legacy", "fresh"):
            async with websockets.connect(f"ws://{addr}/agents/counter/{name}?subscribe=none") as ws:
                assert (await recv(ws))["type"] == "welcome"
                for i in range(1, 51):
                    assert (await call(ws, str(i), "increment"))["result"] == i
    for name, size in (("legacy", 4096), ("fresh", PAGE_SIZE)):
        db = sqlite3.connect(actor_path(data_dir, "counter", name))
        try:
            assert db.execute("PRAGMA page_size").fetchone()[0] == size, name
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", name
        finally:
            db.close()
        assert actor_state(data_dir, "counter", name) == {"count": 50}
    db = sqlite3.connect(legacy)
    try:
        assert db.execute("SELECT x FROM notes").fetchall() == [("kept",)]
    finally:
        db.close()
    assert PAGE_SIZE == 1024


# -- found by review: each of these failed before its fix ---------------------------------------------
def test_commits_that_write_nothing_do_not_put_off_the_next_checkpoint(data_dir: Path) -> None:
    """Read-only turns commit empty transactions: they must not teach ``checkpoint_due`` that a commit
    adds a fraction of a page (it then waited 10,000 commits while big frames filled the WAL)."""
    file = ActorFile.open(actor_path(data_dir, "counter", "ro"), "counter", "ro")
    try:
        for _ in range(3000):  # read-only turns
            file.begin_turn()
            file.end_turn()
            file.commit()
        assert not file.checkpoint_due
        file.checkpoint()
        seq = 0
        while not file.checkpoint_due:
            seq += 1
            commit_one(file, seq)
            assert seq <= CHECKPOINT_PAGES, "read-only commits put the checkpoint off"
        frames = file.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        assert frames <= 2 * CHECKPOINT_PAGES, frames
    finally:
        file.close()


def test_the_wal_stays_bounded_when_no_checkpoint_can_run_between_turns(data_dir: Path) -> None:
    """One long turn that commits again and again (a streaming call: a commit per ``yield``) never
    reaches a point between turns; the commit itself bounds the WAL, as SQLite's own checkpoint did."""
    file = ActorFile.open(actor_path(data_dir, "counter", "stream"), "counter", "stream")
    wal = Path(f"{file.path}-wal")
    try:
        peak = 0
        for seq in range(1, 12 * CHECKPOINT_PAGES):
            commit_one(file, seq)  # nobody calls checkpoint(): no turn ever ends
            if seq % 500 == 0:
                peak = max(peak, wal.stat().st_size)
        # unbounded, 12,000 one-page commits would leave a WAL of about 12,000 pages
        assert peak <= 6 * CHECKPOINT_PAGES * (PAGE_SIZE + 24), peak
        assert file.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        file.close()


async def test_agent_kinds_get_4k_pages(data_dir: Path) -> None:
    """Agents write rows of kilobytes (runs, plans, payloads): their files keep SQLite's 4 KiB pages,
    while small-state kinds get 1 KiB (``Actor.page_size``)."""
    from roost.examples.kinds import DocsAgent

    assert DocsAgent.page_size == 4096
    assert Counter.page_size == PAGE_SIZE == 1024
    app = create_app([DocsAgent, Counter], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        for kind in ("docs", "counter"):
            async with websockets.connect(f"ws://{addr}/agents/{kind}/p1?subscribe=none") as ws:
                assert (await recv(ws))["type"] == "welcome"
    for kind, size in (("docs", 4096), ("counter", 1024)):
        db = sqlite3.connect(actor_path(data_dir, kind, "p1"))
        try:
            assert db.execute("PRAGMA page_size").fetchone()[0] == size, kind
        finally:
            db.close()


async def test_an_actor_keeps_serving_when_its_checkpoint_cannot_start(data_dir: Path) -> None:
    """No thread can take the checkpoint (its executor is shut down): the actor must not wait for it
    forever; it goes on, and its commits bound the WAL themselves."""
    app = create_app([Counter], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        app.registry.checkpoints().shutdown()
        async with websockets.connect(f"ws://{addr}/agents/counter/nothread?subscribe=none") as ws:
            assert (await recv(ws))["type"] == "welcome"
            for i in range(1, 2 * CHECKPOINT_PAGES + 1):  # the first checkpoint is due well before
                assert (await call(ws, str(i), "increment"))["result"] == i


def test_a_commit_stands_when_its_own_checkpoint_fails(data_dir: Path) -> None:
    """The checkpoint a commit runs itself (no checkpoint could run between turns) happens after the
    COMMIT succeeded: its failure is logged and must not turn the commit into a reported failure."""
    file = ActorFile.open(actor_path(data_dir, "counter", "ckfail"), "counter", "ckfail")
    current = [""]
    failed = [0]

    def trace(statement: str) -> None:
        current[0] = statement

    def progress() -> int:  # SQLite interrupts every checkpoint, as an I/O error would fail it
        if "wal_checkpoint" in current[0]:
            failed[0] += 1
            return 1
        return 0

    file.conn.set_trace_callback(trace)
    file.conn.set_progress_handler(progress, 1)
    try:
        seq = 0
        for seq in range(1, 6 * CHECKPOINT_PAGES):
            commit_one(file, seq)  # raised before the fix, once the WAL estimate passed the bound
        assert failed[0] > 0, "no checkpoint was tried"
        file.conn.set_progress_handler(None, 1)
        assert file.log_bounds() == (1, seq)
    finally:
        file.close()


def test_page_sizes_that_sqlite_would_ignore_are_refused(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="power of two"):
        ActorFile.open(actor_path(data_dir, "counter", "odd"), "counter", "odd", page_size=1000)
