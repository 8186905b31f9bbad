"""The orchestrator-workers shape with agents on both sides: a ``lead`` agent whose model hands
parts of a request to ``helper`` agents (other actors, by name: ``helper/{lead}.{worker}``) with the
tool ``delegate`` (:func:`roost.agent.delegate_tool`), and merges what they answer. The models are
deterministic (no network): the lead's plans ``delegate`` for a request that says *split* or
*delegate* (the request's words shared between ``w1``..``w3``, or the tasks given as JSON after
the keyword: ``delegate {"tasks": [{"worker": "a", "task": "..."}]}``); a helper answers its task
with the tool ``answer`` (the words reversed, after ``[agent.tools.answer] delay_s`` seconds).

``turn("split these six words between three helpers")`` on ``/agents/lead/l1``; ``get_run(run_id)``
shows ``delegations``: per worker the task's status, progress, the helper's run and how often it
was dispatched; each helper's report is a ``delegation_progress`` event of the lead's run, and a
cancel of the lead's run cancels the helpers' runs (docs/design.md, *Delegation*).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from roost.agent import Agent, ToolContext, delegate_tool, tool
from roost.agent.models import DeterministicPlanner, ModelRequest, ModelStep, ToolCall

__all__ = ["Answer", "Helper", "Lead", "answer"]


class Answer(BaseModel):
    text: str = Field(max_length=4000)


@tool(background=True, keywords=("answer",), settings=("delay_s",))
async def answer(ctx: ToolContext, args: Answer) -> dict[str, Any]:
    """Answer a part of a task (the deterministic worker: its words reversed)."""
    delay = float(ctx.settings.get("delay_s", 0.0))
    if delay:
        await ctx.progress(0, 1, "thinking")
        await ctx.sleep(delay)
    return {"summary": " ".join(reversed(args.text.split()))}


class AnswerEverything(DeterministicPlanner):
    """A worker's model: every task is answered by ``answer``, then the run is done."""

    async def step(self, request: ModelRequest) -> ModelStep:
        if request.steps:
            return await super().step(request)
        return ModelStep(tool_calls=[ToolCall(name="answer", args={"text": request.text})])


class Helper(Agent):
    """A worker agent: answers the task it is handed."""

    kind = "helper"
    tools = (answer,)
    planner = AnswerEverything


class Lead(Agent):
    """The orchestrator agent: hands a request's parts to helpers and merges their answers."""

    kind = "lead"
    tools = (delegate_tool(Helper.kind),)
