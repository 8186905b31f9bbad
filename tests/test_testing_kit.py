"""The testing kit keeps the guarantees its docstrings give (``roost.testing``).

``until`` waits on a condition, bounded; ``WsClient`` over a real socket keeps every frame in order and
bounds every wait; ``RecordingSink`` and ``FaultySink`` record, drop and hold frames as documented;
``fires`` and ``schedule_rows`` read what an actor's wake-ups did from its file.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import websockets
from starlette.applications import Starlette

from roost.actors import RpcError
from roost.examples.kinds import Counter
from roost.scheduler import FakeClock
from roost.testing import (
    ActorKit,
    FaultySink,
    RecordingSink,
    WsClient,
    connect,
    fires,
    open_files,
    open_sockets,
    ping_frame,
    rpc_frame,
    schedule_rows,
    serve,
    until,
)
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.support import ROOT, serve_in_process


# -- until ------------------------------------------------------------------------------------------------
async def test_until_returns_a_condition_that_already_holds_without_yielding() -> None:
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    task = asyncio.create_task(other())
    assert await until(lambda: "value") == "value"
    assert ran == [], "until yielded to the loop although the condition held"
    await task


async def test_until_sees_a_condition_another_task_makes_true() -> None:
    box: list[int] = []

    async def fill() -> None:
        for i in range(3):
            await asyncio.sleep(0)
            box.append(i)

    task = asyncio.create_task(fill())
    assert await until(lambda: len(box) == 3, timeout=5) is True
    await task


async def test_until_awaits_an_async_predicate_and_returns_its_value() -> None:
    calls = 0

    async def check() -> int:
        nonlocal calls
        calls += 1
        return calls if calls >= 3 else 0

    assert await until(check, timeout=5, interval=0.001) == 3


async def test_until_fails_with_an_assertion_error_within_its_bound() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(AssertionError, match=r"never ready within 0\.2 s"):
        await until(lambda: False, timeout=0.2, interval=0.01, message="never ready")
    assert loop.time() - started < 2.0


async def test_until_bounds_an_async_predicate_that_hangs() -> None:
    async def hang() -> bool:
        await asyncio.Event().wait()
        return True

    with pytest.raises(AssertionError, match="hung"):
        await until(hang, timeout=0.1)


def test_roost_testing_imports_without_pytest() -> None:
    code = "import sys, roost.testing; assert 'pytest' not in sys.modules, 'pytest was imported'"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


# -- serve ------------------------------------------------------------------------------------------------
async def test_serve_raises_when_the_app_cannot_start() -> None:
    @contextlib.asynccontextmanager
    async def failing(app: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("cannot start")
        yield

    with pytest.raises(RuntimeError, match="stopped before it started"):
        async with serve(Starlette(lifespan=failing)):
            pytest.fail("the block ran although the server never started")


# -- WsClient --------------------------------------------------------------------------------------------
@pytest.fixture
async def addr(data_dir: Path) -> AsyncIterator[str]:
    async with serve_in_process(create_app([Counter], data_dir=data_dir, limits=NO_RATE_LIMITS)) as a:
        yield a


async def test_ws_client_keeps_every_frame_in_order_and_recv_returns_each_once(addr: str) -> None:
    async with connect(f"ws://{addr}/agents/counter/kit1") as ws:
        welcome = await ws.recv()
        assert welcome["type"] == "welcome"
        assert await ws.call("increment", 2) == 2
        # the state frame of the call came before its reply; recv does not return it again
        assert [f["type"] for f in ws.frames] == ["welcome", "state", "rpc_result"]
        await ws.send(ping_frame("p"))
        assert await ws.recv() == {"type": "pong", "id": "p"}
        state = await ws.wait_for(lambda f: f["type"] == "state")
        assert state == {"type": "state", "seq": 1, "state": {"count": 2}}, "wait_for sees earlier frames"
        assert ws.of_type("pong") == [{"type": "pong", "id": "p"}]


async def test_ws_client_rpc_waits_for_its_own_result_and_call_raises_rpc_error(addr: str) -> None:
    async with connect(f"ws://{addr}/agents/counter/kit2?subscribe=none") as ws:
        await ws.recv()
        await ws.send(rpc_frame("early", "increment", 1))
        reply = await ws.rpc("increment", 10, id="mine")
        assert reply == {"type": "rpc_result", "id": "mine", "ok": True, "result": 11}
        assert ws.frames[1]["id"] == "early", "the earlier reply is kept, not lost"
        with pytest.raises(RpcError) as info:
            await ws.call("no_such_method")
        assert info.value.code == "method_not_found"


async def test_ws_client_bounds_every_wait_and_reports_the_close_code(addr: str) -> None:
    async with connect(f"ws://{addr}/agents/counter/kit3") as ws:
        await ws.recv()
        with pytest.raises(TimeoutError):
            await ws.recv(timeout=0.05)
        with pytest.raises(TimeoutError):
            await ws.wait_for(lambda f: False, timeout=0.05)
    async with connect(f"ws://{addr}/agents/nokind/x") as ws:
        frames, code = await ws.read_until_closed()
        assert code == 4404
        assert [f["type"] for f in frames] == ["error"]
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()


async def test_ws_client_results_are_in_the_order_of_the_ids_whatever_order_they_came_in(addr: str) -> None:
    async with connect(f"ws://{addr}/agents/counter/kit5?subscribe=none") as ws:
        await ws.recv()
        first = await ws.send_rpc("increment", 1)
        second = await ws.send_rpc("increment", 2)
        await ws.recv_n(2)  # both replies already received: results finds them among the earlier frames
        third = await ws.send_rpc("increment", 3)
        replies = await ws.results([third, second, first])
        assert [(f["id"], f["result"]) for f in replies] == [(third, 6), (second, 3), (first, 1)]
        assert await ws.results([]) == []
        with pytest.raises(TimeoutError):
            await ws.results(["never sent"], timeout=0.05)


async def test_ws_client_sends_bytes_as_a_binary_message(addr: str) -> None:
    async with connect(f"ws://{addr}/agents/counter/kit6") as ws:
        await ws.recv()
        await ws.send(b'{"type":"ping","id":1}')
        assert (await ws.recv())["code"] == "bad_frame", "a binary message is not a frame"
        await ws.send('{"type":"ping","id":2}')
        assert await ws.recv() == {"type": "pong", "id": 2}


async def test_ws_client_wraps_an_open_websockets_connection(addr: str) -> None:
    async with websockets.connect(f"ws://{addr}/agents/counter/kit4") as raw:
        ws = WsClient(raw)
        assert (await ws.recv())["type"] == "welcome"
        assert await ws.call("increment") == 1


# -- descriptors ------------------------------------------------------------------------------------------
def test_open_files_names_a_file_while_it_is_open_and_not_after(tmp_path: Path) -> None:
    path = (tmp_path / "f.txt").resolve()
    with path.open("w"):
        assert str(path) in open_files()
    assert str(path) not in open_files()


async def test_open_sockets_shows_the_server_in_this_process_letting_go_of_a_connection(addr: str) -> None:
    before = open_sockets()
    async with connect(f"ws://{addr}/agents/counter/kit7") as ws:
        await ws.recv()
        during = open_sockets()
        assert len(during - before) == 2, "the client's end and the server's end"
    await until(lambda: open_sockets() <= before, message="the server closed its end")


# -- sinks ----------------------------------------------------------------------------------------------
def test_a_recording_sink_records_nothing_after_its_close_and_keeps_the_first_close() -> None:
    sink = RecordingSink()
    sink.send_text('{"type":"state","seq":1}')
    sink.close(1000, "bye")
    sink.send_text('{"type":"state","seq":2}')
    sink.close(1011, "again")
    assert sink.frames == [{"type": "state", "seq": 1}]
    assert sink.closed == (1000, "bye")


def test_a_faulty_sink_drops_and_holds_frames_but_never_a_close() -> None:
    sink = FaultySink()
    with sink.dropping():
        sink.send_text('{"n":1}')
    with sink.holding():
        sink.send_text('{"n":2}')
        sink.send_text('{"n":3}')
        assert sink.frames == []
    sink.send_text('{"n":4}')
    with sink.dropping():
        sink.close(1001, "going away")
    assert sink.dropped == 1
    assert sink.frames == [{"n": 2}, {"n": 3}, {"n": 4}], "held frames come first, in order"
    assert sink.closed == (1001, "going away")


async def test_a_frame_the_network_dropped_is_replayed_when_the_client_resumes(tmp_path: Path) -> None:
    async with ActorKit([Counter], tmp_path / "data") as kit:
        sink = FaultySink()
        c = kit.connect("counter", "lossy", sink=sink)
        await c.wait_for(lambda f: f["type"] == "welcome")
        with sink.dropping():
            await kit.call("counter", "lossy", "increment", 5)
            await kit.settle()
        assert sink.dropped == 1
        assert c.sink.of_type("state") == []
        again = kit.connect("counter", "lossy", cursor=0)
        welcome = await again.wait_for(lambda f: f["type"] == "welcome")
        assert welcome["resume"] == "replay"
        assert await again.wait_for(lambda f: f["type"] == "state") == {
            "type": "state",
            "seq": 1,
            "state": {"count": 5},
        }


# -- files ---------------------------------------------------------------------------------------------
async def test_fires_and_schedule_rows_show_one_completed_fire_per_due_time(tmp_path: Path) -> None:
    data = tmp_path / "data"
    clock = FakeClock(1_000_000.0)
    async with ActorKit([Counter], data, clock=clock) as kit:
        sid = await kit.call("counter", "f1", "increment_later", 10)
        with pytest.raises(sqlite3.OperationalError):
            fires(data, "counter", "f1")  # the actor is open: refused, not read stale
        assert await kit.fire_due("counter", "f1") == 0, "fired before its time"
        clock.advance(11)
        await kit.fire_due("counter", "f1")  # 1, or 0 if the dispatcher was first
        assert await kit.call("counter", "f1", "schedules") == []
    (fire,) = fires(data, "counter", "f1")
    assert (fire.schedule_id, fire.nominal) == (sid, 1_000_010.0)
    (row,) = schedule_rows(data, "counter", "f1")
    assert (row.id, row.status, row.runs) == (sid, "done", 1)
    with pytest.raises(FileNotFoundError):
        fires(data, "counter", "never")
