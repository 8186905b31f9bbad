"""Background jobs on the workflow core: retries, lost workers, fencing, cancellation, worker presence
(roost/agent/jobs.py for the records, roost/agent/background.py for the attempt's side)."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from roost.actors import Actor, Observer, Overloaded, RetryPolicy
from roost.agent import AgentConfig
from roost.agent.agent import Agent
from roost.agent.background import job_runner
from roost.agent.catalog import NeedInput, ToolCancelled, ToolContext, tool
from roost.agent.orchestrator import Orchestrator
from roost.cli import main
from roost.storage import actor_path
from roost.testing import ActorKit
from roost.workflows.runner import runner
from tests.agent_support import (
    FAST,
    FLAKY_CALLS,
    Docs,
    Flaky,
    Nothing,
    advance,
    drive,
    event_types,
    events,
    file_text,
)


def orchestrator_of(actor: Actor) -> Orchestrator:
    assert isinstance(actor, Agent)
    return actor.orchestrator


def lose_attempts(kit: ActorKit) -> None:
    """What a lost process does to the attempts it ran: their tasks are gone, nothing recorded."""
    for task in list(runner(kit.registry.process).tasks.values()):
        task.cancel()


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


async def test_a_lost_worker_is_noticed_at_its_lease_end_and_its_attempt_runs_again(data_dir: Path) -> None:
    """The attempt's task is gone without a word (as when its process dies): the lease wake-up finds
    no live task and runs the attempt again (its next run, under the same idempotency key); the job
    counts the try as its second; the item completes once."""
    KEYS.clear()
    async with ActorKit([Keyed], data_dir) as kit:
        c = kit.connect("keyed", "k")
        reply = await c.call("turn", "keyed work")
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 1, step=0.0)
        lose_attempts(kit)
        await drive(kit, lambda: runner(kit.registry.process).leases_held == 0, step=0.0)
        before = len(events(c))
        advance(kit, FAST.lease_ttl / 2)
        await drive(kit, lambda: True)
        assert len(events(c)) == before, "not taken up before its lease ends"
        await drive(kit, lambda: "turn_completed" in event_types(c))
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
        assert [i["runs"] for i in turn["items"]] == [1]
        assert [i["status"] for i in turn["items"]] == ["completed"]
        first, second = KEYS
        assert (first[0], second[0]) == (1, 2)
        assert first[1] is not None
        assert first[1] == second[1], "a rerun of the attempt has its key"


async def test_a_superseded_try_cannot_write(data_dir: Path) -> None:
    """Fencing: once the attempt's next run is current, the earlier try's progress is refused (its
    tool gets ToolCancelled) and nothing of it is recorded."""
    KEYS.clear()
    CONTEXTS.clear()
    async with ActorKit([Keyed], data_dir) as kit:
        c = kit.connect("keyed", "k")
        await c.call("turn", "keyed work")
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 1, step=0.0)
        stale = CONTEXTS[0]
        lose_attempts(kit)
        await drive(kit, lambda: len(CONTEXTS) == 2, step=FAST.lease_ttl / 4)
        with pytest.raises(ToolCancelled):
            await stale.progress(5, 6, "late")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        assert all(
            e["payload"].get("message") != "late" for e in events(c) if e["event_type"] == "tool_progress"
        )


#: ``(ctx.attempt, ctx.idempotency_key)`` of each try of ``keyed``, and its contexts.
KEYS: list[tuple[int, str | None]] = []
CONTEXTS: list[ToolContext] = []


@tool(background=True, keywords=("keyed",))
async def keyed(ctx: ToolContext, args: Nothing) -> str:
    """Reports once, then works a while (on the runtime's clock)."""
    KEYS.append((ctx.attempt, ctx.idempotency_key))
    CONTEXTS.append(ctx)
    await ctx.progress(0, 1)
    await ctx.sleep(FAST.lease_ttl / 4)
    return "done"


class Keyed(Agent):
    kind = "keyed"
    config = FAST
    tools = (keyed,)


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


async def test_no_task_of_a_job_outlives_the_kit(data_dir: Path) -> None:
    """When the kit stops, every task a job ran in has ended: its attempt's (whose tool's clean-up ran
    to its end: the runner awaits it) and the presence task; nothing of the stopped attempt is
    recorded as a failure (its lease wake-up takes it up after a restart)."""
    TIDIED.clear()
    async with ActorKit([Tidy], data_dir) as kit:
        c = kit.connect("tidy", "t")
        await c.call("turn", "tidy up")
        await drive(kit, lambda: "tool_progress" in event_types(c))
        tasks = list(runner(kit.registry.process).tasks.values())
        assert len(tasks) == 1
        presence = job_runner(kit.registry.process)._presence
        assert presence is not None
    assert all(t.done() for t in tasks)
    assert presence.done()
    assert TIDIED == [1]
    assert "tool_failed" not in event_types(c)


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
    """Keeps the name of each turn's function (a wake-up's is its input's type)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def turn(self, kind: str, seconds: float, item: object) -> None:
        self.names.append(getattr(getattr(item, "fn", None), "__name__", type(item).__name__))


@tool(background=True, keywords=("quiet",))
async def quiet(ctx: ToolContext, args: Nothing) -> str:
    """Works three leases long without a word."""
    await ctx.sleep(FAST.lease_ttl * 3)
    return "done"


class Quiet(Agent):
    kind = "quiet"
    config = FAST
    tools = (quiet,)


async def test_a_running_job_costs_no_turns_but_its_lease_checks(data_dir: Path) -> None:
    """A job whose tool says nothing makes no turns while it runs: nothing renews its lease (the lease
    wake-up asks this process whether the attempt still runs), so within a lease no turn runs in the
    agent, and each lease's end costs one wake-up turn."""
    async with ActorKit([Quiet], data_dir) as kit:
        seen = TurnNames()
        kit.registry.observer = seen
        c = kit.connect("quiet", "q")
        await c.call("turn", "quiet please")
        await drive(kit, lambda: runner(kit.registry.process).leases_held == 1, step=0.0)
        seen.names.clear()
        start = kit.clock.now()
        await drive(kit, lambda: kit.clock.now() >= start + FAST.lease_ttl * 0.9, step=FAST.lease_ttl / 10)
        assert seen.names == [], "no turn within a lease"
        await drive(kit, lambda: kit.clock.now() >= start + FAST.lease_ttl * 2.5, step=FAST.lease_ttl / 10)
        assert 1 <= len(seen.names) <= 3, seen.names
        await drive(kit, lambda: "turn_completed" in event_types(c), step=FAST.lease_ttl / 10)


#: A credential a tool's error carries (its pattern is one the payload policy redacts).
LEAKED = "sk-live-0123456789abcdef0123456789"


@tool(background=True, keywords=("leaky",))
async def leaky(ctx: ToolContext, args: Nothing) -> str:
    """Fails its first attempt with an error that holds a credential."""
    if ctx.attempt == 1:
        raise ConnectionError(f"upstream refused api_key={LEAKED}")
    return "done"


class Final(ConnectionError):
    retryable = False


@tool(background=True, keywords=("final",))
async def final(ctx: ToolContext, args: Nothing) -> str:
    """Fails for good (it says so) with an error that holds a credential."""
    raise Final(f"upstream refused api_key={LEAKED}")


@tool(background=True, keywords=("asking",))
async def asking(ctx: ToolContext, args: Nothing) -> str:
    """Needs input, with a credential in its question."""
    raise NeedInput(f"is api_key={LEAKED} still good?")


class Leaky(Agent):
    kind = "leaky"
    config = FAST
    tools = (leaky, final, asking)


@pytest.mark.parametrize(
    ("request_text", "ends"),
    [("leaky", "turn_completed"), ("final", "turn_failed"), ("asking", "input_requested")],
)
async def test_a_jobs_texts_are_written_nowhere_as_raised(
    data_dir: Path, request_text: str, ends: str
) -> None:
    """The payload policy covers what the workflow core records of a job (its step's error and
    outcome, its history, the workflow's result): a credential in a tool's retried error, in its
    final error, in its question is redacted in every row of the agent's file, as in the events."""
    async with ActorKit([Leaky], data_dir) as kit:
        c = kit.connect("leaky", "l")
        await c.call("turn", request_text)
        await drive(kit, lambda: ends in event_types(c))
        said = [e for e in events(c) if e["event_type"] in ("tool_failed", "input_requested")]
        assert said
        assert all(LEAKED not in repr(e) for e in events(c))
        assert "[redacted]" in repr(said[0]["payload"])
    text = file_text(data_dir, "leaky", "l")
    assert "roost.job" in text  # the core's rows were read
    assert LEAKED not in text


@tool(background=True, keywords=("broken",))
async def broken(ctx: ToolContext, args: Nothing) -> str:
    """Fails every attempt with a long, many-lined error."""
    raise RuntimeError("it broke\nTraceback (most recent call last):\n  File internals.py, line 1")


@tool(background=True, keywords=("refusing",))
async def refusing(ctx: ToolContext, args: Nothing) -> str:
    """Raises ToolCancelled of its own (the upstream job it waited on was cancelled)."""
    REFUSALS.append(ctx.attempt)
    raise ToolCancelled("the upstream job was cancelled by its owner")


@tool(background=True, keywords=("bulky",))
async def bulky(ctx: ToolContext, args: Nothing) -> dict[str, str]:
    """Returns a result larger than a workflow step's result may be."""
    return {"text": "x" * 400_000}


REFUSALS: list[int] = []


class Odd(Agent):
    kind = "odd"
    config = AgentConfig(**{**FAST.model_dump(), "payload_limit": 1_000_000})
    tools = (broken, refusing, bulky)


async def test_a_jobs_error_is_its_first_line(data_dir: Path) -> None:
    """What a job records of a tool's exception is its type and first line, never the rest (a
    traceback, internals): in the events, the run's error and the file."""
    async with ActorKit([Odd], data_dir) as kit:
        c = kit.connect("odd", "o")
        reply = await c.call("turn", "broken")
        await drive(kit, lambda: "turn_failed" in event_types(c))
        run = await c.call("get_run", reply["run_id"])
        assert run["error"] == "broken failed: RuntimeError: it broke (attempt 3 of 3)"
        errors = [e["payload"]["error"] for e in events(c) if e["event_type"] == "tool_failed"]
        assert all(error.startswith("RuntimeError: it broke") for error in errors)
        assert not any("internals" in repr(e) for e in events(c))
    assert "internals" not in file_text(data_dir, "odd", "o")


async def test_a_tool_that_raises_toolcancelled_fails_its_step_once(data_dir: Path) -> None:
    REFUSALS.clear()
    async with ActorKit([Odd], data_dir) as kit:
        c = kit.connect("odd", "o")
        reply = await c.call("turn", "refusing")
        await drive(kit, lambda: "turn_failed" in event_types(c))
        run = await c.call("get_run", reply["run_id"])
        assert REFUSALS == [1], "not retried"
        assert run["retryable"] is False or run["retryable"] == 0
        assert "the upstream job was cancelled by its owner" in run["error"]


async def test_a_jobs_result_may_be_larger_than_a_workflow_steps(data_dir: Path) -> None:
    """A job's result is kept with the job (the agent's payload limit), not in the workflow core's
    step record (256 KiB at most): a 400 KB result completes its step."""
    async with ActorKit([Odd], data_dir) as kit:
        c = kit.connect("odd", "o")
        reply = await c.call("turn", "bulky")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        turn = await c.call("get_turn", reply["turn_id"])
        assert [i["status"] for i in turn["items"]] == ["completed"]


async def test_a_running_job_keeps_its_actor_live(data_dir: Path) -> None:
    """An actor whose job runs here is not put to sleep by the idle sweep, however quiet the job: its
    attempt's turns and lease wake-up stay in this process (another process cannot open the actor
    and find the attempt missing). Once the job ends, the actor sleeps as any other."""
    async with ActorKit([Quiet], data_dir, idle_timeout=FAST.lease_ttl / 4) as kit:
        await kit.call("quiet", "q", "turn", "quiet please")  # no connection stays open
        await drive(kit, lambda: runner(kit.registry.process).leases_held == 1, step=0.0)
        advance(kit, FAST.lease_ttl / 2)
        assert kit.registry.sweep() == 0
        assert ("quiet", "q") in kit.registry.hosts
        await drive(kit, lambda: runner(kit.registry.process).leases_held == 0, step=FAST.lease_ttl / 10)
        advance(kit, FAST.lease_ttl)
        await drive(kit, lambda: kit.registry.sweep() == 1 or ("quiet", "q") not in kit.registry.hosts)
        assert ("quiet", "q") not in kit.registry.hosts


async def test_a_job_of_the_release_before_is_taken_up_by_its_lease_wake_up(data_dir: Path) -> None:
    """A job begun before jobs ran on the workflow core (a row, its lease wake-up, no workflow): when
    the wake-up fires, the job gets its workflow and completes; one whose attempts were spent fails."""
    FLAKY_CALLS.clear()
    async with ActorKit([Flaky], data_dir) as kit:
        c = kit.connect("flaky", "f")
        reply = await c.call("turn", "flaky please")
        await drive(kit, lambda: "turn_completed" in event_types(c))

        async def as_before(actor: Actor) -> str:
            orch = orchestrator_of(actor)
            store = orch.records.store()
            (job,) = store.select("jobs", "run_id = ?", (reply["run_id"],))
            item = store.get("items", job["item_id"])
            assert item is not None
            store.update("items", item["item_id"], status="running", updated_at=actor.extension.now)
            store.update(
                "runs",
                reply["run_id"],
                status="in_progress",
                model_done=0,
                on_core=0,
                updated_at=actor.extension.now,
            )
            store.update("jobs", job["job_id"], status="running", attempt=1, updated_at=actor.extension.now)
            for wid in (job["job_id"], reply["run_id"]):  # neither jobs nor runs were workflows then
                store.execute("DELETE FROM roost_wf WHERE id = ?", (wid,))
                store.execute("DELETE FROM roost_wf_steps WHERE workflow_id = ?", (wid,))
            await actor.schedule(0, "agent_lease", {"job_id": job["job_id"], "attempt": 1})
            return str(job["job_id"])

        job_id = await kit.registry.run("flaky", "f", as_before)
        calls = len(FLAKY_CALLS)
        await drive(kit, lambda: event_types(c).count("turn_completed") == 2)
        assert len(FLAKY_CALLS) == calls + 1, "its next try ran on the core"
        run = await c.call("get_run", reply["run_id"])
        assert run["jobs"][0]["job_id"] == job_id
        assert run["jobs"][0]["status"] == "completed"


@tool(background=True, keywords=("mixed",))
async def mixed(ctx: ToolContext, args: Nothing) -> str:
    """Fails its first and third tries; its second works until its process is lost."""
    await ctx.progress(0, 1)
    if ctx.attempt == 2:
        await ctx.sleep(3600)
    raise RuntimeError(f"failure of try {ctx.attempt}")


class Mixed(Agent):
    kind = "mixed"
    config = FAST
    tools = (mixed, quiet)


async def test_a_last_try_that_fails_ends_the_job_with_its_own_error(data_dir: Path) -> None:
    """Tries lost with their process spend the job's attempts as failed ones do: try 1 fails, try 2
    is lost, try 3 fails; the job ends at once with try 3's error, no retry announced after it and
    no fourth try started."""
    async with ActorKit([Mixed], data_dir) as kit:
        c = kit.connect("mixed", "m")
        reply = await c.call("turn", "mixed")
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 2)
        lose_attempts(kit)
        await drive(kit, lambda: "turn_failed" in event_types(c))
        run = await c.call("get_run", reply["run_id"])
        assert run["error"] == "mixed failed: RuntimeError: failure of try 3 (attempt 3 of 3)"
        assert run["jobs"][0]["attempt"] == 3
        failed = [e["payload"] for e in events(c) if e["event_type"] == "tool_failed"]
        assert [f["will_retry"] for f in failed] == [True, True, False]
        starts = [e["payload"].get("attempt") for e in events(c) if e["event_type"] == "tool_started"]
        assert starts == [1, 2, 3]


async def test_a_running_jobs_lease_end_is_shown_as_it_moves(data_dir: Path) -> None:
    """``get_run`` shows where a running job's lease ends now: each lease check that finds the
    attempt alive moves it, and the card moves with it."""
    async with ActorKit([Mixed], data_dir) as kit:
        c = kit.connect("mixed", "m")
        reply = await c.call("turn", "quiet please")
        await drive(kit, lambda: runner(kit.registry.process).leases_held == 1, step=0.0)
        start = kit.clock.now()
        await drive(kit, lambda: kit.clock.now() > start + FAST.lease_ttl * 2.5, step=FAST.lease_ttl / 10)
        job = (await c.call("get_run", reply["run_id"]))["jobs"][0]
        assert job["status"] == "running"
        assert job["lease_expires_at"] > kit.clock.now()


async def test_an_overloaded_activation_creates_nothing_when_every_live_actor_runs_a_job(
    data_dir: Path,
) -> None:
    async with ActorKit([Mixed], data_dir, max_active=2) as kit:
        for name in ("a", "b"):
            await kit.call("mixed", name, "turn", "quiet please")
        await drive(kit, lambda: runner(kit.registry.process).leases_held == 2, step=0.0)
        with pytest.raises(Overloaded):
            await kit.call("mixed", "c", "turn", "quiet please")
        assert not actor_path(data_dir, "mixed", "c").exists()
        assert kit.registry.directory is not None
        assert kit.registry.directory.get("mixed", "c") is None


#: Where the credential starts in ``longwinded``'s error: a cut at 1,000 characters keeps its first 12.
CUT_AT = 1000 - 12 - len("ConnectionError: ") - 1


@tool(background=True, keywords=("longwinded",))
async def longwinded(ctx: ToolContext, args: Nothing) -> str:
    """Fails once with a first line so long that its credential sits where the record is cut."""
    if ctx.attempt == 1:
        raise ConnectionError("x" * CUT_AT + f" {LEAKED}")
    return "done"


class Longwinded(Agent):
    kind = "longwinded"
    config = FAST
    tools = (longwinded,)


async def test_an_error_is_cleaned_before_it_is_cut(data_dir: Path) -> None:
    """A credential where a long error is cut is redacted whole: the core cleans, then cuts."""
    async with ActorKit([Longwinded], data_dir) as kit:
        c = kit.connect("longwinded", "l")
        await c.call("turn", "longwinded")
        await drive(kit, lambda: "turn_completed" in event_types(c))
    assert LEAKED[:10] not in file_text(data_dir, "longwinded", "l")
