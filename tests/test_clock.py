"""The runtime's one clock (``roost.scheduler.clock``): timers and timeouts a test moves, to the tick."""

from __future__ import annotations

import asyncio

import pytest

from roost.scheduler import FakeClock, SystemClock


async def test_a_fake_clock_timer_runs_at_its_deadline_not_a_tick_before_and_never_once_cancelled() -> None:
    clock = FakeClock()
    ran: list[str] = []
    clock.call_at(5.0, ran.append, "due")
    cancelled = clock.call_at(5.0, ran.append, "cancelled")
    cancelled.cancel()
    clock.advance(4.999)
    await asyncio.sleep(0)
    assert ran == []
    assert clock.timers == 1
    clock.advance(0.001)
    await asyncio.sleep(0)
    assert ran == ["due"]
    assert clock.timers == 0


async def test_a_timer_armed_for_a_time_already_past_runs_at_the_next_loop_iteration() -> None:
    clock = FakeClock()
    clock.advance(10)
    ran: list[int] = []
    clock.call_at(3.0, ran.append, 1)
    assert ran == []
    await asyncio.sleep(0)
    assert ran == [1]


async def test_armed_returns_once_the_runtime_has_armed_that_many_timers() -> None:
    clock = FakeClock()
    waiting = asyncio.ensure_future(clock.armed(2))
    clock.call_at(1.0, lambda: None)
    await asyncio.sleep(0)
    assert not waiting.done()
    clock.call_at(2.0, lambda: None)
    await asyncio.wait_for(waiting, 1)


async def test_a_fake_clock_timeout_raises_timeout_error_when_time_moves_past_it() -> None:
    clock = FakeClock()

    async def body() -> None:
        async with clock.timeout(2.0):
            await asyncio.Event().wait()

    task = asyncio.ensure_future(body())
    await clock.armed(1)
    clock.advance(2.0)
    with pytest.raises(TimeoutError):
        await task


async def test_a_cancel_that_lands_with_a_fake_clock_timeout_stays_a_cancel() -> None:
    """As with ``asyncio.timeout``: the uncancel count decides, so a shutdown's cancel is not lost."""
    clock = FakeClock()
    entered = asyncio.Event()

    async def body() -> None:
        async with clock.timeout(1.0):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(body())
    await entered.wait()
    clock.advance(1.0)
    await asyncio.sleep(0)  # the timeout's cancel is delivered at the next step ...
    task.cancel()  # ... and one from elsewhere lands with it
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_system_clock_timer_and_timeout_work_on_the_running_loop() -> None:
    clock = SystemClock()
    fired = asyncio.Event()
    clock.call_at(clock.monotonic(), fired.set)
    await asyncio.wait_for(fired.wait(), 5)
    with pytest.raises(TimeoutError):
        async with clock.timeout(0):
            await asyncio.Event().wait()
