"""Guarantee 4 end to end, with the Python client over real sockets: gap-free resume by cursor."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from roost.client import Client, ConnectionLost, TerminalClose, actor_url


async def test_gap_free_resume_under_random_drops(server: str) -> None:
    """A client dropped at random moments, while another keeps incrementing, receives every state
    ``seq`` exactly once and in order, and ends with the final state."""
    url = actor_url(f"ws://{server}", "counter", "resume")
    seen: list[int] = []
    modes: list[str] = []

    progress = asyncio.Event()

    def on_state(state: Any, seq: int) -> None:
        seen.append(seq)
        progress.set()

    async with (
        Client(
            url,
            rng=random.Random(7),
            chaos=0.005,
            on_state=on_state,
            on_welcome=lambda w: modes.append(w.resume),
        ) as watcher,
        Client(url, rng=random.Random(8)) as writer,
    ):
        await watcher.wait_connected(5)
        first = watcher.cursor
        assert first is not None
        total = 1000
        for i in range(total):
            try:
                await writer.call("increment", timeout=5)
            except ConnectionLost:  # the writer is never dropped: this would be a server fault
                pytest.fail(f"writer lost its connection at call {i}")
        final = await writer.call("get")
        async with asyncio.timeout(20):
            while watcher.cursor is None or watcher.cursor < first + total:
                progress.clear()
                await progress.wait()
        assert watcher.drops >= 3, "the chaos never dropped the watcher: the test proved nothing"
        assert "replay" in modes[1:], "no reconnect resumed by replay"
    assert seen == list(range(first + 1, first + total + 1)), "a seq was missed, repeated or reordered"
    assert watcher.state == {"count": final}


async def test_a_terminal_close_stops_the_client(server: str) -> None:
    """Close codes 4400-4499 are final: the client does not reconnect and says why."""
    async with Client(actor_url(f"ws://{server}", "nokind", "x"), rng=random.Random(1)) as c:
        with pytest.raises(TerminalClose) as closed:
            await c.wait_connected(5)
        assert closed.value.code == 4404
        assert c.reconnects == 0


async def test_calls_through_the_client_survive_server_side_state(server: str) -> None:
    url = actor_url(f"ws://{server}", "counter", "c/1")
    async with Client(url, rng=random.Random(2)) as c:
        await c.wait_connected(5)
        assert await c.call("increment", 2) == 2
        assert await c.call("increment", by=3) == 5
        stream = c.stream("count_to", 3)
        assert [chunk async for chunk in stream] == [6, 7, 8]
    async with Client(url, rng=random.Random(3)) as again:
        await again.wait_connected(5)
        assert again.state == {"count": 8}
