"""Outside steps that report while they run, and share the actor's concurrency slots, in process:
progress (``StepAttempt.progress``) shown while an attempt runs, fenced like its outcome, checked before
any turn, a checkpoint handed to the step's later attempts; an attempt's own fenced turns
(``StepAttempt.turn``); slots (``step.external(..., slot=)``) that never run more than their limit.

Real SQLite files, a ``FakeClock`` for the retry's delay; every wait is on a condition (``until``) or an
``asyncio.Event`` the test sets.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import pytest

from roost.actors import Actor, RetryPolicy, RpcError, callable
from roost.scheduler.clock import FakeClock
from roost.storage import Migration
from roost.testing import ActorKit, until
from roost.workflows import (
    MAX_LOST_RUNS,
    MAX_RESULT_BYTES,
    AttemptSuperseded,
    NonRetryable,
    Step,
    StepAttempt,
    StepFailed,
    Workflows,
    workflow,
)
from roost.workflows.runner import runner


class Mover(Workflows):
    """``move`` moves ``items`` items in an outside step, reporting each with a checkpoint; the test
    holds the step after ``hold_at`` items (until ``go`` is set) and makes its first attempt fail after
    ``fail_at`` items."""

    kind = "mover"
    workflow_lease = 30.0
    migrations: ClassVar[Sequence[Migration]] = ("CREATE TABLE moved (item INTEGER NOT NULL)",)

    workflow_slots = {"heavy": 1, "pair": 2, "solo": 1}

    go: ClassVar[asyncio.Event]
    attempts: ClassVar[list[StepAttempt]] = []
    #: per workflow id: set to let its ``heavy`` step end; what those steps did, in order
    gates: ClassVar[dict[str, asyncio.Event]] = {}
    ran: ClassVar[list[tuple[str, str]]] = []
    #: workflows whose body raises on its next replay; whose end hook raises; the slot a body asks
    broken: ClassVar[set[str]] = set()
    hook_raises: ClassVar[set[str]] = set()
    slot_of: ClassVar[dict[str, str]] = {}

    async def on_workflow_end(self, workflow: dict[str, Any]) -> None:
        if workflow["id"] in Mover.hook_raises:
            raise RuntimeError("the end hook failed")

    @workflow
    async def move(self, step: Step, spec: dict[str, Any]) -> Any:
        retry = RetryPolicy(max_attempts=3, base=1.0, cap=1.0)
        return await step.external("move", lambda a: _move(a, spec), retry=retry)

    @callable(readonly=True)
    async def moved(self) -> list[int]:
        return [int(r[0]) for r in self.sql.execute("SELECT item FROM moved ORDER BY item")]

    @workflow
    async def copy(self, step: Step, spec: dict[str, Any]) -> Any:
        return await step.external("copy", lambda a: _copy(a, spec), retry=RetryPolicy(max_attempts=1))

    @workflow
    async def heavy(self, step: Step, spec: dict[str, Any]) -> Any:
        retry = RetryPolicy(max_attempts=2, base=1.0, cap=1.0)
        wid = step.workflow_id
        if wid in Mover.broken:
            raise RuntimeError("the body broke on replay")
        slot = Mover.slot_of.get(wid, spec.get("slot", "heavy"))
        try:
            return await step.external("work", lambda a: _work(a, spec), slot=slot, retry=retry)
        except StepFailed as exc:
            await step.do("after", lambda: None)  # the body goes on past a step lost for good
            if spec.get("then_wait"):
                await step.wait_for_event("again")
            return exc.error

    @workflow
    async def fan_retry(self, step: Step, spec: dict[str, Any]) -> Any:
        retry = RetryPolicy(max_attempts=2, base=1.0, cap=1.0)
        return await step.parallel("fan", {"left": lambda a: _move(a, spec)}, retry=retry)

    @workflow
    async def fan_fails(self, step: Step, spec: dict[str, Any]) -> Any:
        async def refused(a: StepAttempt) -> None:
            await Mover.go.wait()
            raise NonRetryable("refused")

        try:
            return await step.parallel("fan", {"left": lambda a: _move(a, spec), "right": refused})
        except StepFailed as exc:
            return exc.error

    @workflow
    async def fan(self, step: Step, spec: dict[str, Any]) -> Any:
        return await step.parallel("fan", {"left": lambda a: _move(a, spec), "right": lambda a: _move(a, {})})


async def _move(attempt: StepAttempt, spec: dict[str, Any]) -> dict[str, Any]:
    Mover.attempts.append(attempt)
    items = int(spec.get("items", 1))
    start = int(attempt.checkpoint or 0)
    if spec.get("pause_rerun") and (attempt.attempt, attempt.run) != (1, 1):
        await Mover.go.wait()
    for i in range(start, items):
        await attempt.progress(i + 1, items, f"item {i + 1}", checkpoint=i + 1)
        if spec.get("fail_at") == i + 1 and attempt.attempt == 1:
            raise ConnectionError("the far side went away")
        if spec.get("hold_at") == i + 1:
            await Mover.go.wait()
            if spec.get("fail_after_hold") and attempt.attempt == 1:
                raise ConnectionError("lost the far side while held")
    return {"started_from": start, "attempt": attempt.attempt}


async def _copy(attempt: StepAttempt, spec: dict[str, Any]) -> list[list[Any]]:
    """Each item a row of ``moved`` and an event, in a turn of the attempt; item ``fail_at`` writes its
    row and then raises inside the turn (the attempt catches it and goes on)."""
    Mover.attempts.append(attempt)
    failed: list[list[Any]] = []
    for i in range(1, int(spec["items"]) + 1):

        async def write(actor: Actor, i: int = i) -> int:
            actor.sql.execute("INSERT INTO moved (item) VALUES (?)", (i,))
            if i == spec.get("fail_at"):
                raise RpcError("bad_item", f"item {i} is bad")
            return actor.emit({"copied": i})

        try:
            await attempt.turn(write)
        except RpcError as exc:
            failed.append([i, exc.code])
        if i == spec.get("hold_at"):
            await Mover.go.wait()
    return failed


async def _work(attempt: StepAttempt, spec: dict[str, Any]) -> str:
    wid = attempt.workflow_id
    Mover.ran.append(("start", wid))
    gate = Mover.gates.setdefault(wid, asyncio.Event())
    await gate.wait()
    gate.clear()
    Mover.ran.append(("end", wid))
    if spec.get("fail_first") and attempt.attempt == 1:
        raise ConnectionError("try again")
    return wid


@pytest.fixture(autouse=True)
def _fresh() -> None:
    Mover.go = asyncio.Event()
    Mover.attempts = []
    Mover.gates = {}
    Mover.ran = []
    Mover.broken = set()
    Mover.hook_raises = set()
    Mover.slot_of = {}


async def _status(kit: ActorKit, wid: str) -> dict[str, Any]:
    result: dict[str, Any] = await kit.call("mover", "m1", "workflow_status", wid)
    return result


async def _backing_off(kit: ActorKit, wid: str) -> dict[str, Any] | None:
    """The workflow's status while a failed attempt waits for its retry (None otherwise)."""
    status = await _status(kit, wid)
    return status if (status["waiting"] or {}).get("why") == "retry" else None


async def _reported(kit: ActorKit, wid: str, done: int) -> dict[str, Any] | None:
    status = await _status(kit, wid)
    progress = status["steps"][0]["progress"] if status["steps"] else None
    return status if progress is not None and progress["done"] == done else None


async def test_a_running_attempts_progress_is_shown_in_workflow_status(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "move", {"items": 3, "hold_at": 2}, "w1")
        status = await until(lambda: _reported(kit, "w1", 2))
        step = status["steps"][0]
        assert step["status"] == "running"
        assert step["progress"] == {"done": 2, "total": 3, "message": "item 2", "at": clock.now()}
        Mover.go.set()
        status = await until(lambda: _reported(kit, "w1", 3))
        await until(lambda: _ended(kit, "w1"))
        status = await _status(kit, "w1")
        assert status["result"] == {"started_from": 0, "attempt": 1}
        assert status["steps"][0]["progress"]["message"] == "item 3", "the last report stays shown"
        page = await kit.call("mover", "m1", "workflow_history", "w1")
        assert "progress" not in {e["event"] for e in page["entries"]}, "a report is not a history line"


async def _ended(kit: ActorKit, wid: str) -> bool:
    return (await _status(kit, wid))["status"] in ("completed", "failed")


async def test_a_checkpoint_outlives_the_attempt_and_reaches_the_next(data_dir: Path) -> None:
    """The first attempt saves checkpoints 1 and 2 and fails; the second starts from 2, its step's
    report cleared when it started."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        spec = {"items": 4, "fail_at": 2, "pause_rerun": True}
        await kit.call("mover", "m1", "start_workflow", "move", spec, "w1")

        status = await until(partial(_backing_off, kit, "w1"))
        assert status["steps"][0]["progress"]["done"] == 2
        clock.advance(status["waiting"]["until"] - clock.now())
        await kit.fire_due("mover", "m1")
        await until(lambda: len(Mover.attempts) == 2)
        assert Mover.attempts[1].checkpoint == 2
        step = (await _status(kit, "w1"))["steps"][0]
        assert (step["attempt"], step["status"], step["progress"]) == (2, "running", None)
        Mover.go.set()
        status = await until(lambda: _reported(kit, "w1", 4))
        await until(lambda: _ended(kit, "w1"))
        assert (await _status(kit, "w1"))["result"] == {"started_from": 2, "attempt": 2}


async def test_a_report_is_fenced_as_the_outcome_is(data_dir: Path) -> None:
    """A report of an attempt that is no longer current (its workflow cancelled, then started again
    under the same id) raises ``AttemptSuperseded`` and changes nothing."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "move", {"items": 2, "hold_at": 1}, "w1")
        await until(lambda: _reported(kit, "w1", 1))
        stale = Mover.attempts[0]
        await kit.call("mover", "m1", "cancel_workflow", "w1")
        with pytest.raises(AttemptSuperseded):
            await stale.progress(2, 2, "too late", checkpoint=99)
        status = await _status(kit, "w1")
        assert status["status"] == "cancelled"
        assert status["steps"][0]["progress"]["message"] == "item 1"
        await kit.call("mover", "m1", "restart_workflow", "w1")
        await until(lambda: len(Mover.attempts) == 2)
        assert Mover.attempts[1].checkpoint is None, "a restart begins anew: no checkpoint of before"
        with pytest.raises(AttemptSuperseded):
            await stale.progress(2, 2, "from the old generation")
        again = await until(lambda: _reported(kit, "w1", 1))
        assert again["generation"] == 2
        Mover.go.set()
        await until(lambda: _ended(kit, "w1"))


async def test_a_lost_runs_checkpoint_reaches_its_rerun_and_its_late_reports_are_refused(
    data_dir: Path,
) -> None:
    """Run 1 saves checkpoints 1 and 2 and is lost with its task (here: cancelled); the lease wake-up
    declares it lost and run 2 of the same attempt starts from 2. Run 1's late report is refused."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "move", {"items": 3, "hold_at": 2}, "w1")
        await until(lambda: _reported(kit, "w1", 2))
        work = runner(_process(kit))
        for task in list(work.tasks.values()):
            task.cancel()
        await until(lambda: not work.tasks)
        clock.advance(Mover.workflow_lease)
        await kit.fire_due("mover", "m1")
        await until(lambda: _ended(kit, "w1"))
        lost, rerun = Mover.attempts
        assert (rerun.attempt, rerun.run, rerun.checkpoint) == (1, 2, 2)
        assert rerun.idempotency_key == lost.idempotency_key
        assert (await _status(kit, "w1"))["result"] == {"started_from": 2, "attempt": 1}
        with pytest.raises(AttemptSuperseded):
            await lost.progress(3, 3, "late")
        assert (await _status(kit, "w1"))["steps"][0]["progress"]["message"] == "item 3"


async def test_a_lease_wake_up_of_a_workflow_deleted_and_started_again_is_not_the_new_ones(
    data_dir: Path,
) -> None:
    """A workflow cancelled while its outside step runs, deleted, and started again under its id 20 s
    later: the old run's lease wake-up, still pending, is dropped (it names the old workflow's
    nonce), and the new run, lost with its task, is declared lost when its own lease ends, not when
    the old one's did."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "move", {"items": 2, "hold_at": 1}, "w1")
        await until(lambda: _reported(kit, "w1", 1))
        await kit.call("mover", "m1", "cancel_workflow", "w1")
        assert await kit.call("mover", "m1", "delete_workflow", "w1")
        clock.advance(20)
        await kit.call("mover", "m1", "start_workflow", "move", {"items": 2, "hold_at": 1}, "w1")
        await until(lambda: _reported(kit, "w1", 1))
        work = runner(_process(kit))
        for task in list(work.tasks.values()):
            task.cancel()
        await until(lambda: not work.tasks)
        clock.advance(Mover.workflow_lease - 20)  # the old run's lease is up, the new run's is not
        await kit.fire_due("mover", "m1")
        step = (await _status(kit, "w1"))["steps"][0]
        assert (step["status"], step["run"]) == ("running", 1), "looked at by the old run's wake-up"
        clock.advance(20)  # now the new run's own lease is up
        await kit.fire_due("mover", "m1")
        Mover.go.set()
        await until(lambda: _ended(kit, "w1"))
        rerun = Mover.attempts[-1]
        assert (rerun.attempt, rerun.run, rerun.checkpoint) == (1, 2, 1)
        history = await kit.call("mover", "m1", "workflow_history", "w1")
        assert [e["event"] for e in history["entries"]].count("attempt_lost") == 1


async def test_a_branch_lease_wake_up_of_a_workflow_deleted_and_started_again_is_not_the_new_ones(
    data_dir: Path,
) -> None:
    """As for a plain outside step, for a branch of a join: the old branch run's lease wake-up is
    dropped, and the new branch run, lost with its task, is declared lost at its own lease's end."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:

        async def left_reported() -> dict[str, Any] | None:
            status = await _status(kit, "w1")
            rows = status["steps"][0].get("branches", []) if status["steps"] else []
            left = [b for b in rows if b["branch"] == "left"]
            return left[0] if left and left[0]["progress"] is not None else None

        await kit.call("mover", "m1", "start_workflow", "fan", {"items": 2, "hold_at": 1}, "w1")
        await until(left_reported)
        await kit.call("mover", "m1", "cancel_workflow", "w1")
        assert await kit.call("mover", "m1", "delete_workflow", "w1")
        clock.advance(20)
        await kit.call("mover", "m1", "start_workflow", "fan", {"items": 2, "hold_at": 1}, "w1")
        await until(left_reported)
        work = runner(_process(kit))
        for task in list(work.tasks.values()):
            task.cancel()
        await until(lambda: not work.tasks)
        clock.advance(Mover.workflow_lease - 20)  # the old run's lease is up, the new run's is not
        await kit.fire_due("mover", "m1")
        left = await left_reported()
        assert left is not None
        assert (left["status"], left["run"]) == ("running", 1), "looked at by the old run's wake-up"
        clock.advance(20)
        await kit.fire_due("mover", "m1")
        Mover.go.set()
        await until(lambda: _ended(kit, "w1"))
        assert (await _status(kit, "w1"))["result"]["left"] == {"started_from": 1, "attempt": 1}


def _process(kit: ActorKit) -> Any:
    host = next(iter(kit.registry.hosts.values()))
    return host.actor.extension.process


async def test_a_bad_report_is_refused_before_any_turn(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "move", {"items": 2, "hold_at": 1}, "w1")
        await until(lambda: _reported(kit, "w1", 1))
        live = Mover.attempts[0]
        for done, total in ((math.nan, 2), (1, math.inf), (-1, 2), (True, 2), (2**64, None), (10**400, 1)):
            with pytest.raises((ValueError, TypeError)):
                await live.progress(done, total)
        with pytest.raises(TypeError):
            await live.progress(1, 2, message=b"bytes")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await live.progress(1, 2, checkpoint={1, 2})
        with pytest.raises(RpcError) as too_large:
            await live.progress(1, 2, checkpoint="x" * MAX_RESULT_BYTES)
        assert too_large.value.code == "too_large"
        status = await _status(kit, "w1")
        assert status["steps"][0]["progress"]["message"] == "item 1", "nothing of a bad report recorded"
        await live.progress(1, None, "x" * 5000)  # total unknown; a long message is cut
        status = await _status(kit, "w1")
        assert status["steps"][0]["progress"]["total"] is None
        assert len(status["steps"][0]["progress"]["message"]) == 1000
        Mover.go.set()
        await until(lambda: _ended(kit, "w1"))
        assert (await _status(kit, "w1"))["result"] == {"started_from": 0, "attempt": 1}


async def test_a_branch_shows_its_own_progress(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "fan", {"items": 3, "hold_at": 2}, "w1")

        async def shown() -> dict[str, Any] | None:
            status = await _status(kit, "w1")
            rows = status["steps"][0].get("branches", []) if status["steps"] else []
            branches = {b["branch"]: b for b in rows}
            left = (branches.get("left") or {}).get("progress")
            return branches if left is not None and left["done"] == 2 else None

        branches = await until(shown)
        assert branches["left"]["progress"]["message"] == "item 2"
        Mover.go.set()
        await until(lambda: _ended(kit, "w1"))
        status = await _status(kit, "w1")
        assert status["result"] == {
            "left": {"started_from": 0, "attempt": 1},
            "right": {"started_from": 0, "attempt": 1},
        }
        assert {b["branch"]: b["progress"]["done"] for b in status["steps"][0]["branches"]} == {
            "left": 3,
            "right": 1,
        }


async def test_an_attempts_turn_commits_its_writes_and_events_before_it_returns(data_dir: Path) -> None:
    """``StepAttempt.turn``: the rows and events of the items done so far are committed and sent while
    the attempt still runs; a raise inside a turn rolls that turn's row back and reaches the attempt."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        watcher = kit.connect("mover", "m1")
        await kit.call(
            "mover", "m1", "start_workflow", "copy", {"items": 4, "fail_at": 2, "hold_at": 3}, "w1"
        )
        await watcher.wait_for(lambda f: f.get("type") == "event" and f["event"] == {"copied": 3})
        assert await kit.call("mover", "m1", "moved") == [1, 3], "item 2's row went with its turn's raise"
        assert (await _status(kit, "w1"))["steps"][0]["status"] == "running"
        Mover.go.set()
        await until(lambda: _ended(kit, "w1"))
        assert (await _status(kit, "w1"))["result"] == [[2, "bad_item"]]
        events = [f["event"]["copied"] for f in watcher.frames if "copied" in (f.get("event") or {})]
        assert events == [1, 3, 4]


async def test_a_superseded_attempts_turn_is_refused_without_running(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "copy", {"items": 2, "hold_at": 1}, "w1")
        await until(lambda: _moved(kit, [1]))
        stale = Mover.attempts[0]
        await kit.call("mover", "m1", "cancel_workflow", "w1")
        ran: list[int] = []

        async def late(actor: Actor) -> None:
            ran.append(1)
            actor.sql.execute("INSERT INTO moved (item) VALUES (99)")

        with pytest.raises(AttemptSuperseded):
            await stale.turn(late)
        assert ran == []
        assert await kit.call("mover", "m1", "moved") == [1]


async def _moved(kit: ActorKit, items: list[int]) -> bool:
    return bool(await kit.call("mover", "m1", "moved") == items)


def _open(wid: str) -> None:
    Mover.gates.setdefault(wid, asyncio.Event()).set()


async def _waiting_for_slot(kit: ActorKit, wid: str) -> bool:
    waiting = (await _status(kit, wid))["waiting"] or {}
    return waiting.get("why") == "slot"


async def test_a_slot_never_runs_more_than_its_limit_and_admits_the_oldest_first(data_dir: Path) -> None:
    """``heavy`` (limit 1): w1 runs; w2 and w3 wait, in that order; each end starts the next in the
    same turn that records it."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        for wid in ("w1", "w2", "w3"):
            await kit.call("mover", "m1", "start_workflow", "heavy", {}, wid)
            clock.advance(1)
        await until(lambda: Mover.ran == [("start", "w1")])
        for wid in ("w2", "w3"):
            assert await _waiting_for_slot(kit, wid)
            step = (await _status(kit, wid))["steps"][0]
            assert (step["status"], step["slot"]) == ("waiting", "heavy")
        _open("w1")
        await until(lambda: _ended(kit, "w1"))
        assert Mover.ran[:3] == [("start", "w1"), ("end", "w1"), ("start", "w2")]
        assert await _waiting_for_slot(kit, "w3")
        _open("w2")
        await until(lambda: _ended(kit, "w2"))
        _open("w3")
        await until(lambda: _ended(kit, "w3"))
        assert Mover.ran == [(what, w) for w in ("w1", "w2", "w3") for what in ("start", "end")]
        page = await kit.call("mover", "m1", "workflow_history", "w2")
        assert "slot_waiting" in [e["event"] for e in page["entries"]]


async def test_a_slot_of_two_runs_two(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        for wid in ("w1", "w2", "w3"):
            await kit.call("mover", "m1", "start_workflow", "heavy", {"slot": "pair"}, wid)
        await until(lambda: sorted(Mover.ran) == [("start", "w1"), ("start", "w2")])
        assert await _waiting_for_slot(kit, "w3")
        _open("w2")
        await until(lambda: ("start", "w3") in Mover.ran)
        assert (await _status(kit, "w1"))["steps"][0]["status"] == "running"
        _open("w1")
        _open("w3")
        for wid in ("w1", "w2", "w3"):
            await until(partial(_ended, kit, wid))


async def test_cancel_restart_and_retry_free_a_place(data_dir: Path) -> None:
    """A cancelled workflow's running step frees its place; a restarted one queues behind those that
    waited before it; an attempt that failed queues again for its retry."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "heavy", {}, "w1")
        clock.advance(1)
        await kit.call("mover", "m1", "start_workflow", "heavy", {"fail_first": True}, "w2")
        clock.advance(1)
        await kit.call("mover", "m1", "start_workflow", "heavy", {}, "w3")
        await until(lambda: Mover.ran == [("start", "w1")])
        await kit.call("mover", "m1", "cancel_workflow", "w1")
        await until(lambda: Mover.ran[-1] == ("start", "w2"))
        assert await _waiting_for_slot(kit, "w3")
        await kit.call("mover", "m1", "restart_workflow", "w2")  # its new generation queues behind w3
        await until(lambda: Mover.ran[-1] == ("start", "w3"))
        assert await _waiting_for_slot(kit, "w2")
        _open("w3")
        await until(lambda: _ended(kit, "w3"))
        await until(lambda: Mover.ran[-1] == ("start", "w2"))
        _open("w2")  # its first attempt fails: the place is free while it backs off

        status = await until(partial(_backing_off, kit, "w2"))
        await kit.call("mover", "m1", "start_workflow", "heavy", {}, "w4")
        await until(lambda: Mover.ran[-1] == ("start", "w4"))
        clock.advance(status["waiting"]["until"] - clock.now())
        await kit.fire_due("mover", "m1")
        assert await _waiting_for_slot(kit, "w2"), "the retry queues behind w4, which holds the place"
        _open("w4")
        await until(lambda: Mover.ran[-1] == ("start", "w2"))
        _open("w2")
        await until(lambda: _ended(kit, "w2"))
        assert (await _status(kit, "w2"))["result"] == "w2"
        assert (await _status(kit, "w1"))["status"] == "cancelled"


async def test_a_step_in_an_undeclared_slot_fails_its_workflow(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        status = await kit.call("mover", "m1", "start_workflow", "heavy", {"slot": "nope"}, "w1")
        assert (status["status"], status["reason"]) == ("failed", "error")
        assert "no workflow slot 'nope'" in status["error"]
        assert Mover.ran == []


async def test_a_report_without_a_checkpoint_keeps_the_steps(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        spec = {"items": 2, "hold_at": 1, "fail_after_hold": True}
        await kit.call("mover", "m1", "start_workflow", "move", spec, "w1")
        await until(lambda: _reported(kit, "w1", 1))  # checkpoint 1 saved with it
        await Mover.attempts[0].progress(1, 2, "still on item 1")  # no checkpoint: the step's stays
        Mover.go.set()  # the first attempt fails

        status = await until(partial(_backing_off, kit, "w1"))
        clock.advance(status["waiting"]["until"] - clock.now())
        await kit.fire_due("mover", "m1")
        await until(lambda: _ended(kit, "w1"))
        assert Mover.attempts[1].checkpoint == 1
        assert (await _status(kit, "w1"))["result"] == {"started_from": 1, "attempt": 2}


async def test_a_ticket_of_a_deleted_workflow_is_not_current_in_one_started_again_under_its_id(
    data_dir: Path,
) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "move", {"items": 2, "hold_at": 1}, "w1")
        await until(lambda: _reported(kit, "w1", 1))
        old = Mover.attempts[0]
        await kit.call("mover", "m1", "cancel_workflow", "w1")
        await kit.call("mover", "m1", "delete_workflow", "w1")
        Mover.go = asyncio.Event()
        await kit.call("mover", "m1", "start_workflow", "move", {"items": 2, "hold_at": 1}, "w1")
        await until(lambda: len(Mover.attempts) == 2)
        await until(lambda: _reported(kit, "w1", 1))
        assert (old.workflow_id, old.step, old.attempt, old.run) == ("w1", "move", 1, 1)
        with pytest.raises(AttemptSuperseded):
            await old.progress(2, 2, "from the deleted workflow", checkpoint="stale")

        async def stale_write(actor: Actor) -> None:
            actor.sql.execute("INSERT INTO moved (item) VALUES (99)")

        with pytest.raises(AttemptSuperseded):
            await old.turn(stale_write)
        assert (await _status(kit, "w1"))["steps"][0]["progress"]["message"] == "item 1"
        assert await kit.call("mover", "m1", "moved") == []
        Mover.go.set()
        await until(lambda: _ended(kit, "w1"))
        assert (await _status(kit, "w1"))["result"] == {"started_from": 0, "attempt": 1}


async def test_a_branch_retry_gets_its_checkpoint_with_its_report_cleared(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        spec = {"items": 4, "fail_at": 2, "pause_rerun": True}
        await kit.call("mover", "m1", "start_workflow", "fan_retry", spec, "w1")

        async def left() -> dict[str, Any]:
            status = await _status(kit, "w1")
            rows: list[dict[str, Any]] = status["steps"][0]["branches"]
            return next(b for b in rows if b["branch"] == "left")

        async def backing_off() -> dict[str, Any] | None:
            branch = await left()
            return branch if branch["status"] == "retry_wait" else None

        branch = await until(backing_off)
        assert branch["progress"]["done"] == 2
        clock.advance(branch["wake_at"] - clock.now())
        await kit.fire_due("mover", "m1")
        await until(lambda: len(Mover.attempts) == 2)
        assert Mover.attempts[1].checkpoint == 2
        branch = await left()
        assert (branch["attempt"], branch["status"], branch["progress"]) == (2, "running", None)
        Mover.go.set()
        await until(lambda: _ended(kit, "w1"))
        assert (await _status(kit, "w1"))["result"] == {"left": {"started_from": 2, "attempt": 2}}


async def test_a_branch_report_after_its_join_failed_is_refused(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await kit.call("mover", "m1", "start_workflow", "fan_fails", {"items": 1, "hold_at": 1}, "w1")

        async def reported_left() -> bool:
            status = await _status(kit, "w1")
            rows = status["steps"][0].get("branches", []) if status["steps"] else []
            return any(b["branch"] == "left" and b["progress"] is not None for b in rows)

        await until(reported_left)
        left = Mover.attempts[0]
        Mover.go.set()  # "right" is refused: the join fails and "left" is no longer current
        await until(lambda: _ended(kit, "w1"))
        assert "refused" in (await _status(kit, "w1"))["result"]
        with pytest.raises(AttemptSuperseded):
            await left.progress(2, 2, "after the join failed")
        rows = (await _status(kit, "w1"))["steps"][0]["branches"]
        assert {b["branch"]: b["progress"] for b in rows}["left"]["message"] == "item 1"


async def _lose_runs(kit: ActorKit, clock: FakeClock) -> None:
    """What a lost process does to the runs it held: gone; then the lease wake-ups come due."""
    work = runner(_process(kit))
    for task in list(work.tasks.values()):
        task.cancel()
    await until(lambda: not work.tasks)
    clock.advance(Mover.workflow_lease)
    await kit.fire_due("mover", "m1")


async def _start(kit: ActorKit, clock: FakeClock, *wids: str, **spec: Any) -> None:
    for wid in wids:
        await kit.call("mover", "m1", "start_workflow", "heavy", spec, wid)
        clock.advance(1)


async def test_a_run_lost_while_paused_keeps_its_place_until_its_rerun(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await _start(kit, clock, "w1", "w2")
        await until(lambda: Mover.ran == [("start", "w1")])
        await kit.call("mover", "m1", "pause_workflow", "w1")
        await _lose_runs(kit, clock)
        assert (await _status(kit, "w1"))["steps"][0]["status"] == "lost"
        assert await _waiting_for_slot(kit, "w2"), "the lost run's place is still its"
        await kit.call("mover", "m1", "resume_workflow", "w1")
        await until(lambda: Mover.ran == [("start", "w1"), ("start", "w1")])
        assert await _waiting_for_slot(kit, "w2")
        _open("w1")
        await until(lambda: Mover.ran[-1] == ("start", "w2"))


async def test_a_run_lost_for_good_frees_its_place_when_its_body_goes_on(data_dir: Path) -> None:
    """After ``MAX_LOST_RUNS`` lost runs the step fails; the body catches it and goes on to wait for an
    event (its workflow does not end), and the lease turn that failed the step admits the next."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await _start(kit, clock, "w1", then_wait=True)
        await _start(kit, clock, "w2")
        for n in range(1, MAX_LOST_RUNS + 1):
            await until(partial(_started, "w1", n))
            await _lose_runs(kit, clock)
        await until(lambda: Mover.ran[-1] == ("start", "w2"))
        status = await _status(kit, "w1")
        assert (status["status"], status["steps"][0]["status"]) == ("waiting", "failed")


def _started(wid: str, n: int) -> bool:
    return Mover.ran.count(("start", wid)) == n


async def test_a_workflow_that_fails_mid_step_frees_its_place_and_stops_its_run(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await _start(kit, clock, "w1", "w2")
        await until(lambda: Mover.ran == [("start", "w1")])
        Mover.broken.add("w1")
        await kit.call("mover", "m1", "send_event", "w1", "poke")  # its replay raises: it fails
        status = await _status(kit, "w1")
        assert (status["status"], status["reason"]) == ("failed", "error")
        await until(lambda: Mover.ran[-1] == ("start", "w2"))
        await until(lambda: not any(key[2] == "w1" for key in runner(_process(kit)).tasks))
        assert ("end", "w1") not in Mover.ran


async def test_an_admission_that_fails_never_takes_the_freeing_turn_with_it(data_dir: Path) -> None:
    """w2's body breaks when it is admitted and its end hook raises: w1's outcome is still recorded
    (once: its run is not redone), and w2 stays waiting."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await _start(kit, clock, "w1", "w2")
        await until(lambda: Mover.ran == [("start", "w1")])
        Mover.broken.add("w2")
        Mover.hook_raises.add("w2")
        _open("w1")
        await until(lambda: _ended(kit, "w1"))
        assert (await _status(kit, "w1"))["result"] == "w1"
        assert await _waiting_for_slot(kit, "w2")
        assert Mover.ran == [("start", "w1"), ("end", "w1")]


async def test_a_paused_waiter_is_passed_over_but_keeps_its_place(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await _start(kit, clock, "w1", "w2", "w3", "w4")
        await until(lambda: Mover.ran == [("start", "w1")])
        await kit.call("mover", "m1", "pause_workflow", "w2")
        _open("w1")
        await until(lambda: Mover.ran[-1] == ("start", "w3"))  # w2 passed over while paused
        await kit.call("mover", "m1", "resume_workflow", "w2")
        assert await _waiting_for_slot(kit, "w2")
        _open("w3")
        await until(lambda: Mover.ran[-1] == ("start", "w2"))  # ahead of w4, which queued after it
        assert await _waiting_for_slot(kit, "w4")
        _open("w2")
        await until(lambda: Mover.ran[-1] == ("start", "w4"))


async def test_a_step_that_asks_another_slot_queues_in_that_one(data_dir: Path) -> None:
    """w2 waits in ``heavy``; its body now asks ``solo`` (as a deploy that moves the step would),
    where w3 runs: w2 queues there, and w3's end admits it."""
    clock = FakeClock()
    async with ActorKit([Mover], data_dir, clock=clock) as kit:
        await _start(kit, clock, "w1", "w2")
        await _start(kit, clock, "w3", slot="solo")
        await until(lambda: sorted(Mover.ran) == [("start", "w1"), ("start", "w3")])
        assert await _waiting_for_slot(kit, "w2")
        Mover.slot_of["w2"] = "solo"
        await kit.call("mover", "m1", "send_event", "w2", "poke")
        step = (await _status(kit, "w2"))["steps"][0]
        assert (step["status"], step["slot"]) == ("waiting", "solo")
        _open("w3")
        await until(lambda: Mover.ran[-1] == ("start", "w2"))
