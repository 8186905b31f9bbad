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
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx

from roost.testing import connect, until
from tests.support import TCP_CLOSE, ServerProcess, silent_websocket, tcp_state

BLOB = "x" * 900_000  # one broadcast; the default send bound (4 MiB) holds four


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
    with serving(tmp_path, "--handshake-timeout", "120", "--max-conns-per-actor", "2") as server:
        silent = await silent_websocket(server.addr, "/agents/room/r1")
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

            await until(removed, timeout=60, interval=0.2, message="the member that never reads is counted")
            async with connect(f"{server.ws}/agents/room/r1") as newcomer:  # its slot is free
                assert (await newcomer.recv())["type"] == "welcome"
            assert tcp_state(silent) != TCP_CLOSE, "the close timeout is two minutes: not aborted yet"
        silent.close()


async def test_a_client_that_does_not_take_its_close_is_aborted_after_the_close_timeout(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--handshake-timeout", "2") as server:
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
