"""Wake-up edge cases found in review: self-cancel, key reuse, coalesced retries, DST folds.

Schedule keys (``docs/design.md``, "Wake-ups"): a key dedupes while its schedule is pending and for
``KEY_WINDOW`` after it finished, the same spec returning that schedule (a delay asked for again is
the same time); another spec under a key in use is an ``idempotency_conflict``; after the window, or
a cancel, the key schedules anew.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from roost.actors import Actor, IdempotencyConflict, callable, wakeup
from roost.actors.schedules import KEEP_FINISHED, KEY_WINDOW, PRUNE_EVERY
from roost.scheduler import Dispatcher, FakeClock, make_trigger, next_fire
from roost.storage import Directory
from roost.testing import ActorKit, until


class Ticker(Actor):
    kind = "ticker"
    initial_state = {"runs": 0}
    fail_next: ClassVar[int] = 0

    @callable
    async def every(self, seconds: float, key: str, misfire: str = "run_once") -> dict[str, Any]:
        s = await self.schedule_every(seconds, "tick", key=key, misfire=misfire)  # type: ignore[arg-type]
        return s.to_json()

    @callable
    async def later(self, seconds: float, key: str) -> str:
        return (await self.schedule(seconds, "tick", key=key)).id

    @callable
    async def later_with(self, seconds: float, key: str, callback: str, payload: Any) -> str:
        return (await self.schedule(seconds, callback, payload, key=key)).id

    @callable
    async def at(self, when: float, key: str) -> str:
        return (await self.schedule(datetime.fromtimestamp(when, UTC), "tick", key=key)).id

    @callable
    async def cancel(self, key: str) -> bool:
        return await self.cancel_schedule(key)

    @callable
    async def info(self, id_or_key: str) -> dict[str, Any] | None:
        s = await self.get_schedule(id_or_key)
        return None if s is None else s.to_json()

    @callable
    async def runs(self) -> int:
        n: int = self.state["runs"]
        return n

    @wakeup
    async def tock(self, payload: Any = None) -> None:
        self.set_state({"runs": self.state["runs"] + 100})

    @wakeup
    async def tick(self) -> None:
        self.set_state({"runs": self.state["runs"] + 1})
        if type(self).fail_next > 0:
            type(self).fail_next -= 1
            raise RuntimeError("boom")
        if self.state["runs"] == 2 and self.name.startswith("self-cancel"):
            await self.cancel_schedule("t")


def kit_for(tmp_path: Path, clock: FakeClock) -> ActorKit:
    return ActorKit([Ticker], tmp_path, clock=clock, scheduler=False)


async def test_a_schedule_that_cancels_itself_from_its_callback_stays_cancelled(tmp_path: Path) -> None:
    clock = FakeClock()
    async with kit_for(tmp_path, clock) as kit:
        await kit.call("ticker", "self-cancel", "every", 10, "t")
        for _ in range(5):
            clock.advance(10)
            await kit.registry.wake("ticker", "self-cancel")
        assert await kit.call("ticker", "self-cancel", "runs") == 2
        info = await kit.call("ticker", "self-cancel", "info", "t")
        assert info is None, "a cancelled schedule releases its key"


async def test_a_key_can_schedule_again_after_a_cancel(tmp_path: Path) -> None:
    clock = FakeClock()
    async with kit_for(tmp_path, clock) as kit:
        first = await kit.call("ticker", "reuse", "later", 5, "k")
        assert await kit.call("ticker", "reuse", "later", 5, "k") == first, "idempotent while pending"
        assert await kit.call("ticker", "reuse", "cancel", "k") is True
        second = await kit.call("ticker", "reuse", "later", 5, "k")
        assert second != first
        clock.advance(6)
        await kit.registry.wake("ticker", "reuse")
        assert await kit.call("ticker", "reuse", "runs") == 1


async def test_a_fired_key_answers_a_repeat_within_the_window_and_schedules_anew_after_it(
    tmp_path: Path,
) -> None:
    """A client re-sending a request after its wake-up fired (it lost the answer to a crash) gets the
    finished schedule, not a second fire; another spec under that key is a conflict; after
    ``KEY_WINDOW`` the key schedules anew and fires again."""
    clock = FakeClock()
    async with kit_for(tmp_path, clock) as kit:
        first = await kit.call("ticker", "again", "later", 5, "k1")
        clock.advance(6)
        await kit.registry.wake("ticker", "again")
        assert await kit.call("ticker", "again", "runs") == 1
        assert await kit.call("ticker", "again", "later", 5, "k1") == first, "a repeat fired twice"
        with pytest.raises(IdempotencyConflict):
            await kit.call("ticker", "again", "later", 9, "k1")
        clock.advance(KEY_WINDOW)
        second = await kit.call("ticker", "again", "later", 5, "k1")
        assert second != first, "the key was never released"
        info = await kit.call("ticker", "again", "info", "k1")
        assert info is not None
        assert (info["id"], info["status"], info["next_fire"]) == (second, "active", clock.now() + 5)
        clock.advance(6)
        await kit.registry.wake("ticker", "again")
        assert await kit.call("ticker", "again", "runs") == 2
        done = await kit.call("ticker", "again", "info", first)
        assert done is not None
        assert (done["status"], done["key"]) == ("done", None), "the finished record keeps its id"


async def test_a_pending_key_with_another_spec_is_an_idempotency_conflict_and_changes_nothing(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    async with kit_for(tmp_path, clock) as kit:
        first = await kit.call("ticker", "clash", "later_with", 5, "k", "tock", {"a": 1})
        for other in ((9, "tock", {"a": 1}), (5, "tick", {"a": 1}), (5, "tock", {"a": 2})):
            with pytest.raises(IdempotencyConflict):
                await kit.call("ticker", "clash", "later_with", other[0], "k", other[1], other[2])
        assert await kit.call("ticker", "clash", "later_with", 5, "k", "tock", {"a": 1}) == first
        info = await kit.call("ticker", "clash", "info", "k")
        assert info is not None
        assert (info["id"], info["callback"], info["payload"]) == (first, "tock", {"a": 1})
        clock.advance(6)
        await kit.registry.wake("ticker", "clash")
        assert await kit.call("ticker", "clash", "runs") == 100, "one fire of the first spec"


async def test_a_delay_or_an_instant_asked_for_again_is_the_same_pending_schedule(tmp_path: Path) -> None:
    """``schedule(5, key=k)`` in ``on_start`` after a restart names a later instant than the first
    call did, yet the same schedule; so does the same aware datetime."""
    clock = FakeClock()
    async with kit_for(tmp_path, clock) as kit:
        first = await kit.call("ticker", "same", "later", 5, "d")
        clock.advance(2)
        assert await kit.call("ticker", "same", "later", 5, "d") == first
        when = clock.now() + 60
        at = await kit.call("ticker", "same", "at", when, "t")
        clock.advance(1)
        assert await kit.call("ticker", "same", "at", when, "t") == at
        with pytest.raises(IdempotencyConflict):
            await kit.call("ticker", "same", "at", when + 30, "t")


async def test_a_coalesced_run_that_fails_and_retries_still_runs_once(tmp_path: Path) -> None:
    """run_once after a long gap: the run stands for every missed time, also when it needs a retry
    (the retry keeps the coalesced nominal time; no second catch-up run follows)."""
    clock = FakeClock()
    async with kit_for(tmp_path, clock) as kit:
        s = await kit.call("ticker", "coalesce", "every", 10, "c")
        start = s["next_fire"]
        Ticker.fail_next = 1
        clock.advance(100)
        await kit.registry.wake("ticker", "coalesce")
        info = await kit.call("ticker", "coalesce", "info", "c")
        assert info is not None
        assert info["attempts"] == 1
        assert info["retry_at"] is not None
        clock.advance(info["retry_at"] - clock.now() + 0.001)
        await kit.registry.wake("ticker", "coalesce")
        runs = await kit.call("ticker", "coalesce", "runs")
        assert runs == 1, "the failed attempt left nothing; the retry ran once"
        info = await kit.call("ticker", "coalesce", "info", "c")
        assert info is not None
        assert info["runs"] == 1
        assert info["next_fire"] > clock.now(), "no missed time is left to run"
        assert info["last_fire"] == start + 90, "the run was for the latest missed time"


def _utc_times(expr: str, start: datetime, n: int) -> list[str]:
    trigger = make_trigger(expr, now=0, tz="Europe/Paris")
    t = next_fire(trigger, previous=None, now=start.timestamp())
    out: list[str] = []
    while t is not None and len(out) < n:
        out.append(datetime.fromtimestamp(t, UTC).strftime("%d %H:%M"))
        t = next_fire(trigger, previous=t, now=t)
    return out


def test_fixed_hour_crons_fire_once_per_wall_time_in_a_fold_and_wildcard_hours_follow_real_time() -> None:
    start = datetime(2026, 10, 24, 22, 0, tzinfo=UTC)  # the fold: 2026-10-25 03:00 CEST -> 02:00 CET
    assert _utc_times("15,45 2 * * *", start, 4) == ["25 00:15", "25 00:45", "26 01:15", "26 01:45"]
    assert _utc_times("0 * * * *", start, 6) == [
        "24 22:00",
        "24 23:00",
        "25 00:00",
        "25 01:00",
        "25 02:00",
        "25 03:00",
    ]


async def test_the_dispatcher_survives_a_locked_directory_and_wakes_the_actor_afterwards(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory held by another process past the busy timeout fails one claim: the dispatcher logs
    it, waits a poll interval and claims again; it never dies (wake-ups would stop for good)."""
    caplog.set_level(logging.WARNING, logger="roost.dispatcher")
    clock = FakeClock()
    directory = Directory(tmp_path, busy_timeout=0.01)
    directory.register("counter", "x", "d", clock.now())
    directory.lower_alarm("counter", "x", clock.now() - 1)  # due
    woken: list[tuple[str, str]] = []
    done = asyncio.Event()

    async def wake(kind: str, name: str) -> None:
        woken.append((kind, name))
        directory.set_alarm(kind, name, None)
        done.set()

    other = sqlite3.connect(tmp_path / "directory.sqlite", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    dispatcher = Dispatcher(directory, wake, clock, poll_interval=1.0)
    task = asyncio.create_task(dispatcher.run())
    try:
        await until(lambda: dispatcher.failures >= 1 and clock.sleepers >= 1)
        assert not task.done(), "the dispatcher died"
        assert woken == []
        other.execute("COMMIT")  # the lock is gone
        clock.advance(1.0)
        async with asyncio.timeout(5):
            await done.wait()
        assert woken == [("counter", "x")]
        assert "wake-ups not claimed: the directory is busy" in caplog.text
    finally:
        other.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        directory.close()


async def test_a_dispatcher_claims_only_the_kinds_it_serves(tmp_path: Path) -> None:
    """An alarm of a kind this process does not serve (left on the data directory by another app, or
    served by another process on it) is never claimed, failed and deferred here, nor does it make the
    dispatcher spin: it stays due for whoever serves its kind. (It was claimed, failed with
    ``unknown_kind`` and deferred a second, logged every second for as long as the process ran.)"""
    clock = FakeClock()
    directory = Directory(tmp_path)
    directory.register("other", "y", "d", clock.now())
    directory.lower_alarm("other", "y", clock.now() - 5)  # due, of a kind not served here
    directory.register("counter", "x", "d", clock.now())
    directory.lower_alarm("counter", "x", clock.now() + 30)
    woken: list[tuple[str, str]] = []

    async def wake(kind: str, name: str) -> None:
        woken.append((kind, name))
        directory.set_alarm(kind, name, None)

    dispatcher = Dispatcher(directory, wake, clock, poll_interval=60.0, kinds=("counter",))
    assert directory.next_alarm(("counter",)) == clock.now() + 30
    task = asyncio.create_task(dispatcher.run())
    try:
        await until(lambda: clock.sleepers >= 1)
        assert dispatcher.sleeping_until == clock.now() + 30  # until its own kind's alarm
        clock.advance(30)
        await until(lambda: woken == [("counter", "x")])
        assert dispatcher.failures == 0
        assert directory.next_alarm() == clock.now() - 35  # the other kind's alarm: due, untouched
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        directory.close()


# -- finished schedules are bounded --------------------------------------------------------------------------
class Churner(Actor):
    """Makes one-off wake-ups by the thousand, as a busy agent's job leases do."""

    kind = "churner"

    @callable
    async def churn(self, n: int) -> None:
        for _ in range(n):  # each scheduled and cancelled: a finished schedule with no key
            s = await self.schedule(3600, "noop")
            await self.cancel_schedule(s.id)

    @callable
    async def keyed(self) -> str:
        return (await self.schedule(1, "noop", key="once")).id

    @callable
    async def finished(self) -> list[str]:
        return [s.id for s in await self.list_schedules(include_finished=True) if s.status != "active"]

    @wakeup
    async def noop(self, payload: Any) -> None:
        pass


async def test_finished_schedules_are_bounded(tmp_path: Path) -> None:
    """One-off wake-ups do not fill an actor's file: of the finished ones with no key only the newest
    KEEP_FINISHED stay (pruned every PRUNE_EVERY new schedules), while one whose key may still be asked
    for again stays for KEY_WINDOW — a repeated request within it is the same schedule — and is
    deleted after it."""
    clock = FakeClock()
    async with ActorKit([Churner], tmp_path / "data", clock=clock) as kit:
        sid = await kit.call("churner", "c", "keyed")
        clock.advance(2)
        await kit.fire_due("churner", "c")  # done, its key held for KEY_WINDOW
        await kit.call("churner", "c", "churn", KEEP_FINISHED + 3 * PRUNE_EVERY)
        finished = await kit.call("churner", "c", "finished")
        assert sid in finished
        assert len(finished) <= KEEP_FINISHED + PRUNE_EVERY + 1
        assert await kit.call("churner", "c", "keyed") == sid  # the key still answers a repeat
        clock.advance(KEY_WINDOW)
        await kit.call("churner", "c", "churn", PRUNE_EVERY)
        finished = await kit.call("churner", "c", "finished")
        assert sid not in finished
        assert len(finished) <= KEEP_FINISHED + PRUNE_EVERY
        assert await kit.call("churner", "c", "keyed") != sid  # the window passed: a new schedule


@pytest.mark.parametrize("yields", range(8))
async def test_time_advanced_while_the_dispatcher_goes_to_sleep_still_wakes_the_alarm(
    tmp_path: Path, yields: int
) -> None:
    """The dispatcher sleeps until an instant read with the time it claimed at, not for a span that
    starts whenever its sleep first runs: an ``advance`` that lands between its choosing how long to
    sleep and the sleep's start still fires the alarm. (The span was counted from after the advance,
    so the alarm waited for the next one, for ever in a test: the README's queue block hung.)"""
    clock = FakeClock()
    directory = Directory(tmp_path)
    directory.register("counter", "x", "d", clock.now())
    woken = asyncio.Event()

    async def wake(kind: str, name: str) -> None:
        directory.set_alarm(kind, name, None)
        woken.set()

    dispatcher = Dispatcher(directory, wake, clock, poll_interval=60.0)
    task = asyncio.get_running_loop().create_task(dispatcher.run())
    try:
        await until(lambda: dispatcher.sleeping_until < float("inf"))
        directory.lower_alarm("counter", "x", clock.now() + 1)
        dispatcher.notify(clock.now() + 1)  # as a turn that wrote the alarm does
        for _ in range(yields):  # the advance lands at each step of the dispatcher's going to sleep
            await asyncio.sleep(0)
        clock.advance(1)
        async with asyncio.timeout(5):
            await woken.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        directory.close()
