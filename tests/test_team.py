"""The orchestrator-workers example (``team`` / ``team_worker`` of the default app) in process:
workers dispatched by name, their progress and results back through the team's mailbox into its
``get_run`` and events, a cancel of the team's run cancelling its workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roost.examples.team import Team, TeamWorker
from roost.scheduler.clock import FakeClock
from roost.testing import ActorKit, until
from roost.workflows import NonRetryable

KINDS = [Team, TeamWorker]


async def _run(kit: ActorKit, run_id: str = "r1") -> dict[str, Any]:
    result: dict[str, Any] = await kit.call("team", "t1", "get_run", run_id)
    return result


async def _finished(kit: ActorKit) -> dict[str, Any] | None:
    run = await _run(kit)
    return run if run["status"] in ("completed", "failed", "cancelled") else None


async def test_workers_progress_and_results_reach_the_orchestrators_run(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir, clock=FakeClock()) as kit:
        watch = kit.connect("team", "t1")
        spec = {"task": "split this task between three workers", "workers": ["w1", "w2", "w3"]}
        await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
        run = await until(lambda: _finished(kit))
        assert run["status"] == "completed"
        assert [
            (b["worker"], b["status"], b["progress"], b["parts"], b["attempt"], b["runs"])
            for b in run["branches"]
        ] == [
            ("w1", "completed", 2, 2, 1, 1),
            ("w2", "completed", 2, 2, 1, 1),
            ("w3", "completed", 2, 2, 1, 1),
        ]
        assert run["result"]["answers"]["w1"][0].startswith("split this")
        for w in ("w1", "w2", "w3"):
            assert await kit.call("team_worker", f"t1.{w}", "effects") == {f"r1:1:{w}": 2}
        progress = [f for f in watch.frames if "team_progress" in str(f)]
        assert len(progress) == 9  # per worker: 2 progress reports and the final one


async def test_a_worker_not_done_shows_in_the_run_as_running_with_its_progress(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit(KINDS, data_dir, clock=clock) as kit:
        spec = {"task": "a b c", "workers": ["w1", "w2"], "delays": {"w2": 60}}
        await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: _branch_is(kit, "w1", "completed"))
        await until(lambda: _branch_is(kit, "w2", "dispatched"))
        run = await _run(kit)
        assert run["status"] == "waiting"
        assert [(b["worker"], b["status"]) for b in run["branches"]] == [
            ("w1", "completed"),
            ("w2", "dispatched"),
        ]
        clock.advance(60)
        await kit.fire_due("team_worker", "t1.w2")
        await until(lambda: _branch_is(kit, "w2", "running"))
        assert next(b for b in (await _run(kit))["branches"] if b["worker"] == "w2")["progress"] == 1
        clock.advance(60)
        await kit.fire_due("team_worker", "t1.w2")
        done = await until(lambda: _finished(kit))
        assert done["status"] == "completed"


async def _branch_is(kit: ActorKit, worker: str, status: str) -> bool:
    run = await _run(kit)
    return any(b["worker"] == worker and b["status"] == status for b in run["branches"])


async def test_cancelling_the_team_run_cancels_its_workers(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir, clock=FakeClock()) as kit:
        spec = {"task": "a b c", "workers": ["w1", "w2"], "delays": {"w1": 60, "w2": 60}}
        await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: _dispatched(kit))
        await kit.call("team", "t1", "cancel_run", "r1")
        run = await _run(kit)
        assert run["status"] == "cancelled"
        assert {b["status"] for b in run["branches"]} == {"cancelled"}
        for w in ("w1", "w2"):
            worker = await kit.call("team_worker", f"t1.{w}", "workflow_status", f"r1:1:{w}")
            assert worker["status"] == "cancelled"
            assert await kit.call("team_worker", f"t1.{w}", "effects") == {}


async def _dispatched(kit: ActorKit) -> bool:
    run = await _run(kit)
    return len(run["branches"]) == 2 and all(b["status"] == "dispatched" for b in run["branches"])


async def test_a_worker_that_does_not_complete_fails_the_run(data_dir: Path) -> None:
    """A worker's workflow cancelled on its own: it reports ``cancelled``, ``get_run`` shows it and
    the run fails naming it (it waited on ``done:w2`` for ever)."""
    clock = FakeClock()
    async with ActorKit(KINDS, data_dir, clock=clock) as kit:
        spec = {"task": "a b", "workers": ["w1", "w2"], "delays": {"w2": 60}}
        await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: _branch_is(kit, "w2", "dispatched"))
        await kit.call("team_worker", "t1.w2", "cancel_workflow", "r1:1:w2")
        await kit.fire_due("team_worker", "t1.w2")  # the report of the cancel, after its turn
        run = await until(lambda: _finished(kit))
        assert run["status"] == "failed"
        assert "w2" in run["error"]
        assert "cancelled" in run["error"]
        assert [(b["worker"], b["status"]) for b in run["branches"]] == [
            ("w1", "completed"),
            ("w2", "cancelled"),
        ]


class FailingWorker(TeamWorker):
    """A worker whose second part fails for good (``NonRetryable``)."""

    def _write(self, wid: str, part: int, text: str) -> str:
        if part == 1:
            raise NonRetryable("the model refused")
        return super()._write(wid, part, text)


async def test_a_failed_worker_reports_it_and_fails_the_run(data_dir: Path) -> None:
    async with ActorKit([Team, FailingWorker], data_dir, clock=FakeClock()) as kit:
        await kit.call("team", "t1", "start_workflow", "team", {"task": "a b", "workers": ["w1"]}, "r1")
        run = await until(lambda: _finished(kit))
        assert run["status"] == "failed"
        assert "failed" in run["error"]
        assert [(b["worker"], b["status"], b["progress"]) for b in run["branches"]] == [("w1", "failed", 1)]
        worker = await kit.call("team_worker", "t1.w1", "workflow_status", "r1:1:w1")
        assert worker["status"] == "failed"


async def test_a_restarted_run_dispatches_its_workers_again(data_dir: Path) -> None:
    """``restart_workflow`` of a completed run: generation 2 starts workflows of its own on the
    workers (``r1:2:w1``), and completes; before, it found the old completed ones and hung."""
    async with ActorKit(KINDS, data_dir, clock=FakeClock()) as kit:
        await kit.call("team", "t1", "start_workflow", "team", {"task": "a b c", "workers": ["w1"]}, "r1")
        first = await until(lambda: _finished(kit))
        assert first["status"] == "completed"
        await kit.call("team", "t1", "restart_workflow", "r1")

        async def second() -> dict[str, Any] | None:
            run = await _run(kit)
            return run if run["generation"] == 2 and run["status"] == "completed" else None

        run = await until(second)
        assert run["result"] == first["result"]
        assert [(b["worker"], b["status"]) for b in run["branches"]] == [("w1", "completed")]
        assert await kit.call("team_worker", "t1.w1", "effects") == {"r1:1:w1": 2, "r1:2:w1": 2}


async def test_a_bad_spec_fails_the_run_at_once(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir, clock=FakeClock()) as kit:
        for rid, workers in (("r0", []), ("r1", "w1"), ("r2", ["w1", "w1"])):
            spec = {"task": "a", "workers": workers}
            status = await kit.call("team", "t1", "start_workflow", "team", spec, rid)
            assert status["status"] == "failed"
            assert status["reason"] == "error"
            assert "ValueError" in status["error"]
            assert "workers" in status["error"]
            assert status["steps"] == []  # nothing ran, nothing was retried
