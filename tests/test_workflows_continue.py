"""``resume_workflow`` on a cancelled or failed workflow: it goes on after its last completed step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roost.actors import RpcError
from roost.scheduler.clock import FakeClock
from roost.testing import ActorKit, until
from roost.workflows.engine import engine_of
from roost.workflows.runner import runner
from tests.fanout_kinds import Fan
from tests.workflow_kinds import Shop


def _lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def _process(kit: ActorKit) -> Any:
    host = next(iter(kit.registry.hosts.values()))
    return host.actor.extension.process


async def _status(kit: ActorKit, kind: str, name: str, wid: str) -> dict[str, Any]:
    result: dict[str, Any] = await kit.call(kind, name, "workflow_status", wid)
    return result


async def _history(kit: ActorKit, kind: str, name: str, wid: str) -> list[dict[str, Any]]:
    page = await kit.call(kind, name, "workflow_history", wid, 0, 500)
    entries: list[dict[str, Any]] = page["entries"]
    return entries


async def test_a_cancelled_workflow_goes_on_after_its_last_completed_step(
    data_dir: Path, tmp_path: Path
) -> None:
    """Cancelled while its outside step ran: resume keeps ``reserve`` (never run again) and runs
    ``charge`` as its next attempt, under a key of its own (the stopped attempt's is not reused)."""
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "order", {"ledger": str(ledger), "hold": True}, "w1")
        await until(lambda: len(_lines(ledger)) == 1)
        assert (await kit.call("shop", "s1", "cancel_workflow", "w1"))["status"] == "cancelled"
        await until(lambda: not runner(_process(kit)).tasks)
        status = await kit.call("shop", "s1", "resume_workflow", "w1")
        assert status["status"] == "waiting"  # charge runs again, outside the turn
        await until(lambda: _ended(kit, "w1"))
        status = await _status(kit, "shop", "s1", "w1")
        assert status["status"] == "completed"
        first, second = (f"w1:{status['nonce']}:1:1:{n}" for n in (1, 2))
        assert [line.split()[0] for line in _lines(ledger)] == [first, second]
        assert status["result"] == {"receipt": {"key": second, "run": 1}}
        assert await kit.call("shop", "s1", "effects") == {"reserve": 1, "ship": 1}
        continued = [e for e in await _history(kit, "shop", "s1", "w1") if e["event"] == "continued"]
        assert [(e["detail"]["from"], e["detail"]["step"]) for e in continued] == [("cancelled", "charge")]


async def _ended(kit: ActorKit, wid: str) -> bool:
    status = await _status(kit, "shop", "s1", wid)
    return bool(status["status"] in ("completed", "failed", "cancelled"))


async def test_a_failed_step_gets_one_more_attempt_on_each_resume(data_dir: Path, tmp_path: Path) -> None:
    """``charge`` fails its only attempt: the workflow fails. A resume runs attempt 2 (it fails too:
    the policy's attempts are spent, so the workflow fails again at once), a second resume attempt 3,
    which succeeds; ``reserve`` ran once in all."""
    ledger = tmp_path / "ledger"
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        spec = {"ledger": str(ledger), "attempts": 1, "fail": 2}
        await kit.call("shop", "s1", "start_workflow", "order", spec, "w1")
        await until(lambda: _ended(kit, "w1"))
        status = await _status(kit, "shop", "s1", "w1")
        assert (status["status"], status["reason"]) == ("failed", "step_failed")
        await kit.call("shop", "s1", "resume_workflow", "w1")
        await until(lambda: _ended(kit, "w1"))
        status = await _status(kit, "shop", "s1", "w1")
        assert status["status"] == "failed"
        assert status["steps"][1]["attempt"] == 2
        await kit.call("shop", "s1", "resume_workflow", "w1")
        await until(lambda: _ended(kit, "w1"))
        status = await _status(kit, "shop", "s1", "w1")
        assert status["status"] == "completed"
        assert status["error"] is None
        assert [line.split()[0][-1] for line in _lines(ledger)] == ["1", "2", "3"]
        assert await kit.call("shop", "s1", "effects") == {"reserve": 1, "ship": 1}


async def test_a_cancelled_join_keeps_its_completed_branches(data_dir: Path, tmp_path: Path) -> None:
    """Cancelled while ``a`` hangs and ``b``, ``c`` are done: resume runs only ``a`` again (its next
    attempt); ``b`` and ``c`` keep their results (pending writes), ``merge`` runs once."""
    ledger = tmp_path / "ledger"
    async with ActorKit([Fan], data_dir, clock=FakeClock()) as kit:
        await kit.call("fan", "f1", "start_workflow", "fanout", {"ledger": str(ledger), "hold": ["a"]}, "w1")

        async def two_done() -> bool:
            status = await _status(kit, "fan", "f1", "w1")
            branches = status["steps"][0]["branches"]
            return sum(1 for b in branches if b["status"] == "completed") == 2

        await until(two_done)
        await kit.call("fan", "f1", "cancel_workflow", "w1")
        await until(lambda: not runner(_process(kit)).tasks)
        await kit.call("fan", "f1", "resume_workflow", "w1")

        async def done() -> bool:
            return bool((await _status(kit, "fan", "f1", "w1"))["status"] == "completed")

        await until(done)
        runs = [line.split()[0].rsplit(":", 2)[1:] for line in _lines(ledger)]
        assert sorted(runs) == [["a", "1"], ["a", "2"], ["b", "1"], ["c", "1"]]  # branch, attempt
        assert await kit.call("fan", "f1", "effects") == {"merge": 1}


async def test_an_approval_past_its_deadline_waits_afresh_after_resume(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "gated", {"timeout": 5}, "w1")
        clock.advance(5)
        await kit.fire_due("shop", "s1")
        status = await _status(kit, "shop", "s1", "w1")
        assert status["status"] == "failed"
        status = await kit.call("shop", "s1", "resume_workflow", "w1")
        assert status["status"] == "waiting"  # a new wait, its deadline five seconds from now
        assert status["waiting"]["until"] == pytest.approx(clock.now() + 5)
        status = await kit.call("shop", "s1", "approve_step", "w1", "manager", True, "late but fine")
        assert status["status"] == "completed"
        assert status["result"]["approved"] is True
        assert await kit.call("shop", "s1", "effects") == {"release": 1}


async def test_a_completed_workflow_is_not_resumed(data_dir: Path) -> None:
    async with ActorKit([Shop], data_dir, clock=FakeClock()) as kit:
        await kit.call("shop", "s1", "start_workflow", "chain", 2, "w1")
        with pytest.raises(RpcError) as err:
            await kit.call("shop", "s1", "resume_workflow", "w1")
        assert err.value.code == "workflow_state"
        assert await kit.call("shop", "s1", "effects") == {"write-0": 1, "write-1": 1}


async def test_an_approval_whose_deadline_lapsed_while_cancelled_waits_afresh(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "gated", {"timeout": 5}, "w1")
        clock.advance(1)
        await kit.call("shop", "s1", "cancel_workflow", "w1")
        clock.advance(9)  # past the deadline, while cancelled
        await kit.fire_due("shop", "s1")
        status = await kit.call("shop", "s1", "resume_workflow", "w1")
        assert status["status"] == "waiting"
        assert status["waiting"]["until"] == pytest.approx(clock.now() + 5)
        status = await kit.call("shop", "s1", "approve_step", "w1", "manager", True, None)
        assert status["status"] == "completed"


# -- a WorkflowHost's own controls (the agent's runs use them) --------------------------------------
async def test_rewind_drops_the_steps_from_a_position_and_runs_them_afresh(
    data_dir: Path, tmp_path: Path
) -> None:
    """``Engine.rewind(wid, 1)`` of a completed ``order``: ``reserve`` is kept, ``charge`` and ``ship``
    run again, ``charge`` under a new nonce (a key of its own); history ``rewound``."""
    ledger = tmp_path / "ledger"
    async with ActorKit([Shop], data_dir, clock=FakeClock()) as kit:
        await kit.call("shop", "s1", "start_workflow", "order", {"ledger": str(ledger)}, "w1")
        await until(lambda: _ended(kit, "w1"))
        before = (await _status(kit, "shop", "s1", "w1"))["nonce"]

        async def rewind(actor: Any) -> None:
            await engine_of(actor).rewind("w1", 1)

        await kit.registry.run("shop", "s1", rewind)
        await until(lambda: _ended(kit, "w1"))
        status = await _status(kit, "shop", "s1", "w1")
        assert status["status"] == "completed"
        assert status["nonce"] != before
        keys = [line.split()[0] for line in _lines(ledger)]
        assert keys == [f"w1:{before}:1:1:1", f"w1:{status['nonce']}:1:1:1"]
        assert await kit.call("shop", "s1", "effects") == {"reserve": 1, "ship": 2}
        history = await _history(kit, "shop", "s1", "w1")
        assert [e["detail"]["position"] for e in history if e["event"] == "rewound"] == [1]

        async def bad(actor: Any) -> None:
            await engine_of(actor).rewind("w1", -1)

        with pytest.raises(RpcError) as refused:
            await kit.registry.run("shop", "s1", bad)
        assert refused.value.code == "invalid_arguments"


async def test_a_start_not_advanced_waits_for_its_wake_up_and_notify_delivers_an_event(
    data_dir: Path,
) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:

        async def start(actor: Any) -> None:
            await engine_of(actor).start("paid", {}, "w1", advance=False)

        await kit.registry.run("shop", "s1", start)
        status = await _status(kit, "shop", "s1", "w1")
        assert (status["status"], status["steps"]) == ("running", [])  # nothing ran in the start's turn
        assert await kit.call("shop", "s1", "effects") == {}
        await kit.fire_due("shop", "s1")
        assert (await _status(kit, "shop", "s1", "w1"))["status"] == "waiting"

        async def pay(actor: Any) -> None:
            await engine_of(actor).notify("w1", "payment", {"amount": 3})

        await kit.registry.run("shop", "s1", pay)
        status = await _status(kit, "shop", "s1", "w1")
        assert (status["status"], status["result"]) == ("completed", {"amount": 3})
        assert await kit.call("shop", "s1", "effects") == {"invoice": 1, "settle": 1}
