"""Outside steps (``step.external``) in process: the runner, the lease, the key of each attempt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roost.actors import RpcError
from roost.scheduler.clock import FakeClock
from roost.testing import ActorKit, schedule_rows, until
from roost.workflows.runner import runner
from tests.workflow_kinds import Shop


def _lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


async def _status(kit: ActorKit, wid: str) -> dict[str, Any]:
    result: dict[str, Any] = await kit.call("shop", "s1", "workflow_status", wid)
    return result


async def test_outside_step_runs_outside_the_turn_with_its_key(data_dir: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        status = await kit.call("shop", "s1", "start_workflow", "order", {"ledger": str(ledger)}, "w1")
        assert status["status"] == "waiting"
        assert status["waiting"]["kind"] == "external"
        await until(lambda: _done(kit, "w1"))
        status = await _status(kit, "w1")
        key = f"w1:{status['nonce']}:1:1:1"  # {workflow}:{nonce}:{generation}:{position}:{attempt}
        assert status["result"] == {"receipt": {"key": key, "run": 1}}
        assert [line.split()[0] for line in _lines(ledger)] == [key]
        assert await kit.call("shop", "s1", "effects") == {"reserve": 1, "ship": 1}
        page = await kit.call("shop", "s1", "workflow_history", "w1")
        events = [(e["event"], e["name"]) for e in page["entries"]]
        assert ("attempt_started", "charge") in events
        assert ("step_completed", "charge") in events


async def _done(kit: ActorKit, wid: str) -> bool:
    status = await _status(kit, wid)
    return bool(status["status"] == "completed")


async def test_an_attempt_whose_start_rolled_back_never_runs(data_dir: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        with pytest.raises(RpcError):
            await kit.call("shop", "s1", "start_then_fail", {"ledger": str(ledger)})
        await until(lambda: not runner(_process(kit)).tasks)
        assert _lines(ledger) == []
        assert await kit.call("shop", "s1", "list_workflows") == []


def _process(kit: ActorKit) -> Any:
    host = next(iter(kit.registry.hosts.values()))
    return host.actor.extension.process


async def test_a_live_run_is_never_taken_over_and_a_lost_run_runs_again_under_the_same_key(
    data_dir: Path, tmp_path: Path
) -> None:
    """The lease wake-up asks the runner: a live task is left alone; a task gone (its process lost,
    here: cancelled) makes the attempt ``lost``, and it runs again, ``run`` 2, the same key."""
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        spec = {"ledger": str(ledger), "hold": True}
        await kit.call("shop", "s1", "start_workflow", "order", spec, "w1")
        await until(lambda: len(_lines(ledger)) == 1)
        clock.advance(Shop.workflow_lease)
        await kit.fire_due("shop", "s1")  # the task is alive: the lease is only looked at again
        assert len(_lines(ledger)) == 1
        assert (await _status(kit, "w1"))["steps"][1]["status"] == "running"
        work = runner(_process(kit))
        for task in list(work.tasks.values()):
            task.cancel()
        await until(lambda: not work.tasks)
        clock.advance(Shop.workflow_lease)
        await kit.fire_due("shop", "s1")
        await until(lambda: _done(kit, "w1"))
        keys = [line.split()[0] for line in _lines(ledger)]
        status = await _status(kit, "w1")
        key = f"w1:{status['nonce']}:1:1:1"
        assert keys == [key, key]
        assert status["result"]["receipt"] == {"key": key, "run": 2}
        assert await kit.call("shop", "s1", "effects") == {"reserve": 1, "ship": 1}
        page = await kit.call("shop", "s1", "workflow_history", "w1")
        assert [e["detail"]["run"] for e in page["entries"] if e["event"] == "attempt_lost"] == [1]


async def test_cancel_stops_the_outside_run_and_records_nothing(data_dir: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "order", {"ledger": str(ledger), "hold": True}, "w1")
        await until(lambda: len(_lines(ledger)) == 1)
        status = await kit.call("shop", "s1", "cancel_workflow", "w1")
        assert status["status"] == "cancelled"
        await until(lambda: not runner(_process(kit)).tasks)
        clock.advance(Shop.workflow_lease)
        await kit.fire_due("shop", "s1")
        assert len(_lines(ledger)) == 1
        assert await kit.call("shop", "s1", "effects") == {"reserve": 1}


async def test_the_runner_is_stopped_with_the_registry(data_dir: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "order", {"ledger": str(ledger), "hold": True}, "w1")
        await until(lambda: len(_lines(ledger)) == 1)
        work = runner(_process(kit))
        tasks = list(work.tasks.values())
        assert tasks
    assert all(t.done() for t in tasks)


async def test_a_finished_outside_step_cancels_its_lease_wake_up(data_dir: Path, tmp_path: Path) -> None:
    """A step's result turn cancels the lease wake-up of its run: a dormant actor is not woken a
    lease later for nothing."""
    ledger = tmp_path / "ledger"
    async with ActorKit([Shop], data_dir) as kit:
        await kit.call("shop", "s1", "start_workflow", "order", {"ledger": str(ledger)}, "w1")
        await until(lambda: _done(kit, "w1"))
    rows = schedule_rows(data_dir, "shop", "s1")
    assert [(r.status, r.runs) for r in rows] == [("cancelled", 0)]  # the one lease; nothing left to fire


async def test_a_failed_outside_attempt_is_retried_under_a_new_key(data_dir: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "order", {"ledger": str(ledger), "fail": 1}, "w1")

        async def backing_off() -> dict[str, Any] | None:
            status = await _status(kit, "w1")
            waiting = status["waiting"] or {}
            return status if waiting.get("why") == "retry" else None

        status = await until(backing_off)
        assert status["steps"][1]["status"] == "retry_wait"
        assert "ConnectionError" in status["steps"][1]["error"]
        clock.advance(status["waiting"]["until"] - clock.now())
        await kit.fire_due("shop", "s1")
        await until(lambda: _done(kit, "w1"))
        n = status["nonce"]
        assert [line.split()[0] for line in _lines(ledger)] == [f"w1:{n}:1:1:1", f"w1:{n}:1:1:2"]
        assert (await _status(kit, "w1"))["result"]["receipt"]["key"] == f"w1:{n}:1:1:2"


async def test_an_outside_run_past_its_timeout_fails_on_the_runtime_clock(
    data_dir: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        spec = {"ledger": str(ledger), "hold": True, "timeout": 5, "attempts": 1}
        await kit.call("shop", "s1", "start_workflow", "order", spec, "w1")
        await until(lambda: len(_lines(ledger)) == 1)  # the run's timeout is armed before it begins
        clock.advance(5)

        async def failed() -> dict[str, Any] | None:
            status = await _status(kit, "w1")
            return status if status["status"] == "failed" else None

        status = await until(failed)
        assert "timeout after 5 s" in status["error"]
        assert await kit.call("shop", "s1", "effects") == {"reserve": 1}


async def test_a_pause_does_not_lose_an_outside_step(data_dir: Path, tmp_path: Path) -> None:
    """The lease ends while the workflow is paused and its process is gone after that: the lease
    wake-up still marks the attempt ``lost`` (without advancing), so resume runs it again (same key,
    run 2) in the next process and the workflow completes."""
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "order", {"ledger": str(ledger), "hold": True}, "w1")
        await until(lambda: len(_lines(ledger)) == 1)
        await kit.call("shop", "s1", "pause_workflow", "w1")
        work = runner(_process(kit))
        for task in list(work.tasks.values()):
            task.cancel()  # as if its process were gone
        await until(lambda: not work.tasks)
        clock.advance(Shop.workflow_lease)
        assert await kit.fire_due("shop", "s1") == 1
        status = await _status(kit, "w1")
        assert status["status"] == "paused"
        assert status["steps"][1]["status"] == "lost"
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "resume_workflow", "w1")
        await until(lambda: _done(kit, "w1"))
        status = await _status(kit, "w1")
        assert status["result"]["receipt"]["run"] == 2
        assert await kit.call("shop", "s1", "effects") == {"reserve": 1, "ship": 1}


async def test_no_two_workflows_share_an_idempotency_key(data_dir: Path, tmp_path: Path) -> None:
    """The same workflow id on two actors, and an id deleted and started again (its generation back
    at 1), give other keys: a payment API that drops a repeated key would otherwise drop a genuine
    second charge. The key has the workflow's nonce, drawn when it starts."""
    clock = FakeClock()
    keys: list[str] = []
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        for name, ledger in (("s1", tmp_path / "a"), ("s2", tmp_path / "b"), ("s1", tmp_path / "c")):
            await kit.call("shop", name, "start_workflow", "order", {"ledger": str(ledger)}, "w1")

            async def done(name: str = name) -> dict[str, Any] | None:
                status: dict[str, Any] = await kit.call("shop", name, "workflow_status", "w1")
                return status if status["status"] == "completed" else None

            status = await until(done)
            keys.append(status["result"]["receipt"]["key"])
            assert _lines(ledger)[0].split()[0] == keys[-1]
            await kit.call("shop", name, "delete_workflow", "w1")
    assert len(set(keys)) == 3
    assert all(k.startswith("w1:") and k.endswith(":1:1:1") for k in keys)
