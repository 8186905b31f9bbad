"""The fast paths keep the guarantees users rely on.

- **Turns** (``ActorHost.submit``): a turn runs as the actor's task, including one that suspends,
  ``turn_timeout`` cuts it short and rolls it back, and turns share commits (group commit) with every
  acknowledged write durable.
- **Checkpoints off the loop** (``roost.storage.actor_file``): the WAL stays bounded without SQLite's
  automatic
  checkpoint, checkpoints run in a worker thread while the actor takes no turn, and new files use 1 KiB
  pages while old files keep theirs.

Real servers on 127.0.0.1 in this process, real SQLite files.
Waiting is on frames, events and conditions; the only timeouts bound how long a failure takes.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
import pytest
import websockets

from roost.actors import Actor, callable
from roost.actors.registry import RuntimeConfig
from roost.examples.kinds import Counter
from roost.scheduler import FakeClock
from roost.storage import ActorFile, actor_path
from roost.storage.actor_file import CHECKPOINT_PAGES, PAGE_SIZE
from roost.testing import encode
from roost.testing import rpc_frame as rpc
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.support import Statements, actor_state, call, recv, serve_in_process

Frame = dict[str, Any]


# -- actor kinds --------------------------------------------------------------------------------------
class Stepper(Actor):
    """Turns that suspend; each records which task ran it."""

    kind = "stepper"
    initial_state = {"n": 0}
    seen: ClassVar[list[dict[str, Any]]] = []

    def _note(self, method: str, **facts: Any) -> None:
        type(self).seen.append({"method": method, **facts})

    @callable
    async def sleepy(self, seconds: float) -> int:
        task = asyncio.current_task()
        await asyncio.sleep(seconds)
        self._note("sleepy", task_before=task, task_after=asyncio.current_task())
        n: int = self.state["n"] + 1
        self.set_state({"n": n})
        return n

    @callable
    async def via(self, other: str, by: int) -> int:
        """Awaits another actor (a real suspension) and folds its answer into this actor's state."""
        task = asyncio.current_task()
        got: int = await self.actor("counter", other).call("increment", by)
        self._note("via", task_before=task, task_after=asyncio.current_task())
        self.set_state({"n": self.state["n"] + got})
        return got

    @callable
    async def slow(self, seconds: float) -> int:
        """Writes, then waits longer than the turn may last."""
        self.set_state({"n": self.state["n"] + 100})
        self._note("slow", task_before=asyncio.current_task())
        await asyncio.sleep(seconds)
        n: int = self.state["n"]
        return n

    @callable
    def add(self) -> int:
        n: int = self.state["n"] + 1
        self.set_state({"n": n})
        return n

    @callable
    def get(self) -> int:
        n: int = self.state["n"]
        return n


class Tally(Actor):
    """A counter that counts its turns."""

    kind = "tally"
    initial_state = {"count": 0}
    turns: ClassVar[int] = 0

    @callable
    def increment(self) -> int:
        type(self).turns += 1
        count: int = self.state["count"] + 1
        self.set_state({"count": count})
        return count


@pytest.fixture
def fresh_kinds() -> Iterator[None]:
    Stepper.seen = []
    Tally.turns = 0
    yield
    Stepper.seen = []


def file_size(path: Path) -> int:
    return path.stat().st_size


# -- 3. turns -------------------------------------------------------------------------------------
async def test_a_turn_that_suspends_runs_as_the_actor_task_and_returns_its_result(
    data_dir: Path, fresh_kinds: None
) -> None:
    app = create_app([Stepper, Counter], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/stepper/s?subscribe=none") as ws:
            assert (await recv(ws))["type"] == "welcome"
            host = app.registry.hosts[("stepper", "s")]
            assert (await call(ws, "1", "sleepy", 0.01))["result"] == 1
            first = Stepper.seen[0]
            assert first["task_before"] is host.task, f"the turn ran as {first['task_before']!r}"
            assert first["task_after"] is host.task, f"it was continued by {first['task_after']!r}"
            assert (await call(ws, "2", "via", "c", 5))["result"] == 5
            assert (await call(ws, "3", "via", "c", 2))["result"] == 7
            # pipelined behind turns that suspend: one turn at a time, in order
            for i, method in enumerate(["sleepy", "add", "sleepy", "add"], start=4):
                await ws.send(rpc(str(i), method, *([0.01] if method == "sleepy" else [])))
            got = [await recv(ws) for _ in range(4)]
            assert [(f["id"], f["result"]) for f in got] == [("4", 14), ("5", 15), ("6", 16), ("7", 17)]
            assert (await call(ws, "8", "get"))["result"] == 17
            async with httpx.AsyncClient() as http:
                counter = (await http.get(f"http://{addr}/agents/counter/c")).json()
            assert counter["state"] == {"count": 7}
    seen = Stepper.seen
    assert [s["method"] for s in seen] == ["sleepy", "via", "via", "sleepy", "sleepy"]
    for s in seen:
        assert s["task_before"] is host.task, f"{s['method']} ran as {s['task_before']!r}"
        assert s["task_after"] is host.task, f"{s['method']} was continued by {s['task_after']!r}"
    assert actor_state(data_dir, "stepper", "s") == {"n": 17}


async def test_a_turn_past_turn_timeout_gets_timeout_is_rolled_back_and_the_actor_goes_on(
    data_dir: Path, fresh_kinds: None
) -> None:
    config = RuntimeConfig(turn_timeout=0.3)
    clock = FakeClock()
    app = create_app([Stepper], data_dir=data_dir, config=config, limits=NO_RATE_LIMITS, clock=clock)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/stepper/t?subscribe=none") as ws:
            assert (await recv(ws))["type"] == "welcome"
            host = app.registry.hosts[("stepper", "t")]
            assert (await call(ws, "1", "add"))["result"] == 1
            await ws.send(rpc("slow", "slow", 60.0))
            await ws.send(rpc("after", "get"))  # queued behind the slow turn
            await clock.armed(1)  # the slow turn suspended: its deadline is armed on the clock
            clock.advance(0.29)
            await asyncio.sleep(0)
            assert clock.timers == 1, "the turn timed out before turn_timeout"
            clock.advance(0.01)  # exactly at the deadline
            slow = await recv(ws)
            after = await recv(ws)
            assert (await call(ws, "2", "add"))["result"] == 2
            assert app.registry.hosts[("stepper", "t")] is host, "the actor was restarted"
            assert not host.task.done()
    assert Stepper.seen[0]["method"] == "slow"
    assert (slow["id"], slow["ok"], slow["error"]["code"]) == ("slow", False, "timeout")
    assert after == {"type": "rpc_result", "id": "after", "ok": True, "result": 1}, "not rolled back"
    assert actor_state(data_dir, "stepper", "t") == {"n": 2}
    file = ActorFile.open(actor_path(data_dir, "stepper", "t"), "stepper", "t")
    try:
        states = [orjson.loads(frame)["state"]["n"] for _, kind, frame in file.replay(0) if kind == "state"]
    finally:
        file.close()
    assert states == [1, 2], "the timed-out turn's write reached the log"


async def test_turns_share_commits_and_every_acknowledged_increment_is_counted(
    data_dir: Path, fresh_kinds: None
) -> None:
    connections, calls_each = 20, 30
    app = create_app([Tally], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/tally/hot?subscribe=none"
        async with websockets.connect(url) as first:
            assert (await recv(first))["type"] == "welcome"
            host = app.registry.hosts[("tally", "hot")]
            stats = Statements(host.file.conn, host.file, lambda: int(host.state["count"]))
            early: list[tuple[int, int]] = []  # (result, committed) for replies seen before their commit

            async def hammer(i: int) -> list[int]:
                results: list[int] = []
                async with websockets.connect(url) as ws:
                    assert (await recv(ws))["type"] == "welcome"
                    for j in range(calls_each):
                        result = (await call(ws, f"{i}.{j}", "increment"))["result"]
                        if result > stats.committed:
                            early.append((result, stats.committed))
                        results.append(result)
                return results

            acked = [r for rs in await asyncio.gather(*(hammer(i) for i in range(connections))) for r in rs]
            final = await call(first, "final", "increment")
    calls = connections * calls_each
    assert sorted(acked) == list(range(1, calls + 1)), "an increment was lost or applied twice"
    assert final["result"] == calls + 1
    assert actor_state(data_dir, "tally", "hot") == {"count": calls + 1}
    assert early == [], "a reply arrived before the commit of its write"
    assert Tally.turns == calls + 1
    assert stats.commits <= calls // 2, f"{stats.commits} commits for {calls} calls: no group commit"


# -- 4. checkpoints off the loop, page size -----------------------------------------------------------
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


def commit_one(file: ActorFile, seq: int) -> None:
    file.begin_turn()
    file.append_log(seq, "state", encode({"type": "state", "seq": seq, "state": {"count": seq}}), 0.0)
    file.end_turn()
    file.commit()


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


# -- found by review: each of these failed before its fix --------------------------------------------
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


class Doomed(Counter):
    """``doomed`` writes, then its batch's COMMIT fails (the SQLite progress handler interrupts it)."""

    kind = "doomed"

    @callable
    def doomed(self) -> int:
        self.set_state({"count": self.state["count"] + 100})
        conn = self.extension.connection()
        conn.set_progress_handler(lambda: 1 if conn.in_transaction else 0, 1)  # interrupt the COMMIT
        n: int = self.state["count"]
        return n


async def test_a_failed_commit_releases_nothing_over_the_websocket(data_dir: Path) -> None:
    """The output gate: the reply and the state frame of a batch whose commit
    failed never reach the client; it is closed with 1011; the actor reloads the committed state."""
    app = create_app([Doomed], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/doomed/d1") as ws:
            assert (await recv(ws))["type"] == "welcome"
            for i in (1, 2):
                await ws.send(encode({"type": "rpc", "id": str(i), "method": "increment"}))
                state, reply = await recv(ws), await recv(ws)  # one batch: the state frame, the reply
                assert (state["type"], state["state"], reply["result"]) == ("state", {"count": i}, i)
            await ws.send(encode({"type": "rpc", "id": "d", "method": "doomed"}))
            seen: list[Frame] = []
            code = None
            try:
                while True:
                    seen.append(await recv(ws))
            except websockets.ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else None
            assert seen == [], f"frames of the failed batch left the server: {seen}"
            assert code == 1011
        async with websockets.connect(f"ws://{addr}/agents/doomed/d1?subscribe=none") as ws:
            welcome = await recv(ws)
            assert welcome["state"] == {"count": 2}
            assert (await call(ws, "3", "increment"))["result"] == 3


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


class Quits(Counter):
    """``quit`` raises ``CancelledError`` without ever suspending (as some library code does)."""

    kind = "quits"

    @callable
    def quit(self) -> None:
        raise asyncio.CancelledError


async def test_a_cancelled_error_raised_in_a_turn_stops_the_actor_cleanly(data_dir: Path) -> None:
    """It must not escape into the protocol's ``data_received`` (the client saw 1006 and the actor's
    task stayed parked forever): the actor stops as after any crash (close 1011), its task ends, and
    the next connection gets it back from disk."""
    app = create_app([Quits], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/quits/q?subscribe=none") as ws:
            assert (await recv(ws))["type"] == "welcome"
            assert (await call(ws, "1", "increment"))["result"] == 1
            host = app.registry.hosts[("quits", "q")]
            await ws.send(encode({"type": "rpc", "id": "2", "method": "quit"}))
            code = None
            try:
                while True:
                    await recv(ws)
            except websockets.ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else None
            assert code == 1011
        async with asyncio.timeout(5):
            await asyncio.gather(host.task, return_exceptions=True)  # ended, not parked forever
        async with websockets.connect(f"ws://{addr}/agents/quits/q?subscribe=none") as ws:
            assert (await recv(ws))["state"] == {"count": 1}
            assert (await call(ws, "3", "increment"))["result"] == 2


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
