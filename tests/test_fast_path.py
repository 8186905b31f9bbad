"""The fast paths keep the guarantees users rely on.

- **Frame order** (``roost.transport.endpoint``): frames are answered in the order they were sent,
  whether they were sent pipelined, before the welcome or before the 101; an asynchronous
  ``authorize`` hook holds later frames behind the frame it judges.
- **Turns** (``ActorHost.submit``): a turn runs as the actor's task, including one that suspends,
  ``turn_timeout`` cuts it short and rolls it back, and turns share commits (group commit) with every
  acknowledged write durable.
- **Checkpoints off the loop** (``roost.storage.actor_file``): the WAL stays bounded without SQLite's
  automatic
  checkpoint, checkpoints run in a worker thread while the actor takes no turn, and new files use 1 KiB
  pages while old files keep theirs.

Real servers on 127.0.0.1 (in this process, or ``roost serve`` as a child process), real SQLite files.
Waiting is on frames, events and conditions; the only timeouts bound how long a failure takes.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sqlite3
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
import pytest
import websockets
from starlette.requests import HTTPConnection

from roost.actors import ANONYMOUS, Actor, Principal, callable
from roost.actors.registry import RuntimeConfig
from roost.examples.kinds import KINDS, Counter
from roost.scheduler import FakeClock
from roost.storage import ActorFile, actor_path
from roost.storage.actor_file import CHECKPOINT_PAGES, PAGE_SIZE
from roost.testing import encode, until
from roost.testing import ping_frame as ping
from roost.testing import rpc_frame as rpc
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.support import ServerProcess, Statements, actor_state, call, recv, serve_in_process

Frame = dict[str, Any]


# -- helpers ------------------------------------------------------------------------------------------
def uvicorn_protocol() -> Any:
    """The uvicorn protocol object of this loop's one open WebSocket connection (the ``self`` of the
    ``run_asgi`` task it runs the app in), to see what the server has read: the frames it read and
    queued for ``receive()``."""
    (proto,) = [
        task.get_coro().cr_frame.f_locals["self"]  # type: ignore[union-attr]
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "").endswith(".run_asgi")
    ]
    return proto


class RawSocket:
    """A WebSocket client written by hand: frames before the 101, several frames in one TCP write."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, addr: str) -> RawSocket:
        host, port = addr.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer)

    @staticmethod
    def upgrade(path: str) -> bytes:
        key = base64.b64encode(os.urandom(16)).decode()
        return (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()

    @staticmethod
    def frames(*texts: str) -> bytes:
        """Masked text frames, back to back."""
        out = bytearray()
        for text in texts:
            payload = text.encode()
            mask = os.urandom(4)
            n = len(payload)
            out += bytes([0x81])
            out += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
            out += mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bytes(out)

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def accepted(self) -> None:
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        assert b" 101 " in head.split(b"\r\n")[0], head

    async def recv(self, timeout: float = 10.0) -> Frame:
        async with asyncio.timeout(timeout):
            while True:
                b0, b1 = await self.reader.readexactly(2)
                n = b1 & 0x7F
                if n == 126:
                    n = struct.unpack(">H", await self.reader.readexactly(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", await self.reader.readexactly(8))[0]
                payload = await self.reader.readexactly(n)
                opcode = b0 & 0x0F
                if opcode == 0x8:
                    raise ConnectionError(f"closed by the server: {payload!r}")
                if opcode == 0x1:
                    frame: Frame = orjson.loads(payload)
                    return frame

    async def aclose(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


# -- actor kinds --------------------------------------------------------------------------------------
class Ledger(Actor):
    """``add`` counts up; ``wipe`` (refused by the test's ``authorize``) would reset the total."""

    kind = "ledger"
    initial_state = {"total": 0}
    wipes: ClassVar[int] = 0

    @callable
    def add(self, k: int = 1) -> int:
        total: int = self.state["total"] + k
        self.set_state({"total": total})
        return total

    @callable
    def wipe(self) -> int:
        type(self).wipes += 1
        self.set_state({"total": 0})
        return 0


class SlowStart(Counter):
    """A counter whose activation waits for the test (``gate``)."""

    kind = "slowstart"
    gate: ClassVar[asyncio.Event | None] = None

    async def on_start(self) -> None:
        if SlowStart.gate is not None:
            await SlowStart.gate.wait()


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
    Ledger.wipes = 0
    Stepper.seen = []
    Tally.turns = 0
    SlowStart.gate = None
    yield
    Stepper.seen = []
    SlowStart.gate = None


def file_size(path: Path) -> int:
    return path.stat().st_size


# -- 1. frames keep their order -------------------------------------------------------------------
def pipelined_frames() -> tuple[list[str], list[tuple[str, Any]]]:
    """200 frames: counter increments, app-level pings, one bad frame and one unknown type; and for
    each, in order, what answers it: ``("rpc", count)``, ``("pong", id)`` or ``("error", code)``."""
    frames: list[str] = []
    answers: list[tuple[str, Any]] = []
    count = 0
    for i in range(200):
        if i == 61:
            frames.append("{not json")
            answers.append(("error", "bad_frame"))
        elif i == 137:
            frames.append('{"type":"launch_missiles","id":"x"}')
            answers.append(("error", "unknown_type"))
        elif i % 9 == 4:
            frames.append(ping(f"p{i}"))
            answers.append(("pong", f"p{i}"))
        else:
            count += 1
            frames.append(rpc(f"r{i}", "increment"))
            answers.append(("rpc", count))
    return frames, answers


def answer_of(frame: Frame) -> tuple[str, Any]:
    if frame["type"] == "rpc_result":
        assert frame["ok"] is True, frame
        return ("rpc", frame["result"])
    if frame["type"] == "pong":
        return ("pong", frame["id"])
    assert frame["type"] == "error", frame
    return ("error", frame["code"])


async def pipeline_and_check(url: str) -> None:
    frames, expected = pipelined_frames()
    async with websockets.connect(url) as ws:
        assert (await recv(ws))["type"] == "welcome"
        for text in frames:  # all of them, without waiting for any answer
            await ws.send(text)
        got = [answer_of(await recv(ws)) for _ in frames]
        # Replies and pongs: exactly in the order sent, each count the running count.
        assert [a for a in got if a[0] != "error"] == [a for a in expected if a[0] != "error"]
        # An error answering a bad frame goes out at once once welcomed (not a barrier: see
        # tests/test_core_edges.py), so it may overtake replies still waiting for their commit; but it
        # never comes after the answer to any frame sent after it.
        assert [a for a in got if a[0] == "error"] == [("error", "bad_frame"), ("error", "unknown_type")]
        for code in ("bad_frame", "unknown_type"):
            sent_at = expected.index(("error", code))
            later = set(expected[sent_at + 1 :]) - {("error", "unknown_type")}
            assert not later & set(got[: got.index(("error", code))]), f"{code} answered late"
        final = await call(ws, "final", "get")
        assert final["result"] == sum(1 for a in expected if a[0] == "rpc")


async def test_pipelined_frames_are_answered_in_the_order_sent_in_process(data_dir: Path) -> None:
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        await pipeline_and_check(f"ws://{addr}/agents/counter/pipelined?subscribe=none")


async def test_pipelined_frames_are_answered_in_the_order_sent_by_roost_serve(data_dir: Path) -> None:
    """The same over ``roost serve`` in a child process (its own TCP reads, its own event loop)."""
    server = await asyncio.to_thread(ServerProcess(data_dir).start)
    try:
        await pipeline_and_check(f"{server.ws}/agents/counter/pipelined?subscribe=none")
    finally:
        server.kill()


@pytest.mark.parametrize("when", ["after_the_101_before_the_welcome", "before_the_101_while_authenticating"])
async def test_frames_sent_before_the_welcome_are_answered_in_order_with_later_ones(
    data_dir: Path, fresh_kinds: None, when: str
) -> None:
    """Frames a client sends as soon as it can are answered after the welcome, in the order sent, and
    so are the frames it sends later.

    - After the 101, while the actor starts (a slow ``on_start``): they are queued at the actor behind
      the connection's welcome.
    - After the upgrade request but before the 101, while an asynchronous ``authenticate`` hook waits
      (RFC 6455 has clients wait for the 101; some do not): they wait for ASGI ``receive()``, and
      frames sent after the 101 wait behind them.

    (Frames in the *same* TCP read as the upgrade request are dropped by uvicorn's HTTP protocol,
    before Roost sees them; RFC 6455 forbids sending them, and nothing here relies on them.)
    """
    gate = asyncio.Event()
    asked: list[HTTPConnection] = []

    async def authenticate(conn: HTTPConnection) -> Principal:
        asked.append(conn)
        if when == "before_the_101_while_authenticating":
            await gate.wait()
        return ANONYMOUS

    if when == "after_the_101_before_the_welcome":
        SlowStart.gate = gate
    app = create_app([SlowStart], data_dir=data_dir, limits=NO_RATE_LIMITS, authenticate=authenticate)
    early = [rpc("e1", "increment"), ping("pe"), rpc("e2", "increment"), rpc("e3", "increment")]
    middle = [rpc("m1", "increment"), ping("pm"), rpc("m2", "increment")]
    late = [rpc("l1", "increment"), ping("pl"), rpc("l2", "increment")]
    async with serve_in_process(app) as addr:
        sock = await RawSocket.connect(addr)
        try:
            sock.write(RawSocket.upgrade("/agents/slowstart/early?subscribe=none"))
            await until(lambda: bool(asked))
            if when == "after_the_101_before_the_welcome":
                await sock.accepted()
                sock.write(RawSocket.frames(*early))
                host = app.registry.hosts[("slowstart", "early")]
                await until(lambda: host.queued == 1 + len(early))  # the connect, then these
            else:
                sock.write(RawSocket.frames(*early))
            gate.set()
            sock.write(RawSocket.frames(*middle))  # while the server goes on: before the welcome
            if when == "before_the_101_while_authenticating":
                await sock.accepted()
            welcome = await sock.recv()
            assert welcome["type"] == "welcome"
            sock.write(RawSocket.frames(*late))
            got = [answer_of(await sock.recv()) for _ in range(len(early + middle + late))]
        finally:
            gate.set()  # a failure must not leave the hook (and the server's shutdown) waiting
            await sock.aclose()
    assert got == [
        ("rpc", 1),
        ("pong", "pe"),
        ("rpc", 2),
        ("rpc", 3),
        ("rpc", 4),
        ("pong", "pm"),
        ("rpc", 5),
        ("rpc", 6),
        ("pong", "pl"),
        ("rpc", 7),
    ]


# -- 2. an asynchronous authorize hook holds later frames behind its verdict --------------------------
async def test_async_authorize_keeps_pipelined_calls_in_order_and_a_refused_call_has_no_effect(
    data_dir: Path, fresh_kinds: None
) -> None:
    asked: list[str] = []
    started = 0

    async def authorize(principal: Principal, kind: str, name: str, action: str) -> bool:
        nonlocal started
        started += 1
        # a real suspension, of varying length: verdicts waited for side by side would end out of order
        await asyncio.sleep(0.005 * (started % 4))
        asked.append(action)
        return action != "call:wipe"

    app = create_app([Ledger], data_dir=data_dir, limits=NO_RATE_LIMITS, authorize=authorize)
    ids = [f"a{i}" for i in range(1, 11)] + ["wipe"] + [f"a{i}" for i in range(11, 21)]
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/ledger/l?subscribe=none") as ws:
            assert (await recv(ws))["type"] == "welcome"
            for call_id in ids:
                await ws.send(rpc(call_id, "wipe" if call_id == "wipe" else "add"))
            got = [await recv(ws) for _ in ids]
            total = await call(ws, "total", "add", 0)
    assert [f["id"] for f in got] == ids, "answered out of order"
    refused = got[10]
    assert refused["ok"] is False
    assert refused["error"]["code"] == "forbidden"
    assert [f["result"] for f in got[:10] + got[11:]] == list(range(1, 21)), "the refused wipe had an effect"
    assert total["result"] == 20
    assert Ledger.wipes == 0, "the refused method ran"
    assert asked == ["connect"] + ["call:add"] * 10 + ["call:wipe"] + ["call:add"] * 11
    assert actor_state(data_dir, "ledger", "l") == {"total": 20}


@pytest.mark.parametrize(
    ("taken", "later_frame"),
    [
        ("alone", "ping"),
        ("alone", "call_with_a_synchronous_verdict"),
        ("behind_another", "ping"),
        ("behind_another", "call_with_a_synchronous_verdict"),
    ],
)
async def test_a_later_frame_waits_behind_a_call_whose_async_verdict_is_pending(
    data_dir: Path, taken: str, later_frame: str
) -> None:
    """Call ``B`` waits for its (asynchronous) verdict, which the test holds; frame ``C``, sent now,
    must be answered after ``B``'s reply, and if it is a call, run after ``B``.

    - ``alone``: ``B`` is sent on its own.
    - ``behind_another``: ``A`` and ``B`` arrive in one TCP read; the reader waits for ``A``'s verdict
      (given at once), then for ``B``'s.

    The hook answers ``increment`` at once and ``get`` later (a hook may do either, per action).
    """
    entered = asyncio.Event()
    gate = asyncio.Event()
    held_get = 1 if taken == "alone" else 2  # which get's verdict the test holds: B's
    gets = 0

    def authorize(principal: Principal, kind: str, name: str, action: str) -> Any:
        nonlocal gets
        if action != "call:get":
            return True
        gets += 1
        mine = gets

        async def later() -> bool:
            if mine == held_get:
                entered.set()
                await gate.wait()
            return True

        return later()

    app = create_app([Counter], data_dir=data_dir, limits=NO_RATE_LIMITS, authorize=authorize)
    c_frame = ping("C") if later_frame == "ping" else rpc("C", "increment")
    async with serve_in_process(app) as addr:
        sock = await RawSocket.connect(addr)
        try:
            sock.write(RawSocket.upgrade("/agents/counter/held?subscribe=none"))
            await sock.accepted()
            assert (await sock.recv())["type"] == "welcome"
            protocol = uvicorn_protocol()
            if taken == "alone":
                sock.write(RawSocket.frames(rpc("B", "get")))
                await asyncio.wait_for(entered.wait(), 10)
            else:
                sock.write(RawSocket.frames(rpc("A", "get"), rpc("B", "get")))  # one TCP write
                await asyncio.wait_for(entered.wait(), 10)
                assert (await sock.recv()) == {"type": "rpc_result", "id": "A", "ok": True, "result": 0}
            sock.write(RawSocket.frames(c_frame))
            reading = asyncio.ensure_future(sock.recv())
            try:
                # until the server read C: it answered C already (wrong) or queued it behind B
                await until(lambda: reading.done() or protocol.queue.qsize() > 0)
                early = [reading.result()] if reading.done() else []
                assert early == [], "C was answered while B still waited for its verdict"
                gate.set()
                rest = [await reading, await sock.recv()]
            finally:
                reading.cancel()
        finally:
            gate.set()  # a failure must not leave the hook (and the server's shutdown) waiting
            await sock.aclose()
    assert [f.get("id") for f in rest] == ["B", "C"]
    assert rest[0]["result"] == 0, "B saw the effect of C, a call sent after it"


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
