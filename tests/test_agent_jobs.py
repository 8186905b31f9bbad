"""Background jobs: leases, heartbeats, retries, fencing, worker presence (roost/agent/jobs.py for the
records, roost/agent/background.py for the worker)."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from roost.actors import Actor, Observer, RetryPolicy
from roost.agent import AgentConfig
from roost.agent.agent import Agent
from roost.agent.background import SERVICE, JobRunner
from roost.agent.catalog import ToolContext, tool
from roost.agent.orchestrator import Orchestrator
from roost.cli import main
from roost.testing import ActorKit
from tests.agent_support import FAST, FLAKY_CALLS, Docs, Flaky, Nothing, advance, drive, event_types, events


def orchestrator_of(actor: Actor) -> Orchestrator:
    assert isinstance(actor, Agent)
    return actor.orchestrator


async def take_over(kit: ActorKit, kind: str, name: str, job_id: str) -> None:
    """Claim the job anew inside a turn of its agent: what the lease wake-up does after expiry."""

    async def claim(actor: Actor) -> None:
        orch = orchestrator_of(actor)
        row = orch.jobs.store.get("jobs", job_id)
        assert row is not None
        await orch.jobs.claim(row)

    await kit.registry.run(kind, name, claim)


REQUEST = "analyze the documents and make a report"


def seeded_delays(seed: int, policy: RetryPolicy, attempts: int) -> list[float]:
    """The retry delays a process whose ``rng`` was seeded with ``seed`` draws, in order."""
    rng = random.Random(seed)
    return [policy.delay(attempt, rng) for attempt in range(1, attempts + 1)]


async def test_a_failed_attempt_is_retried_with_backoff_then_completes(data_dir: Path) -> None:
    FLAKY_CALLS.clear()
    async with ActorKit([Flaky], data_dir) as kit:
        kit.registry.rng.seed(7)
        c = kit.connect("flaky", "f")
        reply = await c.call("turn", "flaky please")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        failed = [e for e in events(c) if e["event_type"] == "tool_failed"]
        assert len(failed) == 1
        assert failed[0]["payload"]["will_retry"] is True
        (delay,) = seeded_delays(7, RetryPolicy(3, base=0.5, cap=60.0), 1)
        assert 0.0 <= failed[0]["payload"]["retry_in_s"] == delay <= 0.5  # full jitter, capped
        assert "attempt 1 failed" in failed[0]["payload"]["error"]
        assert FLAKY_CALLS == [1, 2]
        run = await c.call("get_run", reply["run_id"])
        assert run["jobs"][0]["attempt"] == 2
        assert run["jobs"][0]["status"] == "completed"
        assert run["status"] == "completed"


async def test_a_job_that_keeps_failing_fails_the_run_with_its_reason(data_dir: Path) -> None:
    """After ``job_max_attempts`` (3) the job fails: the item and the run fail with the last error,
    marked retryable (the error was a transient one), and ``continue_run`` takes the run up again."""
    FLAKY_CALLS.clear()
    async with ActorKit([Flaky], data_dir) as kit:
        kit.registry.rng.seed(11)
        c = kit.connect("flaky", "f")
        reply = await c.call("turn", "flaky, fail 9 times")
        await drive(kit, lambda: "turn_failed" in event_types(c))
        assert FLAKY_CALLS == [1, 2, 3]
        failed = [e["payload"] for e in events(c) if e["event_type"] == "tool_failed"]
        assert [f["will_retry"] for f in failed] == [True, True, False]
        delays = [f.get("retry_in_s") for f in failed[:2]]
        assert delays == seeded_delays(11, RetryPolicy(3, base=0.5, cap=60.0), 2)
        assert 0.0 <= delays[0] <= 0.5
        assert 0.0 <= delays[1] <= 1.0
        assert "attempt 3 of 3" in failed[-1]["error"]
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "failed"
        assert run["retryable"] == 1
        assert "ConnectionError: attempt 3 failed" in run["error"]
        turn = await c.call("get_turn", reply["turn_id"])
        assert turn["items"][0]["status"] == "failed"
        again = await c.call("continue_run", reply["run_id"])
        assert again["status"] == "in_progress"


class PatientFlaky(Flaky):
    kind = "patient_flaky"
    config = AgentConfig(**{**FAST.model_dump(), "job_max_attempts": 6, "job_backoff_cap": 2.0})


@pytest.mark.parametrize("seed", [3, 4])
async def test_job_retries_share_the_full_jitter_retry_policy_of_wake_ups(data_dir: Path, seed: int) -> None:
    """Job retries back off as wake-ups do (:class:`roost.actors.RetryPolicy`, full jitter): attempt
    ``n`` waits ``uniform(0, min(job_backoff_cap, job_backoff * 2**(n-1)))``, drawn from the
    process's ``rng`` (the registry's, shared with wake-ups) — seeded here, so the delays are known
    exactly and differ from seed to seed."""
    FLAKY_CALLS.clear()
    async with ActorKit([PatientFlaky], data_dir) as kit:
        kit.registry.rng.seed(seed)
        c = kit.connect("patient_flaky", "f")
        await c.call("turn", "flaky, fail 5 times")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        assert FLAKY_CALLS == [1, 2, 3, 4, 5, 6]
        delays = [e["payload"]["retry_in_s"] for e in events(c) if e["event_type"] == "tool_failed"]
        policy = RetryPolicy(6, base=0.5, cap=2.0)
        assert delays == seeded_delays(seed, policy, 5)
        caps = [0.5, 1.0, 2.0, 2.0, 2.0]
        assert all(0.0 <= d <= cap for d, cap in zip(delays, caps, strict=True))  # bounded, capped
        assert delays != caps  # jittered: not the bare exponential
    assert seeded_delays(3, policy, 5) != seeded_delays(4, policy, 5)


async def test_lease_expiry_after_the_worker_died_retries_with_the_next_attempt(data_dir: Path) -> None:
    """The worker stops without a word (as when its process dies): no heartbeat renews the lease; the
    wake-up at the lease's end claims attempt 2, which completes; the item completes once."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 2)
        dead = kit.registry.services.pop("agent.jobs")
        await dead.stop()  # the worker is gone; nothing was recorded
        assert isinstance(dead, JobRunner)
        await drive(kit, lambda: "approval_requested" in event_types(c))
        retried = [e for e in events(c) if e["event_type"] == "tool_failed"]
        assert retried[0]["payload"]["error"] == "lease expired (worker lost)"
        starts = [
            e["payload"]["attempt"]
            for e in events(c)
            if e["event_type"] == "tool_started" and "job_id" in e["payload"]
        ]
        assert starts == [1, 2]
        run = await c.call("get_run", reply["run_id"])
        assert run["jobs"][0]["attempt"] == 2
        assert run["jobs"][0]["status"] == "completed"
        turn = await c.call("get_turn", reply["turn_id"])
        assert [i["runs"] for i in turn["items"][:2]] == [1, 1]
        assert [i["status"] for i in turn["items"][:2]] == ["completed", "completed"]


async def test_a_worker_that_lost_its_lease_cannot_write(data_dir: Path) -> None:
    """Fencing: once attempt 2 holds the lease, attempt 1's progress and finish are refused."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 2)
        runner = kit.registry.services["agent.jobs"]
        assert isinstance(runner, JobRunner)
        job = (await c.call("get_run", reply["run_id"]))["jobs"][0]

        await take_over(kit, "docs", "acme", job["job_id"])

        async def stale_progress(actor: Actor) -> bool:
            orch = orchestrator_of(actor)
            return await orch.jobs.progress(job["job_id"], 1, runner.worker_id, 5, 6, "late")

        assert await kit.registry.run("docs", "acme", stale_progress) is False

        async def stale_heartbeat(actor: Actor) -> bool:
            return orchestrator_of(actor).jobs.heartbeat(job["job_id"], 1, runner.worker_id)

        assert await kit.registry.run("docs", "acme", stale_heartbeat) is False
        await drive(kit, lambda: "approval_requested" in event_types(c))
        run = await c.call("get_run", reply["run_id"])
        assert run["jobs"][0]["attempt"] == 2
        assert all(
            e["payload"].get("message") != "late" for e in events(c) if e["event_type"] == "tool_progress"
        )


def runner_tasks() -> set[asyncio.Task[object]]:
    """The live tasks the job runner started (each is named after its service)."""
    return {t for t in asyncio.all_tasks() if t.get_name().startswith(f"{SERVICE}:") and not t.done()}


#: The attempts of ``tidy`` whose clean-up after cancellation ran to its end.
TIDIED: list[int] = []


@tool(background=True, keywords=("tidy",))
async def tidy(ctx: ToolContext, args: Nothing) -> str:
    """Works until cancelled, then takes a while (real time) to clean up."""
    await ctx.progress(0, 1)
    try:
        await ctx.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)
        TIDIED.append(ctx.attempt)
        raise
    return "done"


class Tidy(Agent):
    kind = "tidy"
    config = FAST
    tools = (tidy,)


async def test_no_task_of_the_runner_outlives_it(data_dir: Path) -> None:
    """When the kit stops, every task the runner started has ended: the attempt that a newer attempt
    of its job took over and its tool (whose clean-up ran to its end), the newer attempt's, and the
    presence task."""
    TIDIED.clear()
    async with ActorKit([Tidy], data_dir) as kit:
        c = kit.connect("tidy", "t")
        reply = await c.call("turn", "tidy up")
        await drive(kit, lambda: "tool_progress" in event_types(c))
        job = (await c.call("get_run", reply["run_id"]))["jobs"][0]
        first = runner_tasks()
        names = {t.get_name() for t in first}
        assert {f"{SERVICE}:{job['job_id']}:1", f"{SERVICE}:{job['job_id']}:1:tool"} <= names
        assert any(n.endswith(":presence") for n in names)

        await take_over(kit, "tidy", "t", job["job_id"])
        assert f"{SERVICE}:{job['job_id']}:2" in {t.get_name() for t in runner_tasks()}
    assert all(t.done() for t in first)
    assert runner_tasks() == set()
    assert sorted(TIDIED) == [1, 2]


async def test_the_worker_reports_its_presence_in_the_directory(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        await c.call("turn", "analyze the documents")
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 1)
        assert kit.registry.directory is not None
        first = kit.registry.directory.workers()
        assert len(first) == 1
        assert first[0].pid == os.getpid()
        advance(kit, 0.5)  # one presence beat while the analysis runs
        await drive(kit, lambda: True)
        later = kit.registry.directory.workers()
        assert later[0].heartbeat_at > first[0].heartbeat_at
        assert later[0].running_jobs == 1
        await drive(kit, lambda: "turn_completed" in event_types(c))
        directory = kit.registry.directory
        await drive(kit, lambda: directory.workers()[0].running_jobs == 0, max_steps=30)  # next beats
    assert main(["workers", "--data", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert later[0].worker_id in out
    assert f" {os.getpid()} " in out
    assert out.rstrip().endswith("1 worker(s): 1 stopped")  # it stopped cleanly with the kit, and says so


class TurnNames(Observer):
    """Keeps the name of each turn's function (a worker's turns are ``Task`` inputs: a heartbeat's is
    ``renew``, a progress report's ``record``)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def turn(self, kind: str, seconds: float, item: object) -> None:
        self.names.append(getattr(getattr(item, "fn", None), "__name__", type(item).__name__))


@tool(background=True, keywords=("chatty",))
async def chatty(ctx: ToolContext, args: Nothing) -> str:
    """Reports progress four times a heartbeat interval, for five intervals."""
    for n in range(20):
        await ctx.sleep(FAST.heartbeat_interval / 4)
        await ctx.progress(n + 1, 20)
    return "done"


class Chatty(Agent):
    kind = "chatty"
    config = FAST
    tools = (chatty, *Flaky.tools)


async def test_a_worker_that_reports_often_makes_no_heartbeat_turns(data_dir: Path) -> None:
    """A progress report (and a streamed batch) reads the fence and renews the lease as a heartbeat
    does, so the next heartbeat is due an interval after it: a tool that reports more often than
    heartbeat_interval costs no heartbeat turns, and one that never reports still gets them."""
    async with ActorKit([Chatty], data_dir) as kit:
        seen = TurnNames()
        kit.registry.observer = seen
        c = kit.connect("chatty", "a")
        await c.call("turn", "chatty")
        await drive(kit, lambda: "turn_completed" in event_types(c), step=FAST.heartbeat_interval / 8)
        assert seen.names.count("record") >= 20
        assert seen.names.count("renew") == 0
        seen.names.clear()
        reply = await c.call("turn", "quiet")
        await drive(kit, lambda: seen.names.count("renew") >= 3, step=FAST.heartbeat_interval / 8)
        await c.call("cancel", reply["turn_id"])
