"""The triggers of compaction and reset (``[agent.context.compact]``, ``[agent.context.reset]``): a
token budget, a hop count, the reset's budget checked first, and the check made only at a turn
boundary — never while an answer of the session streams."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roost.agent import AgentConfig, ChatAgent
from roost.agent.agent import Agent
from roost.agent.config import Budget, ContextConfig
from roost.testing import ActorKit, KitConnection
from tests.agent_support import drive, event_types, events
from tests.test_compaction import erase, note


def of_type(conn: KitConnection, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(conn) if e["event_type"] == kind]


class Tokens(Agent):
    kind = "tokens"
    config = AgentConfig(context=ContextConfig(compact=Budget(tokens=40), keep_recent=0))
    tools = (note, erase)


class Hops(Agent):
    kind = "hops"
    #: both budgets pass at the second run: the reset's is checked first
    config = AgentConfig(
        context=ContextConfig(compact=Budget(messages=3), reset=Budget(hops=1), keep_recent=0)
    )
    tools = (note, erase)


class Streaming(ChatAgent):
    kind = "streaming"
    config = AgentConfig(
        stream_batch_count=2,
        stream_batch_interval=0.05,
        stream_pace=0.01,
        context=ContextConfig(compact=Budget(messages=2), keep_recent=0),
    )


KINDS = [Tokens, Hops, Streaming]


async def test_a_token_budget_estimated_from_the_text_compacts(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("tokens", "a")
        await c.call("turn", "note a short one", session_id="s")  # ~ 9 tokens: within the budget
        await drive(kit, lambda: True)
        assert "context_requested" not in event_types(c)
        await c.call("turn", "note " + "a rather long request " * 6, session_id="s")  # ~ 45 tokens
        await drive(kit, lambda: "context_compacted" in event_types(c))
        (op,) = [e["payload"]["op"] for e in of_type(c, "context_compacted")]
        assert op["trigger"] == "tokens"
        assert len(op["range"]["turn_ids"]) == 2


async def test_a_hop_count_resets_and_the_reset_budget_is_checked_first(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("hops", "a")
        await c.call("turn", "note one", session_id="s")  # 2 messages, 1 hop: nothing
        await drive(kit, lambda: True)
        assert "context_requested" not in event_types(c)
        await c.call("turn", "note two", session_id="s")  # 4 messages > 3, and 2 hops > 1
        await drive(kit, lambda: "context_reset" in event_types(c))
        ops = [e["payload"]["op"] for e in of_type(c, "context_requested")]
        assert [(o["op"], o["trigger"]) for o in ops] == [("reset", "hops")]
        await c.call("turn", "note three", session_id="s")  # a fresh context: 2 messages, 1 hop
        await drive(kit, lambda: True)
        assert len(of_type(c, "context_requested")) == 1


async def test_triggers_are_checked_at_a_turn_boundary_never_while_an_answer_streams(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("streaming", "a")
        for text in ("first question", "second question", "third question"):
            await c.call("send", text, session_id="s")  # queued: answered one after the other
        await drive(kit, lambda: len(of_type(c, "turn_completed")) == 3, step=0.01)
        await drive(kit, lambda: "context_compacted" in event_types(c), step=0.01)
        evs = events(c)
        ends = [i for i, e in enumerate(evs) if e["event_type"] == "turn_completed"]
        (requested,) = [i for i, e in enumerate(evs) if e["event_type"] == "context_requested"]
        # the budget passed when the first answer ended, but the next answer streamed at once
        assert requested > ends[-1]
        (op,) = [e["payload"]["op"] for e in of_type(c, "context_compacted")]
        assert len(op["range"]["turn_ids"]) == 3
