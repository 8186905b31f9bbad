"""Frames keep their order: around the welcome, behind pings, pipelined, before the 101, and behind an
asynchronous ``authorize`` verdict (``roost.transport.endpoint``), over a real socket.

- Frames sent from ``on_connect`` arrive after the welcome, and after the replay on a resume.
- Answers to frames a client sent before its welcome follow the welcome, in the order they were sent.
- A ping is a barrier: its pong comes after the replies to every call sent before it; the answer to a
  bad frame is not a barrier.
- Pipelined frames (200 calls and pings sent without waiting, one bad frame, one unknown type) are
  answered in the order sent, in this process and by ``roost serve``; an error never comes after the
  answer to a frame sent after it.
- Frames sent as soon as a client can, after the 101 while the actor starts or before it while an
  asynchronous ``authenticate`` waits, are answered after the welcome in order with the later ones.
- An asynchronous ``authorize`` hook holds later frames behind the frame it judges: pipelined calls
  keep their order and a refused call has no effect; a frame sent while a call's verdict is pending is
  answered, and run, after that call.

Real servers on 127.0.0.1 (in this process, or ``roost serve`` as a child process); a WebSocket client
written by hand sends what a library client would not (frames before the 101, several in one write).
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
import websockets
from starlette.requests import HTTPConnection

from roost.actors import ANONYMOUS, Actor, Connection, Principal, callable
from roost.client import Client, actor_url
from roost.examples.kinds import KINDS, Counter
from roost.testing import connect, rpc_frame, until
from roost.testing import ping_frame as ping
from roost.testing import rpc_frame as rpc
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.kinds import Holder
from tests.support import ServerProcess, actor_state, call, queued_inputs, recv, serve_in_process

Frame = dict[str, Any]


def types_of(frames: list[Frame]) -> list[str]:
    return [f["type"] for f in frames]


class Greeter(Actor):
    """Sends its new connection a message and changes state in ``on_connect``."""

    kind = "greeter"
    initial_state = {"visits": 0}

    def on_connect(self, conn: Connection) -> None:
        visits = self.state["visits"] + 1
        conn.send({"hello": visits})
        self.set_state({"visits": visits})

    @callable
    def visits(self) -> int:
        n: int = self.state["visits"]
        return n


async def test_frames_sent_from_on_connect_arrive_after_the_welcome_and_after_the_replay(
    data_dir: Path,
) -> None:
    app = create_app([Greeter], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/greeter/hello"
        async with connect(url) as first:
            await first.send('{"type":"ping","id":"p"}')
            frames = await first.recv_n(3)
            assert frames[0]["type"] == "welcome"
            assert frames[0]["resume"] == "fresh"
            assert frames[0]["state"] == {"visits": 1}, "the welcome reflects the state after on_connect"
            assert frames[0]["cursor"] == 1
            assert frames[1:] == [{"type": "message", "data": {"hello": 1}}, {"type": "pong", "id": "p"}]

            async with connect(f"{url}?cursor=0") as second:
                await second.send('{"type":"ping","id":"p"}')
                frames = await second.recv_n(5)
                assert frames[0]["type"] == "welcome"
                assert frames[0]["resume"] == "replay"
                assert frames[0]["cursor"] == 2
                assert frames[1:] == [
                    {"type": "state", "seq": 1, "state": {"visits": 1}},
                    {"type": "state", "seq": 2, "state": {"visits": 2}},
                    {"type": "message", "data": {"hello": 2}},
                    {"type": "pong", "id": "p"},
                ], "welcome, then the replay, then what on_connect sent"
            assert await first.recv() == {"type": "state", "seq": 2, "state": {"visits": 2}}

        for cursor in (None, 0):
            client = Client(
                actor_url(f"ws://{addr}", "greeter", "hello"),
                cursor=cursor,
                reconnect=False,
                rng=random.Random(1),
            )
            async with client:
                await client.wait_connected(5)
                await client.ping(5)
                assert client.closed_reason is None, "a message from on_connect stopped the client"
                assert client.connected
                assert await client.call("visits", timeout=5) == client.state["visits"]


async def test_answers_to_frames_sent_before_the_welcome_follow_the_welcome(
    data_dir: Path, holder: type[Holder]
) -> None:
    """A slow ``on_start``: a ping, bad frames and a call sent right after connecting are answered after
    the welcome, in the order they were sent."""
    gate = holder.start_gate = asyncio.Event()
    app = create_app([holder], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/holder/slow-start?subscribe=none") as ws:
            await ws.send('{"type":"ping","id":1}')
            await ws.send("not json")
            await ws.send('{"type":"nope"}')
            await ws.send(rpc_frame("r1", "add", 5))
            await ws.send('{"type":"ping","id":2}')
            # the connect and all five frames
            await until(lambda: queued_inputs(app, "holder", "slow-start") >= 6)
            gate.set()
            frames = await ws.recv_n(6)
    assert types_of(frames) == ["welcome", "pong", "error", "error", "rpc_result", "pong"]
    assert frames[1] == {"type": "pong", "id": 1}
    assert [f["code"] for f in frames[2:4]] == ["bad_frame", "unknown_type"]
    assert frames[4] == {"type": "rpc_result", "id": "r1", "ok": True, "result": 5}
    assert frames[5] == {"type": "pong", "id": 2}


async def test_ping_is_a_barrier_behind_the_replies_to_earlier_calls(
    data_dir: Path, holder: type[Holder]
) -> None:
    app = create_app([holder], data_dir=data_dir)
    key = ("holder", "barrier")
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/holder/barrier?subscribe=none") as ws:
            welcome = await ws.recv()
            await ws.send(rpc_frame("h", "hold", "held"))
            await ws.send('{"type":"ping","id":"p0"}')
            for i in (1, 2, 3):
                await ws.send(rpc_frame(f"a{i}", "add"))
            await ws.send('{"type":"ping","id":"p1"}')
            await ws.send("[not, json")
            assert holder.entered is not None
            await asyncio.wait_for(holder.entered.wait(), 5)
            conn = app.registry.hosts[key].connections[welcome["connection_id"]]
            # `hold` runs; two pings and three calls are queued behind it (pings count in flight too)
            await until(lambda: conn.in_flight == 6)
            assert holder.release is not None
            holder.release.set()
            frames = await ws.recv_n(7)
    # the answer to the bad frame is not a barrier: once welcomed it goes out at once
    errors = [f for f in frames if f["type"] == "error"]
    assert [(f["type"], f["code"]) for f in errors] == [("error", "bad_frame")]
    frames = [f for f in frames if f["type"] != "error"] + errors
    assert frames[:6] == [
        {"type": "rpc_result", "id": "h", "ok": True, "result": "held"},
        {"type": "pong", "id": "p0"},
        {"type": "rpc_result", "id": "a1", "ok": True, "result": 1},
        {"type": "rpc_result", "id": "a2", "ok": True, "result": 2},
        {"type": "rpc_result", "id": "a3", "ok": True, "result": 3},
        {"type": "pong", "id": "p1"},
    ]
    assert (frames[6]["type"], frames[6]["code"]) == ("error", "bad_frame")


# -- a client written by hand, what the server has read -----------------------------------------------
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


@pytest.fixture
def fresh_kinds() -> Iterator[None]:
    Ledger.wipes = 0
    SlowStart.gate = None
    yield
    SlowStart.gate = None


# -- pipelined frames, frames before the welcome ------------------------------------------------------
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
        # test_ping_is_a_barrier_behind_the_replies_to_earlier_calls), so it may overtake replies still
        # waiting for their commit; but it never comes after the answer to any frame sent after it.
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


# -- an asynchronous authorize hook holds later frames behind its verdict -----------------------------
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
