"""A compaction of one run's own steps (``[agent.context.run]``): a long run's older tool calls and
results are replaced, for the model, by a summary before its next model step — a hop count, a step
budget — while every step stays readable in ``get_run`` and ``context``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from roost.actors import RpcError
from roost.agent import AgentConfig, ToolContext, tool
from roost.agent.agent import Agent
from roost.agent.config import Budget, ContextConfig
from roost.agent.models import DeterministicPlanner, ModelRequest, ModelStep, SummaryRequest, ToolCall
from roost.testing import ActorKit, KitConnection
from tests.agent_support import drive, events


class Nothing(BaseModel):
    pass


CALLS: list[str] = []


@tool(keywords=("count",))
async def count(ctx: ToolContext, args: Nothing) -> dict[str, Any]:
    """Count one more (each call once: the effects are counted)."""
    CALLS.append(str(ctx.item_id))
    return {"summary": f"counted {len(CALLS)}"}


class Stepper(DeterministicPlanner):
    """A model that calls ``count`` once a hop until hop 5, keeping what it was asked."""

    seen: ClassVar[list[ModelRequest]] = []

    async def step(self, request: ModelRequest) -> ModelStep:
        type(self).seen.append(request)
        if request.hop >= 5:
            return ModelStep(text=f"counted for {request.hop} hops")
        return ModelStep(tool_calls=[ToolCall(name="count", args={})])


class Long(Agent):
    kind = "long"
    config = AgentConfig(max_tool_hops=10, context=ContextConfig(run=Budget(hops=1), keep_recent_steps=1))
    tools = (count,)
    planner = Stepper


class Wide(Long):
    kind = "wide"
    config = AgentConfig(max_tool_hops=10, context=ContextConfig(run=Budget(messages=5), keep_recent_steps=0))


class Plain(Long):
    kind = "plain"
    config = AgentConfig(max_tool_hops=10)


def of_type(conn: KitConnection, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(conn) if e["event_type"] == kind]


async def _long_run(kit: ActorKit, kind: str) -> tuple[KitConnection, dict[str, Any]]:
    CALLS.clear()
    Stepper.seen.clear()
    c = kit.connect(kind, "a")
    reply = await c.call("turn", "count please", session_id="s")
    await drive(kit, lambda: bool(of_type(c, "turn_completed")))
    return c, await c.call("get_run", reply["run_id"])


def _summary_line(n: int) -> str:
    return f'tool: count {{}} -> {{"summary":"counted {n}"}}'


async def test_a_hop_count_compacts_a_long_runs_older_steps_before_its_next_model_step(
    data_dir: Path,
) -> None:
    async with ActorKit([Long], data_dir) as kit:
        c, run = await _long_run(kit, "long")
        assert run["status"] == "completed"
        assert len(CALLS) == 5  # each step once: a compaction repeats nothing
        ops = [e["payload"]["op"] for e in of_type(c, "context_compacted")]
        ranges = [(o["range"]["from_ordinal"], o["range"]["to_ordinal"]) for o in ops]
        assert [(o["hop"], o["trigger"], *r) for o, r in zip(ops, ranges, strict=True)] == [
            (2, "hops", 0, 0),  # 2 hops > 1: all but the last step
            (4, "hops", 1, 2),  # 2 more hops: the next ones, the summary before carried
        ]
        assert all(o["run_id"] == run["run_id"] for o in ops)
        assert ops[1]["artifact"] == {"summary": "\n".join(_summary_line(n) for n in (1, 2, 3))}
        by_hop = {r.hop: r for r in Stepper.seen}
        assert [s.result["summary"] for s in by_hop[1].steps] == ["counted 1"]  # nothing compacted yet
        assert by_hop[1].steps_summary == ""
        assert [s.result["summary"] for s in by_hop[2].steps] == ["counted 2"]
        assert by_hop[2].steps_summary == _summary_line(1)
        assert [s.result["summary"] for s in by_hop[5].steps] == ["counted 4", "counted 5"]
        assert by_hop[5].steps_summary.splitlines() == [_summary_line(n) for n in (1, 2, 3)]
        assert len(Stepper.seen) == 6  # one request a hop: the wait for a compaction asked nothing
        # the whole run stays readable: every step, and the operations with their ranges
        turn = await c.call("get_turn", run["turn_id"])
        assert [i["status"] for i in turn["items"]] == ["completed"] * 5
        card = await c.call("context", "s")
        assert [o["run_id"] for o in card["ops"]] == [run["run_id"]] * 2
        assert card["context"]["cursor"] == 0  # the session's own context is not touched


async def test_a_step_budget_compacts_every_step_when_none_is_kept(data_dir: Path) -> None:
    async with ActorKit([Wide], data_dir) as kit:
        c, run = await _long_run(kit, "wide")
        assert run["status"] == "completed"
        assert len(CALLS) == 5
        ops = [e["payload"]["op"] for e in of_type(c, "context_compacted")]
        assert [(o["hop"], o["trigger"], o["range"]["to_ordinal"]) for o in ops] == [
            (3, "messages", 2),  # 3 steps are 6 messages > 5
        ]
        last = Stepper.seen[-1]
        assert [s.result["summary"] for s in last.steps] == ["counted 4", "counted 5"]


async def test_without_a_run_budget_a_run_sees_all_its_steps(data_dir: Path) -> None:
    async with ActorKit([Plain], data_dir) as kit:
        c, run = await _long_run(kit, "plain")
        assert run["status"] == "completed"
        assert not of_type(c, "context_requested")
        assert len(Stepper.seen[-1].steps) == 5
        assert Stepper.seen[-1].steps_summary == ""


class Refuses(Stepper):
    """The stepper whose summaries all fail (a bug of the model's own code)."""

    async def summarize(self, request: SummaryRequest) -> str:
        raise RuntimeError("the model refused to summarise")


class Refused(Long):
    kind = "refused"
    planner = Refuses


async def test_a_run_whose_steps_compaction_fails_goes_on_with_its_steps_whole(data_dir: Path) -> None:
    """Before, the run was told before the operation was marked failed, saw it pending and waited
    again for an event it had used: it hung for ever."""
    async with ActorKit([Refused], data_dir) as kit:
        c, run = await _long_run(kit, "refused")
        assert run["status"] == "completed"
        assert len(CALLS) == 5
        failed = [e["payload"]["op"] for e in of_type(c, "context_failed")]
        assert [o["hop"] for o in failed] == [2, 3, 4, 5]  # at each hop past the budget, once each
        assert "refused to summarise" in failed[0]["error"]
        assert len(Stepper.seen[-1].steps) == 5  # nothing summarised: every step seen whole
        assert Stepper.seen[-1].steps_summary == ""


class KeepFour(Long):
    kind = "keepfour"
    config = AgentConfig(max_tool_hops=10, context=ContextConfig(run=Budget(hops=1), keep_recent_steps=4))


async def test_keep_recent_steps_larger_than_the_steps_made_keeps_them_all(data_dir: Path) -> None:
    """Before, a negative slice summarised steps from the end of the list it should have kept."""
    async with ActorKit([KeepFour], data_dir) as kit:
        c, run = await _long_run(kit, "keepfour")
        assert run["status"] == "completed"
        by_hop = {r.hop: r for r in Stepper.seen}
        assert [len(by_hop[h].steps) for h in range(1, 5)] == [1, 2, 3, 4]  # none summarised yet
        ops = [e["payload"]["op"] for e in of_type(c, "context_compacted")]
        assert [(o["hop"], o["range"]["from_ordinal"], o["range"]["to_ordinal"]) for o in ops] == [(5, 0, 0)]


class Creds(BaseModel):
    api_token: str


SECRET = "hunter2-plain-value-xyz"


@tool(keywords=("login",))
async def login(ctx: ToolContext, args: Creds) -> dict[str, Any]:
    """A tool handed a credential, and echoing it back."""
    return {"summary": f"logged in with {args.api_token}"}


class Leaker(Stepper):
    asked: ClassVar[list[SummaryRequest]] = []

    async def step(self, request: ModelRequest) -> ModelStep:
        type(self).seen.append(request)
        if request.hop >= 4:
            return ModelStep(text="done")
        return ModelStep(tool_calls=[ToolCall(name="login", args={"api_token": SECRET})])

    async def summarize(self, request: SummaryRequest) -> str:
        type(self).asked.append(request)
        return await super().summarize(request)


class Leaky(Long):
    kind = "leaky"
    tools = (login,)
    planner = Leaker


async def test_a_runs_secret_reaches_its_steps_summariser_as_the_model_sees_it_redacted(
    data_dir: Path,
) -> None:
    """Neither the credential nor its kept digest: the summariser sees the steps as the model does."""
    Leaker.asked.clear()
    async with ActorKit([Leaky], data_dir) as kit:
        c = kit.connect("leaky", "a")
        await c.call("turn", "login please", session_id="s")
        await drive(kit, lambda: bool(of_type(c, "turn_completed")))
    seen = [m.content for r in Leaker.asked for m in r.messages]
    assert seen
    assert not any(SECRET in t or "$secret" in t for t in seen)
    assert all("[redacted]" in t for t in seen)


class Held(Stepper):
    """A summariser that answers only once the test lets it (an outside step of the operation)."""

    summarizes_inline = False
    gate: ClassVar[asyncio.Event | None] = None

    async def summarize(self, request: SummaryRequest) -> str:
        assert Held.gate is not None
        await Held.gate.wait()
        return "steps summarised"


class HeldRun(Long):
    kind = "heldrun"
    planner = Held


async def test_a_session_compaction_asked_while_a_runs_own_is_under_way_is_refused_saying_why(
    data_dir: Path,
) -> None:
    """Before, ``compact`` answered the run's pending operation as if it were the one asked for."""
    Held.gate = asyncio.Event()
    async with ActorKit([HeldRun], data_dir) as kit:
        CALLS.clear()
        c = kit.connect("heldrun", "a")
        await c.call("turn", "count please", session_id="s")
        await drive(kit, lambda: bool(of_type(c, "context_requested")))
        with pytest.raises(RpcError, match=r"compaction of run .* steps is under way"):
            await c.call("reset", "s", "start afresh")
        Held.gate.set()
        await drive(kit, lambda: bool(of_type(c, "turn_completed")), io_wait=0.01)
        assert [e["payload"]["op"]["run_id"] is not None for e in of_type(c, "context_compacted")] == [
            True,
            True,
        ]


@tool(background=True, keywords=("count",), name="count")
async def slow_count(ctx: ToolContext, args: Nothing) -> dict[str, Any]:
    """``count``, taking ten seconds on the runtime's clock (a background job)."""
    await ctx.sleep(10.0)
    CALLS.append(str(ctx.item_id))
    return {"summary": f"counted {len(CALLS)}"}


class Asked(Long):
    """No budget of its own: its steps, each a job of ten seconds, are compacted only when asked."""

    kind = "asked"
    config = AgentConfig(max_tool_hops=10, context=ContextConfig(keep_recent_steps=1))
    tools = (slow_count,)
    planner = Held


async def test_compact_asked_while_a_run_steps_compacts_its_steps_before_its_next_model_step(
    data_dir: Path,
) -> None:
    """Before, ``compact(session_id)`` was refused while a run of the session was under way."""
    Held.gate = asyncio.Event()
    Held.gate.set()
    Stepper.seen.clear()
    async with ActorKit([Asked], data_dir) as kit:
        c = kit.connect("asked", "a")
        CALLS.clear()
        await c.call("turn", "count please", session_id="s")
        await drive(kit, lambda: len(CALLS) >= 2, io_wait=0.01)  # two steps done, the third under way
        asked = await c.call("compact", "s")
        assert (asked["status"], len(asked["run_ids"])) == ("requested", 1)
        await drive(kit, lambda: bool(of_type(c, "turn_completed")), io_wait=0.01)
        (op,) = [e["payload"]["op"] for e in of_type(c, "context_compacted")]
        assert (op["trigger"], op["run_id"]) == ("explicit", asked["run_ids"][0])
        later = [r for r in Stepper.seen if r.hop > op["hop"]]
        assert later
        assert all(r.steps_summary == "steps summarised" for r in later)
