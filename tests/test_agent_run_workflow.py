"""An agent's run is a workflow of its agent on the workflow core (``roost.run``; roost.agent.loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from roost.actors import Actor, RpcError
from roost.agent import Agent, AgentConfig, ToolContext, tool
from roost.agent.models import DeterministicPlanner, Model, ModelRequest, ModelStep, ToolCall
from roost.testing import ActorKit
from roost.workflows.engine import engine_of
from tests.agent_support import FAST, Docs, Payloads, advance, drive, event_types, events

REQUEST = "analyze the documents and make a report"


def _approval(c: Any) -> str:
    payload = [e for e in events(c) if e["event_type"] == "approval_requested"][-1]["payload"]
    return str(payload["approval_id"])


async def _workflow(kit: ActorKit, kind: str, name: str, run_id: str) -> dict[str, Any]:
    async def read(actor: Actor) -> dict[str, Any]:
        engine = engine_of(actor)
        status = engine.status(run_id)
        status["history"] = engine.history(run_id, 0, 1000)["entries"]
        status["written"] = [(s.name, s.updated_at) for s in engine.store.steps(run_id)]
        return status

    result: dict[str, Any] = await kit.registry.run(kind, name, read)
    return result


async def test_a_run_is_a_workflow_of_its_agent(data_dir: Path) -> None:
    """The docs run: a model step, three planned calls (one a job, one waiting for its approval), a
    second model step, the check: each a step of the run's workflow, in that order."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: "approval_requested" in event_types(c))
        wf = await _workflow(kit, "docs", "acme", reply["run_id"])
        approval = _approval(c)
        assert (wf["name"], wf["status"]) == ("roost.run", "waiting")
        assert (wf["waiting"]["kind"], wf["waiting"]["step"]) == ("approval", approval)
        card = (await c.call("get_run", reply["run_id"]))["workflow"]
        assert (card["status"], card["waiting"]["step"], card["last_step"]["name"]) == (
            "waiting",
            approval,
            approval,
        )
        await c.call("approve", approval, "grant")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        wf = await _workflow(kit, "docs", "acme", reply["run_id"])
        run = await c.call("get_run", reply["run_id"])
        turn = await c.call("get_turn", reply["turn_id"])
        collect, analyze, report = (i["item_id"] for i in turn["items"])
        (job,) = (j["job_id"] for j in run["jobs"])
        assert wf["status"] == "completed"
        assert [(s["name"], s["kind"]) for s in wf["steps"]] == [
            ("model:0:0", "do"),
            (f"item:{collect}:0", "do"),
            (f"item:{analyze}:0", "do"),
            (f"job:{job}", "event"),
            (f"item:{report}:0", "do"),
            (approval, "approval"),
            (f"item:{report}:1", "do"),
            ("model:1:0", "do"),
            ("verify", "do"),
        ]
        assert wf["history"][-1]["event"] == "completed"
        page = await c.call("run_history", reply["run_id"], 0, 500)
        assert page["entries"] == wf["history"]  # what the run's reader sees: the core's history
        with pytest.raises(RpcError) as bad:
            await c.call("run_history", reply["run_id"], "0")
        assert bad.value.code == "invalid_arguments"


async def test_continue_rewinds_only_the_piece_the_run_stopped_in(data_dir: Path) -> None:
    """Cancelled while its job ran: ``continue_run`` drops the steps from that call's first on (history
    ``rewound``), keeps the model step and the first call (not run again), and the run completes."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 2)
        await c.call("cancel", reply["turn_id"])
        wf = await _workflow(kit, "docs", "acme", reply["run_id"])
        assert wf["status"] == "cancelled"
        kept = wf["written"][:2]
        await c.call("continue_run", reply["run_id"])
        await drive(kit, lambda: "approval_requested" in event_types(c))
        await c.call("approve", _approval(c), "grant")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        wf = await _workflow(kit, "docs", "acme", reply["run_id"])
        assert wf["status"] == "completed"
        assert wf["written"][:2] == kept  # neither written again
        (rewound,) = [e for e in wf["history"] if e["event"] == "rewound"]
        assert (rewound["detail"]["from"], rewound["detail"]["position"]) == ("cancelled", 2)
        turn = await c.call("get_turn", reply["turn_id"])
        assert [i["runs"] for i in turn["items"]] == [1, 2, 1]
        run = await c.call("get_run", reply["run_id"])
        assert [j["status"] for j in run["jobs"]] == ["cancelled", "completed"]


class Glitchy(DeterministicPlanner):
    """Raises an error of its own (not a ModelError) the first ``failures`` times it is asked."""

    failures: ClassVar[int] = 0

    async def step(self, request: ModelRequest) -> ModelStep:
        if Glitchy.failures > 0:
            Glitchy.failures -= 1
            raise RuntimeError("the planner's own bug, token=supersecrettoken0123")
        return await super().step(request)


class GlitchyAgent(Agent):
    kind = "glitchy"
    config = FAST

    def make_model(self) -> Model:
        return Glitchy(self.catalog())


async def test_a_runtime_error_fails_the_run_not_the_turn(data_dir: Path) -> None:
    """A piece of the run that raises (here the agent's own inline model) fails its run, retryable,
    with the error's first line (credentials redacted there and in the workflow's record), and the
    ``turn`` call answers; ``continue_run`` runs the piece again."""
    Glitchy.failures = 1
    async with ActorKit([GlitchyAgent], data_dir) as kit:
        c = kit.connect("glitchy", "g")
        reply = await c.call("turn", "hello there")
        assert reply["status"] == "failed"
        assert reply["error"].startswith(
            "runtime error: step 'model:0:0' failed: RuntimeError: the planner's own bug, token="
        )
        run = await c.call("get_run", reply["run_id"])
        assert run["retryable"]
        wf = await _workflow(kit, "glitchy", "g", reply["run_id"])
        assert wf["reason"] == "step_failed"
        for text in (reply["error"], wf["error"], wf["steps"][0]["error"]):
            assert "supersecrettoken0123" not in text
        again = await c.call("continue_run", reply["run_id"])
        assert again["status"] == "in_progress"
        assert again["waiting"] == "input"  # the planner, asked again, asks what is meant


async def _as_before(kit: ActorKit, kind: str, name: str, run_id: str) -> None:
    """Make ``run_id`` what a file of an earlier release holds: a run with no workflow."""

    async def strip(actor: Actor) -> None:
        engine_of(actor).store.delete(run_id)
        actor.extension.connection().execute(
            "UPDATE roost_agent_runs SET on_core = 0 WHERE run_id = ?", (run_id,)
        )

    await kit.registry.run(kind, name, strip)


def _started(c: Any) -> list[str]:
    return [e["payload"]["tool"] for e in events(c) if e["event_type"] == "tool_started"]


async def test_a_run_of_an_earlier_release_waiting_for_an_approval_moves_onto_the_core(
    data_dir: Path,
) -> None:
    """A run with no workflow (begun before runs were workflows), waiting for an approval: the
    approval moves it onto the core, where it goes on from its approved call; nothing it had done
    runs again."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: "approval_requested" in event_types(c))
        await _as_before(kit, "docs", "acme", reply["run_id"])
        assert (await c.call("get_run", reply["run_id"]))["workflow"] is None
        await c.call("approve", _approval(c), "grant")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        turn = await c.call("get_turn", reply["turn_id"])
        assert turn["status"] == "completed"
        assert [i["status"] for i in turn["items"]] == ["completed"] * 3
        assert _started(c) == ["collect_documents", "analyze_documents", "generate_report"]  # each once
        wf = await _workflow(kit, "docs", "acme", reply["run_id"])
        assert wf["status"] == "completed"
        report = turn["items"][2]["item_id"]
        assert [s["name"] for s in wf["steps"]] == ["adopted:0", f"item:{report}:0", "model:1:0", "verify"]
        assert (await c.call("get_run", reply["run_id"]))["workflow"]["status"] == "completed"


async def test_a_run_of_an_earlier_release_waiting_for_its_job_moves_onto_the_core_at_the_jobs_end(
    data_dir: Path,
) -> None:
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: "analyze_documents" in _started(c))
        await _as_before(kit, "docs", "acme", reply["run_id"])
        await drive(kit, lambda: "approval_requested" in event_types(c))  # the job ended: on to the report
        await c.call("approve", _approval(c), "grant")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        assert _started(c) == ["collect_documents", "analyze_documents", "generate_report"]
        wf = await _workflow(kit, "docs", "acme", reply["run_id"])
        assert wf["status"] == "completed"
        assert wf["steps"][0]["name"] == "adopted:0"
        run = await c.call("get_run", reply["run_id"])
        assert [j["status"] for j in run["jobs"]] == ["completed"]


async def test_a_run_of_an_earlier_release_waiting_for_input_moves_onto_the_core_with_the_answer(
    data_dir: Path,
) -> None:
    async with ActorKit([Payloads], data_dir) as kit:
        c = kit.connect("payloads", "p")
        reply = await c.call("turn", "ask me")
        await drive(kit, lambda: "input_requested" in event_types(c))
        await _as_before(kit, "payloads", "p", reply["run_id"])
        await c.call("provide_input", reply["run_id"], "teal")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        turn = await c.call("get_turn", reply["turn_id"])
        assert turn["items"][0]["result"] == {"colour": "teal"}
        wf = await _workflow(kit, "payloads", "p", reply["run_id"])
        assert (wf["status"], wf["steps"][0]["name"]) == ("completed", "adopted:0")


async def test_a_cancelled_run_of_an_earlier_release_continues_on_the_core(data_dir: Path) -> None:
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: "approval_requested" in event_types(c))
        await _as_before(kit, "docs", "acme", reply["run_id"])
        await c.call("cancel", reply["turn_id"])
        again = await c.call("continue_run", reply["run_id"])
        assert again["status"] == "in_progress"
        await drive(kit, lambda: len([e for e in events(c) if e["event_type"] == "approval_requested"]) == 2)
        await c.call("approve", _approval(c), "grant")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        assert _started(c) == ["collect_documents", "analyze_documents", "generate_report"]
        wf = await _workflow(kit, "docs", "acme", reply["run_id"])
        assert (wf["status"], wf["steps"][0]["name"]) == ("completed", "adopted:0")


async def test_continue_after_a_stop_between_two_pieces_runs_neither_again(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one in-turn step an advance, the run stops after its model step has planned and before
    the first call: a cancel there, then ``continue_run``, keeps the plan (the model is not asked
    again, no second ``plan_ready``) and runs each call once."""
    monkeypatch.setattr("roost.workflows.step.STEPS_PER_TURN", 1)
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        assert reply["status"] == "in_progress"  # the plan is recorded; its calls wait for a wake-up
        wf = await _workflow(kit, "docs", "acme", reply["run_id"])
        assert [s["name"] for s in wf["steps"]] == ["model:0:0"]
        await c.call("cancel", reply["turn_id"])
        await c.call("continue_run", reply["run_id"])
        await drive(kit, lambda: "approval_requested" in event_types(c))
        await c.call("approve", _approval(c), "grant")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        assert event_types(c).count("plan_ready") == 1  # the plan, once (the model was not asked again)
        turn = await c.call("get_turn", reply["turn_id"])
        assert [i["runs"] for i in turn["items"]] == [1, 1, 1]
        wf = await _workflow(kit, "docs", "acme", reply["run_id"])
        (rewound,) = [e for e in wf["history"] if e["event"] == "rewound"]
        assert rewound["detail"]["position"] == 1  # nothing dropped: the plan was settled


async def test_a_failed_run_workflow_stops_what_the_run_owns(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run past its kind's bound on steps (three, here) fails while its job runs: the job is
    cancelled with it, the run's error says why, and it is not retryable (it would fail again)."""
    monkeypatch.setattr(Docs, "workflow_max_steps", 3)
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        assert reply["status"] == "failed"
        assert reply["error"] == "runtime error: more than 3 steps"
        run = await c.call("get_run", reply["run_id"])
        assert not run["retryable"]
        assert [j["status"] for j in run["jobs"]] == ["cancelled"]
        assert "tool_cancelled" in event_types(c)
        with pytest.raises(RpcError) as refused:
            await c.call("continue_run", reply["run_id"])
        assert refused.value.code == "invalid_transition"


async def test_an_approval_of_a_failed_run_is_closed(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's workflow fails at its approval's wait: the approval is cancelled with it, the
    session shows none pending, and approving it is refused."""
    monkeypatch.setattr(Docs, "workflow_max_steps", 5)
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: "turn_failed" in event_types(c))
        card = await c.call("session", reply["session_id"])
        assert card["pending_approval"] is None
        with pytest.raises(RpcError) as refused:
            await c.call("approve", _approval(c), "grant")
        assert refused.value.code == "invalid_transition"
        turn = await c.call("get_turn", reply["turn_id"])
        assert turn["status"] == "failed"


class Forgetful(Docs):
    kind = "forgetful"
    workflow_retention = 1


async def test_a_run_whose_workflow_is_no_longer_kept_is_not_continued(data_dir: Path) -> None:
    """The retention deleted a cancelled run's workflow (more finished since): ``continue_run``
    is refused, clearly, rather than taken for a run of an earlier release; nothing changes."""
    async with ActorKit([Forgetful], data_dir) as kit:
        c = kit.connect("forgetful", "f")
        first = await c.call("turn", REQUEST)
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 1)
        await c.call("cancel", first["turn_id"])
        for _ in range(2):  # each start deletes the oldest finished workflow past the one kept
            advance(kit, 1)  # (the oldest by its end: the fake clock moves, so ends differ)
            await c.call("turn", "collect the documents")
        run = await c.call("get_run", first["run_id"])
        assert run["workflow"] is None
        with pytest.raises(RpcError) as refused:
            await c.call("continue_run", first["run_id"])
        assert refused.value.code == "invalid_transition"
        assert "no longer kept" in refused.value.message
        assert (await c.call("get_run", first["run_id"]))["status"] == "cancelled"


TICKS: list[str] = []


class Empty(BaseModel):
    pass


@tool(keywords=("tick",))
async def tick(ctx: ToolContext, args: Empty) -> int:
    """Counts its calls (inline)."""
    TICKS.append(ctx.item_id or "")
    return len(TICKS)


class LongPlanner(DeterministicPlanner):
    """Plans ``WIDTH`` calls of ``tick`` a step for ``HOPS`` steps, then answers."""

    WIDTH: ClassVar[int] = 110
    HOPS: ClassVar[int] = 10

    async def step(self, request: ModelRequest) -> ModelStep:
        if request.hop >= self.HOPS:
            return ModelStep(text="done")
        return ModelStep(tool_calls=[ToolCall(name="tick") for _ in range(self.WIDTH)])


class LongAgent(Agent):
    kind = "long"
    config = AgentConfig(max_tool_hops=20)
    tools = (tick,)

    def make_model(self) -> Model:
        return LongPlanner(self.catalog())


async def test_a_run_longer_than_the_cores_default_bound_completes(data_dir: Path) -> None:
    """1,100 calls in 10 model steps (over 1,100 steps, past the core's default of 1,000): the run
    completes, each call once, its advances cut into turns of 64 steps by wake-ups."""
    TICKS.clear()
    async with ActorKit([LongAgent], data_dir) as kit:
        c = kit.connect("long", "l")
        reply = await c.call("turn", "tick away")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        assert len(TICKS) == len(set(TICKS)) == 1100
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed"
        assert run["workflow"]["steps"] > 1100


class NoArgs(BaseModel):
    pass


@tool(keywords=("first",))
async def first_key(ctx: ToolContext, args: NoArgs) -> dict[str, Any]:
    return {"key": ctx.idempotency_key}


@tool(keywords=("second",))
async def second_key(ctx: ToolContext, args: NoArgs) -> dict[str, Any]:
    return {"key": ctx.idempotency_key}


class KeyedAgent(Agent):
    kind = "keyed"
    config = FAST
    tools: ClassVar = [first_key, second_key]


async def test_an_inline_tool_call_gets_the_idempotency_key_of_its_step(data_dir: Path) -> None:
    """An inline call runs inside an in-turn step of the run's workflow: ``ctx.idempotency_key`` is
    that step's (``{step_id}:{attempt}``, as an outside step's), one per call."""
    async with ActorKit([KeyedAgent], data_dir) as kit:
        c = kit.connect("keyed", "k")
        reply = await c.call("turn", "first then second")
        await drive(kit, lambda: "turn_completed" in event_types(c))
        turn = await c.call("get_turn", reply["turn_id"])
        keys = [i["result"]["key"] for i in turn["items"]]
        wf = await _workflow(kit, "keyed", "k", reply["run_id"])
        at = {s["name"]: s["position"] for s in wf["steps"]}

        async def prefix(actor: Actor) -> str:
            row = engine_of(actor).store.get(reply["run_id"])
            assert row is not None
            return f"{row.step_prefix}:{row.generation}"

        head = await kit.registry.run("keyed", "k", prefix)
        assert head.startswith(f"{reply['run_id']}:")
        positions = [at["item:" + i["item_id"] + ":0"] for i in turn["items"]]
        assert keys == [f"{head}:{pos}:1" for pos in positions]
        assert len(set(keys)) == 2
