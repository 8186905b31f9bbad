"""The orchestrator-workers example (``team`` / ``team_worker`` of the default app) in process:
workers dispatched by name, their progress and results back through the team's mailbox into its
``get_run`` and events, a cancel of the team's run cancelling its workers."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from roost.actors import RetryPolicy, RpcError, callable
from roost.examples.team import Team, TeamWorker
from roost.scheduler.clock import FakeClock
from roost.testing import ActorKit, until
from roost.workflows import NonRetryable, Step, workflow

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
        await _dispatch_then_cancel(kit)
        await until(lambda: _cancel_done(kit))  # the workers are told from outside the cancel's turn
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


class OneShotTeam(Team):
    """A team whose dispatch is tried once: a worker refusing it fails the run at once."""

    dispatch_retry = RetryPolicy(max_attempts=1)


class RefusingWorker(TeamWorker):
    """A worker named ``….bad`` refuses to start its team's job."""

    @callable
    async def start_workflow(
        self, name: str, input: Any = None, workflow_id: str | None = None
    ) -> dict[str, Any]:
        if self.name.endswith(".bad"):
            raise RpcError("invalid_arguments", "this worker refuses")
        return await super().start_workflow(name, input, workflow_id)


async def test_a_run_that_fails_cancels_the_workers_it_dispatched(data_dir: Path) -> None:
    """The dispatch to ``bad`` fails for good, so the run fails while ``good`` is dispatched and
    sleeping: ``good`` is cancelled before it writes a part (the run can no longer be cancelled by
    hand: it has ended), and ``get_run`` shows the cancel."""
    clock = FakeClock()
    async with ActorKit([OneShotTeam, RefusingWorker], data_dir, clock=clock) as kit:
        spec = {"task": "a b c d", "workers": ["good", "bad"], "delays": {"good": 60}}
        await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
        run = await until(lambda: _finished(kit))
        assert run["status"] == "failed"
        with pytest.raises(RpcError):
            await kit.call("team", "t1", "cancel_run", "r1")
        await kit.fire_due("team", "t1")  # the failure's cancel, from its wake-up

        async def good_ended() -> dict[str, Any] | None:
            await kit.fire_due("team", "t1")
            w: dict[str, Any] = await kit.call("team_worker", "t1.good", "workflow_status", "r1:1:good")
            return w if w["status"] in ("completed", "failed", "cancelled") else None

        worker = await until(good_ended)
        assert worker["status"] == "cancelled"
        cancel = await until(lambda: _cancel_done(kit))
        assert cancel["workers"]["good"]["status"] == "completed"
        for _ in range(3):  # past every sleep the worker had: nothing more is written
            clock.advance(60)
            await kit.fire_due("team_worker", "t1.good")
        assert await kit.call("team_worker", "t1.good", "effects") == {}


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


class FlakyWorker(TeamWorker):
    """A worker whose first ``cancel_workflow`` fails (its actor was busy, a link dropped)."""

    refused = False

    @callable
    async def cancel_workflow(self, workflow_id: str) -> dict[str, Any]:
        if not self.refused and self.name == "t1.w2":
            self.refused = True
            raise RuntimeError("not now")
        return await super().cancel_workflow(workflow_id)


async def test_a_cancel_is_one_turn_and_is_retried_until_each_worker_confirms(data_dir: Path) -> None:
    """The team's cancel is acknowledged after one turn that records the run's end and the intent
    (``cancel_workers``); a worker whose cancel fails is asked again until it confirms. Before, the
    cancel called each worker inside its turn: w2's refusal failed the call and rolled the run's
    cancel back, with w1 cancelled already (half done)."""
    clock = FakeClock()
    async with ActorKit([Team, FlakyWorker], data_dir, clock=clock) as kit:
        spec = {"task": "a b c", "workers": ["w1", "w2"], "delays": {"w1": 60, "w2": 60}}
        await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: _dispatched(kit))
        acked = await kit.call("team", "t1", "cancel_run", "r1")
        assert acked["status"] == "cancelled"

        async def confirmed() -> dict[str, Any] | None:
            clock.advance(1)  # past the retry's backoff (at most 0.5 s)
            await kit.fire_due("team", "t1")
            cancel = (await _run(kit))["cancel"]
            return cancel if cancel["status"] == "completed" else None

        cancel = await until(confirmed)
        assert cancel["workers"] == {
            "w1": {"status": "completed", "runs": 1},
            "w2": {"status": "completed", "runs": 1},
        }
        steps = await kit.call("team", "t1", "workflow_steps", cancel["id"])
        branches = {b["branch"]: b for b in steps["steps"][0]["branches"]}
        assert branches["w2"]["attempt"] == 2  # refused once, asked again
        assert steps["steps"][0]["result"] == {"w1": "cancelled", "w2": "cancelled"}
        for w in ("w1", "w2"):
            worker = await kit.call("team_worker", f"t1.{w}", "workflow_status", f"r1:1:{w}")
            assert worker["status"] == "cancelled"


class StubbornWorker(TeamWorker):
    """A worker whose first three cancels of w2 fail."""

    refusals = 0

    @callable
    async def cancel_workflow(self, workflow_id: str) -> dict[str, Any]:
        if self.name == "t1.w2" and self.refusals < 3:
            self.refusals += 1
            raise RuntimeError("not now")
        return await super().cancel_workflow(workflow_id)


async def _dispatch_then_cancel(kit: ActorKit) -> None:
    """Start run ``r1`` of team ``t1`` (w1 and w2, each slow), wait until both are dispatched, and
    cancel it."""
    spec = {"task": "a b c", "workers": ["w1", "w2"], "delays": {"w1": 60, "w2": 60}}
    await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
    await until(lambda: _dispatched(kit))
    await kit.call("team", "t1", "cancel_run", "r1")


class ImpatientTeam(Team):
    """Two attempts per cancel, then the whole ``cancel_workers`` again 5 s later."""

    cancel_retry = RetryPolicy(max_attempts=2, base=0.1, cap=0.1)
    cancel_pause = 5.0


async def test_a_cancel_whose_retries_are_spent_is_carried_again_until_each_worker_confirms(
    data_dir: Path,
) -> None:
    """w2 refuses its cancel three times: the first ``cancel_workers`` spends its two attempts and
    fails; ``on_workflow_end`` restarts it ``cancel_pause`` later, and its second generation gets
    w2's confirmation (w1's, already cancelled, is ``ended``)."""
    clock = FakeClock()
    async with ActorKit([ImpatientTeam, StubbornWorker], data_dir, clock=clock) as kit:
        await _dispatch_then_cancel(kit)

        async def confirmed() -> dict[str, Any] | None:
            clock.advance(1)
            await kit.fire_due("team", "t1")
            status: dict[str, Any] = await kit.call("team", "t1", "workflow_status", "r1:1:cancel")
            return status if status["status"] == "completed" else None

        status = await until(confirmed)
        assert status["generation"] == 2
        steps = await kit.call("team", "t1", "workflow_steps", "r1:1:cancel")
        assert steps["steps"][0]["result"] == {"w1": "ended", "w2": "cancelled"}
        history = await kit.call("team", "t1", "workflow_history", "r1:1:cancel", 0, 500)
        assert [e["event"] for e in history["entries"] if e["event"] in ("failed", "restarted")] == [
            "failed",
            "restarted",
        ]
        worker = await kit.call("team_worker", "t1.w2", "workflow_status", "r1:1:w2")
        assert worker["status"] == "cancelled"


class UnreachableWorker(TeamWorker):
    """A worker whose cancel always fails: it never confirms."""

    @callable
    async def cancel_workflow(self, workflow_id: str) -> dict[str, Any]:
        raise RuntimeError("unreachable")


class BackingOffTeam(ImpatientTeam):
    """Records the pause of each ``cancel_again`` it schedules; the cap is 20 s."""

    cancel_pause_cap = 20.0
    pauses: list[float] = []

    async def schedule(self, when: Any, callback: str, payload: Any = None, **kw: Any) -> Any:
        if callback == "cancel_again":
            BackingOffTeam.pauses.append(float(when))
        return await super().schedule(when, callback, payload, **kw)


async def test_a_cancel_that_no_worker_confirms_is_carried_again_less_and_less_often(
    data_dir: Path,
) -> None:
    """Each failed generation of ``cancel_workers`` is started again after a pause that doubles
    (5, 10, 20 s) up to ``cancel_pause_cap`` (20 s), and the cancel is never given up on."""
    BackingOffTeam.pauses = []
    clock = FakeClock()
    async with ActorKit([BackingOffTeam, UnreachableWorker], data_dir, clock=clock) as kit:
        await _dispatch_then_cancel(kit)

        async def five_pauses() -> bool:
            clock.advance(1)
            await kit.fire_due("team", "t1")
            return len(BackingOffTeam.pauses) >= 5

        await until(five_pauses, timeout=30)
        assert BackingOffTeam.pauses[:5] == [5.0, 10.0, 20.0, 20.0, 20.0]
        status = await kit.call("team", "t1", "workflow_status", "r1:1:cancel")
        assert status["generation"] == 5


class SlowLinkTeam(Team):
    """A team whose start of w2 is on the wire when the test says: the call, once sent, is delivered
    later whatever the sender does meanwhile (cancelling the branch does not take it back)."""

    gate: asyncio.Event
    held: asyncio.Event
    sent: list[asyncio.Task[Any]]

    def actor(self, kind: str, name: str) -> Any:
        ref = super().actor(kind, name)
        if kind != "team_worker" or name != "t1.w2":
            return ref
        return _SlowLink(ref)


class _SlowLink:
    def __init__(self, ref: Any) -> None:
        self.ref = ref

    async def call(self, method: str, *args: Any) -> Any:
        if method != "start_workflow":
            return await self.ref.call(method, *args)

        async def later() -> Any:
            SlowLinkTeam.held.set()
            await SlowLinkTeam.gate.wait()
            return await self.ref.call(method, *args)

        task = asyncio.ensure_future(later())
        SlowLinkTeam.sent.append(task)
        return await asyncio.shield(task)


async def test_no_worker_starts_after_the_cancel_is_recorded(data_dir: Path) -> None:
    """A start of w2 sent before the run's cancel and delivered after it starts nothing (the worker
    asks the team's ``dispatch_open`` in the turn that would start it): no orphan, no part written.
    Before, w2 started and wrote its parts for a cancelled run."""
    SlowLinkTeam.gate, SlowLinkTeam.held, SlowLinkTeam.sent = asyncio.Event(), asyncio.Event(), []
    async with ActorKit([SlowLinkTeam, TeamWorker], data_dir, clock=FakeClock()) as kit:
        spec = {"task": "a b c", "workers": ["w1", "w2"], "delays": {"w1": 60}}
        await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: SlowLinkTeam.held.is_set())
        await until(lambda: _branch_is(kit, "w1", "dispatched"))
        await kit.call("team", "t1", "cancel_run", "r1")
        SlowLinkTeam.gate.set()
        (delivered,) = await asyncio.gather(*SlowLinkTeam.sent, return_exceptions=True)
        assert isinstance(delivered, RpcError)
        assert delivered.code == "workflow_state"
        with pytest.raises(RpcError) as refused:
            await kit.call("team_worker", "t1.w2", "workflow_status", "r1:1:w2")
        assert refused.value.code == "workflow_not_found"  # never started
        assert await kit.call("team_worker", "t1.w2", "effects") == {}
        cancel = await until(lambda: _cancel_done(kit))
        steps = await kit.call("team", "t1", "workflow_steps", cancel["id"])
        assert steps["steps"][0]["result"] == {"w1": "cancelled", "w2": "not started"}


async def _cancel_done(kit: ActorKit) -> dict[str, Any] | None:
    cancel: dict[str, Any] | None = (await _run(kit))["cancel"]
    return cancel if cancel is not None and cancel["status"] == "completed" else None


async def test_a_restart_cancels_the_old_generations_workers(data_dir: Path) -> None:
    """``restart_workflow`` of a run whose worker is at work cancels that worker's workflow of the
    old generation (``r1:1:w1``); its ``cancelled`` report is of the old generation and does not fail
    the new one, which completes with its own worker. Before, ``r1:1:w1`` went on and wrote its
    parts for a generation nobody waited for."""
    clock = FakeClock()
    async with ActorKit(KINDS, data_dir, clock=clock) as kit:
        spec = {"task": "a b c", "workers": ["w1"], "delays": {"w1": 60}}
        await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: _branch_is(kit, "w1", "dispatched"))
        await kit.call("team", "t1", "restart_workflow", "r1")

        async def old_cancelled() -> bool:
            old = await kit.call("team_worker", "t1.w1", "workflow_status", "r1:1:w1")
            return bool(old["status"] == "cancelled")

        await until(old_cancelled)
        await kit.fire_due("team_worker", "t1.w1")  # the old workflow's report of its cancel

        async def second() -> dict[str, Any] | None:
            clock.advance(60)
            await kit.fire_due("team_worker", "t1.w1")
            run = await _run(kit)
            return run if run["status"] in ("completed", "failed") else None

        run = await until(second)
        assert (run["generation"], run["status"]) == (2, "completed")
        assert await kit.call("team_worker", "t1.w1", "effects") == {"r1:2:w1": 2}
        old = await kit.call("team_worker", "t1.w1", "workflow_status", "r1:1:w1")
        assert old["status"] == "cancelled"


class ClockReadingWorker(TeamWorker):
    """A worker whose body reads the clock between steps (against the rule): on replay it calls
    another step than it recorded, and its workflow fails as ``nondeterministic``."""

    @workflow
    async def work(self, step: Step, job: dict[str, Any]) -> list[str]:
        await step.do("job", partial(self._keep_job, step.workflow_id, job))
        await step.sleep(f"think until {self.extension.now + 60:.0f}", 60)
        return []


class RaisingWorker(TeamWorker):
    """A worker whose body's own code raises after its first step."""

    @workflow
    async def work(self, step: Step, job: dict[str, Any]) -> list[str]:
        await step.do("job", partial(self._keep_job, step.workflow_id, job))
        raise KeyError("no such part")


@pytest.mark.parametrize(
    ("worker", "reason"), [(ClockReadingWorker, "nondeterministic"), (RaisingWorker, "error")]
)
async def test_a_worker_failing_in_any_way_reports_it(
    data_dir: Path, worker: type[TeamWorker], reason: str
) -> None:
    """A worker's workflow that fails other than by a step (``nondeterministic``, the body's own
    error) reports ``failed`` from a wake-up of its end; the run fails naming it. Before, only a
    failed step was reported and the run waited on ``done:w1`` for ever."""
    clock = FakeClock()
    async with ActorKit([Team, worker], data_dir, clock=clock) as kit:
        await kit.call("team", "t1", "start_workflow", "team", {"task": "a b", "workers": ["w1"]}, "r1")

        async def finished() -> dict[str, Any] | None:
            clock.advance(60)
            await kit.fire_due("team_worker", "t1.w1")
            return await _finished(kit)

        run = await until(finished)
        status = await kit.call("team_worker", "t1.w1", "workflow_status", "r1:1:w1")
        assert (status["status"], status["reason"]) == ("failed", reason)
        assert run["status"] == "failed"
        assert "'w1': 'failed'" in run["error"]
        assert [(b["worker"], b["status"]) for b in run["branches"]] == [("w1", "failed")]


async def test_a_team_run_s_id_holds_no_colon(data_dir: Path) -> None:
    """A run named like another run's cancel (``r1:1:cancel``) is refused before it starts, so it
    can never take that cancel's id; a run with a plain id starts."""
    async with ActorKit(KINDS, data_dir, clock=FakeClock()) as kit:
        spec = {"task": "a task", "workers": ["w1"]}
        with pytest.raises(RpcError) as err:
            await kit.call("team", "t1", "start_workflow", "team", spec, "r1:1:cancel")
        assert err.value.code == "invalid_arguments"
        with pytest.raises(RpcError):
            await kit.call("team", "t1", "workflow_status", "r1:1:cancel")  # nothing was started
        await kit.call("team", "t1", "start_workflow", "team", spec, "r1")
        assert (await until(lambda: _finished(kit)))["status"] == "completed"
