"""Delegation between agents (roost/agent/delegation.py, the ``lead`` / ``helper`` example): a lead
agent's step handed to helper agents by name, their progress and answers back through the lead's
mailbox into its run, a cancel or a failure of the lead's run cancelling the helpers' runs, and the
dispatch idempotent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roost.actors import Principal, RpcError
from roost.agent import AgentConfig, ToolContext, delegate_tool, tool
from roost.agent.config import ConfigError
from roost.examples.lead import Answer, Helper, Lead
from roost.testing import ActorKit, KitConnection
from roost.transport import admin
from tests.agent_support import advance, drive, events

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
        assert "3 workers answered (w1: Done. answer: beta alpha split." in run["output"]  # merged
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


# -- what a sceptical review found ------------------------------------------------------------------
@tool(background=True, keywords=("answer",), name="answer")
async def w1_fast(ctx: ToolContext, args: Answer) -> dict[str, Any]:
    """Worker ``w1`` answers at once; the others take ten minutes on the runtime's clock."""
    if not ctx.agent.endswith(".w1"):
        await ctx.progress(0, 1, "slow")
        await ctx.sleep(600.0)
    return {"summary": args.text}


class MixedHelper(Helper):
    kind = "mixedhelper"
    tools = (w1_fast,)


class MixedLead(Lead):
    kind = "mixedlead"
    tools = (delegate_tool(MixedHelper.kind),)


async def _until(kit: ActorKit, check: Any, steps: int = 400) -> None:
    for _ in range(steps):
        await drive(kit, lambda: True, io_wait=0.01)
        if await check():
            return
    raise AssertionError("condition not reached")


async def test_continue_after_a_cancel_keeps_the_completed_task_and_a_second_cancel_reaches_the_new_ones(
    data_dir: Path,
) -> None:
    """Before, ``continue_run`` handed every task out again (w1 answered twice), and the second
    cancel's workflow took the first one's id, so the new helpers' runs went on."""
    async with ActorKit([MixedLead, MixedHelper], data_dir) as kit:
        c = kit.connect("mixedlead", "l1")
        reply = await c.call("turn", REQUEST)
        run_id = reply["run_id"]

        async def tasks() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = (await c.call("get_run", run_id))["delegations"]
            return found

        async def w1_done() -> bool:
            return any(t["worker"] == "w1" and t["status"] == "completed" for t in await tasks())

        await _until(kit, w1_done)
        await c.call("cancel", reply["turn_id"])

        async def all_ended() -> bool:
            return all(t["status"] in ("completed", "cancelled") for t in await tasks())

        await _until(kit, all_ended)
        await c.call("continue_run", run_id)

        async def redispatched() -> bool:
            fresh = [t for t in await tasks() if t["status"] not in ("completed", "cancelled")]
            return len(fresh) == 2 and all(t["worker_run_id"] for t in fresh)

        await _until(kit, redispatched)
        w1 = [t for t in await tasks() if t["worker"] == "w1"]
        assert len(w1) == 1  # its answer is kept: not handed out again
        fresh = [t for t in await tasks() if t["status"] not in ("completed", "cancelled")]
        await c.call("cancel", reply["turn_id"])
        await _until(kit, all_ended)
        for t in fresh:
            worker_run = await kit.call("mixedhelper", f"l1.{t['worker']}", "get_run", t["worker_run_id"])
            assert worker_run["status"] == "cancelled"


async def test_a_lead_of_a_tenant_delegates_to_helpers_of_its_tenant(data_dir: Path) -> None:
    async with ActorKit([Lead, Helper], data_dir) as kit:
        c = kit.connect("lead", "t1\x00l1", principal=Principal("sam", tenant="t1"))
        reply = await c.call("turn", REQUEST)
        await _ended(kit, c)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed", run.get("error")
        assert kit.registry.exists("helper", "t1\x00l1.w1")


@tool(approval_mode="mutating", keywords=("answer",), name="answer")
async def guarded(ctx: ToolContext, args: Answer) -> dict[str, Any]:
    """Needs an approval nobody can give (the helper's session is the server's)."""
    return {"summary": args.text}


class AskingHelper(Helper):
    kind = "askinghelper"
    tools = (guarded,)


class AskingLead(Lead):
    kind = "askinglead"
    tools = (delegate_tool(AskingHelper.kind, timeout=600.0),)


async def test_a_helper_that_never_answers_fails_the_step_at_its_deadline_and_is_cancelled(
    data_dir: Path,
) -> None:
    async with ActorKit([AskingLead, AskingHelper], data_dir) as kit:
        c = kit.connect("askinglead", "l1")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: bool(of_type(c, "turn_failed")), step=5.0, io_wait=0.01)
        run = await c.call("get_run", reply["run_id"])
        assert "did not answer within 600 s" in run["error"]
        progress = [
            e for e in of_type(c, "tool_progress") if e["item_id"] == run["delegations"][0]["item_id"]
        ]
        assert len(progress) <= 2  # when the count of ended tasks moves, not at every look

        async def cancelled() -> bool:
            tasks = (await c.call("get_run", reply["run_id"]))["delegations"]
            return all(t["status"] == "cancelled" for t in tasks)

        await _until(kit, cancelled)


class SelfLead(Lead):
    kind = "selflead"
    tools = (delegate_tool("selflead"),)


async def test_a_lead_delegating_to_its_own_kind_is_refused_at_start(data_dir: Path) -> None:
    with pytest.raises(ConfigError, match="delegates to its own kind"):
        async with ActorKit([SelfLead], data_dir):
            pass


class NoSuchKindLead(Lead):
    kind = "nokindlead"
    tools = (delegate_tool("nosuchkind"),)


async def test_a_worker_kind_that_does_not_exist_fails_the_step_at_once(data_dir: Path) -> None:
    async with ActorKit([NoSuchKindLead], data_dir) as kit:
        c = kit.connect("nokindlead", "l1")
        reply = await c.call("turn", REQUEST)
        await _ended(kit, c)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "failed"
        assert "worker 'w1'" in run["error"]
        assert [j["attempt"] for j in run["jobs"]] == [1]  # not retried: asking again cannot help

        async def cancelled() -> bool:
            tasks = (await c.call("get_run", reply["run_id"]))["delegations"]
            return all(t["status"] == "cancelled" for t in tasks)

        await _until(kit, cancelled)  # its tasks end: the cancel found nobody to ask


async def test_a_helper_whose_lead_was_deleted_makes_no_lead_again(data_dir: Path) -> None:
    """Before, the helper's report made a new, empty lead of the same name. Now the report finds
    the lead gone (a read, which creates nothing) and stops the task's run instead."""
    async with ActorKit([SlowLead, SlowHelper], data_dir) as kit:
        c = kit.connect("slowlead", "l1")
        reply = await c.call("turn", REQUEST)

        async def dispatched() -> bool:
            tasks = (await c.call("get_run", reply["run_id"]))["delegations"]
            return len(tasks) == 3 and all(t["worker_run_id"] for t in tasks)

        await _until(kit, dispatched)
        tasks = (await c.call("get_run", reply["run_id"]))["delegations"]
        await admin.delete_live(kit.registry, "slowlead", "l1", reason="test", by="test")
        ends: dict[str, str] = {}

        async def helpers_ended() -> bool:
            for t in tasks:
                worker = await kit.call("slowhelper", f"l1.{t['worker']}", "get_run", t["worker_run_id"])
                ends[t["worker"]] = worker["status"]
            return all(status in ("completed", "cancelled") for status in ends.values())

        for _ in range(100):  # past the helpers' minute on the runtime's clock
            advance(kit, 5.0)
            await drive(kit, lambda: True, io_wait=0.01)
            if await helpers_ended():
                break
        assert set(ends.values()) <= {"completed", "cancelled"}
        for _ in range(20):  # their reports' wake-ups have fired
            await drive(kit, lambda: True, io_wait=0.01)
        assert not kit.registry.exists("slowlead", "l1"), ends
