"""``roost.client``'s retry-safe calls against a real server in process, through a TCP proxy
(tests/tcp_proxy.py) that refuses connections, loses replies or cuts connections: calls made while
disconnected wait (bounded) and are sent once; a keyed call whose connection dropped is sent again with
its key and has one effect; the errors tell a call never sent from one sent with its outcome unknown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from roost.client import (
    Backoff,
    CallNotSent,
    CallTimeout,
    Client,
    ConnectionLost,
    OutcomeUnknown,
    ReplyTimeout,
    SendTimeout,
)
from roost.testing import until
from tests.support import get_json
from tests.tcp_proxy import TcpProxy


@pytest.fixture
async def proxy(server: str) -> AsyncIterator[TcpProxy]:
    proxy = await TcpProxy(server).start()
    try:
        yield proxy
    finally:
        await proxy.close()


def client_of(proxy: TcpProxy, name: str, **options: object) -> Client:
    url = f"ws://{proxy.addr}/agents/counter/{name}?subscribe=none"
    return Client(url, backoff=Backoff(base=0.01, cap=0.05), **options)  # type: ignore[arg-type]


async def count(server: str, name: str) -> int:
    got = await get_json(f"http://{server}/agents/counter/{name}")
    return int(got["state"]["count"]) if "state" in got else 0


async def disconnect(client: Client, proxy: TcpProxy) -> None:
    """Cut the client off: its connection is severed and the proxy refuses new ones."""
    proxy.down = True
    proxy.sever()
    await until(lambda: not client.connected, message="the client saw the drop")


async def test_a_call_made_while_disconnected_waits_and_is_sent_once_on_reconnect_and_the_queue_is_bounded(
    server: str, proxy: TcpProxy
) -> None:
    async with client_of(proxy, "queued", max_queued=1) as client:
        await client.wait_connected()
        await disconnect(client, proxy)
        first = asyncio.create_task(client.call("increment", 1, timeout=30))
        await until(lambda: client.queued == 1, message="the call waits for a connection")
        with pytest.raises(CallNotSent) as full:
            await client.call("increment", 100, timeout=30)  # at once: max_queued wait already
        assert not isinstance(full.value, CallTimeout | OutcomeUnknown)
        assert await count(server, "queued") == 0, "nothing was sent"
        proxy.down = False
        assert await first == 1
        assert client.queued == 0
        assert await count(server, "queued") == 1, "sent once"


async def test_a_call_on_a_connection_that_just_dropped_is_sent_on_the_next_one_with_one_effect(
    server: str, proxy: TcpProxy
) -> None:
    async with client_of(proxy, "dropped") as client:
        await client.wait_connected()
        for n in range(1, 4):
            assert client.drop()
            assert await client.call("increment", 1) == n
        assert await count(server, "dropped") == 3


async def test_a_call_never_sent_raises_send_timeout_and_one_unanswered_raises_reply_timeout_with_its_key(
    server: str, proxy: TcpProxy
) -> None:
    async with client_of(proxy, "timeouts") as client:
        await client.wait_connected()
        await disconnect(client, proxy)
        with pytest.raises(SendTimeout) as not_sent:
            await client.call("increment", 1, timeout=0.2)
        assert isinstance(not_sent.value, CallNotSent | CallTimeout)
        assert not isinstance(not_sent.value, OutcomeUnknown)
        proxy.down = False
        await client.wait_connected(timeout=10)
        proxy.mute()  # replies are lost
        with pytest.raises(ReplyTimeout) as unknown:
            await client.call("increment", 2, timeout=0.5)
        assert isinstance(unknown.value, OutcomeUnknown | CallTimeout)
        key = unknown.value.idempotency_key
        assert isinstance(key, str)
        proxy.mute(False)
        reconnects = client.reconnects
        proxy.sever()  # the lost bytes broke the stream: a new connection
        await until(lambda: client.reconnects > reconnects and client.connected, message="reconnected")
        assert await client.call_with("increment", [2], idempotency_key=key) == 2
        assert await count(server, "timeouts") == 2, "the call under its key had one effect"


async def test_a_call_without_a_key_is_not_sent_again_and_raises_connection_lost(
    server: str, proxy: TcpProxy
) -> None:
    async with client_of(proxy, "unkeyed") as client:
        await client.wait_connected()
        proxy.mute()
        call = asyncio.create_task(client.call_with("increment", [1], idempotency_key=False))

        async def committed() -> bool:
            return await count(server, "unkeyed") == 1

        await until(committed, message="the call committed")
        proxy.mute(False)
        proxy.sever()
        with pytest.raises(ConnectionLost) as lost:
            await call
        assert isinstance(lost.value, OutcomeUnknown)
        assert lost.value.idempotency_key is None
        await client.wait_connected(timeout=10)
        assert await client.call("get") == 1, "not sent again"
