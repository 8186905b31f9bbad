"""A client that never reads is disconnected (issue 13, point 5), in a real ``roost serve`` process.

The slow client is a raw socket with a small receive buffer that completes the WebSocket handshake
and then never reads (:func:`tests.support.silent_websocket`), so the server's writes really block.
Run both ways: ``ROOST_FAST_PATHS=0`` serves the connections the ASGI way.

- **Past the send bound a member is removed from its actor at once**: its ``on_close`` runs (the
  room's member count drops), it leaves ``/healthz``'s connections and its connection slot is free
  for a new client, well before the close timeout (here two minutes) could have dropped it.
- **A client that does not take its close is aborted after the close timeout**: the ``1013`` close
  is written behind what the socket holds; when the client has not taken it within the close timeout
  (``--handshake-timeout``), the server resets the TCP connection and its descriptor is free.
- **A client that misses its pong while bytes wait for it is reset**, below the send bound too.
- **A stream whose connection is gone stops at its next chunk** (in-process, on a clock the test
  alone moves, so ``turn_timeout`` never cuts it): whether its client left after the first chunk or
  never read and was closed past the send bound, the stream's turn ends (the actor answers the next
  call, one turn at a time), what its chunks committed stays, and nothing more is counted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets
from websockets.frames import Frame, Opcode

from roost.actors import RuntimeConfig
from roost.examples.kinds import KINDS
from roost.scheduler import FakeClock
from roost.testing import connect, rpc_frame, until
from roost.transport import RoostApp, create_app
from tests.conftest import NO_RATE_LIMITS
from tests.support import TCP_CLOSE, ServerProcess, serve_in_process, silent_websocket, tcp_state

BLOB = "x" * 900_000  # one broadcast; the default send bound (4 MiB) holds four
ENDLESS = 10**9  # a stream never reached the end of: only its connection's end stops it


@contextlib.contextmanager
def serving(data: Path, *args: str) -> Iterator[ServerProcess]:
    server = ServerProcess(data, "--rate-limit", "0", "--principal-rate-limit", "0", *args).start()
    try:
        yield server
    finally:
        server.kill()


async def members(http: httpx.AsyncClient) -> tuple[int, int]:
    """The room's own count of its connections (``on_connect``/``on_close``) and the server's."""
    room = (await http.get("/agents/room/r1")).json()["state"]["members"]
    return room, (await http.get("/healthz")).json()["connections"]


async def test_past_the_send_bound_a_member_is_removed_from_its_actor_at_once(tmp_path: Path) -> None:
    """No keepalive pings (they would drop it too, :func:`test_a_client_that_misses_its_pong_...`)."""
    args = ("--ping-interval", "0", "--handshake-timeout", "120", "--max-conns-per-actor", "2")
    with serving(tmp_path, *args) as server:
        silent = await silent_websocket(server.addr, "/agents/room/r1")
        try:
            async with (
                httpx.AsyncClient(base_url=server.http, timeout=30) as http,
                connect(f"{server.ws}/agents/room/r1", max_size=None) as talker,
            ):
                await talker.recv()
                assert await members(http) == (2, 2)
                for _ in range(60):  # 54 MB for a member that takes nothing
                    await talker.send({"type": "message", "data": BLOB})

                async def removed() -> bool:
                    return await members(http) == (1, 1)

                await until(
                    removed, timeout=60, interval=0.2, message="the member that never reads is counted"
                )
                async with connect(f"{server.ws}/agents/room/r1") as newcomer:  # its slot is free
                    assert (await newcomer.recv())["type"] == "welcome"
                assert tcp_state(silent) != TCP_CLOSE, "the close timeout is two minutes: not reset yet"
        finally:
            silent.close()


async def test_a_client_that_does_not_take_its_close_is_aborted_after_the_close_timeout(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--ping-interval", "0", "--handshake-timeout", "2") as server:
        silent = await silent_websocket(server.addr, "/agents/room/r1")
        try:
            async with connect(f"{server.ws}/agents/room/r1", max_size=None) as talker:
                await talker.recv()
                for _ in range(60):
                    await talker.send({"type": "message", "data": BLOB})
                await until(
                    lambda: tcp_state(silent) == TCP_CLOSE,
                    timeout=60,
                    interval=0.2,
                    message="the server never dropped the client that does not read",
                )
        finally:
            silent.close()


async def test_a_client_that_misses_its_pong_while_bytes_wait_for_it_is_reset(tmp_path: Path) -> None:
    """Below the send bound (64 MiB here: nothing closes it for reading slowly), with a ping every
    second: 36 MB wait for it, more than the kernel takes, so the ping waits behind bytes the client
    does not take and no pong comes back; the keepalive timeout resets the connection (a plain close
    would wait for those bytes for ever) and the actor loses it."""
    args = ("--ping-interval", "1", "--handshake-timeout", "120")
    server = ServerProcess(tmp_path, "--rate-limit", "0", *args, app="tests.apps:roomy").start()
    try:
        silent = await silent_websocket(server.addr, "/agents/room/r1")
        try:
            async with (
                httpx.AsyncClient(base_url=server.http, timeout=30) as http,
                connect(f"{server.ws}/agents/room/r1", max_size=None) as talker,
            ):
                await talker.recv()
                for _ in range(40):
                    await talker.send({"type": "message", "data": BLOB})
                await until(
                    lambda: tcp_state(silent) == TCP_CLOSE,
                    timeout=60,
                    interval=0.2,
                    message="the client that missed its pong was never dropped",
                )

                async def removed() -> bool:
                    return await members(http) == (1, 1)

                await until(removed, timeout=30, interval=0.2, message="the dropped member is counted")
        finally:
            silent.close()
    finally:
        server.kill()


def masked_text(text: str) -> bytes:
    """A client's text frame, masked as RFC 6455 requires, for a raw socket to send."""
    return Frame(Opcode.TEXT, text.encode()).serialize(mask=True, extensions=[])


async def streaming_app(data_dir: Path) -> tuple[RoostApp, FakeClock]:
    """The example kinds, on a clock the test alone moves: ``turn_timeout`` never cuts a stream."""
    clock = FakeClock()
    config = RuntimeConfig(data_dir=data_dir, turn_timeout=5.0)
    return create_app(KINDS, config=config, clock=clock, limits=NO_RATE_LIMITS), clock


async def test_a_stream_whose_client_left_stops_at_its_next_chunk(data_dir: Path) -> None:
    app, _ = await streaming_app(data_dir)
    async with (
        serve_in_process(app) as addr,
        httpx.AsyncClient(base_url=f"http://{addr}", timeout=60) as http,
    ):
        async with websockets.connect(f"ws://{addr}/agents/counter/s?subscribe=none") as ws:
            assert orjson.loads(await ws.recv())["type"] == "welcome"
            await ws.send(rpc_frame("s", "count_to", ENDLESS))
            first: dict[str, Any] = orjson.loads(await ws.recv())
            assert (first["type"], first["chunk"]) == ("rpc_chunk", 1)
        # the stream's turn ended: the next call is answered (the actor runs one turn at a time)
        stopped = (await http.post("/agents/counter/s/rpc/increment", json=[0])).json()["result"]
        assert 1 <= stopped < ENDLESS, "what the chunks committed stays"
        assert (await http.get("/agents/counter/s")).json()["state"]["count"] == stopped


async def test_a_stream_to_a_client_that_does_not_read_stops_once_it_is_closed(data_dir: Path) -> None:
    app, _ = await streaming_app(data_dir)
    async with (
        serve_in_process(app) as addr,
        httpx.AsyncClient(base_url=f"http://{addr}", timeout=60) as http,
    ):
        silent = await silent_websocket(addr, "/agents/counter/s?subscribe=none")
        try:
            await asyncio.get_running_loop().sock_sendall(
                silent, masked_text(rpc_frame("s", "count_to", ENDLESS))
            )
            # past the send bound it is closed (1013) and the stream stops: the next call is answered
            stopped = (await http.post("/agents/counter/s/rpc/increment", json=[0])).json()["result"]
            assert 1 <= stopped < ENDLESS
            assert not app.sinks, "the client that does not read is still connected"
        finally:
            silent.close()
