"""An injectable clock, the source of every timer the runtime owns, so that no test waits for one.

Everything in Roost that depends on time takes a :class:`Clock`: turn timeouts, call timeouts, wake-up
fire timeouts, idle deactivation (dormancy), wake-ups, leases and heartbeats. :class:`SystemClock` is
the real one; :class:`FakeClock` only moves when a test calls :meth:`FakeClock.advance`, and then fires
every timer and wakes every sleeper whose deadline has passed, in deadline order.

Why the clock and not the event loop's time: the runtime's records need wall time (``now()``) and its
timers need a monotonic one; a controllable loop clock (trio's ``MockClock``, the ``looptime`` package)
would move asyncio's own timers too, including the ones of libraries under test (uvicorn, httpx,
websockets), and would not move ``now()``. One small protocol that the runtime alone uses keeps the
fake's reach to exactly the runtime's timers, on any loop (uvloop included, whose ``loop.time()`` is
not ``time.monotonic()``).

Guarantees (``tests/test_clock.py``; the runtime's timeouts on it in ``tests/test_turns.py``):

- :meth:`Clock.call_at` runs ``callback(*args)`` once ``monotonic()`` has reached ``when``, on the loop;
  the handle's ``cancel()`` stops it. A fake clock runs it inside :meth:`FakeClock.advance`.
- :meth:`Clock.timeout` is ``asyncio.timeout`` on this clock: the block's task is cancelled at the
  deadline and the block raises ``TimeoutError``; a cancel from elsewhere that lands with it stays a
  ``CancelledError`` (the uncancel count decides).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Protocol

__all__ = ["Clock", "FakeClock", "SystemClock", "TimerHandle"]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


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

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` on the running loop once ``monotonic()`` reaches ``when``."""
        ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        """``async with clock.timeout(s):`` as ``asyncio.timeout(s)``, on this clock."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> TimerHandle:
        # the loop's own clock may not be time.monotonic() (uvloop's is not): go by the delay
        return asyncio.get_running_loop().call_later(when - time.monotonic(), callback, *args)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)


class _Timer:
    __slots__ = ("args", "callback", "cancelled", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[..., object], args: Any) -> None:
        self.loop = loop
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when told. ``now`` and ``monotonic`` advance together."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall0 = start
        self._t = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None] | _Timer]] = []
        self._ids = itertools.count()
        self._armed: list[asyncio.Future[None]] = []

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

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> TimerHandle:
        timer = _Timer(asyncio.get_running_loop(), callback, args)
        if when <= self._t:  # already due (time moved while it was being armed): at the next iteration
            timer.loop.call_soon(_run_timer, timer)
        else:
            heapq.heappush(self._sleepers, (when, next(self._ids), timer))
        waiters, self._armed = self._armed, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        return timer

    @property
    def timers(self) -> int:
        """How many timers (``call_at``, ``timeout``) are armed and not yet run or cancelled."""
        return sum(1 for *_, w in self._sleepers if isinstance(w, _Timer) and not w.cancelled)

    async def armed(self, count: int = 1) -> None:
        """Return once at least ``count`` timers are armed (see :attr:`timers`): a test waits for the
        runtime to arm its timeout, then moves time past it, without sleeping."""
        while self.timers < count:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._armed.append(waiter)
            await waiter

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return _Timeout(self, seconds)

    def advance(self, seconds: float) -> None:
        """Move time forward: wake every sleeper and run every timer that is now due, in order.
        Timers run on the loop at its next iteration (as ``loop.call_at`` would run them)."""
        if seconds < 0:
            raise ValueError("time does not go back")
        self._t += seconds
        while self._sleepers and self._sleepers[0][0] <= self._t:
            _, _, waiter = heapq.heappop(self._sleepers)
            if isinstance(waiter, _Timer):
                if not waiter.cancelled:
                    waiter.loop.call_soon(_run_timer, waiter)
            elif not waiter.done():
                waiter.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many sleepers and timers are waiting (cancelled sleepers included until due)."""
        return sum(
            1 for *_, w in self._sleepers if (not w.cancelled if isinstance(w, _Timer) else not w.done())
        )


def _run_timer(timer: _Timer) -> None:
    if not timer.cancelled:
        timer.cancelled = True
        timer.callback(*timer.args)


class _Timeout:
    """``asyncio.timeout`` on a :class:`FakeClock` (same cancel and uncancel rules)."""

    __slots__ = ("_cancelling", "_clock", "_expired", "_handle", "_seconds", "_task")

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self._clock = clock
        self._seconds = seconds
        self._task: asyncio.Task[Any] | None = None
        self._handle: TimerHandle | None = None
        self._expired = False
        self._cancelling = 0

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Timeout should be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._handle = self._clock.call_at(self._clock.monotonic() + self._seconds, self._expire)

    def _expire(self) -> None:
        assert self._task is not None
        self._expired = True
        self._task.cancel()

    async def __aexit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._expired and tp is asyncio.CancelledError:
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling:
                raise TimeoutError from exc
