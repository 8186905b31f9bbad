"""An open WebSocket and its token's expiry and renewal, over a real socket (``docs/protocol.md``,
*Token expiry and renewal*; ``docs/security.md``).

The server runs in process on a :class:`~roost.scheduler.FakeClock`; its tokens are signed by
:mod:`roost.transport.tokens` and verified on that clock, so a test moves time past ``exp`` instead of
sleeping for it.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.client import Backoff, Client, RpcError, actor_url
from roost.examples.kinds import KINDS
from roost.scheduler import FakeClock
from roost.testing import WsClient, connect, until
from roost.transport import RoostApp, create_app
from roost.transport.security import claims_authorize, token_authenticate
from roost.transport.tokens import TokenSigner
from tests.conftest import NO_RATE_LIMITS
from tests.support import serve_in_process

signer = TokenSigner("e" * 40)


def app_for(data_dir: Path, clock: FakeClock) -> RoostApp:
    return create_app(
        KINDS,
        data_dir=data_dir,
        clock=clock,
        limits=NO_RATE_LIMITS,
        authenticate=token_authenticate(signer, clock=clock.now),
        authorize=claims_authorize,
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def renew(ws: WsClient, token: str, auth_id: str) -> dict[str, Any]:
    """Send an ``auth`` frame and return its ``auth_result``."""
    await ws.send({"type": "auth", "token": token, "id": auth_id})
    return await ws.wait_for(lambda f: f.get("type") == "auth_result" and f.get("id") == auth_id)


async def test_an_open_connection_is_closed_with_4401_when_its_token_expires(data_dir: Path) -> None:
    clock = FakeClock()
    token = signer.issue("alice", ttl=3, now=clock.now())
    async with serve_in_process(app_for(data_dir, clock)) as addr:
        url = f"ws://{addr}/agents/counter/expiring"
        async with connect(url, additional_headers=bearer(token)) as ws:
            assert (await ws.recv())["type"] == "welcome"
            assert await ws.call("increment") == 1
            clock.advance(2.5)
            assert await ws.call("increment") == 2  # a write right before the expiry goes through
            clock.advance(0.5)  # exactly at exp: closed by the server's timer, with nothing sent
            frames, code = await ws.read_until_closed(timeout=5)
            assert code == 4401
            assert {"type": "error", "code": "unauthenticated", "message": "token expired"} in frames
        async with connect(url, additional_headers=bearer(token)) as again:  # refused at the handshake
            assert (await again.recv())["code"] == "unauthenticated"
            assert await again.close_code() == 4401
        async with httpx.AsyncClient() as http:  # every HTTP request verifies its token
            late = await http.post(
                f"http://{addr}/agents/counter/expiring/rpc/increment", headers=bearer(token)
            )
            assert late.status_code == 401
            fresh = bearer(signer.issue("alice", ttl=60, now=clock.now()))
            got = await http.get(f"http://{addr}/agents/counter/expiring", headers=fresh)
            assert got.json()["state"] == {"count": 2}  # only the writes made before the expiry


async def test_a_renewed_connection_keeps_working_past_the_old_expiry(data_dir: Path) -> None:
    clock = FakeClock()
    first = signer.issue("alice", ttl=3, now=clock.now())
    async with serve_in_process(app_for(data_dir, clock)) as addr:
        url = f"ws://{addr}/agents/counter/renewed"
        async with connect(url, additional_headers=bearer(first)) as ws:  # the old token stays in the header
            assert (await ws.recv())["type"] == "welcome"
            clock.advance(2)
            second = signer.issue("alice", ttl=10, now=clock.now())
            ack = await renew(ws, second, "r1")
            assert ack == {"type": "auth_result", "id": "r1", "ok": True, "exp": clock.now() + 10}
            clock.advance(2)  # past the first token's exp
            assert await ws.call("increment") == 1
            clock.advance(7.5)
            assert await ws.call("increment") == 2
            clock.advance(0.5)  # the second token's exp
            assert await ws.close_code(timeout=5) == 4401


async def test_a_renewal_to_a_read_only_token_refuses_later_writes(data_dir: Path) -> None:
    clock = FakeClock()
    writer = signer.issue("alice", ttl=60, now=clock.now())
    reader = signer.issue("alice", ttl=60, read_only=True, now=clock.now())
    async with serve_in_process(app_for(data_dir, clock)) as addr:
        url = f"ws://{addr}/agents/counter/narrowed"
        async with connect(url, subprotocols=["roost", f"roost.token.{writer}"]) as ws:  # a browser's way
            assert (await ws.recv())["type"] == "welcome"
            assert await ws.call("increment") == 1
            assert (await renew(ws, reader, "r1"))["ok"] is True
            refused = await ws.rpc("increment")
            assert refused["error"]["code"] == "forbidden"
            assert await ws.call("get") == 1  # reads go on
            assert (await renew(ws, writer, "r2"))["ok"] is True  # and a writer's token writes again
            assert await ws.call("increment") == 2


async def test_a_refused_renewal_is_answered_and_one_for_another_subject_closes_with_4403(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    token = signer.issue("alice", ttl=60, now=clock.now())
    bad_tokens = [
        signer.issue("alice", ttl=60, now=clock.now())[:-4] + "AAAA",  # forged
        signer.issue("alice", ttl=-1, now=clock.now()),  # expired
        TokenSigner("f" * 40).issue("alice", ttl=60, now=clock.now()),  # another server's
    ]
    async with serve_in_process(app_for(data_dir, clock)) as addr:
        url = f"ws://{addr}/agents/counter/kept"
        async with connect(url, additional_headers=bearer(token)) as ws:
            assert (await ws.recv())["type"] == "welcome"
            with caplog.at_level(logging.WARNING, logger="roost.security"):
                for i, bad in enumerate(bad_tokens):
                    answer = await renew(ws, bad, f"bad{i}")
                    assert (answer["ok"], answer["error"]["code"]) == (False, "unauthenticated")
            assert "(token from auth frame)" in caplog.text  # the reason is logged, never the token
            assert not [bad for bad in bad_tokens if bad in caplog.text or bad.split(".")[1] in caplog.text]
            assert await ws.call("increment") == 1  # the connection goes on with its own token
            other = signer.issue("mallory", ttl=60, now=clock.now())
            await ws.send({"type": "auth", "token": other, "id": "other"})
            frames, code = await ws.read_until_closed(timeout=5)
            assert code == 4403
            assert [f["code"] for f in frames if f["type"] == "error"] == ["forbidden"]
        elsewhere = signer.issue("alice", ttl=60, kinds=["room"], now=clock.now())  # not this kind
        async with connect(url, additional_headers=bearer(token)) as ws:
            assert (await ws.recv())["type"] == "welcome"
            await ws.send({"type": "auth", "token": elsewhere, "id": "elsewhere"})
            assert await ws.close_code(timeout=5) == 4403


async def test_the_python_clients_renew_keeps_the_connection_and_its_reconnects_going(data_dir: Path) -> None:
    clock = FakeClock()
    first = signer.issue("alice", ttl=3, now=clock.now())
    async with serve_in_process(app_for(data_dir, clock)) as addr:
        url = f"{actor_url(f'ws://{addr}', 'counter', 'client')}?token={first}"
        backoff = Backoff(base=0.01, cap=0.05)
        async with Client(url, backoff=backoff, rng=random.Random(7)) as client:
            await client.wait_connected(5)
            clock.advance(2)
            second = signer.issue("alice", ttl=10, now=clock.now())
            assert await client.renew(second) == clock.now() + 10
            clock.advance(2)  # past the first token's exp
            assert await client.call("increment") == 1
            client.drop()  # the reconnect presents the renewed token, not the expired one in the URL
            await until(lambda: client.reconnects == 1 and client.connected)
            assert await client.call("increment") == 2
            with pytest.raises(RpcError) as refused:
                await client.renew(first)  # expired by now: refused, and the connection goes on
            assert refused.value.code == "unauthenticated"
            assert await client.call("increment") == 3
