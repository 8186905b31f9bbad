"""An app for the compaction SIGKILL test with the deterministic model (``roost serve
tests.compaction_app:app``): kind ``slowsum``, a chat whose summaries are made inside the wake-up's
turn and whose first summary hangs there, after creating the marker file ``$ROOST_TEST_MARKER``, so
that the test can SIGKILL the server while the compaction's turn is open. Every summary begun is one
line of ``$ROOST_TEST_MARKER.calls`` (the effects the test counts).

Kind ``longrun``: an agent whose model calls the tool ``count`` once a hop for five hops, its run's
steps compacted after every hop past the first (``[agent.context.run]``); the first summary of its
steps hangs in the same way. Every call of ``count`` is one line of ``$ROOST_TEST_MARKER.count``
(its item id)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel

from roost.actors import RuntimeConfig
from roost.agent import AgentConfig, ChatAgent, ToolContext, tool
from roost.agent.agent import Agent
from roost.agent.chat import DeterministicChat
from roost.agent.config import Budget, ContextConfig
from roost.agent.models import DeterministicPlanner, ModelRequest, ModelStep, SummaryRequest, ToolCall
from roost.transport import create_app

__all__ = ["LongRun", "SlowSummary", "app"]


def _append(suffix: str, line: str) -> None:
    fd = os.open(os.environ["ROOST_TEST_MARKER"] + suffix, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
    os.write(fd, f"{line}\n".encode())
    os.close(fd)


class HangsFirstSummary(DeterministicPlanner):
    """A summariser whose every summary begun is counted (a line of ``.calls``) and whose first one
    ever hangs inside its turn, after creating the marker file, to be killed there."""

    async def summarize(self, request: SummaryRequest) -> str:
        _append(".calls", str(os.getpid()))
        try:
            os.close(os.open(os.environ["ROOST_TEST_MARKER"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return await super().summarize(request)
        await asyncio.sleep(60)  # inside the turn: killed here
        return "never"


class HangingFirstSummary(HangsFirstSummary, DeterministicChat):
    pass


class SlowSummary(ChatAgent):
    kind = "slowsum"
    planner = HangingFirstSummary


class Nothing(BaseModel):
    pass


@tool(keywords=("count",))
async def count(ctx: ToolContext, args: Nothing) -> dict[str, Any]:
    """Count once more: a line of ``$ROOST_TEST_MARKER.count`` (an effect outside the database)."""
    _append(".count", str(ctx.item_id))
    return {"summary": f"counted at hop {ctx.item_id}"}


class Counting(HangsFirstSummary):
    """Calls ``count`` once a hop until hop 5; its first summary hangs (inside the turn)."""

    async def step(self, request: ModelRequest) -> ModelStep:
        if request.hop >= 5:
            return ModelStep(text=f"counted for {request.hop} hops")
        return ModelStep(tool_calls=[ToolCall(name="count", args={})])


class LongRun(Agent):
    kind = "longrun"
    config = AgentConfig(max_tool_hops=10, context=ContextConfig(run=Budget(hops=1), keep_recent_steps=0))
    tools = (count,)
    planner = Counting


# a wake-up the killed process had claimed comes due again after 2 s, not the default 10 s
app = create_app([SlowSummary, LongRun], config=RuntimeConfig(wakeup_lease=2.0))
