"""Everything a client can pile up on the server is bounded, and the bound answers at once.

- Calls beyond ``max_in_flight`` on one connection are refused with ``overloaded`` at once (not behind
  the busy turn); the calls within the bound succeed.
- A full mailbox refuses calls (``Overloaded``) but still accepts a disconnect.
- A client waiting for its welcome cannot pile answers into the mailbox: past ``max_in_flight`` it is
  closed with 1013 while the actor's other client is served.
- An HTTP body over ``max_frame_bytes`` is refused with 413, with or without a ``content-length``.
- Nothing a client sends after a frame over the limit (close 1009) is acted on.
- A client that does not read is closed with 1013 once its send queue is full, and resumes by replay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from roost.actors import Actor, callable
from roost.actors.errors import Overloaded
from roost.examples.kinds import Counter
from roost.testing import ActorKit, connect, rpc_frame, until
from roost.transport import create_app
from tests.kinds import Holder
from tests.support import queued_inputs, serve_in_process, small_window_socket

Frame = dict[str, Any]


class Ballast(Actor):
    """A counter whose state frames are 8 KB, so that a reader that stops reading backs up quickly."""

    kind = "ballast"
    initial_state = {"count": 0, "pad": ""}

    @callable
    def increment(self) -> int:
        n: int = self.state["count"] + 1
        self.set_state({"count": n, "pad": "x" * 8000})
        return n


class Shouter(Actor):
    """Broadcasts big messages (not logged): the send queue, not the log, is what holds them."""

    kind = "shouter"

    @callable
    def shout(self, size: int) -> int:
        return self.broadcast({"blob": "y" * size})


# -- per connection and per mailbox ---------------------------------------------------------------------
async def test_calls_beyond_the_in_flight_bound_are_refused_promptly_and_the_rest_succeed(
    data_dir: Path, holder: type[Holder]
) -> None:
    app = create_app([holder], data_dir=data_dir, max_in_flight=4)
    key = ("holder", "in-flight")
    assert holder.entered is not None
    assert holder.release is not None
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/holder/in-flight?subscribe=none"
        async with connect(url) as other, connect(url) as ws:
            await other.recv()
            welcome = await ws.recv()
            await other.send(rpc_frame("b", "hold", "other"))  # the actor is busy from now on
            await asyncio.wait_for(holder.entered.wait(), 5)
            for i in range(1, 7):
                await ws.send(rpc_frame(f"a{i}", "add"))
            conn = app.registry.hosts[key].connections[welcome["connection_id"]]
            await until(lambda: conn.in_flight == 4)
            early: list[Frame] = []
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    while len(early) < 2:
                        early.append(await ws.recv())
            holder.release.set()
            late = await ws.recv_n(6 - len(early))
            other_result = await other.recv()
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


async def test_frames_before_the_welcome_are_bounded_and_the_flooder_is_closed_1013(
    data_dir: Path, holder: type[Holder]
) -> None:
    """A client waiting for its welcome (the actor is busy) cannot pile answers into the mailbox:
    past ``max_in_flight`` it is closed with 1013; the busy actor's other client is unaffected."""
    app = create_app([holder], data_dir=data_dir, max_in_flight=10)
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/holder/busy") as first:
            await first.recv()
            await first.send(rpc_frame("h", "hold", "held"))
            assert holder.entered is not None
            await asyncio.wait_for(holder.entered.wait(), 5)
            async with connect(f"ws://{addr}/agents/holder/busy") as flood:
                for i in range(200):
                    await flood.send(f'{{"type":"ping","id":{i}}}')
                frames, code = await flood.read_until_closed()  # while the actor is held
                assert frames == [], "an answer left before the welcome"
                assert code == 1013
                # the connect, the call, and at most max_in_flight answers
                assert queued_inputs(app, "holder", "busy") <= 20
            assert holder.release is not None
            holder.release.set()
            assert (await first.recv())["result"] == "held"
            await first.send(rpc_frame("a", "add"))
            frames = [await first.recv(), await first.recv()]  # the state frame and the reply
            assert {"type": "rpc_result", "id": "a", "ok": True, "result": 1} in frames


# -- frame and body size ---------------------------------------------------------------------------------
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


async def test_nothing_sent_after_a_1009_close_is_acted_on(data_dir: Path) -> None:
    app = create_app([Counter], data_dir=data_dir, max_frame_bytes=1024)
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/counter/big", max_size=None) as ws:
            await ws.recv()
            await ws.send("x" * 2048)
            for i in range(50):
                with contextlib.suppress(websockets.ConnectionClosed):
                    await ws.send(rpc_frame(str(i), "increment"))
            _, code = await ws.read_until_closed()
            assert code == 1009
        async with httpx.AsyncClient() as http:
            r = await http.get(f"http://{addr}/agents/counter/big")
            assert r.json()["state"] == {"count": 0}


# -- a client that does not read --------------------------------------------------------------------------
async def test_a_client_that_does_not_read_is_closed_1013_and_resumes_by_replay(data_dir: Path) -> None:
    total = 500
    app = create_app([Ballast], data_dir=data_dir, send_queue=50)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/ballast/slow"
        sock = small_window_socket(addr)
        async with (
            connect(url, sock=sock, max_queue=1, compression=None) as slow,
            connect(url, compression=None) as driver,
        ):
            last = (await slow.recv())["cursor"]
            await driver.recv()
            for i in range(1, total + 1):
                frame = await driver.rpc("increment", id=str(i))
                assert frame == {"type": "rpc_result", "id": str(i), "ok": True, "result": i}
            await driver.send('{"type":"ping","id":"still-here"}')
            await driver.wait_for(lambda f: f["type"] == "pong")
            # the slow client reads now: what was already on its way, then the close
            backlog, code = await slow.read_until_closed()
            assert code == 1013
            seqs = [f["seq"] for f in backlog]
            assert seqs == list(range(last + 1, last + 1 + len(seqs))), "a gap before the close"
            last += len(seqs)
            assert last < total, "the slow client got everything: it was never slow"

        async with connect(f"{url}?cursor={last}", compression=None) as again:
            try:
                welcome = await again.recv()
            except websockets.ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                pytest.fail(
                    f"resuming {total - last} frames behind was refused with close {code} before a welcome"
                )
            assert welcome["resume"] == "replay"
            assert welcome["cursor"] == total
            seqs = [(await again.recv())["seq"] for _ in range(total - last)]
            assert seqs == list(range(last + 1, total + 1))


async def test_a_slow_consumer_is_closed_1013_by_the_byte_bound_and_its_queue_never_holds_more(
    data_dir: Path,
) -> None:
    """Big broadcasts to a member that does not read: the frame count stays far under ``send_queue``,
    but past ``send_queue_bytes`` of waiting frames the member is closed with 1013; the bytes waiting
    for it never exceed the bound (plus the one frame that crossed it), and the others go on."""
    bound, size = 1 << 20, 100_000
    app = create_app([Shouter], data_dir=data_dir, send_queue=1024, send_queue_bytes=bound)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/shouter/room"
        sock = small_window_socket(addr)
        async with (
            connect(url, sock=sock, max_queue=1, max_size=None, compression=None) as slow,
            connect(f"{url}?subscribe=none", compression=None) as driver,
        ):
            await slow.recv()
            await driver.recv()
            peak = 0
            for i in range(1, 200):
                frame = await driver.rpc("shout", size, id=str(i))
                assert frame["ok"], frame
                peak = max([peak, *(sink.queued_bytes for sink in app.sinks)])
                if len(app.sinks) < 2 or any(sink.closing for sink in app.sinks):  # closed, or gone
                    break
            else:
                pytest.fail("the slow member was never closed")
            assert peak <= bound + size + 1000
            # it reads again: what was already on its way, then the close
            _, code = await slow.read_until_closed()
            assert code == 1013
            assert (await driver.rpc("shout", 10, id="after"))["ok"]
