"""A compaction of one run's own steps (``[agent.context.run]``): a long run's older tool calls and
results are replaced, for the model, by a summary before its next model step — a hop count, a step
budget — while every step stays readable in ``get_run`` and ``context``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from roost.agent import AgentConfig, ToolContext, tool
from roost.agent.agent import Agent
from roost.agent.config import Budget, ContextConfig
from roost.agent.models import DeterministicPlanner, ModelRequest, ModelStep, ToolCall
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
