"""Edges of the core over real sockets, real files and real processes.

Ordering around the welcome, route confusion, per-connection and mailbox bounds, failure paths (commit,
activation, reentrancy), the ``self.sql`` guard, close codes the client relies on, authentication, slow
consumers, graceful shutdown and the ``roost.client`` command line. Waiting is on frames, events and
conditions; where time must pass, a short timeout enforced by asyncio bounds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
import pytest
import websockets
from starlette.requests import HTTPConnection
from websockets.asyncio.client import ClientConnection
from websockets.sync.client import ClientConnection as SyncConnection
from websockets.sync.client import connect as connect_sync

from roost.actors import Actor, Connection, Principal, Reject, RpcError, callable
from roost.actors.errors import Overloaded
from roost.client import Client, TerminalClose, actor_url
from roost.examples.kinds import KINDS, Counter
from roost.storage import actor_path
from roost.testing import ActorKit
from roost.transport import RoostApp, create_app
from tests.support import ROOT, ServerProcess, serve_in_process, server_process

Frame = dict[str, Any]
Key = tuple[str, str]


# -- helpers ------------------------------------------------------------------------------------------
def encode(frame: Frame) -> str:
    return orjson.dumps(frame).decode()


def rpc(call_id: str, method: str, *args: Any) -> str:
    return encode({"type": "rpc", "id": call_id, "method": method, "args": list(args)})


async def recv(ws: ClientConnection) -> Frame:
    frame: Frame = orjson.loads(await ws.recv())
    return frame


async def read_n(ws: ClientConnection, n: int) -> list[Frame]:
    return [await recv(ws) for _ in range(n)]


async def read_until_closed(ws: ClientConnection, limit: float = 10.0) -> tuple[list[Frame], int | None]:
    """Every frame until the server closes, and the close code it sent (None: no close frame)."""
    frames: list[Frame] = []
    try:
        async with asyncio.timeout(limit):
            while True:
                frames.append(await recv(ws))
    except websockets.ConnectionClosed as exc:
        return frames, exc.rcvd.code if exc.rcvd is not None else None


async def close_code(ws: ClientConnection) -> int | None:
    return (await read_until_closed(ws))[1]


def close_code_sync(ws: SyncConnection, limit: float = 10.0) -> int | None:
    try:
        while True:
            ws.recv(timeout=limit)
    except websockets.ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd is not None else None


async def until(condition: Callable[[], bool], rounds: int = 10_000) -> None:
    """Yield to the loop until ``condition`` holds (no timers involved)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


def queued_inputs(app: RoostApp, key: Key) -> int:
    """Inputs waiting in an actor's mailbox. Before its welcome a connection has no other trace, so this
    is how a test knows the server has read frames it sent before the welcome."""
    host = app.registry.hosts.get(key)
    return 0 if host is None else len(host._inbox)


def actor_files(data_dir: Path) -> list[Path]:
    actors = data_dir / "actors"
    return sorted(actors.rglob("*.sqlite")) if actors.exists() else []


def file_exists(path: Path) -> bool:
    return path.exists()


def types_of(frames: list[Frame]) -> list[str]:
    return [f["type"] for f in frames]


# -- actor kinds --------------------------------------------------------------------------------------
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


class Holder(Actor):
    """``on_start`` and ``hold`` wait on events the test holds (reset by the ``holder`` fixture)."""

    kind = "holder"
    initial_state = {"n": 0}
    start_gate: ClassVar[asyncio.Event | None] = None
    release: ClassVar[asyncio.Event | None] = None
    entered: ClassVar[asyncio.Event | None] = None

    async def on_start(self) -> None:
        if Holder.start_gate is not None:
            await Holder.start_gate.wait()

    @callable
    async def hold(self, tag: str = "") -> str:
        if Holder.entered is not None:
            Holder.entered.set()
        if Holder.release is not None:
            await Holder.release.wait()
        return tag

    @callable
    def add(self, k: int = 1) -> int:
        n: int = self.state["n"] + k
        self.set_state({"n": n})
        return n


@pytest.fixture
def holder() -> Iterator[type[Holder]]:
    Holder.start_gate = None
    Holder.release = asyncio.Event()
    Holder.entered = asyncio.Event()
    yield Holder
    Holder.start_gate = Holder.release = Holder.entered = None


class Asker(Actor):
    """``on_message`` calls ``echoer/<via>.relay``, which calls back into this actor."""

    kind = "asker"

    async def on_message(self, conn: Connection, data: Any) -> None:
        try:
            await self.actor("echoer", data["via"]).call("relay", "asker", self.name)
        except RpcError as exc:
            conn.send({"outcome": exc.code})
        else:
            conn.send({"outcome": "ok"})

    @callable
    def hello(self) -> str:
        return "asker"


class Echoer(Actor):
    kind = "echoer"

    @callable
    async def relay(self, kind: str, name: str) -> Any:
        return await self.actor(kind, name).call("hello")


def _fail_next_commit(conn: sqlite3.Connection) -> None:
    """Kind migration step (it is handed the actor's own connection): once ``Brittle.fail_next_commit``
    is set, the next ``COMMIT`` on this connection is interrupted by SQLite and fails, leaving its
    transaction open, as an I/O error at commit would. Nothing else on the connection is affected, and a
    reopened file (migrations run once) commits normally."""
    current = [""]

    def trace(statement: str) -> None:
        current[0] = statement

    def progress() -> int:
        if Brittle.fail_next_commit and current[0] == "COMMIT":
            Brittle.fail_next_commit = False
            return 1
        return 0

    conn.set_trace_callback(trace)
    conn.set_progress_handler(progress, 1)


class Brittle(Actor):
    kind = "brittle"
    initial_state = {"count": 0}
    migrations = ("CREATE TABLE notes (x TEXT)", _fail_next_commit)
    fail_next_commit: ClassVar[bool] = False

    @callable
    def increment(self) -> int:
        n: int = self.state["count"] + 1
        self.set_state({"count": n})
        return n

    @callable
    def doomed(self) -> int:
        """A turn whose batch cannot commit."""
        self.set_state({"count": self.state["count"] + 100})
        self.sql.execute("INSERT INTO notes (x) VALUES ('lost')")
        Brittle.fail_next_commit = True
        n: int = self.state["count"]
        return n


class BadMigration(Actor):
    kind = "badmigration"
    migrations = ("CREATE TABLE fine (x INTEGER)", "THIS IS NOT SQL")

    @callable
    def get(self) -> Any:
        return self.state


class BadInit(Actor):
    kind = "badinit"

    def __init__(self) -> None:
        raise RuntimeError("cannot construct")

    @callable
    def get(self) -> Any:
        return self.state


class Scribe(Actor):
    kind = "scribe"
    initial_state = {"n": 0}
    migrations = ("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)",)

    @callable
    def note(self, text: str) -> int:
        self.sql.execute("INSERT INTO notes (text) VALUES (?)", (text,))
        self.set_state({"n": self.state["n"] + 1})
        return self.seq

    @callable
    def attempt(self, statement: str, params: list[Any]) -> str:
        """Change state, then run ``statement``: if it is refused the turn (state included) rolls back."""
        self.set_state({"n": self.state["n"] + 1000})
        self.sql.execute(statement, params)
        return "ran"

    @callable
    def log_rows(self) -> int:
        n: int = self.sql.scalar("SELECT count(*) FROM roost_log")
        return n

    @callable
    def notes(self) -> list[str]:
        return [row[0] for row in self.sql.execute("SELECT text FROM notes ORDER BY id")]


class Bouncer(Actor):
    kind = "bouncer"
    attempts: ClassVar[int] = 0

    def on_connect(self, conn: Connection) -> None:
        Bouncer.attempts += 1
        raise Reject("banned", 4450)


class Whoami(Actor):
    kind = "whoami"

    def on_connect(self, conn: Connection) -> None:
        turn = self.principal.id if self.principal is not None else None
        conn.send({"conn_principal": conn.principal.id, "turn_principal": turn})

    @callable
    def who(self) -> dict[str, Any]:
        return {
            "principal": self.principal.id if self.principal is not None else None,
            "caller": self.caller.principal.id if self.caller is not None else None,
        }


class Ballast(Actor):
    """A counter whose state frames are 8 KB, so that a reader that stops reading backs up quickly."""

    kind = "ballast"
    initial_state = {"count": 0, "pad": ""}

    @callable
    def increment(self) -> int:
        n: int = self.state["count"] + 1
        self.set_state({"count": n, "pad": "x" * 8000})
        return n


# -- 1. frames from on_connect come after the welcome ---------------------------------------------------
async def test_frames_sent_from_on_connect_arrive_after_the_welcome_and_after_the_replay(
    data_dir: Path,
) -> None:
    app = create_app([Greeter], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/greeter/hello"
        async with websockets.connect(url) as first:
            await first.send('{"type":"ping","id":"p"}')
            frames = await read_n(first, 3)
            assert frames[0]["type"] == "welcome"
            assert frames[0]["resume"] == "fresh"
            assert frames[0]["state"] == {"visits": 1}, "the welcome reflects the state after on_connect"
            assert frames[0]["cursor"] == 1
            assert frames[1:] == [{"type": "message", "data": {"hello": 1}}, {"type": "pong", "id": "p"}]

            async with websockets.connect(f"{url}?cursor=0") as second:
                await second.send('{"type":"ping","id":"p"}')
                frames = await read_n(second, 5)
                assert frames[0]["type"] == "welcome"
                assert frames[0]["resume"] == "replay"
                assert frames[0]["cursor"] == 2
                assert frames[1:] == [
                    {"type": "state", "seq": 1, "state": {"visits": 1}},
                    {"type": "state", "seq": 2, "state": {"visits": 2}},
                    {"type": "message", "data": {"hello": 2}},
                    {"type": "pong", "id": "p"},
                ], "welcome, then the replay, then what on_connect sent"
            assert await recv(first) == {"type": "state", "seq": 2, "state": {"visits": 2}}

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


# -- 2. ping and error frames keep their place -----------------------------------------------------------
async def test_answers_to_frames_sent_before_the_welcome_follow_the_welcome(
    data_dir: Path, holder: type[Holder]
) -> None:
    """A slow ``on_start``: a ping, bad frames and a call sent right after connecting are answered after
    the welcome, in the order they were sent."""
    gate = holder.start_gate = asyncio.Event()
    app = create_app([holder], data_dir=data_dir)
    key = ("holder", "slow-start")
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/holder/slow-start?subscribe=none") as ws:
            await ws.send('{"type":"ping","id":1}')
            await ws.send("not json")
            await ws.send('{"type":"nope"}')
            await ws.send(rpc("r1", "add", 5))
            await ws.send('{"type":"ping","id":2}')
            await until(lambda: queued_inputs(app, key) >= 6)  # the connect and all five frames
            gate.set()
            frames = await read_n(ws, 6)
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
        async with websockets.connect(f"ws://{addr}/agents/holder/barrier?subscribe=none") as ws:
            welcome = await recv(ws)
            await ws.send(rpc("h", "hold", "held"))
            await ws.send('{"type":"ping","id":"p0"}')
            for i in (1, 2, 3):
                await ws.send(rpc(f"a{i}", "add"))
            await ws.send('{"type":"ping","id":"p1"}')
            await ws.send("[not, json")
            assert holder.entered is not None
            await asyncio.wait_for(holder.entered.wait(), 5)
            conn = app.registry.hosts[key].connections[welcome["connection_id"]]
            # `hold` runs; two pings and three calls are queued behind it (pings count in flight too)
            await until(lambda: conn.in_flight == 6)
            assert holder.release is not None
            holder.release.set()
            frames = await read_n(ws, 7)
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


# -- 3. route confusion -------------------------------------------------------------------------------------
CONFUSED_WS = ["/agents/counter/mallory/counter/alice%2Fprivate", "/agents/room/mallory/counter/alice"]
CONFUSED_HTTP = [
    ("GET", "/agents/counter/mallory/counter/alice%2Fprivate"),
    ("GET", "/agents/room/mallory/counter/alice"),
    ("POST", "/agents/counter/mallory/counter/alice%2Fprivate/rpc/increment"),
    ("POST", "/agents/counter/mallory/rpc/increment/counter/alice/rpc/increment"),
]


async def test_a_path_that_names_two_actors_is_refused_before_authentication(data_dir: Path) -> None:
    """The hook approves addresses; a path where the router and the raw path disagree on the actor is
    refused before the hook is asked, so an approval never serves a different actor."""
    seen: list[tuple[str, str]] = []

    def authenticate(conn: HTTPConnection) -> Principal:
        seen.append((conn.path_params["kind"], conn.path_params["name"]))
        return Principal(id="mallory")

    app = create_app(KINDS, data_dir=data_dir, authenticate=authenticate)
    async with serve_in_process(app) as addr:
        for path in CONFUSED_WS:
            async with websockets.connect(f"ws://{addr}{path}") as ws:
                frame = await recv(ws)
                assert (frame["type"], frame["code"]) == ("error", "bad_address"), path
                assert await close_code(ws) == 4400, path
        async with httpx.AsyncClient(base_url=f"http://{addr}") as http:
            for method, path in CONFUSED_HTTP:
                r = await http.request(method, path, content=b"[]" if method == "POST" else None)
                assert r.status_code == 400, path
                assert r.json()["error"]["code"] == "bad_address", path
        assert seen == [], "the hook was asked to approve an address that is refused anyway"
        assert app.registry.hosts == {}
        assert actor_files(data_dir) == [], "a refused address created an actor"

        async with websockets.connect(f"ws://{addr}/agents/counter/alice%2Fprivate") as ws:
            welcome = await recv(ws)
        assert welcome["actor"] == {"kind": "counter", "name": "alice/private"}
        assert seen == [("counter", "alice/private")], "the hook approved exactly the actor served"


# -- 4. bounds --------------------------------------------------------------------------------------------
async def test_calls_beyond_the_in_flight_bound_are_refused_promptly_and_the_rest_succeed(
    data_dir: Path, holder: type[Holder]
) -> None:
    app = create_app([holder], data_dir=data_dir, max_in_flight=4)
    key = ("holder", "in-flight")
    assert holder.entered is not None
    assert holder.release is not None
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/holder/in-flight?subscribe=none"
        async with websockets.connect(url) as other, websockets.connect(url) as ws:
            await recv(other)
            welcome = await recv(ws)
            await other.send(rpc("b", "hold", "other"))  # the actor is busy from now on
            await asyncio.wait_for(holder.entered.wait(), 5)
            for i in range(1, 7):
                await ws.send(rpc(f"a{i}", "add"))
            conn = app.registry.hosts[key].connections[welcome["connection_id"]]
            await until(lambda: conn.in_flight == 4)
            early: list[Frame] = []
            try:
                async with asyncio.timeout(2):
                    while len(early) < 2:
                        early.append(await recv(ws))
            except TimeoutError:
                pass
            holder.release.set()
            late = await read_n(ws, 6 - len(early))
            other_result = await recv(other)
    replies = {f["id"]: f for f in early + late}
    assert [replies[f"a{i}"]["result"] for i in (1, 2, 3, 4)] == [1, 2, 3, 4], "the first four succeed"
    for call_id in ("a5", "a6"):
        assert replies[call_id]["ok"] is False
        assert replies[call_id]["error"]["code"] == "overloaded"
    assert other_result == {"type": "rpc_result", "id": "b", "ok": True, "result": "other"}
    assert [f["id"] for f in early] == ["a5", "a6"], (
        "the overloaded answers waited behind the blocked turn instead of coming at once"
    )


async def test_a_full_mailbox_refuses_calls_but_still_accepts_a_disconnect(
    tmp_path: Path, holder: type[Holder]
) -> None:
    assert holder.entered is not None
    assert holder.release is not None
    async with ActorKit([holder], tmp_path / "data", max_inbox=3) as kit:
        c = kit.connect("holder", "mailbox")
        await c.wait_for(lambda f: f["type"] == "welcome")
        blocked = asyncio.create_task(kit.call("holder", "mailbox", "hold", "x"))
        await asyncio.wait_for(holder.entered.wait(), 5)
        ids = [c.send_call("add") for _ in range(3)]
        with pytest.raises(Overloaded):
            c.send_call("add")
        with pytest.raises(Overloaded):
            await kit.call("holder", "mailbox", "add")
        c.disconnect()  # accepted although the mailbox is full
        holder.release.set()
        assert await blocked == "x"
        last = await c.wait_for(lambda f: f["type"] == "rpc_result" and f["id"] == ids[-1])
        assert last["result"] == 3
        await kit.settle()
        assert kit.registry.hosts[("holder", "mailbox")].connections == {}, "the disconnect was handled"
        assert await kit.call("holder", "mailbox", "add") == 4


# -- 5. reentrancy from on_message ------------------------------------------------------------------------
async def test_a_call_cycle_started_from_on_message_fails_fast_with_reentrant_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with ActorKit([Asker, Echoer], tmp_path / "data", turn_timeout=5.0, call_timeout=5.0) as kit:
        c = kit.connect("asker", "cycle")
        await c.wait_for(lambda f: f["type"] == "welcome")
        c.message({"via": "cycle-b"})
        frame = await c.wait_for(lambda f: f["type"] == "message", timeout=2.0)
        assert frame["data"] == {"outcome": "reentrant_call"}
        assert await c.call("hello") == "asker", "A is free again"
        assert await kit.call("echoer", "cycle-b", "relay", "asker", "cycle") == "asker", "B→A is no cycle"
        await kit.settle()
    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


# -- 6. commit failure ---------------------------------------------------------------------------------------
async def test_a_failed_commit_answers_actor_unavailable_closes_sockets_1011_and_reloads_from_disk(
    data_dir: Path,
) -> None:
    Brittle.fail_next_commit = False
    app = create_app([Brittle], data_dir=data_dir)
    base = "/agents/brittle/b1"
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        async with websockets.connect(f"ws://{addr}{base}") as ws:
            assert (await recv(ws))["type"] == "welcome"
            for expected in (1, 2):
                r = await http.post(f"{base}/rpc/increment")
                assert r.json() == {"ok": True, "result": expected}
            old_host = app.registry.hosts[("brittle", "b1")]
            async with asyncio.timeout(5):  # far below the 30 s call timeout
                r = await http.post(f"{base}/rpc/doomed")
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "actor_unavailable"
            seen, code = await read_until_closed(ws, 5)
            assert code == 1011
            assert [f["seq"] for f in seen] == [1, 2], "a frame of the failed batch left the server"
        Brittle.fail_next_commit = False
        r = await http.get(base)
        assert r.json()["state"] == {"count": 2}
        assert r.json()["cursor"] == 2
        assert app.registry.hosts[("brittle", "b1")] is not old_host
        r = await http.post(f"{base}/rpc/increment")
        assert r.json() == {"ok": True, "result": 3}


# -- 7. activation failure ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["badmigration", "badinit"])
async def test_an_actor_that_fails_to_activate_answers_actor_unavailable_and_others_are_served(
    data_dir: Path, kind: str
) -> None:
    app = create_app([BadMigration, BadInit, Counter], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/{kind}/broken") as ws:
            frame = await recv(ws)
            assert (frame["type"], frame["code"]) == ("error", "actor_unavailable")
            assert await close_code(ws) == 1013
        async with httpx.AsyncClient(base_url=f"http://{addr}") as http:
            r = await http.post(f"/agents/{kind}/broken/rpc/get")
            assert r.status_code == 503
            assert r.json()["ok"] is False
            assert r.json()["error"]["code"] == "actor_unavailable"
            r = await http.post("/agents/counter/fine/rpc/increment")
            assert r.json() == {"ok": True, "result": 1}
        async with websockets.connect(f"ws://{addr}/agents/counter/fine") as ws:
            assert (await recv(ws))["state"] == {"count": 1}


# -- 8. long handshakes --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_long_handshakes_get_an_answer_from_a_real_server(data_dir: Path) -> None:
    with server_process(data_dir) as server:
        with connect_sync(f"{server.ws}/agents/counter/{'n' * 10_240}", open_timeout=5) as ws:
            frame = orjson.loads(ws.recv(timeout=5))
            assert (frame["type"], frame["code"]) == ("error", "bad_address")
            assert close_code_sync(ws, 5) == 4400

        host, port = server.addr.rsplit(":", 1)
        request = (
            f"GET /agents/counter/{'p' * 40_960} HTTP/1.1\r\nHost: {server.addr}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        with socket.create_connection((host, int(port)), timeout=3) as sock:
            sock.sendall(request)
            answer = b""
            while b"\r\n" not in answer:
                chunk = sock.recv(4096)  # a hang raises socket.timeout after 3 s
                if not chunk:
                    break
                answer += chunk
        assert answer.split(b"\r\n", 1)[0].startswith(b"HTTP/1.1 414"), answer[:200]

        with connect_sync(f"{server.ws}/agents/counter/after-long", open_timeout=5) as ws:
            assert orjson.loads(ws.recv(timeout=5))["type"] == "welcome"


# -- 9. a missing method creates nothing ---------------------------------------------------------------------
async def test_a_call_to_a_missing_method_of_a_new_actor_creates_nothing(data_dir: Path) -> None:
    app = create_app(KINDS, data_dir=data_dir)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        r = await http.post("/agents/counter/never-made/rpc/nope")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "method_not_found"
        r = await http.get("/agents/counter/never-made")
        assert r.status_code == 404
        assert app.registry.directory is not None
        assert app.registry.directory.get("counter", "never-made") is None
    assert not file_exists(actor_path(data_dir, "counter", "never-made"))


# -- 10. HTTP body limit -------------------------------------------------------------------------------------
async def _chunks(body: bytes, size: int = 500) -> AsyncIterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i : i + size]


def padded_args(total: int) -> bytes:
    """A valid JSON argument list ``[1]`` padded with spaces to ``total`` bytes."""
    return b"[" + b" " * (total - 3) + b"1]"


@pytest.mark.parametrize("with_length", [True, False], ids=["content-length", "chunked"])
async def test_an_http_body_over_the_frame_limit_is_refused_with_413(
    data_dir: Path, with_length: bool
) -> None:
    app = create_app([Counter], data_dir=data_dir, max_frame_bytes=1000)
    url = "/agents/counter/big-body/rpc/increment"
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        body = padded_args(2000)
        if with_length:
            r = await http.post(url, content=body)
            assert r.request.headers["content-length"] == "2000"
        else:
            r = await http.post(url, content=_chunks(body))
            assert "content-length" not in r.request.headers
        assert r.status_code == 413
        assert r.json()["error"]["code"] == "too_large"
        assert (await http.get("/agents/counter/big-body")).status_code == 404, "the call ran anyway"
        small = padded_args(900)
        r = await http.post(url, content=small if with_length else _chunks(small))
        assert r.json() == {"ok": True, "result": 1}


# -- 11. the self.sql guard ----------------------------------------------------------------------------------
REFUSED_SQL: list[tuple[str, list[Any]]] = [
    ("BEGIN", []),
    ("COMMIT", []),
    ("SAVEPOINT x", []),
    ("ROLLBACK", []),
    ("RELEASE turn", []),
    ("ATTACH DATABASE ':memory:' AS m", []),
    ("PRAGMA journal_mode=DELETE", []),
    ("DELETE FROM roost_log", []),
    ("UPDATE roost_state SET seq = 0", []),
    ("DROP TABLE roost_log", []),
    ("INSERT INTO roost_log (seq, kind, frame, created_at) VALUES (99, 'state', '{}', 0)", []),
    # the exact text the runtime itself uses for its state write
    ("UPDATE roost_state SET state = ?, seq = ?, updated_at = ? WHERE id = 1", ['{"n": -1}', 0, 0.0]),
    ("ALTER TABLE roost_log ADD COLUMN junk TEXT", []),
    ("CREATE INDEX sneaky ON roost_log (kind)", []),
    ("CREATE TRIGGER wipe AFTER UPDATE ON roost_state BEGIN DELETE FROM roost_log; END", []),
]


def roost_file_facts(path: Path) -> dict[str, Any]:
    with closing(sqlite3.connect(path)) as db:
        return {
            "log": [row[0] for row in db.execute("SELECT seq FROM roost_log ORDER BY seq")],
            "state_seq": db.execute("SELECT seq FROM roost_state").fetchone()[0],
            "journal_mode": db.execute("PRAGMA journal_mode").fetchone()[0],
            "log_columns": [row[1] for row in db.execute("PRAGMA table_info(roost_log)")],
            "extra_schema": db.execute(
                "SELECT type, name FROM sqlite_master WHERE type IN ('index', 'trigger') AND sql IS NOT NULL"
            ).fetchall(),
        }


@pytest.mark.parametrize(("statement", "params"), REFUSED_SQL, ids=[s for s, _ in REFUSED_SQL])
async def test_self_sql_refuses_transaction_control_pragmas_and_runtime_tables(
    tmp_path: Path, statement: str, params: list[Any]
) -> None:
    """Each refused statement fails its call with ``handler_error`` and changes nothing; reading the
    runtime's log and writing the kind's own tables work; the seq goes on without a gap."""
    data = tmp_path / "data"
    async with ActorKit([Scribe], data, call_timeout=2.0, turn_timeout=2.0) as kit:
        c = kit.connect("scribe", "guard")
        await c.wait_for(lambda f: f["type"] == "welcome")
        assert await c.call("note", "before") == 1
        with pytest.raises(RpcError) as info:  # in process, as from HTTP or another actor
            await kit.call("scribe", "guard", "attempt", statement, params)
        assert info.value.code == "handler_error"
        assert "not authorized" in info.value.message
        assert await c.call("note", "after") == 2, "the seq continues with no gap"
        assert await c.call("log_rows") == 2
        assert await c.call("notes") == ["before", "after"]
        await c.wait_for(lambda f: f["type"] == "state" and f["seq"] == 2)
        states = [f for f in c.frames if f["type"] == "state"]
        assert [(f["seq"], f["state"]) for f in states] == [(1, {"n": 1}), (2, {"n": 2})]
    assert roost_file_facts(actor_path(data, "scribe", "guard")) == {
        "log": [1, 2],
        "state_seq": 2,
        "journal_mode": "wal",
        "log_columns": ["seq", "kind", "frame", "created_at"],
        "extra_schema": [("index", "roost_schedules_due")],  # the runtime's own, nothing more
    }


# -- 12. Reject ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [4001, 1000, 1013, 4399, 4500])
def test_reject_refuses_codes_outside_4400_to_4499(code: int) -> None:
    with pytest.raises(ValueError, match="4400-4499"):
        Reject(code=code)


async def test_a_reject_code_closes_the_connection_and_stops_the_client(data_dir: Path) -> None:
    Bouncer.attempts = 0
    app = create_app([Bouncer], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/bouncer/door") as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()  # no welcome
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4450, "banned")

        async with Client(actor_url(f"ws://{addr}", "bouncer", "door"), rng=random.Random(3)) as client:
            with pytest.raises(TerminalClose) as stopped:
                await client.wait_connected(5)
            assert stopped.value.code == 4450
            assert isinstance(client.closed_reason, TerminalClose)
            assert client.reconnects == 0
            with pytest.raises(TerminalClose):
                await client.call("anything", timeout=5)
        assert Bouncer.attempts == 2, "the client came back after a terminal close"


# -- 13. authentication --------------------------------------------------------------------------------------
def token_auth(conn: HTTPConnection) -> Principal | None:
    return Principal(id="ann", tenant="t1") if conn.headers.get("x-token") == "ann-token" else None


async def test_authenticate_refuses_with_4401_and_401_and_its_principal_reaches_the_actor(
    data_dir: Path,
) -> None:
    app = create_app([Whoami], data_dir=data_dir, authenticate=token_auth)
    ann = {"x-token": "ann-token"}
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        async with websockets.connect(f"ws://{addr}/agents/whoami/w1") as ws:
            frame = await recv(ws)
            assert (frame["type"], frame["code"]) == ("error", "unauthenticated")
            assert await close_code(ws) == 4401
        for r in (await http.get("/agents/whoami/w1"), await http.post("/agents/whoami/w1/rpc/who")):
            assert r.status_code == 401
            assert r.headers["content-type"] == "application/json"
            assert r.json()["error"]["code"] == "unauthenticated"
        assert (await http.get("/agents/whoami/w1", headers=ann)).status_code == 404, "a refusal created it"

        async with websockets.connect(f"ws://{addr}/agents/whoami/w1", additional_headers=ann) as ws:
            assert (await recv(ws))["type"] == "welcome"
            assert await recv(ws) == {
                "type": "message",
                "data": {"conn_principal": "ann", "turn_principal": "ann"},
            }
            await ws.send(rpc("1", "who"))
            reply = await recv(ws)
            assert reply["result"] == {"principal": "ann", "caller": "ann"}
        r = await http.post("/agents/whoami/w1/rpc/who", headers=ann)
        assert r.json() == {"ok": True, "result": {"principal": "ann", "caller": None}}


async def test_the_default_allow_all_warns_about_authentication_at_start_up(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def auth_warnings() -> list[logging.LogRecord]:
        return [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and "authentication" in r.getMessage().lower()
        ]

    async with serve_in_process(create_app([Whoami], data_dir=data_dir, authenticate=token_auth)):
        pass
    assert auth_warnings() == [], "warned although a hook was configured"
    async with serve_in_process(create_app([Whoami], data_dir=data_dir)):
        pass
    assert len(auth_warnings()) == 1


async def test_the_app_mounted_in_fastapi_serves_websocket_and_http_under_a_prefix(data_dir: Path) -> None:
    fastapi = pytest.importorskip("fastapi")
    roost = create_app([Whoami], data_dir=data_dir, authenticate=token_auth)
    parent = fastapi.FastAPI()
    parent.mount("/api", roost)
    ann = {"x-token": "ann-token"}
    async with serve_in_process(parent) as addr:
        async with websockets.connect(f"ws://{addr}/api/agents/whoami/f%2F1", additional_headers=ann) as ws:
            welcome = await recv(ws)
            assert welcome["actor"] == {"kind": "whoami", "name": "f/1"}
            await recv(ws)  # on_connect's message
            await ws.send(rpc("1", "who"))
            assert (await recv(ws))["result"] == {"principal": "ann", "caller": "ann"}
        async with httpx.AsyncClient(base_url=f"http://{addr}") as http:
            r = await http.post("/api/agents/whoami/f%2F1/rpc/who", headers=ann)
            assert r.json() == {"ok": True, "result": {"principal": "ann", "caller": None}}
            r = await http.get("/api/agents/whoami/f%2F1", headers=ann)
            assert r.json()["actor"] == {"kind": "whoami", "name": "f/1"}
            assert (await http.post("/api/agents/whoami/f%2F1/rpc/who")).status_code == 401
    await roost.aclose()


# -- 14. slow consumer ---------------------------------------------------------------------------------------
def small_window_socket(addr: str) -> socket.socket:
    """A connected TCP socket with a small receive buffer, so an unread backlog reaches the server."""
    host, port = addr.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    return sock


async def test_a_client_that_does_not_read_is_closed_1013_and_resumes_by_replay(data_dir: Path) -> None:
    total = 500
    app = create_app([Ballast], data_dir=data_dir, send_queue=50)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/ballast/slow"
        sock = small_window_socket(addr)
        async with (
            websockets.connect(url, sock=sock, max_queue=1, compression=None) as slow,
            websockets.connect(url, compression=None) as driver,
        ):
            last = (await recv(slow))["cursor"]
            await recv(driver)
            for i in range(1, total + 1):
                await driver.send(rpc(str(i), "increment"))
                while (frame := await recv(driver))["type"] != "rpc_result":
                    pass
                assert frame == {"type": "rpc_result", "id": str(i), "ok": True, "result": i}
            await driver.send('{"type":"ping","id":"still-here"}')
            while (frame := await recv(driver))["type"] != "pong":
                pass
            # the slow client reads now: what was already on its way, then the close
            backlog, code = await read_until_closed(slow)
            assert code == 1013
            seqs = [f["seq"] for f in backlog]
            assert seqs == list(range(last + 1, last + 1 + len(seqs))), "a gap before the close"
            last += len(seqs)
            assert last < total, "the slow client got everything: it was never slow"

        async with websockets.connect(f"{url}?cursor={last}", compression=None) as again:
            try:
                welcome = await recv(again)
            except websockets.ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                pytest.fail(
                    f"resuming {total - last} frames behind was refused with close {code} before a welcome"
                )
            assert welcome["resume"] == "replay"
            assert welcome["cursor"] == total
            seqs = [(await recv(again))["seq"] for _ in range(total - last)]
            assert seqs == list(range(last + 1, total + 1))


# -- 15. graceful shutdown -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigterm_closes_clients_with_a_transient_code_and_keeps_acknowledged_calls(data_dir: Path) -> None:
    server = ServerProcess(data_dir).start()
    try:
        with connect_sync(f"{server.ws}/agents/counter/graceful", open_timeout=5) as ws:
            assert orjson.loads(ws.recv(timeout=5))["type"] == "welcome"
            ws.send(rpc("1", "increment", 7))
            while (frame := orjson.loads(ws.recv(timeout=5)))["type"] != "rpc_result":
                pass
            assert frame["result"] == 7
            assert server.proc is not None
            os.killpg(server.proc.pid, signal.SIGTERM)
            assert close_code_sync(ws) in (1001, 1012)
        # uvicorn re-raises the signal once its graceful shutdown is done
        assert server.proc.wait(20) in (0, -signal.SIGTERM)
    finally:
        server.kill()
    with server_process(data_dir) as again:
        r = httpx.get(f"{again.http}/agents/counter/graceful", timeout=10)
        assert r.json()["state"] == {"count": 7}


# -- 16. the roost.client command line --------------------------------------------------------------
def run_demo_client(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "roost.client", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.slow
def test_demo_client_command_line_calls_and_exit_codes(data_dir: Path) -> None:
    with server_process(data_dir) as server:
        done = run_demo_client(f"{server.ws}/agents/counter/cli", "--call", "increment", "--count", "3")
        assert done.returncode == 0, done.stderr
        assert [orjson.loads(line) for line in done.stdout.splitlines()] == [
            {"result": 1},
            {"result": 2},
            {"result": 3},
        ]
        refused = run_demo_client(f"{server.ws}/agents/nokind/x", "--call", "get")
        assert refused.returncode == 3, refused.stderr
        assert "4404" in refused.stderr
        assert refused.stdout == ""


async def test_frames_before_the_welcome_are_bounded_and_the_flooder_is_closed_1013(
    data_dir: Path, holder: type[Holder]
) -> None:
    """A client waiting for its welcome (the actor is busy) cannot pile answers into the mailbox:
    past ``max_in_flight`` it is closed with 1013; the busy actor's other client is unaffected."""
    app = create_app([holder], data_dir=data_dir, max_in_flight=10)
    key = ("holder", "busy")
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/holder/busy") as first:
            await recv(first)
            await first.send(rpc("h", "hold", "held"))
            assert holder.entered is not None
            await asyncio.wait_for(holder.entered.wait(), 5)
            async with websockets.connect(f"ws://{addr}/agents/holder/busy") as flood:
                for i in range(200):
                    await flood.send(f'{{"type":"ping","id":{i}}}')
                with pytest.raises(websockets.ConnectionClosed) as closed:  # while the actor is held
                    await drain_frames(flood)
                assert closed.value.rcvd is not None
                assert closed.value.rcvd.code == 1013
                inbox = len(app.registry.hosts[key]._inbox)
                assert inbox <= 20  # the connect, the call, and at most max_in_flight answers
            assert holder.release is not None
            holder.release.set()
            assert (await recv(first))["result"] == "held"
            await first.send(rpc("a", "add"))
            frames = [await recv(first), await recv(first)]  # the state frame and the reply
            assert {"type": "rpc_result", "id": "a", "ok": True, "result": 1} in frames


async def drain_frames(ws: Any) -> None:
    while True:
        await ws.recv()


async def test_nothing_sent_after_a_1009_close_is_acted_on(data_dir: Path) -> None:
    app = create_app([Counter], data_dir=data_dir, max_frame_bytes=1024)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/counter/big", max_size=None) as ws:
            await recv(ws)
            await ws.send("x" * 2048)
            for i in range(50):
                with contextlib.suppress(websockets.ConnectionClosed):
                    await ws.send(rpc(str(i), "increment"))
            with pytest.raises(websockets.ConnectionClosed):
                await drain_frames(ws)
        async with httpx.AsyncClient() as http:
            r = await http.get(f"http://{addr}/agents/counter/big")
            assert r.json()["state"] == {"count": 0}
