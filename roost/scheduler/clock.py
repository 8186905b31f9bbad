"""An injectable clock, so that no test waits for a timer.

Everything in Roost that depends on time (idle deactivation, wake-ups, leases, heartbeats) takes a
:class:`Clock`. :class:`SystemClock` is the real one; :class:`FakeClock` only moves when a test calls
:meth:`FakeClock.advance`, and wakes every sleeper whose deadline has passed, in deadline order.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall time, for records)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for timeouts and idle times)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep until ``monotonic()`` has advanced by ``seconds``."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that moves only when told. ``now`` and ``monotonic`` advance together."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall0 = start
        self._t = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()

    def now(self) -> float:
        return self._wall0 + self._t

    def monotonic(self) -> float:
        return self._t

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._t + seconds, next(self._ids), fut))
        await fut

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper that is now due."""
        if seconds < 0:
            raise ValueError("time does not go back")
        self._t += seconds
        while self._sleepers and self._sleepers[0][0] <= self._t:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many sleepers are waiting (cancelled ones included until they would be due)."""
        return sum(1 for *_, f in self._sleepers if not f.done())
