"""An app for the delegation SIGKILL test (``roost serve tests.delegation_app:app``): a lead agent
(``holdlead``) whose helpers (``holdhelper``) hold their answer until the file
``$ROOST_TEST_MARKER.go`` exists. Each start of a helper's answer is a line of
``$ROOST_TEST_MARKER.started`` and each answer made a line of ``$ROOST_TEST_MARKER.effects`` (the
helper and the step's idempotency key: the effects the test counts). The workers named in
``$ROOST_TEST_QUICK`` (commas) answer at once."""

from __future__ import annotations

import os
from typing import Any

from roost.actors import RuntimeConfig
from roost.agent import AgentConfig, ToolContext, delegate_tool, tool
from roost.examples.lead import Answer, Helper, Lead
from roost.transport import create_app

__all__ = ["HoldingHelper", "HoldingLead", "app"]

QUICK = AgentConfig(lease_ttl=1.0, heartbeat_interval=0.25)


def _line(suffix: str, text: str) -> None:
    fd = os.open(os.environ["ROOST_TEST_MARKER"] + suffix, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
    os.write(fd, f"{text}\n".encode())
    os.close(fd)


def _go() -> bool:
    return os.path.exists(os.environ["ROOST_TEST_MARKER"] + ".go")


def _quick(agent: str) -> bool:
    return agent.rpartition(".")[2] in os.environ.get("ROOST_TEST_QUICK", "").split(",")


@tool(background=True, keywords=("answer",), name="answer")
async def hold_then_answer(ctx: ToolContext, args: Answer) -> dict[str, Any]:
    """Wait for the go file (renewing the lease), then answer once: an effect outside the database."""
    _line(".started", f"{ctx.agent} {ctx.idempotency_key}")
    while not _go() and not _quick(ctx.agent):
        await ctx.progress(0, 1, "waiting for the go")
        await ctx.sleep(0.05)
    _line(".effects", f"{ctx.agent} {ctx.idempotency_key}")
    return {"summary": " ".join(reversed(args.text.split()))}


class HoldingHelper(Helper):
    kind = "holdhelper"
    tools = (hold_then_answer,)
    config = QUICK


class HoldingLead(Lead):
    kind = "holdlead"
    tools = (delegate_tool(HoldingHelper.kind),)
    config = QUICK


# a wake-up the killed process had claimed comes due again after 2 s, not the default 10 s
app = create_app([HoldingLead, HoldingHelper], config=RuntimeConfig(wakeup_lease=2.0))
