"""Crash tests against a real server process killed with SIGKILL (guarantees 1 and 3)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import orjson
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.support import ServerProcess, get_json, server_process

pytestmark = pytest.mark.slow


async def test_output_gate_survives_sigkill(data_dir: Path) -> None:
    """10 connections send 1,000 increments in all; the server is SIGKILLed mid-stream and restarted on
    the same data directory, and the connections carry on. Afterwards the count is at least every
    acknowledged call and at most every sent one, and no value or state frame a client saw is lost."""
    total, conns, kill_after = 1000, 10, 300
    stats = {"sent": 0, "acked": 0, "max_acked_value": 0, "max_seen_seq": 0, "lost_in_flight": 0}
    killed = asyncio.Event()
    restarted = asyncio.Event()
    servers = [ServerProcess(data_dir).start()]
    ids = itertools.count()
    failures: list[dict[str, object]] = []  # asserted at the end: a reader task cannot fail the test

    async def run_one(ws: ClientConnection, quota: int) -> int:
        """Send up to ``quota`` calls (8 in flight); return how many were acknowledged."""
        window = asyncio.Semaphore(8)
        done = 0

        async def reader() -> None:
            nonlocal done
            try:
                async for raw in ws:
                    frame = orjson.loads(raw)
                    if frame["type"] == "rpc_result":
                        if not frame["ok"]:
                            failures.append(frame)
                        done += 1
                        stats["acked"] += 1
                        stats["max_acked_value"] = max(stats["max_acked_value"], frame["result"])
                        window.release()
                        if stats["acked"] >= kill_after and not killed.is_set():
                            killed.set()
                            servers[0].kill()
                    elif frame["type"] == "state":
                        stats["max_seen_seq"] = max(stats["max_seen_seq"], frame["seq"])
            finally:  # the socket is gone: unblock the sender
                for _ in range(quota):
                    window.release()

        read_task = asyncio.create_task(reader())
        sent_here = 0
        try:
            while sent_here < quota:
                await window.acquire()
                if read_task.done():
                    break
                msg = {"type": "rpc", "id": str(next(ids)), "method": "increment", "args": [1]}
                await ws.send(orjson.dumps(msg).decode())
                sent_here += 1
                stats["sent"] += 1
            while done < sent_here and not read_task.done():
                await window.acquire()
        except websockets.ConnectionClosed:
            pass
        finally:
            read_task.cancel()
            await asyncio.gather(read_task, return_exceptions=True)
        # calls sent but never answered: applied or not, the client cannot know
        stats["lost_in_flight"] += sent_here - done
        return sent_here

    async def worker(quota: int) -> None:
        while quota > 0:
            server = servers[-1]
            async with websockets.connect(f"{server.ws}/agents/counter/crash", compression=None) as ws:
                await ws.recv()  # welcome
                quota -= await run_one(ws, quota)
            if quota > 0:
                await restarted.wait()

    async def restarter() -> None:
        await killed.wait()
        servers.append(ServerProcess(data_dir).start())
        restarted.set()

    try:
        async with asyncio.timeout(90):
            await asyncio.gather(restarter(), *(worker(total // conns) for _ in range(conns)))
        assert killed.is_set(), "the server was never killed: the test proved nothing"
        snap = await get_json(f"{servers[-1].http}/agents/counter/crash")
    finally:
        for server in servers:
            server.kill()
    count = snap["state"]["count"]
    print(
        f"\ncrash test: sent={stats['sent']} acknowledged={stats['acked']} recovered={count} "
        f"(unanswered when killed: {stats['lost_in_flight']})"
    )
    assert stats["sent"] == total
    assert failures == [], "a call failed while the server was up"
    assert stats["acked"] <= count <= stats["sent"]
    assert stats["max_acked_value"] <= count, "a value a client saw was taken back by the crash"
    assert stats["max_seen_seq"] <= snap["cursor"], "a state frame a client saw was taken back"


async def test_second_process_cannot_activate_a_live_actor(data_dir: Path) -> None:
    """Guarantee 1 across processes: while process A holds an actor, process B refuses it with
    close 1013 (try again later) and serves every other actor; once A is gone, B can serve it."""
    with server_process(data_dir) as a, server_process(data_dir) as b:
        async with websockets.connect(f"{a.ws}/agents/counter/shared") as ws_a:
            assert orjson.loads(await ws_a.recv())["type"] == "welcome"
            async with websockets.connect(f"{b.ws}/agents/counter/shared") as ws_b:
                frame = orjson.loads(await ws_b.recv())
                assert frame == {
                    "type": "error",
                    "code": "actor_unavailable",
                    "message": frame["message"],
                }
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await ws_b.recv()
                assert closed.value.rcvd is not None
                assert closed.value.rcvd.code == 1013
            async with websockets.connect(f"{b.ws}/agents/counter/other") as ws_other:
                assert orjson.loads(await ws_other.recv())["type"] == "welcome"
        a.kill()  # SIGKILL: the OS releases the file lock
        async with websockets.connect(f"{b.ws}/agents/counter/shared") as ws_b:
            assert orjson.loads(await ws_b.recv())["type"] == "welcome"
