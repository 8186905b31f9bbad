"""Waiting on a condition: a positive wait with a bound, never a sleep-and-hope.

::

    await until(lambda: conn.in_flight == 4)                      # yields to the loop between checks
    await until(lambda: server_sees(...), timeout=30, interval=0.25)  # another process: poll, bounded
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

__all__ = ["until"]

T = TypeVar("T")


@overload
async def until(
    predicate: Callable[[], Awaitable[T]],
    timeout: float = ...,
    *,
    interval: float = ...,
    message: str = ...,
) -> T: ...


@overload
async def until(
    predicate: Callable[[], T],
    timeout: float = ...,
    *,
    interval: float = ...,
    message: str = ...,
) -> T: ...


async def until(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    *,
    interval: float = 0.0,
    message: str = "condition never became true",
) -> Any:
    """Check ``predicate`` until it returns a true value, and return that value.

    Guarantees: ``predicate`` is checked at once, so a condition that already holds returns without
    yielding; between checks the loop runs (``interval`` seconds, or one loop iteration when it is 0, so
    a condition other tasks make true is seen as soon as they have run); an awaitable result is awaited
    (an ``async def`` predicate, e.g. an HTTP read); if the condition does not hold within ``timeout``
    seconds the wait fails with ``AssertionError`` naming ``message`` and the last value seen, so a test
    fails rather than errors, and it never waits much longer than ``timeout``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            remaining = max(deadline - loop.time(), 0.5)  # the last check gets a chance to finish
            try:
                value = await asyncio.wait_for(value, remaining)
            except TimeoutError:
                raise AssertionError(f"{message} within {timeout} s (the last check hung)") from None
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"{message} within {timeout} s (last value: {value!r})")
        await asyncio.sleep(interval)
