"""The core over real sockets on 127.0.0.1: activation, dormancy, hostile names, bad frames, HTTP."""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import httpx
import pytest
import websockets
from starlette.applications import Starlette
from starlette.routing import Mount

from roost.actors import Actor, Connection, callable
from roost.examples.kinds import KINDS, Counter
from roost.scheduler import FakeClock
from roost.storage import actor_path
from roost.testing import connect, open_files, until
from roost.transport import RoostApp, create_app
from roost.transport.sink import SocketSink
from tests.support import serve_in_process


class Probe(Actor):
    kind = "probe"
    initial_state = {"n": 0}
    starts: ClassVar[int] = 0

    def on_start(self) -> None:
        type(self).starts += 1

    @callable
    def bump(self) -> int:
        self.set_state({"n": self.state["n"] + 1})
        n: int = self.state["n"]
        return n


async def test_single_activation_under_100_concurrent_first_connections(data_dir: Path) -> None:
    """Guarantee 1: 100 concurrent first connections to one new name activate it exactly once."""
    Probe.starts = 0
    app = create_app([Probe], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/probe/{quote('fresh one', safe='')}"

        async def one(i: int) -> int:
            async with connect(url) as ws:
                welcome = await ws.recv()
                assert welcome["type"] == "welcome"
                result = await ws.rpc("bump", id=str(i))
                assert result["ok"]
                n: int = result["result"]
                return n

        results = await asyncio.gather(*(one(i) for i in range(100)))
        assert Probe.starts == 1
        assert app.registry.activations == 1
        assert sorted(results) == list(range(1, 101)), "every call applied once, in some order"


async def test_dormancy_closes_the_file_and_the_next_call_wakes_it(data_dir: Path) -> None:
    """After the idle time the actor is out of memory and its file closed; the next call wakes it with
    its state intact. Time is a fake clock: no test waits for a timer."""
    clock = FakeClock()
    app = create_app(KINDS, data_dir=data_dir, clock=clock)
    app.configure(idle_timeout=30.0, sweep_interval=1.0)
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/counter/sleepy") as ws:
            await ws.recv()
            assert (await ws.rpc("increment", 5, id="1"))["result"] == 5
        key = ("counter", "sleepy")
        host = app.registry.hosts[key]
        path = host.file.path
        await until(lambda: not host.connections)  # the close reached the actor
        assert str(path) in open_files()
        sweeps = app.registry.sweeps
        clock.advance(20.0)  # not idle long enough yet
        await until(lambda: app.registry.sweeps > sweeps)  # the sweeper ran (and sleeps again)
        assert key in app.registry.hosts
        clock.advance(11.0)
        await until(lambda: key not in app.registry.hosts)
        assert host.file.closed
        # released in a thread, off the loop: a bounded wait for it
        await until(lambda: str(path) not in open_files(), timeout=5, interval=0.001)
        assert str(path) not in open_files()
        assert str(path) + "-wal" not in open_files()
        async with httpx.AsyncClient() as http:
            r = await http.post(f"http://{addr}/agents/counter/sleepy/rpc/increment", json=[1])
        assert r.json() == {"ok": True, "result": 6}
        assert key in app.registry.hosts
        assert app.registry.hosts[key] is not host


async def test_an_actor_with_an_open_connection_never_sleeps(data_dir: Path) -> None:
    clock = FakeClock()
    app = create_app(KINDS, data_dir=data_dir, clock=clock)
    app.configure(idle_timeout=1.0, sweep_interval=0.5)
    async with serve_in_process(app) as addr, connect(f"ws://{addr}/agents/counter/w") as ws:
        await ws.recv()
        await until(lambda: ("counter", "w") in app.registry.hosts and clock.sleepers > 0)

        async def an_idle_timeout_goes_by() -> None:
            sweeps = app.registry.sweeps
            clock.advance(1.0)
            await until(lambda: app.registry.sweeps > sweeps)  # the sweeper ran (and sleeps again)

        for _ in range(10):
            await an_idle_timeout_goes_by()
        assert app.registry.sweep() == 0
        assert ("counter", "w") in app.registry.hosts
        assert (await ws.rpc("increment", id="1"))["result"] == 1


HOSTILE_SERVED = ["../../etc/passwd", "a/b", "..", ".", "日本語/..", "x" * 256]


def segment(name: str) -> str:
    """Percent-encode a name as one path segment, dots included (HTTP clients normalise ``..``)."""
    return quote(name, safe="").replace(".", "%2E")


def all_inside(paths: set[Path], root: Path) -> bool:
    top = root.resolve()
    assert not os.path.exists("/etc/passwd.sqlite")
    return all(p.resolve().is_relative_to(top) for p in paths)


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", HOSTILE_SERVED, ids=repr)
async def test_hostile_names_are_served_inside_the_data_directory(
    tmp_path: Path, data_dir: Path, name: str
) -> None:
    """Names are addresses, never paths: each hostile name is an ordinary actor whose file lies inside
    the data directory, and nothing is created anywhere else."""
    before = files_under(tmp_path)
    app = create_app(KINDS, data_dir=data_dir)
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/counter/{segment(name)}") as ws:
            welcome = await ws.recv()
            assert welcome["type"] == "welcome"
            assert welcome["actor"] == {"kind": "counter", "name": name}
            assert (await ws.rpc("increment", 2, id="1"))["result"] == 2
        async with httpx.AsyncClient() as http:
            r = await http.get(f"http://{addr}/agents/counter/{segment(name)}")
        assert r.json()["state"] == {"count": 2}
        assert r.json()["actor"]["name"] == name
    created = files_under(tmp_path) - before
    assert created, "the actor was stored somewhere"
    assert all_inside(created, data_dir)


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/agents/counter/" + "x" * 10_240, 4400),  # 10 KB name
        ("/agents/counter/" + quote("y" * 257), 4400),
        ("/agents/counter/%FF%FE", 4400),  # not UTF-8
        ("/agents/counter/../../etc/passwd", 4400),  # not one segment
        ("/agents/counter/a/b", 4400),
        ("/agents/counter/%00", 4400),  # NUL separates a tenant from a name: never from a client
        ("/agents/counter/a%00b", 4400),
        ("/agents/Counter/x", 4404),
        ("/agents/counter/x?cursor=-1", 4400),
        ("/agents/counter/x?subscribe=bogus", 4400),
    ],
)
async def test_bad_addresses_are_refused_with_a_close_code_and_touch_nothing(
    tmp_path: Path, data_dir: Path, path: str, code: int
) -> None:
    app = create_app(KINDS, data_dir=data_dir)
    async with serve_in_process(app) as addr:
        before = files_under(tmp_path)
        async with connect(f"ws://{addr}{path}", max_size=None) as ws:
            frame = await ws.recv()
            assert frame["type"] == "error"
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == code
        assert files_under(tmp_path) == before, "a refused address created files"
        async with connect(f"ws://{addr}/agents/counter/fine") as ws:
            assert (await ws.recv())["type"] == "welcome", "the server keeps serving others"


async def test_bad_frames_get_error_frames_and_the_connection_goes_on(server: str) -> None:
    """Guarantee 9: each bad frame gets an error frame; the socket stays usable; others unaffected."""
    url = f"ws://{server}/agents/counter/frames"
    async with connect(url) as ws, connect(url) as other:
        await ws.recv()
        await other.recv()
        bad_frames: list[tuple[str | bytes, str]] = [
            ("not json", "bad_frame"),
            ("[1,2]", "bad_frame"),
            ('{"type":"nope"}', "unknown_type"),
            ('{"no":"type"}', "unknown_type"),
            ('{"type":"rpc","id":1,"method":"increment"}', "bad_frame"),
            ('{"type":"rpc","id":"1","method":"increment","args":{}}', "bad_frame"),
            (b"\x00\x01binary", "bad_frame"),
        ]
        for bad, code in bad_frames:
            await ws.send(bad)
            frame = await ws.recv()
            assert (frame["type"], frame["code"]) == ("error", code), (bad, frame)
        bad_calls: list[tuple[str, list[Any], str]] = [
            ("nope", [], "method_not_found"),
            ("_create", [], "method_not_found"),
            ("__init__", [], "method_not_found"),
            ("increment", [1, 2, 3], "invalid_arguments"),
            ("increment", ["x"], "invalid_arguments"),
        ]
        for method, args, code in bad_calls:
            frame = await ws.rpc(method, *args, id=method)
            assert (frame["ok"], frame["error"]["code"]) == (False, code), (method, frame)
        assert (await ws.rpc("increment", id="ok"))["result"] == 1
        assert (await other.rpc("get", id="ok"))["result"] == 1


async def test_an_oversized_frame_closes_with_1009(server: str) -> None:
    async with connect(f"ws://{server}/agents/counter/big", max_size=None) as ws:
        await ws.recv()
        await ws.send('{"type":"message","data":"' + "x" * (1 << 20) + '"}')
        assert await ws.close_code() == 1009
    async with connect(f"ws://{server}/agents/counter/big") as ws:
        assert (await ws.recv())["type"] == "welcome"


async def test_a_connection_that_opts_out_gets_only_its_own_replies(server: str) -> None:
    """``subscribe=none``: every frame after the welcome is a reply to this connection's own frames."""
    base = f"ws://{server}/agents/counter/optout"
    async with connect(base) as watcher, connect(f"{base}?subscribe=none") as quiet:
        await watcher.recv()
        await quiet.recv()
        for i in (1, 2):
            await quiet.send({"type": "rpc", "id": f"q{i}", "method": "increment"})
        await quiet.send('{"type":"ping","id":7}')
        frames = await quiet.recv_n(3)
        assert frames == [
            {"type": "rpc_result", "id": "q1", "ok": True, "result": 1},
            {"type": "rpc_result", "id": "q2", "ok": True, "result": 2},
            {"type": "pong", "id": 7},
        ], "only the replies, and the pong after them"
        seen = await watcher.recv_n(2)
        assert [(f["type"], f["seq"]) for f in seen] == [("state", 1), ("state", 2)]


async def test_an_ended_connection_is_freed_when_it_ends(app: RoostApp, server: str) -> None:
    """``SocketSink.finish``: once a connection has ended, its sink and its ``Connection`` are freed by
    reference counting, with the cycle collector off: none of them waits in a reference cycle for a
    collection (which, with many actors live, pauses every stream of the loop)."""

    def ours() -> int:
        return sum(1 for o in gc.get_objects() if type(o) in (SocketSink, Connection))

    url = f"ws://{server}/agents/counter/freed"
    async with connect(url) as ws:  # the actor's activation and what stays with it
        await ws.recv()
    await until(lambda: not app.sinks)
    gc.collect()
    gc.disable()
    try:
        before = ours()
        for _ in range(5):
            async with connect(url) as ws:
                await ws.recv()
        await until(lambda: ours() == before, message="an ended connection's objects were not freed")
    finally:
        gc.enable()


async def test_http_endpoints(server: str) -> None:
    base = f"http://{server}"
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{base}/agents/counter/h")).status_code == 404
        r = await http.post(f"{base}/agents/counter/h/rpc/increment", json=[3])
        assert r.status_code == 200
        assert r.json() == {"ok": True, "result": 3}
        r = await http.post(f"{base}/agents/counter/h/rpc/increment", json={"by": 2})
        assert r.json() == {"ok": True, "result": 5}
        r = await http.post(f"{base}/agents/counter/h/rpc/get")
        assert r.json() == {"ok": True, "result": 5}
        r = await http.post(f"{base}/agents/counter/h/rpc/count_to", json=[2])
        assert r.json() == {"ok": True, "result": None, "chunks": [6, 7]}
        r = await http.get(f"{base}/agents/counter/h")
        assert r.json() == {"actor": {"kind": "counter", "name": "h"}, "state": {"count": 7}, "cursor": 4}
        for url, body, status, code in [
            (f"{base}/agents/counter/h/rpc/nope", b"", 404, "method_not_found"),
            (f"{base}/agents/counter/h/rpc/increment", b"[1,2,3]", 400, "invalid_arguments"),
            (f"{base}/agents/counter/h/rpc/increment", b"{bad", 400, "bad_frame"),
            (f"{base}/agents/counter/h/rpc/increment", b"7", 400, "bad_frame"),
            (f"{base}/agents/nokind/h/rpc/get", b"", 404, "unknown_kind"),
        ]:
            r = await http.post(url, content=body)
            assert (r.status_code, r.json()["error"]["code"]) == (status, code), url
        health = (await http.get(f"{base}/healthz")).json()
        assert health["ok"] is True
        assert health["protocol"] == 1
        assert health["active_actors"] >= 1


async def test_a_read_only_http_call_to_an_actor_never_created_answers_404_and_creates_nothing(
    app: RoostApp, server: str, data_dir: Path
) -> None:
    """``POST …/rpc/get`` (``@callable(readonly=True)``) creates no actor, as ``GET /agents/…`` does not:
    no file, no directory row (so nothing shows in ``roost ls``). A call that is not read-only creates it."""
    directory = app.registry.directory
    assert directory is not None
    path = actor_path(data_dir, "counter", "never2")
    async with httpx.AsyncClient(base_url=f"http://{server}") as http:
        r = await http.post("/agents/counter/never2/rpc/get")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "not_found"
        assert "never2" in r.json()["error"]["message"]
        assert not path.exists()
        assert directory.get("counter", "never2") is None
        assert not app.registry.exists("counter", "never2")

        r = await http.post("/agents/counter/never2/rpc/increment")
        assert r.json() == {"ok": True, "result": 1}
        assert path.exists()
        assert directory.get("counter", "never2") is not None
        r = await http.post("/agents/counter/never2/rpc/get")
        assert r.json() == {"ok": True, "result": 1}, "once it exists, a read-only call is answered"


async def test_the_app_mounts_inside_another_asgi_app(data_dir: Path) -> None:
    """Mounted under a prefix in a parent app that does not forward lifespan events, the runtime
    starts on the first request and serves WebSocket and HTTP."""
    roost = create_app([Counter], data_dir=data_dir)
    parent = Starlette(routes=[Mount("/roost", app=roost)])
    async with serve_in_process(parent) as addr:
        async with connect(f"ws://{addr}/roost/agents/counter/{quote('m/1', safe='')}") as ws:
            welcome = await ws.recv()
            assert welcome["actor"] == {"kind": "counter", "name": "m/1"}
            assert (await ws.rpc("increment", id="1"))["result"] == 1
        async with httpx.AsyncClient() as http:
            r = await http.get(f"http://{addr}/roost/agents/counter/m%2F1")
            assert r.json()["state"] == {"count": 1}
        await roost.aclose()
