"""Durable wake-ups (``roost.scheduler.triggers``, ``roost.scheduler.dispatcher``, ``roost.actors.wakeups``).

Real SQLite files under ``tmp_path``; time moves only by ``FakeClock.advance``. After an advance the
dispatcher and the actors react while the test yields to the loop until they are done (``settle``), or
the test delivers a wake itself with ``registry.wake`` when it is about fire semantics. One actor name
per test. Instants in the DST tests are stated in UTC.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel

from roost.actors import Actor, RpcError, callable
from roost.actors.decorators import wakeup
from roost.actors.schedules import Misfire, RetryPolicy
from roost.examples.kinds import Counter
from roost.scheduler import FakeClock, TriggerError, interval_trigger, make_trigger, next_fire
from roost.testing import ActorKit

Frame = dict[str, Any]

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


# -- test actor kinds ----------------------------------------------------------------------------------------
class Item(BaseModel):
    sku: str
    qty: int


#: ``wakeup(model=...)`` is typed ``Any``; give the decorator a type so that the method stays typed.
wakeup_item: Callable[[Callable[..., Any]], Callable[..., Any]] = wakeup(model=Item)


class Waker(Actor):
    """Schedules its own wake-ups on request; its callbacks write a row, change state and obey the
    test (fail a number of times, wait on an event held by the test, hang forever)."""

    kind = "waker"
    initial_state = {"runs": 0}
    migrations = ("CREATE TABLE hits (id INTEGER PRIMARY KEY, tag TEXT, at REAL NOT NULL)",)

    failures: ClassVar[dict[str, int]] = {}  # how many more calls of `hit` raise, by actor name
    attempts: ClassVar[dict[str, int]] = {}  # how many times `hit` was entered
    gates: ClassVar[dict[str, asyncio.Event]] = {}
    running: ClassVar[dict[str, int]] = {}
    max_running: ClassVar[dict[str, int]] = {}
    payloads: ClassVar[dict[str, list[Any]]] = {}

    # -- control (callables) --
    @callable
    async def plan(
        self,
        when: Any,
        callback: str = "hit",
        payload: Any = None,
        key: str | None = None,
        misfire: str = "run_once",
        tz: str = "UTC",
        timeout: float | None = None,
        max_attempts: int = 5,
    ) -> dict[str, Any]:
        s = await self.schedule(
            when,
            callback,
            payload,
            key=key,
            misfire=Misfire(misfire),
            tz=tz,
            timeout=timeout,
            retry=RetryPolicy(max_attempts=max_attempts),
        )
        return s.to_json()

    @callable
    async def plan_every(
        self,
        interval: float,
        callback: str = "hit",
        payload: Any = None,
        key: str | None = None,
        misfire: str = "run_once",
        max_attempts: int = 5,
    ) -> dict[str, Any]:
        s = await self.schedule_every(
            interval,
            callback,
            payload,
            key=key,
            misfire=Misfire(misfire),
            retry=RetryPolicy(max_attempts=max_attempts),
        )
        return s.to_json()

    @callable
    async def cancel(self, id_or_key: str) -> bool:
        return await self.cancel_schedule(id_or_key)

    @callable
    async def info(self, id_or_key: str) -> dict[str, Any] | None:
        s = await self.get_schedule(id_or_key)
        return None if s is None else s.to_json()

    @callable
    async def listing(self, include_finished: bool = False) -> list[dict[str, Any]]:
        return [s.to_json() for s in await self.list_schedules(include_finished=include_finished)]

    @callable
    async def letters(self) -> list[dict[str, Any]]:
        return [
            {"schedule_id": d.schedule_id, "callback": d.callback, "attempts": d.attempts, "error": d.error}
            for d in await self.dead_letters()
        ]

    @callable
    async def fires(self) -> list[list[Any]]:
        return [
            [str(r[0]), float(r[1])]
            for r in self.sql.execute("SELECT schedule_id, nominal FROM roost_fires ORDER BY nominal")
        ]

    @callable
    async def hits(self) -> list[list[Any]]:
        return [[r[0], float(r[1])] for r in self.sql.execute("SELECT tag, at FROM hits ORDER BY id")]

    @callable
    async def runs(self) -> int:
        n: int = self.state["runs"]
        return n

    async def plain(self) -> None:
        """Not a wake-up."""

    # -- wake-ups --
    @wakeup
    async def hit(self, payload: Any) -> None:
        name = self.name
        self.attempts[name] = self.attempts.get(name, 0) + 1
        tag = payload.get("tag") if isinstance(payload, dict) else None
        self.sql.execute(
            "INSERT INTO hits (tag, at) VALUES (?, ?)", (tag, self.extension.process.clock.now())
        )
        self.set_state({"runs": self.state["runs"] + 1})
        if self.failures.get(name, 0) > 0:
            self.failures[name] -= 1
            raise RuntimeError("boom")

    @wakeup
    async def slow(self) -> None:
        name = self.name
        self.running[name] = self.running.get(name, 0) + 1
        self.max_running[name] = max(self.max_running.get(name, 0), self.running[name])
        try:
            await self.gates[name].wait()
        finally:
            self.running[name] -= 1
        self.set_state({"runs": self.state["runs"] + 1})

    @wakeup
    async def hang(self) -> None:
        self.sql.execute("INSERT INTO hits (tag, at) VALUES ('hang', 0)")
        await asyncio.Event().wait()

    @wakeup_item
    async def typed(self, item: Item) -> None:
        self.payloads.setdefault(self.name, []).append(item)
        self.set_state({"runs": self.state["runs"] + 1})


# -- helpers -------------------------------------------------------------------------------------------------
def make_kit(tmp_path: Path, *, start: float = T0, **config: Any) -> tuple[ActorKit, FakeClock]:
    clock = FakeClock(start)
    kit = ActorKit([Waker, Counter], tmp_path / "data", clock=clock, **config)
    kit.registry.rng = random.Random(1)
    return kit, clock


def _settled(kit: ActorKit) -> bool:
    reg = kit.registry
    d = reg.dispatcher
    if d is not None and d.busy:
        return False
    if not all(h.quiescent or h.stopping for h in reg.hosts.values()):
        return False
    assert reg.directory is not None
    nxt = reg.directory.next_alarm()
    return nxt is None or nxt > kit.clock.now()


async def settle(kit: ActorKit, rounds: int = 20_000) -> None:
    """Yield to the loop until the dispatcher has delivered every due alarm and every actor is idle."""
    for _ in range(rounds):
        await asyncio.sleep(0)
        if _settled(kit):
            for _ in range(5):  # a few more turns of the loop: nothing else becomes due
                await asyncio.sleep(0)
            if _settled(kit):
                return
    raise TimeoutError("the dispatcher and actors did not settle")


async def run_until(kit: ActorKit, clock: FakeClock, until: float, max_steps: int = 2000) -> None:
    """Move the clock alarm by alarm (each fire on time) up to ``until``."""
    directory = kit.registry.directory
    assert directory is not None
    await settle(kit)
    for _ in range(max_steps):
        nxt = directory.next_alarm()
        if nxt is None or nxt > until:
            clock.advance(max(0.0, until - clock.now()))
            await settle(kit)
            return
        clock.advance(max(0.0, nxt - clock.now()) + 0.001)
        await settle(kit)
    raise AssertionError("too many alarms")


def fire_times(trigger: dict[str, Any], start: float, n: int) -> list[float]:
    t = next_fire(trigger, previous=None, now=start)
    out: list[float] = []
    while t is not None and len(out) < n:
        out.append(t)
        t = next_fire(trigger, previous=t, now=t)
    return out


def weekdays(expr: str, n: int = 7) -> list[str]:
    start = utc(2026, 3, 29)  # a Sunday, 00:00 UTC
    return [
        datetime.fromtimestamp(t, UTC).strftime("%a") for t in fire_times(make_trigger(expr, now=0), start, n)
    ]


# -- 1. trigger maths ----------------------------------------------------------------------------------------
def test_seconds_trigger_fires_at_now_plus_seconds_sub_second_included() -> None:
    trigger = make_trigger(0.25, now=T0)
    assert trigger == {"type": "date", "at": T0 + 0.25}
    assert next_fire(trigger, previous=None, now=T0) == T0 + 0.25
    assert next_fire(trigger, previous=T0 + 0.25, now=T0 + 0.25) is None  # a date fires once


def test_aware_datetime_trigger_fires_at_its_instant() -> None:
    when = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    assert make_trigger(when, now=T0) == {"type": "date", "at": when.timestamp()}
    paris = when.astimezone(ZoneInfo("Europe/Paris"))
    assert make_trigger(paris, now=T0)["at"] == when.timestamp()


@pytest.mark.parametrize(
    "when",
    [datetime(2026, 3, 2, 9, 0), -1, -0.001, float("nan"), True],
)
def test_unschedulable_when_is_refused(when: Any) -> None:
    with pytest.raises(TriggerError):
        make_trigger(when, now=T0)


@pytest.mark.parametrize(
    "expr",
    ["* * * *", "* * * * * * *", "61 * * * *", "0 25 * * *", "0 9 * * 8", "nonsense x y z w", ""],
)
def test_invalid_cron_expression_raises_trigger_error(expr: str) -> None:
    with pytest.raises(TriggerError):
        make_trigger(expr, now=T0)


def test_unknown_time_zone_raises_trigger_error() -> None:
    with pytest.raises(TriggerError):
        make_trigger("0 9 * * *", now=T0, tz="Mars/Olympus_Mons")
    with pytest.raises(TriggerError):
        make_trigger("0 9 * * *", now=T0, tz="../etc/passwd")


def test_cron_five_fields_fires_on_the_minute() -> None:
    times = fire_times(make_trigger("*/15 * * * *", now=0), utc(2026, 3, 1, 12, 1), 3)
    assert times == [utc(2026, 3, 1, 12, 15), utc(2026, 3, 1, 12, 30), utc(2026, 3, 1, 12, 45)]


def test_cron_six_fields_has_seconds_first() -> None:
    times = fire_times(make_trigger("*/20 * * * * *", now=0), utc(2026, 3, 1, 12, 0, 1), 3)
    assert times == [utc(2026, 3, 1, 12, 0, 20), utc(2026, 3, 1, 12, 0, 40), utc(2026, 3, 1, 12, 1, 0)]


def test_crontab_weekdays_one_to_five_are_monday_to_friday() -> None:
    assert weekdays("0 9 * * 1-5", 6) == ["Mon", "Tue", "Wed", "Thu", "Fri", "Mon"]


@pytest.mark.parametrize("expr", ["0 9 * * 0", "0 9 * * 7", "0 9 * * sun"])
def test_crontab_zero_and_seven_are_sunday(expr: str) -> None:
    assert set(weekdays(expr, 3)) == {"Sun"}


@pytest.mark.parametrize("expr", ["0 9 * * 5-7", "0 9 * * fri-sun", "0 9 * * 5,6,0", "0 9 * * fri,sat,sun"])
def test_crontab_friday_to_sunday_in_numbers_or_names(expr: str) -> None:
    assert weekdays(expr, 6) == ["Sun", "Fri", "Sat", "Sun", "Fri", "Sat"]


def test_crontab_weekday_step_counts_from_sunday() -> None:
    # crontab: */2 over 0-6 is Sunday, Tuesday, Thursday, Saturday
    assert weekdays("0 9 * * */2", 4) == ["Sun", "Tue", "Thu", "Sat"]


def test_crontab_weekday_name_range_from_sunday() -> None:
    # crontab: sun-tue is 0-2, Sunday to Tuesday
    assert weekdays("0 9 * * sun-tue", 4) == ["Sun", "Mon", "Tue", "Sun"]


def test_interval_trigger_next_times_are_start_plus_multiples() -> None:
    trigger = interval_trigger(10, now=T0)
    assert trigger["start"] == T0 + 10
    assert fire_times(trigger, T0, 3) == [T0 + 10, T0 + 20, T0 + 30]
    assert next_fire(trigger, previous=T0 + 20, now=T0 + 55) == T0 + 30
    with pytest.raises(TriggerError):
        interval_trigger(0, now=T0)


# -- 2. DST in Europe/Paris ----------------------------------------------------------------------------------
def test_daily_wall_time_in_spring_gap_fires_once_at_end_of_gap_plus_offset() -> None:
    trigger = make_trigger("30 2 * * *", now=0, tz="Europe/Paris")
    times = fire_times(trigger, utc(2026, 3, 27, 12), 4)
    # 02:30 CET = 01:30 UTC; on the gap day 02:30 does not exist -> 03:30 CEST = 01:30 UTC; then CEST
    assert times == [
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 29, 1, 30),
        utc(2026, 3, 30, 0, 30),
        utc(2026, 3, 31, 0, 30),
    ]


def test_daily_wall_time_in_autumn_fold_fires_once_at_first_occurrence() -> None:
    trigger = make_trigger("30 2 * * *", now=0, tz="Europe/Paris")
    times = fire_times(trigger, utc(2026, 10, 23, 12), 4)
    # 02:30 CEST = 00:30 UTC; on 10-25 02:30 happens at 00:30 UTC (CEST) and 01:30 UTC (CET): once
    assert times == [
        utc(2026, 10, 24, 0, 30),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
        utc(2026, 10, 27, 1, 30),
    ]


def test_half_hourly_cron_through_fold_fires_every_real_half_hour_once() -> None:
    trigger = make_trigger("*/30 * * * *", now=0, tz="Europe/Paris")
    start = utc(2026, 10, 24, 22, 10)
    times = fire_times(trigger, start, 12)
    expected = [utc(2026, 10, 24, 22, 30) + 1800 * i for i in range(12)]
    assert times == expected


def test_half_hourly_cron_through_gap_fires_every_real_half_hour_once() -> None:
    trigger = make_trigger("*/30 * * * *", now=0, tz="Europe/Paris")
    times = fire_times(trigger, utc(2026, 3, 28, 22, 10), 10)
    assert times == [utc(2026, 3, 28, 22, 30) + 1800 * i for i in range(10)]


async def test_daily_paris_wake_up_fires_once_on_gap_day_end_to_end(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, start=utc(2026, 3, 27, 12))
    async with kit:
        await kit.call("waker", "dst-gap", "plan", "30 2 * * *", tz="Europe/Paris")
        await run_until(kit, clock, utc(2026, 3, 30, 12))
        fires = [n for _, n in await kit.call("waker", "dst-gap", "fires")]
        assert fires == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 30)]
        assert await kit.call("waker", "dst-gap", "runs") == 3


async def test_daily_paris_wake_up_fires_once_on_fold_day_end_to_end(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, start=utc(2026, 10, 23, 12))
    async with kit:
        await kit.call("waker", "dst-fold", "plan", "30 2 * * *", tz="Europe/Paris")
        await run_until(kit, clock, utc(2026, 10, 26, 12))
        fires = [n for _, n in await kit.call("waker", "dst-fold", "fires")]
        assert fires == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
        assert await kit.call("waker", "dst-fold", "runs") == 3


async def test_half_hourly_paris_wake_up_through_fold_runs_every_real_half_hour_end_to_end(
    tmp_path: Path,
) -> None:
    kit, clock = make_kit(tmp_path, start=utc(2026, 10, 24, 22, 10))
    async with kit:
        await kit.call("waker", "dst-half", "plan", "*/30 * * * *", tz="Europe/Paris")
        await run_until(kit, clock, utc(2026, 10, 25, 4, 10))
        fires = [n for _, n in await kit.call("waker", "dst-half", "fires")]
        assert fires == [utc(2026, 10, 24, 22, 30) + 1800 * i for i in range(12)]
        assert len(set(fires)) == len(fires)
        assert await kit.call("waker", "dst-half", "runs") == 12


# -- 3. idempotency ------------------------------------------------------------------------------------------
async def test_same_key_twice_gives_one_schedule_and_one_effect(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path)
    async with kit:
        first = await kit.call("counter", "idem", "increment_later", 1, 3, key="k")
        second = await kit.call("counter", "idem", "increment_later", 1, 3, key="k")
        assert first == second
        assert len(await kit.call("counter", "idem", "schedules")) == 1
        clock.advance(1.5)
        await settle(kit)
        assert await kit.call("counter", "idem", "get") == 3
        assert await kit.call("counter", "idem", "schedules") == []


# -- 4. exactly-once bookkeeping -----------------------------------------------------------------------------
async def test_fire_records_completion_and_advances_and_second_delivery_is_a_no_op(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, scheduler=False)
    async with kit:
        s = await kit.call("waker", "once", "plan_every", 10)
        clock.advance(10)
        assert await kit.registry.wake("waker", "once") == 1
        assert await kit.registry.wake("waker", "once") == 0
        assert await kit.call("waker", "once", "fires") == [[s["id"], T0 + 10]]
        info = await kit.call("waker", "once", "info", s["id"])
        assert info["next_fire"] == T0 + 20
        assert info["runs"] == 1
        assert info["last_fire"] == T0 + 10
        assert await kit.call("waker", "once", "runs") == 1
        assert len(await kit.call("waker", "once", "hits")) == 1


async def test_completion_row_stops_a_redelivered_fire(tmp_path: Path) -> None:
    """A fire whose completion row exists (a crash after the commit, the schedule not advanced in
    memory) only moves on: the effect is not applied twice."""
    kit, clock = make_kit(tmp_path, scheduler=False)
    async with kit:
        s = await kit.call("waker", "redeliver", "plan", 5)
        clock.advance(5)
        assert await kit.registry.wake("waker", "redeliver") == 1

        async def rewind(actor: Actor) -> None:  # as if the advance had been lost
            actor.extension.connection().execute(
                "UPDATE roost_schedules SET next_fire = ?, status = 'active' WHERE id = ?", (T0 + 5, s["id"])
            )

        await kit.registry.run("waker", "redeliver", rewind)
        await kit.registry.wake("waker", "redeliver")
        assert await kit.call("waker", "redeliver", "runs") == 1
        assert await kit.call("waker", "redeliver", "listing") == []


# -- 5. retries and dead letters -----------------------------------------------------------------------------
async def test_failing_callback_is_retried_after_backoff_and_applied_once(tmp_path: Path) -> None:
    name = "retry"
    Waker.failures[name] = 2
    kit, clock = make_kit(tmp_path)
    async with kit:
        s = await kit.call("waker", name, "plan", 5)
        clock.advance(5)
        await settle(kit)
        for attempt in (1, 2):
            info = await kit.call("waker", name, "info", s["id"])
            assert info["attempts"] == attempt
            assert info["last_error"] == "RuntimeError: boom"
            assert info["retry_at"] is not None
            assert info["retry_at"] >= clock.now()
            assert await kit.call("waker", name, "runs") == 0  # the failed attempt was rolled back
            assert await kit.call("waker", name, "hits") == []
            clock.advance(info["retry_at"] - clock.now() + 0.001)
            await settle(kit)
        assert Waker.attempts[name] == 3
        assert await kit.call("waker", name, "runs") == 1
        assert len(await kit.call("waker", name, "hits")) == 1
        info = await kit.call("waker", name, "info", s["id"])
        assert info["status"] == "done"
        assert info["runs"] == 1
        assert await kit.call("waker", name, "letters") == []


async def test_always_failing_callback_becomes_dead_letter_and_recurring_schedule_goes_on(
    tmp_path: Path,
) -> None:
    name = "dead"
    Waker.failures[name] = 10**6
    kit, clock = make_kit(tmp_path)
    async with kit:
        conn = kit.connect("waker", name)
        s = await kit.call("waker", name, "plan_every", 100, max_attempts=3)
        clock.advance(100)
        await settle(kit)
        for _ in range(2):
            info = await kit.call("waker", name, "info", s["id"])
            assert info["retry_at"] is not None
            clock.advance(info["retry_at"] - clock.now() + 0.001)
            await settle(kit)
        frame = await conn.wait_for(lambda f: f["type"] == "event" and f["event"]["type"] == "wakeup_dead")
        event = frame["event"]
        assert event["schedule_id"] == s["id"]
        assert event["attempts"] == 3
        assert event["nominal"] == T0 + 100
        assert event["error"] == "RuntimeError: boom"
        letters = await kit.call("waker", name, "letters")
        assert letters == [
            {"schedule_id": s["id"], "callback": "hit", "attempts": 3, "error": "RuntimeError: boom"}
        ]
        info = await kit.call("waker", name, "info", s["id"])
        assert info["status"] == "active"
        assert info["next_fire"] == T0 + 200
        assert info["retry_at"] is None
        assert info["attempts"] == 0
        assert Waker.attempts[name] == 3
        assert await kit.call("waker", name, "runs") == 0  # every failed attempt rolled back
        assert await kit.call("waker", name, "hits") == []


async def test_dead_letter_event_is_durable_for_a_later_connection(tmp_path: Path) -> None:
    name = "dead-durable"
    Waker.failures[name] = 10**6
    kit, clock = make_kit(tmp_path, scheduler=False)
    async with kit:
        await kit.call("waker", name, "plan", 1, max_attempts=1)
        clock.advance(1)
        await kit.registry.wake("waker", name)
        conn = kit.connect("waker", name, cursor=0)
        frame = await conn.wait_for(lambda f: f["type"] == "event" and f["event"]["type"] == "wakeup_dead")
        assert frame["event"]["attempts"] == 1
        schedules = await kit.call("waker", name, "listing", include_finished=True)
        assert [x["status"] for x in schedules] == ["dead"]


# -- 6. timeout ----------------------------------------------------------------------------------------------
async def test_callback_over_its_timeout_is_a_failed_attempt_and_actor_stays_responsive(
    tmp_path: Path,
) -> None:
    kit, clock = make_kit(tmp_path, scheduler=False)
    async with kit:
        s = await kit.call("waker", "timeout", "plan", 1, callback="hang", timeout=0.05)
        clock.advance(1)
        waking = asyncio.ensure_future(kit.registry.wake("waker", "timeout"))
        # the wake's own wait, the callback's timeout and the fire turn's deadline, on the clock
        await clock.armed(3)
        clock.advance(0.05)  # past the callback's timeout: nothing sleeps
        assert await waking == 1
        info = await kit.call("waker", "timeout", "info", s["id"])
        assert info["last_error"] == "timeout"
        assert info["attempts"] == 1
        assert info["retry_at"] is not None
        assert info["status"] == "active"
        assert await kit.call("waker", "timeout", "hits") == []  # its write was rolled back
        assert await kit.call("waker", "timeout", "runs") == 0


# -- 7. misfire policies -------------------------------------------------------------------------------------
async def _long_gap(tmp_path: Path, name: str, misfire: str) -> tuple[ActorKit, FakeClock, dict[str, Any]]:
    kit, clock = make_kit(tmp_path)
    await kit.__aenter__()
    s = await kit.call("waker", name, "plan_every", 10, misfire=misfire)
    await settle(kit)
    clock.advance(100)
    await settle(kit)
    return kit, clock, s


async def test_run_once_coalesces_missed_fires_into_one_run(tmp_path: Path) -> None:
    name = "mis-once"
    kit, _, s = await _long_gap(tmp_path, name, "run_once")
    try:
        conn = kit.connect("waker", name, cursor=0)
        frame = await conn.wait_for(
            lambda f: f["type"] == "event" and f["event"]["type"] == "wakeup_coalesced"
        )
        assert frame["event"]["missed"] == 10
        assert frame["event"]["run_for"] == T0 + 100
        assert await kit.call("waker", name, "runs") == 1
        assert [n for _, n in await kit.call("waker", name, "fires")] == [T0 + 100]
        info = await kit.call("waker", name, "info", s["id"])
        assert info["next_fire"] == T0 + 110
    finally:
        await kit.__aexit__(None, None, None)


async def test_run_all_runs_every_missed_fire_in_nominal_order(tmp_path: Path) -> None:
    name = "mis-all"
    kit, _, s = await _long_gap(tmp_path, name, "run_all")
    try:
        assert await kit.call("waker", name, "runs") == 10
        assert [n for _, n in await kit.call("waker", name, "fires")] == [T0 + 10 * i for i in range(1, 11)]
        info = await kit.call("waker", name, "info", s["id"])
        assert info["next_fire"] == T0 + 110
    finally:
        await kit.__aexit__(None, None, None)


async def test_skip_runs_nothing_and_records_how_many_were_missed(tmp_path: Path) -> None:
    name = "mis-skip"
    kit, clock, s = await _long_gap(tmp_path, name, "skip")
    try:
        conn = kit.connect("waker", name, cursor=0)
        frame = await conn.wait_for(lambda f: f["type"] == "event" and f["event"]["type"] == "wakeup_skipped")
        assert frame["event"]["missed"] == 10
        assert await kit.call("waker", name, "runs") == 0
        info = await kit.call("waker", name, "info", s["id"])
        assert info["next_fire"] == T0 + 110
        clock.advance(10)
        await settle(kit)
        assert await kit.call("waker", name, "runs") == 1  # continues on time
    finally:
        await kit.__aexit__(None, None, None)


# -- 8. no overlap -------------------------------------------------------------------------------------------
async def test_runs_of_one_schedule_never_overlap(tmp_path: Path) -> None:
    name = "overlap"
    gate = Waker.gates[name] = asyncio.Event()
    kit, clock = make_kit(tmp_path, turn_timeout=10_000)
    async with kit:
        s = await kit.call("waker", name, "plan_every", 10, callback="slow")
        clock.advance(10)
        for _ in range(1000):
            await asyncio.sleep(0)
            if Waker.running.get(name) == 1:
                break
        assert Waker.running.get(name) == 1
        for _ in range(5):  # more periods pass while the first run is still running
            clock.advance(10)
            for _ in range(50):
                await asyncio.sleep(0)
        assert Waker.max_running[name] == 1
        gate.set()
        await settle(kit)
        assert Waker.max_running[name] == 1
        info = await kit.call("waker", name, "info", s["id"])
        assert info["next_fire"] > clock.now()
        assert await kit.call("waker", name, "runs") >= 2  # the late one ran after (coalesced)


# -- 9. payload model ----------------------------------------------------------------------------------------
async def test_model_payload_is_validated_at_schedule_time_and_arrives_as_model(tmp_path: Path) -> None:
    name = "typed"
    kit, clock = make_kit(tmp_path)
    async with kit:
        with pytest.raises(RpcError):
            await kit.call("waker", name, "plan", 1, callback="typed", payload={"sku": "a", "qty": "many"})
        assert await kit.call("waker", name, "listing") == []
        await kit.call("waker", name, "plan", 1, callback="typed", payload={"sku": "a", "qty": 2})
        clock.advance(1)
        await settle(kit)
        assert Waker.payloads[name] == [Item(sku="a", qty=2)]
        assert isinstance(Waker.payloads[name][0], Item)


# -- 10. control records -------------------------------------------------------------------------------------
async def test_cancel_by_id_and_by_key_and_list_is_soonest_first(tmp_path: Path) -> None:
    name = "control"
    kit, clock = make_kit(tmp_path)
    async with kit:
        a = await kit.call("waker", name, "plan", 30)
        b = await kit.call("waker", name, "plan", 10, key="kb")
        c = await kit.call("waker", name, "plan", 20)
        assert [x["id"] for x in await kit.call("waker", name, "listing")] == [b["id"], c["id"], a["id"]]
        assert await kit.call("waker", name, "cancel", "kb") is True
        assert await kit.call("waker", name, "cancel", a["id"]) is True
        assert await kit.call("waker", name, "cancel", a["id"]) is False
        assert await kit.call("waker", name, "cancel", "nope") is False
        assert [x["id"] for x in await kit.call("waker", name, "listing")] == [c["id"]]
        statuses = {
            x["id"]: x["status"] for x in await kit.call("waker", name, "listing", include_finished=True)
        }
        assert statuses == {a["id"]: "cancelled", b["id"]: "cancelled", c["id"]: "active"}
        clock.advance(31)
        await settle(kit)
        assert await kit.call("waker", name, "runs") == 1


async def test_get_schedule_returns_the_control_record(tmp_path: Path) -> None:
    name = "record"
    kit, _ = make_kit(tmp_path)
    async with kit:
        s = await kit.call(
            "waker", name, "plan", "0 9 * * 1-5", key="daily", misfire="skip", tz="Europe/Paris"
        )
        info = await kit.call("waker", name, "info", "daily")
        assert info == await kit.call("waker", name, "info", s["id"])
        assert info["key"] == "daily"
        assert info["callback"] == "hit"
        assert info["trigger"] == {"type": "cron", "expr": "0 9 * * 1-5", "tz": "Europe/Paris"}
        assert info["misfire"] == "skip"
        assert info["status"] == "active"
        assert info["trace_id"] != ""
        assert info["created_at"] == T0
        assert info["next_fire"] == utc(2026, 3, 2, 8)  # Monday 09:00 CET
        assert info["attempts"] == 0
        assert info["runs"] == 0
        assert await kit.call("waker", name, "info", "missing") is None


@pytest.mark.parametrize("callback", ["plain", "_secret", "runs", "missing"])
async def test_scheduling_a_method_that_is_not_a_wakeup_is_refused(tmp_path: Path, callback: str) -> None:
    kit, _ = make_kit(tmp_path)
    async with kit:
        with pytest.raises(RpcError):
            await kit.call("waker", f"refuse-{callback.strip('_')}", "plan", 1, callback=callback)
        assert await kit.call("waker", f"refuse-{callback.strip('_')}", "listing") == []


def test_private_method_cannot_be_marked_wakeup() -> None:
    async def _hidden(self: Any) -> None: ...

    with pytest.raises(ValueError, match="private"):
        wakeup(_hidden)


# -- 11. dormant actors --------------------------------------------------------------------------------------
async def test_dispatcher_activates_a_dormant_actor_when_its_wake_up_is_due(tmp_path: Path) -> None:
    name = "dormant"
    kit, clock = make_kit(tmp_path, idle_timeout=10)
    async with kit:
        await kit.call("waker", name, "plan", 100)
        await kit.call("waker", name, "plan_every", 200, key="every")
        await settle(kit)
        clock.advance(11)
        kit.registry.sweep()
        assert ("waker", name) not in kit.registry.hosts
        directory = kit.registry.directory
        assert directory is not None
        entry = directory.get("waker", name)
        assert entry is not None
        assert entry.next_alarm_at == T0 + 100
        clock.advance(100 - 11)
        await settle(kit)
        entry = directory.get("waker", name)
        assert entry is not None
        assert entry.next_alarm_at == T0 + 200
        assert await kit.call("waker", name, "runs") == 1
        await kit.call("waker", name, "cancel", "every")
        await settle(kit)
        entry = directory.get("waker", name)
        assert entry is not None
        assert entry.next_alarm_at is None


# -- 12. directory alarm invariant ---------------------------------------------------------------------------
async def test_directory_alarm_is_never_later_than_the_actor_earliest_wake_up(tmp_path: Path) -> None:
    name = "alarm"
    kit, _ = make_kit(tmp_path)
    async with kit:
        directory = kit.registry.directory
        assert directory is not None
        seen: list[float | None] = []

        async def schedule_and_look(actor: Actor) -> None:
            await actor.schedule(5, "hit")
            await actor.schedule(50, "hit", key="later")

        await kit.registry.run("waker", name, schedule_and_look)
        nxt = directory.next_alarm()
        seen.append(nxt)
        assert nxt is not None
        assert nxt <= T0 + 5
        first = (await kit.call("waker", name, "listing"))[0]
        await kit.call("waker", name, "cancel", first["id"])
        await settle(kit)
        assert directory.next_alarm() == T0 + 50
        await kit.call("waker", name, "cancel", "later")
        await settle(kit)
        assert directory.next_alarm() is None
