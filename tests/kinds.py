"""Actor kinds that tests in several files share (each file keeps the kinds only it uses)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from roost.actors import Actor, callable

__all__ = ["Holder"]


class Holder(Actor):
    """``on_start`` and ``hold`` wait on events the test holds (reset by the ``holder`` fixture in
    ``tests/conftest.py``): a way to keep an actor busy, or not yet started, for as long as a test needs."""

    kind = "holder"
    initial_state = {"n": 0}
    start_gate: ClassVar[asyncio.Event | None] = None
    release: ClassVar[asyncio.Event | None] = None
    entered: ClassVar[asyncio.Event | None] = None

    async def on_start(self) -> None:
        if Holder.start_gate is not None:
            await Holder.start_gate.wait()

    @callable
    async def hold(self, tag: str = "") -> str:
        if Holder.entered is not None:
            Holder.entered.set()
        if Holder.release is not None:
            await Holder.release.wait()
        return tag

    @callable
    def add(self, k: int = 1) -> int:
        n: int = self.state["n"] + k
        self.set_state({"n": n})
        return n
