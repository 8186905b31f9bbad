"""Limits (docs/security.md): each refuses with its documented answer and leaves the others served."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from roost.examples.kinds import KINDS
from roost.scheduler import FakeClock
from roost.testing import connect, open_sockets, until
from roost.transport import create_app
from roost.transport.limits import Limits
from roost.transport.security import token_authenticate
from roost.transport.tokens import TokenSigner
from tests.support import ServerProcess, serve_in_process

signer = TokenSigner("k" * 40)


async def test_a_connection_over_its_rate_gets_rate_limited_and_the_others_do_not(data_dir: Path) -> None:
    clock = FakeClock()
    app = create_app(KINDS, data_dir=data_dir, clock=clock, limits=Limits(conn_rate=10, conn_burst=5))
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/counter/r"
        async with connect(url) as flood, connect(url) as calm:
            await flood.recv()
            await calm.recv()
            got = await flood.results([await flood.send_rpc("increment", id=f"f{i}") for i in range(8)])
            codes = [f["error"]["code"] if not f["ok"] else "ok" for f in got]
            assert codes == ["ok"] * 5 + ["rate_limited"] * 3  # the burst, then refusals
            assert (await calm.rpc("increment", id="c1"))["ok"] is True  # another connection is unaffected
            clock.advance(0.5)  # 5 tokens back at 10/s
            again = [await flood.send_rpc("increment", id=f"g{i}") for i in range(5)]
            assert all(f["ok"] for f in await flood.results(again))


async def test_a_principal_shares_one_rate_over_its_connections(data_dir: Path) -> None:
    clock = FakeClock()
    limits = Limits(conn_rate=None, principal_rate=1, principal_burst=4)
    app = create_app(
        KINDS,
        data_dir=data_dir,
        clock=clock,
        limits=limits,
        authenticate=token_authenticate(signer, clock=clock.now),
    )
    alice = {"Authorization": f"Bearer {signer.issue('alice', ttl=600, now=clock.now())}"}
    bob = {"Authorization": f"Bearer {signer.issue('bob', ttl=600, now=clock.now())}"}
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/counter/p"
        async with (
            connect(url, additional_headers=alice) as a1,
            connect(url, additional_headers=alice) as a2,
            connect(url, additional_headers=bob) as b,
        ):
            for ws in (a1, a2, b):
                await ws.recv()
            for i in range(3):
                await a1.send_rpc("increment", id=f"a{i}")
                await a2.send_rpc("increment", id=f"b{i}")
            replies = await a1.results(["a0", "a1", "a2"]) + await a2.results(["b0", "b1", "b2"])
            oks = [f["ok"] for f in replies]
            assert oks.count(True) == 4  # four tokens between both connections
            assert (await b.rpc("increment", id="b"))["ok"] is True
        async with httpx.AsyncClient() as http:  # HTTP calls draw on the same bucket
            r = await http.post(f"http://{addr}/agents/counter/p/rpc/increment", headers=alice)
            assert r.status_code == 429
            assert r.json()["error"]["code"] == "rate_limited"


async def test_connections_per_actor_and_per_principal_are_bounded(data_dir: Path) -> None:
    limits = Limits(conn_rate=None, principal_rate=None, conns_per_actor=2, conns_per_principal=3)
    app = create_app(KINDS, data_dir=data_dir, limits=limits, authenticate=token_authenticate(signer))
    ann = {"Authorization": f"Bearer {signer.issue('ann', ttl=600)}"}
    ben = {"Authorization": f"Bearer {signer.issue('ben', ttl=600)}"}
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/counter/one"
        async with (
            connect(url, additional_headers=ann) as c1,
            connect(url, additional_headers=ben) as c2,
        ):
            await c1.recv()
            await c2.recv()
            async with connect(url, additional_headers=ann) as c3:
                assert (await c3.recv())["code"] == "too_many_connections"
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await c3.recv()
                assert closed.value.rcvd is not None
                assert closed.value.rcvd.code == 1013
            # per principal: ann holds 1; two more on other actors fit, the next does not
            async with (
                connect(f"ws://{addr}/agents/counter/two", additional_headers=ann) as d1,
                connect(f"ws://{addr}/agents/counter/three", additional_headers=ann) as d2,
            ):
                await d1.recv()
                await d2.recv()
                async with connect(f"ws://{addr}/agents/counter/four", additional_headers=ann) as d3:
                    assert (await d3.recv())["code"] == "too_many_connections"
                async with connect(f"ws://{addr}/agents/counter/four", additional_headers=ben) as e:
                    assert (await e.recv())["type"] == "welcome"  # ben is not ann
            assert (await c2.rpc("increment", id="x"))["ok"] is True
        async with connect(url, additional_headers=ann) as again:  # slots are given back
            assert (await again.recv())["type"] == "welcome"


def wait_closed(sock: socket.socket, limit: float) -> float:
    """Seconds until the server closed ``sock`` (reading until EOF), at most ``limit``."""
    start = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(4096):
            pass
    except (TimeoutError, ConnectionResetError):
        pass
    return time.monotonic() - start


@pytest.mark.slow
def test_a_handshake_that_never_completes_is_closed_after_the_timeout(data_dir: Path) -> None:
    server = ServerProcess(data_dir, "--handshake-timeout", "0.5").start()
    try:
        host, port = server.addr.split(":")
        opened = time.monotonic()
        silent = socket.create_connection((host, int(port)))
        partial = socket.create_connection((host, int(port)))
        partial.sendall(b"GET /agents/counter/x HTTP/1.1\r\nHost: x\r\n")  # never the blank line
        for sock in (silent, partial):
            wait_closed(sock, 10)
            assert 0.4 < time.monotonic() - opened < 5
            sock.close()
        r = httpx.get(f"{server.http}/healthz")  # everyone else is served
        assert r.json()["ok"] is True
    finally:
        server.kill()


@pytest.mark.slow
def test_a_dead_peer_is_closed_within_two_ping_intervals(data_dir: Path) -> None:
    """A client that completed the handshake and then stopped answering (no pongs) is closed by the
    server's heartbeat within two intervals; the actor sees it go."""
    server = ServerProcess(data_dir, "--ping-interval", "0.5").start()
    try:
        host, port = server.addr.split(":")
        sock = socket.create_connection((host, int(port)))
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET /agents/room/hb HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        sock.settimeout(5)
        assert b"101" in sock.recv(4096).split(b"\r\n")[0]
        # from here on the "client" reads nothing and answers nothing: a dead peer
        started = time.monotonic()
        waited = wait_closed(sock, 10)
        assert waited < 1.0 + 0.75, waited  # ping at 0.5 s, no pong by 1.0 s: closed (slack for scheduling)
        assert time.monotonic() - started >= 0.4
        sock.close()

        async def members() -> int:
            async with connect(f"{server.ws}/agents/room/hb") as ws:
                welcome = await ws.recv()
                return int(welcome["state"]["members"])

        assert asyncio.run(members()) == 1  # only this new connection: the dead one was let go
    finally:
        server.kill()


async def test_anonymous_clients_share_a_rate_per_address_over_http_too(data_dir: Path) -> None:
    clock = FakeClock()
    app = create_app(
        KINDS,
        data_dir=data_dir,
        clock=clock,
        limits=Limits(conn_rate=None, anonymous_rate=1, anonymous_burst=3),
    )
    async with serve_in_process(app) as addr, httpx.AsyncClient() as http:
        codes = [
            (await http.post(f"http://{addr}/agents/counter/h/rpc/increment")).status_code for _ in range(5)
        ]
        assert codes == [200, 200, 200, 429, 429]
        async with connect(f"ws://{addr}/agents/counter/h") as ws:  # the same address
            await ws.recv()
            assert (await ws.rpc("increment", id="w"))["error"]["code"] == "rate_limited"
        clock.advance(1)
        assert (await http.post(f"http://{addr}/agents/counter/h/rpc/increment")).status_code == 200


async def test_a_connection_refused_midway_gives_its_slots_back(data_dir: Path) -> None:
    """A client that resets while an (asynchronous) authenticate hook runs never holds a slot after."""
    gate = asyncio.Event()
    entered = resumed = 0  # handshakes that reached the hook; that went on past it

    async def slow_authenticate(conn: Any) -> Any:
        nonlocal entered, resumed
        entered += 1
        await gate.wait()
        resumed += 1
        from roost.actors import ANONYMOUS

        return ANONYMOUS

    limits = Limits(conn_rate=None, principal_rate=None, conns_per_actor=2)
    app = create_app(KINDS, data_dir=data_dir, limits=limits, authenticate=slow_authenticate)
    async with serve_in_process(app) as addr:
        host, port = addr.split(":")
        before = open_sockets()

        async def in_the_hook(n: int) -> None:
            await until(lambda: entered == n, message="the handshake reached authenticate")

        for i in range(5):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(
                b"GET /agents/counter/v HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            await in_the_hook(i + 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()  # reset while authenticate waits
        # the server in this process closes its end of a connection when it reads the reset
        await until(lambda: open_sockets() <= before, message="the server saw every reset")
        gate.set()
        # every half-open attempt went on past the hook (taking a slot, failing to accept) and ended
        await until(
            lambda: resumed == 5 and not app.access.per_actor.counts,
            timeout=2,
            interval=0.02,
            message="every half-open attempt ended",
        )
        assert app.access.per_actor.counts == {}
        async with (
            connect(f"ws://{addr}/agents/counter/v") as a,
            connect(f"ws://{addr}/agents/counter/v") as b,
        ):
            assert (await a.recv())["type"] == "welcome"
            assert (await b.recv())["type"] == "welcome"


def test_anonymous_addresses_are_grouped_and_ipv6_by_its_64() -> None:
    from roost.actors import ANONYMOUS, Principal
    from roost.transport.access import limit_key

    assert limit_key(ANONYMOUS, "203.0.113.7") == ("ip", "203.0.113.7")
    assert limit_key(ANONYMOUS, "2001:db8:1:2::5") == limit_key(ANONYMOUS, "2001:db8:1:2:ffff::9")  # one /64
    assert limit_key(ANONYMOUS, "2001:db8:1:3::5") != limit_key(ANONYMOUS, "2001:db8:1:2::5")
    assert limit_key(Principal("ann"), "203.0.113.7") == (None, "ann")
    assert limit_key(ANONYMOUS, None) is None
