"""Frames keep their order around the welcome and behind pings, over a real socket.

- Frames sent from ``on_connect`` arrive after the welcome, and after the replay on a resume.
- Answers to frames a client sent before its welcome follow the welcome, in the order they were sent.
- A ping is a barrier: its pong comes after the replies to every call sent before it; the answer to a
  bad frame is not a barrier.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from roost.actors import Actor, Connection, callable
from roost.client import Client, actor_url
from roost.testing import connect, rpc_frame, until
from roost.transport import create_app
from tests.kinds import Holder
from tests.support import queued_inputs, serve_in_process

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
