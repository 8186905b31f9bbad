"""The parallel shape in process (``step.parallel``): branches at once, a join state per branch, a
completed branch kept when a sibling is rerun or retried, fail fast, the replay check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roost.scheduler.clock import FakeClock
from roost.testing import ActorKit, until
from roost.workflows.runner import runner
from tests.fanout_kinds import Fan


def _keys(ledger: Path) -> list[str]:
    return [line.split()[0] for line in ledger.read_text().splitlines()] if ledger.exists() else []


async def _status(kit: ActorKit, wid: str = "w1") -> dict[str, Any]:
    result: dict[str, Any] = await kit.call("fan", "f1", "workflow_status", wid)
    return result


def _join(status: dict[str, Any]) -> dict[str, tuple[str, int, int]]:
    return {b["branch"]: (b["status"], b["attempt"], b["run"]) for b in status["steps"][0]["branches"]}


async def _finished(kit: ActorKit) -> dict[str, Any] | None:
    status = await _status(kit)
    return status if status["status"] in ("completed", "failed") else None


def _process(kit: ActorKit) -> Any:
    return next(iter(kit.registry.hosts.values())).actor.extension.process


async def test_branches_run_concurrently_and_a_completed_branch_is_kept_when_a_sibling_reruns(
    data_dir: Path, tmp_path: Path
) -> None:
    """``a`` hangs; ``b`` and ``c`` complete meanwhile (so they ran at once with it), the join state
    shows it; ``a``'s run is then lost: only ``a`` runs again (same key, run 2), ``b`` and ``c`` are
    taken from their rows."""
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Fan], data_dir, clock=clock) as kit:
        status = await kit.call(
            "fan", "f1", "start_workflow", "fanout", {"ledger": str(ledger), "hold": ["a"]}, "w1"
        )
        assert status["waiting"]["why"] == "join"
        await until(lambda: _join_is(kit, {"a": "running", "b": "completed", "c": "completed"}))
        status = await _status(kit)
        s = f"w1:{status['nonce']}:1:0"  # {workflow}:{nonce}:{generation}:{position}, then branch, attempt
        assert _join(status) == {"a": ("running", 1, 1), "b": ("completed", 1, 1), "c": ("completed", 1, 1)}
        assert status["steps"][0]["kind"] == "parallel"
        page = await kit.call("fan", "f1", "workflow_steps", "w1")
        assert page["steps"][0]["branches"][1]["result"] == {"branch": "b", "key": f"{s}:b:1", "run": 1}
        work = runner(_process(kit))
        for task in list(work.tasks.values()):
            task.cancel()  # as if its process were gone
        await until(lambda: not work.tasks)
        clock.advance(Fan.workflow_lease)
        await kit.fire_due("fan", "f1")
        done = await until(lambda: _finished(kit))
        assert done["status"] == "completed"
        assert done["result"]["a"] == {"branch": "a", "key": f"{s}:a:1", "run": 2}
        assert sorted(_keys(ledger)) == [f"{s}:a:1", f"{s}:a:1", f"{s}:b:1", f"{s}:c:1"]
        assert await kit.call("fan", "f1", "effects") == {"merge": 1}
        history = (await kit.call("fan", "f1", "workflow_history", "w1", 0, 500))["entries"]
        rerun = [e["detail"] for e in history if e["event"] == "attempt_started" and e["detail"]["run"] == 2]
        assert rerun == [{"branch": "a", "run": 2, "idempotency_key": f"{s}:a:1", "kept": ["b", "c"]}]
        lost = [e["detail"]["branch"] for e in history if e["event"] == "attempt_lost"]
        assert lost == ["a"]


async def _join_is(kit: ActorKit, want: dict[str, str]) -> bool:
    return {b: s for b, (s, _, _) in _join(await _status(kit)).items()} == want


async def test_a_failed_attempt_of_one_branch_is_retried_alone(data_dir: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Fan], data_dir, clock=clock) as kit:
        spec = {"ledger": str(ledger), "fail": {"b": 1}}
        await kit.call("fan", "f1", "start_workflow", "fanout", spec, "w1")
        await until(lambda: _join_is(kit, {"a": "completed", "b": "retry_wait", "c": "completed"}))
        clock.advance(4.0)  # past the cap of the backoff
        await kit.fire_due("fan", "f1")
        done = await until(lambda: _finished(kit))
        assert done["status"] == "completed"
        assert _join(done) == {"a": ("completed", 1, 1), "b": ("completed", 2, 1), "c": ("completed", 1, 1)}
        s = f"w1:{done['nonce']}:1:0"
        assert sorted(_keys(ledger)) == [f"{s}:a:1", f"{s}:b:1", f"{s}:b:2", f"{s}:c:1"]


async def test_fail_fast_the_first_branch_failed_for_good_fails_the_join(
    data_dir: Path, tmp_path: Path
) -> None:
    """``b`` refuses (``NonRetryable``) while ``a`` hangs: the join fails at once naming ``b``, ``a``'s
    task is cancelled, the body's handler runs once."""
    ledger = tmp_path / "ledger"
    async with ActorKit([Fan], data_dir, clock=FakeClock()) as kit:
        spec = {"ledger": str(ledger), "hold": ["a"], "fatal": ["b"]}
        await kit.call("fan", "f1", "start_workflow", "fanout", spec, "w1")
        done = await until(lambda: _finished(kit))
        assert done["status"] == "completed"
        assert "branch 'b'" in done["result"]["failed"]
        assert done["steps"][0]["status"] == "failed"
        await until(lambda: not runner(_process(kit)).tasks)
        assert await kit.call("fan", "f1", "effects") == {"give-up": 1}


async def test_a_join_replayed_with_other_branches_fails_the_workflow(data_dir: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    async with ActorKit([Fan], data_dir, clock=FakeClock()) as kit:
        await kit.call("fan", "f1", "start_workflow", "fanout", {"ledger": str(ledger), "hold": ["a"]}, "w1")
        Fan.names = ("a", "b", "d")
        try:
            status = await kit.call("fan", "f1", "resume_workflow", "w1")
        finally:
            Fan.names = ("a", "b", "c")
        assert status["status"] == "failed"
        assert status["reason"] == "nondeterministic"


async def test_a_pause_does_not_lose_a_branch(data_dir: Path, tmp_path: Path) -> None:
    """A branch's lease ends while the workflow is paused and its run is gone: the branch is marked
    ``lost`` (nothing advances), and resume runs it again in the next process."""
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Fan], data_dir, clock=clock) as kit:
        await kit.call("fan", "f1", "start_workflow", "fanout", {"ledger": str(ledger), "hold": ["a"]}, "w1")
        await until(lambda: _join_is(kit, {"a": "running", "b": "completed", "c": "completed"}))
        await kit.call("fan", "f1", "pause_workflow", "w1")
        work = runner(_process(kit))
        for task in list(work.tasks.values()):
            task.cancel()  # as if its process were gone
        await until(lambda: not work.tasks)
        clock.advance(Fan.workflow_lease)
        await kit.fire_due("fan", "f1")
        status = await _status(kit)
        assert status["status"] == "paused"
        assert _join(status)["a"][0] == "lost"
    async with ActorKit([Fan], data_dir, clock=clock) as kit:
        await kit.call("fan", "f1", "resume_workflow", "w1")
        done = await until(lambda: _finished(kit))
        assert done["status"] == "completed"
        assert done["result"]["a"]["run"] == 2
