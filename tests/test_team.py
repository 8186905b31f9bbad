"""The orchestrator-workers example (``team`` / ``team_worker`` of the default app) in process:
workers dispatched by name, their progress and results back through the team's mailbox into its
``get_run`` and events, a cancel of the team's run cancelling its workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roost.examples.team import Team, TeamWorker
from roost.scheduler.clock import FakeClock
from roost.testing import ActorKit, until

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
            assert await kit.call("team_worker", f"t1.{w}", "effects") == {f"r1:{w}": 2}
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
            worker = await kit.call("team_worker", f"t1.{w}", "workflow_status", f"r1:{w}")
            assert worker["status"] == "cancelled"
            assert await kit.call("team_worker", f"t1.{w}", "effects") == {}


async def _dispatched(kit: ActorKit) -> bool:
    run = await _run(kit)
    return len(run["branches"]) == 2 and all(b["status"] == "dispatched" for b in run["branches"])
