"""Delegation between agents (roost/agent/delegation.py, the ``lead`` / ``helper`` example): a lead
agent's step handed to helper agents by name, their progress and answers back through the lead's
mailbox into its run, a cancel or a failure of the lead's run cancelling the helpers' runs, and the
dispatch idempotent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roost.actors import RpcError
from roost.agent import AgentConfig, ToolContext, delegate_tool, tool
from roost.examples.lead import Answer, Helper, Lead
from roost.testing import ActorKit, KitConnection
from tests.agent_support import drive, events

REQUEST = "split alpha beta gamma delta epsilon zeta"


class SlowHelper(Helper):
    """A helper whose answer takes a minute on the runtime's clock."""

    kind = "slowhelper"
    config = AgentConfig(tools={"answer": {"delay_s": 60.0}})


class SlowLead(Lead):
    kind = "slowlead"
    tools = (delegate_tool(SlowHelper.kind),)


@tool(background=True, keywords=("answer",), name="answer")
async def refuse(ctx: ToolContext, args: Answer) -> dict[str, Any]:
    """Refuses the task of worker ``w2``."""
    if ctx.agent.endswith(".w2"):
        raise ValueError("this helper cannot answer")
    return {"summary": args.text}


class PickyHelper(Helper):
    kind = "pickyhelper"
    tools = (refuse,)
    config = AgentConfig(job_max_attempts=1)


class PickyLead(Lead):
    kind = "pickylead"
    tools = (delegate_tool(PickyHelper.kind),)


KINDS = [Lead, Helper, SlowLead, SlowHelper, PickyLead, PickyHelper]


def of_type(conn: KitConnection, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(conn) if e["event_type"] == kind]


async def _ended(kit: ActorKit, c: KitConnection) -> None:
    await drive(kit, lambda: bool(of_type(c, "turn_completed") or of_type(c, "turn_failed")
                                 or of_type(c, "turn_cancelled")), io_wait=0.01)  # fmt: skip


async def test_a_leads_step_is_answered_by_its_helpers_and_their_progress_reaches_its_run(
    data_dir: Path,
) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("lead", "l1")
        reply = await c.call("turn", REQUEST)
        await _ended(kit, c)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed", run
        tasks = run["delegations"]
        assert [(t["worker"], t["status"], t["progress"], t["dispatches"]) for t in tasks] == [
            ("w1", "completed", 1, 1),
            ("w2", "completed", 1, 1),
            ("w3", "completed", 1, 1),
        ]
        assert [t["task"] for t in tasks] == ["split alpha beta", "gamma delta epsilon", "zeta"]
        for t in tasks:  # each helper, by name, ran its task once (a run of the server's own)
            worker_run = await kit.call("helper", f"l1.{t['worker']}", "get_run", t["worker_run_id"])
            assert worker_run["status"] == "completed"
            assert t["output"] == worker_run["output"]
        assert tasks[0]["output"].startswith("Done. answer: beta alpha split")
        seen = [(e["payload"]["worker"], e["payload"]["status"]) for e in of_type(c, "delegation_progress")]
        for w in ("w1", "w2", "w3"):  # its end once, after any progress (a later progress is stale)
            mine = [status for worker, status in seen if worker == w]
            assert mine[-1] == "completed"
            assert mine.count("completed") == 1
        assert all(e["run_id"] == reply["run_id"] for e in of_type(c, "delegation_progress"))


async def test_a_cancel_of_the_leads_run_cancels_its_helpers_runs(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("slowlead", "l1")
        reply = await c.call("turn", REQUEST)

        async def dispatched() -> bool:
            run = await c.call("get_run", reply["run_id"])
            return len(run["delegations"]) == 3 and all(t["worker_run_id"] for t in run["delegations"])

        for _ in range(400):
            await drive(kit, lambda: True, io_wait=0.01)
            if await dispatched():
                break
        assert await dispatched()
        await c.call("cancel", reply["turn_id"])
        done: list[dict[str, Any]] = []

        async def helpers_cancelled() -> bool:
            run = await c.call("get_run", reply["run_id"])
            done[:] = run["delegations"]
            return all(t["status"] == "cancelled" for t in run["delegations"])

        for _ in range(400):
            await drive(kit, lambda: True, io_wait=0.01)
            if await helpers_cancelled():
                break
        assert [t["status"] for t in done] == ["cancelled"] * 3
        for t in done:
            worker_run = await kit.call("slowhelper", f"l1.{t['worker']}", "get_run", t["worker_run_id"])
            assert worker_run["status"] == "cancelled"


async def test_a_helper_that_fails_fails_the_leads_step_naming_it(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("pickylead", "l1")
        reply = await c.call("turn", REQUEST)
        await _ended(kit, c)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "failed"
        assert "w2" in run["error"]
        assert [t["status"] for t in run["delegations"]] == ["completed", "failed", "completed"]


async def test_a_task_taken_twice_is_one_run_and_one_cancelled_first_never_starts(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        first = await kit.call("helper", "h", "take_task", "lead", "l9", "t-1", "say something")
        again = await kit.call("helper", "h", "take_task", "lead", "l9", "t-1", "say something")
        assert again["run_id"] == first["run_id"]
        assert await kit.call("helper", "h", "cancel_task", "t-2") == "not started"
        with pytest.raises(RpcError, match="cancelled before it started"):
            await kit.call("helper", "h", "take_task", "lead", "l9", "t-2", "too late")


async def test_the_delegation_callables_are_refused_over_a_connection(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("helper", "h")
        with pytest.raises(RpcError, match="not over a connection"):
            await c.call("take_task", "lead", "l1", "t-1", "do my bidding")
        lead = kit.connect("lead", "l1")
        with pytest.raises(RpcError, match="not over a connection"):
            await lead.call("task_report", "t-1", "completed", 1, "forged")
