"""Retry-safe calls end to end: ``roost.client`` with its default idempotency keys against a real server
process, through a TCP proxy (tests/tcp_proxy.py) that loses replies. The server is SIGKILLed after the
call committed and before its reply reached the client; restarted on the same data and port, it answers
the client's resend with the original result, and the call had one effect."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from roost.client import Backoff, Client
from roost.testing import until
from tests.support import ServerProcess, get_json
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow


@pytest.fixture
async def proxied(data_dir: Path) -> AsyncIterator[tuple[ServerProcess, TcpProxy]]:
    server = ServerProcess(data_dir).start()
    proxy = await TcpProxy(server.addr).start()
    try:
        yield server, proxy
    finally:
        await proxy.close()
        server.kill()


async def count(server: ServerProcess, name: str) -> int:
    got = await get_json(f"{server.http}/agents/counter/{name}")
    return int(got["state"]["count"]) if "state" in got else 0


async def test_sigkill_between_commit_and_reply_then_the_resend_has_one_effect_and_the_original_result(
    data_dir: Path, proxied: tuple[ServerProcess, TcpProxy]
) -> None:
    server, proxy = proxied
    port = server.addr.rsplit(":", 1)[1]
    url = f"ws://{proxy.addr}/agents/counter/crash?subscribe=none"
    async with Client(url, backoff=Backoff(base=0.05, cap=0.2)) as client:
        assert await client.call("increment", 10) == 10
        proxy.mute()  # the server's reply to the next call is lost on the way
        call = asyncio.create_task(client.call("increment", 5, timeout=60))

        async def committed() -> bool:
            return await count(server, "crash") == 15

        await until(committed, message="the call committed")
        assert not call.done(), "its reply never arrived"
        server.kill()  # SIGKILL: between the commit and a reply the client got
        proxy.mute(False)
        restarted = ServerProcess(data_dir, "--port", port).start()
        try:
            assert await call == 15, "the resend got the original result"
            assert client.reconnects >= 1
            assert await count(restarted, "crash") == 15, "one effect"
            assert await client.call("increment", 1) == 16
        finally:
            restarted.kill()
