"""Execution: what a tool is given (its :class:`ToolContext`) and running a quick tool inline.

Inline tools run inside the agent's turn: their result and the item's ``completed`` status commit
together, so a completed step is never run again. Background steps become jobs instead
(:mod:`roost.agent.jobs` for their records, :mod:`roost.agent.background` for the worker), which get
their context from :meth:`Execution.context` too.
"""

from __future__ import annotations

from typing import Any

from roost.agent.catalog import Tool, ToolContext
from roost.agent.context import Part
from roost.agent.status import ItemStatus
from roost.agent.store import Row

__all__ = ["Execution"]


class Execution(Part):
    def context(self, run: Row, item_id: str | None, tool_name: str, attempt: int = 1) -> ToolContext:
        """The context of a step of ``run``: ids, settings, inputs, earlier results, the attempt."""
        agent = self.agent
        done = self.store.select(
            "items", "run_id = ? AND status = ?", (run["run_id"], ItemStatus.COMPLETED), order="step_index"
        )
        return ToolContext(
            agent=agent.name,
            run_id=run["run_id"],
            turn_id=run["turn_id"],
            item_id=item_id,
            trace_id=run["trace_id"],
            data_dir=agent.extension.process.data_dir,
            settings=agent.settings().tool_settings(tool_name),
            inputs=list(self.records.original(run["inputs"])),
            results={i["tool_name"]: i["result"] for i in done},
            attempt=attempt,
            workspace=self.orchestrator.workspaces.open(run) if item_id is not None else None,
        )

    async def run_inline(self, run: Row, item: Row, tool: Tool, idempotency_key: str | None = None) -> Any:
        """Run ``tool`` inside this turn (it must be quick), with the idempotency key of the run's
        step it runs in (``ctx.idempotency_key``). Exceptions go to the caller."""
        ctx = self.context(run, item["item_id"], tool.name)
        ctx.idempotency_key = idempotency_key
        return await tool.fn(ctx, tool.validate(self.records.original(item["args"])))
