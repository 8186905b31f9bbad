"""The workflow core in process (``roost.workflows``): in-turn steps, replay, retries, timeouts,
sleeps, events, approvals, controls, divergence and bounds, on a real registry and real files with
the fake clock."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar

import pytest

from roost.actors import Actor, ActorNotFound, Principal, RpcError, callable, wakeup
from roost.scheduler.clock import FakeClock
from roost.storage import Migration, actor_path
from roost.testing import ActorKit, until
from roost.transport import admin
from roost.workflows import MAX_RESULT_BYTES, STEPS_PER_TURN, Step, workflow
from tests.workflow_kinds import Relay, Shop

READ_ONLY = Principal("reader", claims={"read_only": True})


async def _status(kit: ActorKit, name: str, wid: str) -> dict[str, Any]:
    result: dict[str, Any] = await kit.call("shop", name, "workflow_status", wid)
    return result


async def _history(kit: ActorKit, name: str, wid: str) -> list[dict[str, Any]]:
    page: dict[str, Any] = await kit.call("shop", name, "workflow_history", wid, 0, 500)
    entries: list[dict[str, Any]] = page["entries"]
    return entries


async def _replay_shifted(kit: ActorKit, clock: FakeClock, kind: str, name: str) -> None:
    """End ``shifty``'s sleep with its body naming its first step otherwise: the replay diverges."""
    Shop.shift = True
    try:
        clock.advance(10)
        await kit.fire_due(kind, name)
    finally:
        Shop.shift = False


async def test_in_turn_steps_run_once_and_complete(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        status = await kit.call("shop", "s1", "start_workflow", "chain", 10, "w1")
        assert status["status"] == "completed"
        assert status["result"] == 10
        assert [s["status"] for s in status["steps"]] == ["completed"] * 10
        assert await kit.call("shop", "s1", "effects") == {f"write-{i}": 1 for i in range(10)}


async def test_start_is_idempotent_by_workflow_id(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        first = await kit.call("shop", "s1", "start_workflow", "chain", 3, "w1")
        again = await kit.call("shop", "s1", "start_workflow", "chain", 3, "w1")
        assert again == first
        assert await kit.call("shop", "s1", "effects") == {f"write-{i}": 1 for i in range(3)}
        with pytest.raises(RpcError) as err:
            await kit.call("shop", "s1", "start_workflow", "chain", 4, "w1")
        assert err.value.code == "workflow_conflict"
        with pytest.raises(RpcError) as err:
            await kit.call("shop", "s1", "start_workflow", "nope", None)
        assert err.value.code == "unknown_workflow"


async def test_a_sleep_is_a_durable_wake_up_and_a_recorded_step_never_runs_again(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        status = await kit.call("shop", "s1", "start_workflow", "nap", {"seconds": 60}, "w1")
        assert status["status"] == "waiting"
        assert status["waiting"]["step"] == "nap"
        assert await kit.call("shop", "s1", "effects") == {"before": 1}
        clock.advance(59)
        await kit.fire_due("shop", "s1")
        assert (await _status(kit, "s1", "w1"))["status"] == "waiting"
        clock.advance(1)
        await kit.fire_due("shop", "s1")
        status = await _status(kit, "s1", "w1")
        assert status["status"] == "completed"
        assert await kit.call("shop", "s1", "effects") == {"before": 1, "after": 1}
        events = [e["event"] for e in await _history(kit, "s1", "w1")]
        assert "sleeping" in events
        assert "slept" in events
        resumed = [e for e in await _history(kit, "s1", "w1") if e["event"] == "resumed"]
        assert resumed[-1]["detail"]["replayed"] == 1  # "before" kept, not run again


async def test_event_wakes_a_waiting_workflow_and_a_buffered_one_counts(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "paid", {}, "w1")
        status = await kit.call("shop", "s1", "send_event", "w1", "payment", {"amount": 5})
        assert status["status"] == "completed"
        assert status["result"] == {"amount": 5}
        assert await kit.call("shop", "s1", "effects") == {"invoice": 1, "settle": 1}


async def test_event_deadline_raises_event_timeout_into_the_body(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "paid", {"timeout": 30}, "w1")
        clock.advance(29.5)
        await kit.fire_due("shop", "s1")
        assert (await _status(kit, "s1", "w1"))["status"] == "waiting"
        clock.advance(0.5)
        await kit.fire_due("shop", "s1")
        status = await _status(kit, "s1", "w1")
        assert status["status"] == "completed"
        assert status["result"] == "expired"
        with pytest.raises(RpcError) as err:  # too late: the workflow is finished
            await kit.call("shop", "s1", "send_event", "w1", "payment", {})
        assert err.value.code == "workflow_state"


async def test_send_event_actor_to_actor(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop, Relay], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "paid", {}, "w1")
        status = await kit.call("relay", "r1", "forward", "s1", "w1", "payment", {"via": "relay"})
        assert status["status"] == "completed"
        assert status["result"] == {"via": "relay"}


async def test_retry_waits_full_jitter_backoff_as_wake_ups(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        kit.registry.rng.seed(7)
        expected = random.Random(7)
        Shop.flaky_failures = 2
        status = await kit.call("shop", "s1", "start_workflow", "flaky", {"attempts": 5}, "w1")
        assert status["status"] == "waiting"
        first = expected.uniform(0.0, min(8.0, 1.0))  # attempt 1 failed: uniform(0, base)
        assert status["waiting"]["until"] == pytest.approx(clock.now() + first)
        clock.advance(first)
        await kit.fire_due("shop", "s1")
        status = await _status(kit, "s1", "w1")
        second = expected.uniform(0.0, min(8.0, 2.0))
        assert status["waiting"]["until"] == pytest.approx(clock.now() + second)
        clock.advance(second)
        await kit.fire_due("shop", "s1")
        status = await _status(kit, "s1", "w1")
        assert status["status"] == "completed"
        assert status["steps"][0]["attempt"] == 3
        # the failed attempts' writes were rolled back: one attempt row, the successful one's
        assert await kit.call("shop", "s1", "effects") == {"flaky-attempt": 1, "flaky": 1}


async def test_an_in_turn_step_has_an_idempotency_key_per_attempt(data_dir: Path) -> None:
    """``step.idempotency_key`` inside ``step.do`` is ``{step_id}:{attempt}``, as an outside step's:
    one per step, another for the next attempt; outside a step it raises."""
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        Shop.flaky_failures = 1
        status = await kit.call("shop", "s1", "start_workflow", "keyed", None, "w1")
        clock.advance(1.0)
        await kit.fire_due("shop", "s1")
        status = await _status(kit, "s1", "w1")
        assert status["status"] == "completed"
        keys = status["result"]
        assert "inside step.do" in keys["outside"]
        head = keys["first"].rsplit(":", 3)[0]  # {workflow}:{nonce}
        assert head.startswith("w1:")
        assert keys["first"] == f"{head}:1:0:1"  # generation 1, position 0, attempt 1
        assert keys["second"] == f"{head}:1:1:2"  # position 1, its second attempt


async def test_spent_attempts_raise_step_failed_into_the_body(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        Shop.flaky_failures = 5
        await kit.call("shop", "s1", "start_workflow", "flaky", {"attempts": 2}, "w1")
        clock.advance(10)
        await kit.fire_due("shop", "s1")
        status = await _status(kit, "s1", "w1")
        Shop.flaky_failures = 0
        assert status["status"] == "completed"
        assert status["result"] == -1
        assert status["steps"][0]["status"] == "failed"
        assert await kit.call("shop", "s1", "effects") == {"gave-up": 1}


async def test_non_retryable_fails_the_workflow_at_once(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        status = await kit.call("shop", "s1", "start_workflow", "fatal", None, "w1")
        assert status["status"] == "failed"
        assert status["reason"] == "step_failed"
        assert "card declined" in status["error"]
        assert status["steps"][0]["attempt"] == 1


async def test_step_timeout_on_the_runtime_clock(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        armed = clock.timers
        task = asyncio.ensure_future(
            kit.registry.call("shop", "s1", "start_workflow", ["slow", {"timeout": 5}, "w1"], {})
        )
        await clock.armed(armed + 1)
        clock.advance(5)
        status, _ = await task
        assert status["status"] == "completed"
        assert status["result"] == "timeout after 5.0 s"


async def test_approval_records_who_and_refuses_read_only(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "gated", {}, "w1")
        # in process a read-only turn cannot write (over the wire: forbidden, tests/test_workflows_wire.py)
        for method, args in (("approve_step", ["w1", "manager"]), ("cancel_workflow", ["w1"])):
            with pytest.raises(RpcError) as err:
                await kit.registry.call("shop", "s1", method, args, {}, principal=READ_ONLY)
            assert err.value.code == "invalid_state"
        seen, _ = await kit.registry.call("shop", "s1", "workflow_status", ["w1"], {}, principal=READ_ONLY)
        assert seen["status"] == "waiting"
        with pytest.raises(RpcError) as err:  # an approval is not an event anyone may send
            await kit.call("shop", "s1", "send_event", "w1", "approval:manager", {"approved": True})
        assert err.value.code == "invalid_arguments"
        with pytest.raises(RpcError) as err:
            await kit.call("shop", "s1", "approve_step", "w1", "someone-else")
        assert err.value.code == "workflow_state"
        status, _ = await kit.registry.call(
            "shop", "s1", "approve_step", ["w1", "manager"], {"note": "ok"}, principal=Principal("boss")
        )
        assert status["status"] == "completed"
        assert status["result"] == {"approved": True, "by": "boss", "note": "ok"}


async def test_an_approval_with_approvers_is_decided_only_by_one_of_them(data_dir: Path) -> None:
    """``step.approval(name, approvers=[...])``: a principal that may write but is not named is
    refused ``forbidden`` and the workflow goes on waiting; a named one decides, recorded as ``by``."""
    async with ActorKit([Shop], data_dir, clock=FakeClock()) as kit:
        await kit.call("shop", "s1", "start_workflow", "gated", {"approvers": ["boss", "cfo"]}, "w1")
        for who in ("intern", None):  # someone else, and an in-process call with no principal
            principal = Principal(who) if who else None
            with pytest.raises(RpcError) as err:
                await kit.registry.call(
                    "shop", "s1", "approve_step", ["w1", "manager"], {}, principal=principal
                )
            assert err.value.code == "forbidden"
        seen = await kit.call("shop", "s1", "workflow_status", "w1")
        assert (seen["status"], seen["waiting"]["approvers"]) == ("waiting", ["boss", "cfo"])
        status, _ = await kit.registry.call(
            "shop", "s1", "approve_step", ["w1", "manager"], {"approved": False}, principal=Principal("cfo")
        )
        assert status["result"] == {"approved": False, "by": "cfo", "note": None}


async def test_cancel_pause_resume_restart_and_nothing_advances_a_paused_or_finished_workflow(
    data_dir: Path,
) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "nap", {"seconds": 10}, "w1")
        assert (await kit.call("shop", "s1", "pause_workflow", "w1"))["status"] == "paused"
        clock.advance(10)
        await kit.fire_due("shop", "s1")
        assert (await _status(kit, "s1", "w1"))["status"] == "paused"  # the sleep's end did not move it
        status = await kit.call("shop", "s1", "resume_workflow", "w1")
        assert status["status"] == "completed"
        with pytest.raises(RpcError) as err:
            await kit.call("shop", "s1", "pause_workflow", "w1")
        assert err.value.code == "workflow_state"
        status = await kit.call("shop", "s1", "restart_workflow", "w1")
        assert status["generation"] == 2
        assert status["status"] == "waiting"
        assert await kit.call("shop", "s1", "effects") == {"before": 2, "after": 1}
        status = await kit.call("shop", "s1", "resume_workflow", "w1")  # a waiting one: advanced now
        assert status["status"] == "waiting"
        status = await kit.call("shop", "s1", "cancel_workflow", "w1")
        assert status["status"] == "cancelled"
        clock.advance(10)
        await kit.fire_due("shop", "s1")
        assert await kit.call("shop", "s1", "effects") == {"before": 2, "after": 1}
        status = await kit.call("shop", "s1", "resume_workflow", "w1")  # cancelled: goes on
        assert status["status"] == "completed"  # after its recorded sleep, now over
        assert await kit.call("shop", "s1", "effects") == {"before": 2, "after": 2}
        with pytest.raises(RpcError) as err:
            await kit.call("shop", "s1", "resume_workflow", "w1")
        assert err.value.code == "workflow_state"
        assert await kit.call("shop", "s1", "delete_workflow", "w1") is True
        with pytest.raises(RpcError) as err:
            await _status(kit, "s1", "w1")
        assert err.value.code == "workflow_not_found"


async def test_a_restart_drops_the_events_of_the_old_generation(data_dir: Path) -> None:
    """Paused, approved (the approval waits unconsumed), restarted: the new generation waits for an
    approval of its own; the old one's event does not carry over."""
    boss = Principal("boss")
    async with ActorKit([Shop], data_dir, clock=FakeClock()) as kit:
        await kit.call("shop", "s1", "start_workflow", "gated", {}, "w1")
        await kit.call("shop", "s1", "pause_workflow", "w1")
        await kit.registry.call("shop", "s1", "approve_step", ["w1", "manager", True], {}, principal=boss)
        await kit.call("shop", "s1", "send_event", "w1", "other", {"n": 1})
        assert (await _status(kit, "s1", "w1"))["status"] == "paused"
        status = await kit.call("shop", "s1", "restart_workflow", "w1")
        assert status["generation"] == 2
        assert status["status"] == "waiting"
        assert status["waiting"]["kind"] == "approval"
        assert await kit.call("shop", "s1", "effects") == {}


async def test_nondeterministic_replay_fails_the_workflow(data_dir: Path) -> None:
    """Another step name at a recorded position, on the replay after a sleep: the workflow fails with
    reason ``nondeterministic``, and the step that diverged never runs."""
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "shifty", None, "w1")
        await _replay_shifted(kit, clock, "shop", "s1")
        status = await _status(kit, "s1", "w1")
        assert status["status"] == "failed"
        assert status["reason"] == "nondeterministic"
        assert "'first'" in status["error"]
        assert "'first-b'" in status["error"]
        assert await kit.call("shop", "s1", "effects") == {"first": 1}


async def test_a_step_result_over_the_limit_fails_the_step_clearly(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        status = await kit.call("shop", "s1", "start_workflow", "big", MAX_RESULT_BYTES + 10, "w1")
        assert status["status"] == "completed"
        assert "over the 262144 limit" in status["result"]
        assert status["steps"][0]["attempt"] == 1  # not retried: another attempt would not help
        status = await kit.call("shop", "s1", "start_workflow", "big", 100, "w2")
        assert status["result"] == "kept"


async def test_history_is_paged(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "chain", 30, "w1")
        seen: list[int] = []
        after = 0
        while True:
            page = await kit.call("shop", "s1", "workflow_history", "w1", after, 7)
            assert len(page["entries"]) <= 7
            seen += [e["seq"] for e in page["entries"]]
            if page["next"] is None:
                break
            after = page["next"]
        assert seen == list(range(1, len(seen) + 1))
        assert len(seen) == 32  # started, 30 steps, completed
        listed = await kit.call("shop", "s1", "list_workflows", "completed")
        assert [w["id"] for w in listed] == ["w1"]


async def test_workflows_are_exported_and_deleted_with_the_actor(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "paid", {}, "w1")
        await kit.call("shop", "s1", "send_event", "w1", "other", {"kept": True})  # not consumed yet
    exported = admin.export_actor(data_dir, "shop", "s1")
    tables = exported["tables"]
    assert [w["id"] for w in tables["roost_wf"]] == ["w1"]
    assert [s["name"] for s in tables["roost_wf_steps"]] == ["invoice", "payment"]
    assert [e["name"] for e in tables["roost_wf_events"]] == ["other"]
    assert tables["roost_wf_history"]
    admin.delete_actor(data_dir, "shop", "s1")
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        with pytest.raises(ActorNotFound):  # the file went, and every workflow row with it
            await kit.call("shop", "s1", "list_workflows")


async def test_a_long_run_of_in_turn_steps_lets_the_mailbox_go(data_dir: Path) -> None:
    """An advance runs at most STEPS_PER_TURN in-turn steps; a wake-up at once goes on from there."""
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        status = await kit.call("shop", "s1", "start_workflow", "chain", STEPS_PER_TURN + 6, "w1")
        assert status["status"] == "running"
        assert len(status["steps"]) == STEPS_PER_TURN
        await kit.fire_due("shop", "s1")
        status = await _status(kit, "s1", "w1")
        assert status["status"] == "completed"
        assert status["result"] == STEPS_PER_TURN + 6
        effects = await kit.call("shop", "s1", "effects")
        assert set(effects.values()) == {1}
        assert len(effects) == STEPS_PER_TURN + 6


async def test_a_body_that_returns_before_its_recorded_steps_is_nondeterministic(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Shop], data_dir, clock=clock) as kit:
        await kit.call("shop", "s1", "start_workflow", "shifty", None, "w1")  # first, then the sleep
        Shop.shrink = True
        try:
            clock.advance(10)
            await kit.fire_due("shop", "s1")
        finally:
            Shop.shrink = False
        status = await _status(kit, "s1", "w1")
        assert status["status"] == "failed"
        assert status["reason"] == "nondeterministic"
        assert "returned after 1 steps; 2 were recorded" in status["error"]


async def test_steps_run_one_at_a_time(data_dir: Path) -> None:
    async with ActorKit([Shop], data_dir) as kit:
        status = await kit.call("shop", "s1", "start_workflow", "parallel", None, "w1")
        assert status["status"] == "failed"
        assert "one at a time" in status["error"]


async def test_status_leaves_results_out_and_steps_are_paged_by_count_and_bytes(data_dir: Path) -> None:
    async with ActorKit([Shop], data_dir) as kit:
        await kit.call("shop", "s1", "start_workflow", "bulky", 200_000, "w1")
        status = await _status(kit, "s1", "w1")
        assert [s["name"] for s in status["steps"]] == ["bulk-0", "bulk-1", "bulk-2"]
        assert all("result" not in s for s in status["steps"])
        first = await kit.call("shop", "s1", "workflow_steps", "w1")
        assert [len(s["result"]) for s in first["steps"]] == [200_000, 200_000]  # 512 KiB a page
        assert first["next"] == 1
        rest = await kit.call("shop", "s1", "workflow_steps", "w1", first["next"])
        assert [s["position"] for s in rest["steps"]] == [2]
        assert rest["next"] is None
        one = await kit.call("shop", "s1", "workflow_steps", "w1", -1, 1)
        assert [s["position"] for s in one["steps"]] == [0]
        assert one["next"] == 0


class Kept(Shop):
    kind = "kept"
    workflow_retention = 10


async def test_finished_workflows_are_bounded(data_dir: Path) -> None:
    """Past ``workflow_retention`` finished workflows (plus a tenth), a start deletes the oldest
    finished ones with their steps and history; a waiting one, however old, is kept."""
    clock = FakeClock()
    async with ActorKit([Kept], data_dir, clock=clock) as kit:
        await kit.call("kept", "k1", "start_workflow", "nap", {"seconds": 3600}, "sleeper")
        for i in range(30):
            clock.advance(1)
            status = await kit.call("kept", "k1", "start_workflow", "chain", 1, f"w{i:02}")
            assert status["status"] == "completed"
            listed = await kit.call("kept", "k1", "list_workflows", None, None, 500)
            assert len([w for w in listed if w["status"] == "completed"]) <= 11
        listed = await kit.call("kept", "k1", "list_workflows", None, None, 500)
        ids = [w["id"] for w in listed]
        assert "sleeper" in ids
        assert "w29" in ids
        assert "w00" not in ids
        assert len(ids) - 1 >= 10
        with pytest.raises(RpcError) as err:
            await kit.call("kept", "k1", "workflow_history", "w00")
        assert err.value.code == "workflow_not_found"
    with closing(sqlite3.connect(actor_path(data_dir, "kept", "k1"))) as conn:
        for table in ("roost_wf_history", "roost_wf_steps"):
            kept = {r[0] for r in conn.execute(f"SELECT DISTINCT workflow_id FROM {table}")}
            assert kept <= set(ids)
            assert "w00" not in kept


class Pruned(Shop):
    """Retention 10, batch 5; ``start_counted`` is a start that says how many workflows its turn
    deleted, and every prune wake-up's turn appends how many it deleted to :attr:`prune_turns`."""

    kind = "pruned"
    workflow_retention = 10
    workflow_prune_batch = 5
    prune_turns: ClassVar[list[int]] = []

    def _rows(self) -> int:
        return int(self.sql.scalar("SELECT count(*) FROM roost_wf"))

    @callable
    async def start_counted(
        self, name: str, input: Any, workflow_ids: list[str], then_delete: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """Start ``workflow_ids`` (then delete ``then_delete``) in one turn."""
        before = self._rows()
        done = [(await self.start_workflow(name, input, wid))["status"] for wid in workflow_ids]
        deleted = before + len(workflow_ids) - self._rows()
        for wid in then_delete:
            assert await self.delete_workflow(wid)
        return {"status": done, "deleted": deleted}

    @wakeup
    async def workflow_wake(self, payload: dict[str, Any]) -> None:
        before = self._rows()
        await super().workflow_wake(payload)
        if payload.get("why") == "prune":
            type(self).prune_turns.append(before - self._rows())


async def _finish_waiting(kit: ActorKit, clock: FakeClock, ids: list[str], kind: str = "pruned") -> list[str]:
    """Start ``paid`` workflows ``ids`` of ``kind`` ``p1``, then pay each a second apart; their statuses."""
    for wid in ids:
        await kit.call(kind, "p1", "start_workflow", "paid", {}, wid)
    done = []
    for wid in ids:
        clock.advance(1)
        done.append((await kit.call(kind, "p1", "send_event", wid, "payment", 1))["status"])
    return done


async def test_a_turn_prunes_at_most_a_batch(data_dir: Path) -> None:
    """40 finished workflows gathered (they waited for an event, then got it): the two starts that
    find them (in one turn) delete none; the one prune wake-up chain they set going deletes at most
    the batch a turn, the oldest first, until the newest ``workflow_retention`` are left, with their
    rows only."""
    Pruned.prune_turns = []
    clock = FakeClock()
    async with ActorKit([Pruned], data_dir, clock=clock) as kit:
        done = await _finish_waiting(kit, clock, [f"w{i:02}" for i in range(40)])
        assert done == ["completed"] * 40
        clock.advance(1)
        started = await kit.call("pruned", "p1", "start_counted", "chain", 1, ["last", "latest"])
        assert started == {"status": ["completed", "completed"], "deleted": 0}
        await kit.fire_due("pruned", "p1")
        await until(lambda: sum(Pruned.prune_turns) == 32)
        assert Pruned.prune_turns == [5, 5, 5, 5, 5, 5, 2]  # one chain: no turn found nothing to do
        listed = await kit.call("pruned", "p1", "list_workflows", None, None, 500)
        ids = sorted(w["id"] for w in listed)
        assert ids == ["last", "latest", *(f"w{i:02}" for i in range(32, 40))]
        assert await kit.fire_due("pruned", "p1") == 0  # no prune wake-up is left
    with closing(sqlite3.connect(actor_path(data_dir, "pruned", "p1"))) as conn:
        for table in ("roost_wf_history", "roost_wf_steps", "roost_wf_events"):
            kept = {r[0] for r in conn.execute(f"SELECT DISTINCT workflow_id FROM {table}")}
            assert kept <= set(ids)


class RowPruned(Pruned):
    """:class:`Pruned` with a bound of rows no finished workflow fits in."""

    kind = "row_pruned"
    workflow_prune_rows = 1


async def test_a_turn_prunes_at_most_a_batch_of_rows(data_dir: Path) -> None:
    """Each finished workflow has more rows than ``workflow_prune_rows``: a prune turn deletes one
    (never none), not the batch of five, and the chain goes on until the retention holds."""
    RowPruned.prune_turns = []
    clock = FakeClock()
    async with ActorKit([RowPruned], data_dir, clock=clock) as kit:
        await _finish_waiting(kit, clock, [f"w{i:02}" for i in range(12)], "row_pruned")
        clock.advance(1)
        started = await kit.call("row_pruned", "p1", "start_counted", "chain", 1, ["last"])
        assert started == {"status": ["completed"], "deleted": 1}  # 3 past the retention: one fits
        await kit.fire_due("row_pruned", "p1")
        await until(lambda: sum(RowPruned.prune_turns) == 2)
        assert RowPruned.prune_turns == [1, 1]
        listed = await kit.call("row_pruned", "p1", "list_workflows", None, None, 500)
        assert sorted(w["id"] for w in listed) == ["last", *(f"w{i:02}" for i in range(3, 12))]
        assert await kit.fire_due("row_pruned", "p1") == 0


async def test_a_prune_wake_up_that_found_nothing_does_not_stop_the_next(data_dir: Path) -> None:
    """A prune wake-up keyed by the oldest finished workflow that found none past the retention
    (deleted meanwhile by ``delete_workflow``) leaves that workflow the oldest; the next backlog
    behind it still gets a prune wake-up, and the retention holds again."""
    Pruned.prune_turns = []
    clock = FakeClock()
    async with ActorKit([Pruned], data_dir, clock=clock) as kit:
        await _finish_waiting(kit, clock, [f"w{i:02}" for i in range(20)])
        gone = [f"w{i:02}" for i in range(1, 12)]
        await kit.call("pruned", "p1", "start_counted", "chain", 1, ["a"], gone)  # a wake-up, then 10 left
        await kit.fire_due("pruned", "p1")
        await until(lambda: Pruned.prune_turns == [0])  # 10 left: nothing to do, w00 still the oldest
        await _finish_waiting(kit, clock, [f"v{i:02}" for i in range(10)])
        started = await kit.call("pruned", "p1", "start_counted", "chain", 1, ["b"])
        assert started["deleted"] == 0
        await kit.fire_due("pruned", "p1")
        await until(lambda: sum(Pruned.prune_turns) == 11)
        assert Pruned.prune_turns == [0, 5, 5, 1]
        listed = await kit.call("pruned", "p1", "list_workflows", None, None, 500)
        assert "w00" not in {w["id"] for w in listed}
        assert len(listed) == 10


class EndShop(Shop):
    """A shop that keeps a row per workflow end, written by ``on_workflow_end``."""

    kind = "endshop"
    migrations: ClassVar[Sequence[Migration]] = (
        *Shop.migrations,
        "CREATE TABLE ends (wid TEXT, status TEXT, reason TEXT)",
    )

    async def on_workflow_end(self, workflow: dict[str, Any]) -> None:
        self.sql.execute(
            "INSERT INTO ends VALUES (?, ?, ?)", (workflow["id"], workflow["status"], workflow.get("reason"))
        )

    @callable(readonly=True)
    async def ends(self) -> list[list[Any]]:
        return [list(r) for r in self.sql.execute("SELECT wid, status, reason FROM ends ORDER BY rowid")]


async def test_every_end_is_heard_in_its_own_turn(data_dir: Path) -> None:
    """``on_workflow_end`` hears each end once, in the turn that records it (its write commits with
    the end): a completed body, a failed step, a cancel, and a divergence on replay, which no body
    can catch itself."""
    clock = FakeClock()
    async with ActorKit([EndShop], data_dir, clock=clock) as kit:
        await kit.call("endshop", "e", "start_workflow", "chain", 2, "done")
        await kit.call("endshop", "e", "start_workflow", "fatal", None, "broke")
        await kit.call("endshop", "e", "start_workflow", "nap", {"seconds": 60}, "stopped")
        assert await kit.call("endshop", "e", "ends") == [
            ["done", "completed", None],
            ["broke", "failed", "step_failed"],
        ]
        await kit.call("endshop", "e", "cancel_workflow", "stopped")
        await kit.call("endshop", "e", "start_workflow", "shifty", None, "diverged")
        await _replay_shifted(kit, clock, "endshop", "e")
        ends = await kit.call("endshop", "e", "ends")
        assert ends[2:] == [["stopped", "cancelled", "cancelled"], ["diverged", "failed", "nondeterministic"]]


class Stray(Actor):
    """A plain actor with a workflow body: it cannot run it."""

    kind = "stray"

    @workflow
    async def chores(self, step: Step, _: Any) -> None:
        await step.do("sweep", lambda: None)


async def test_a_workflow_on_an_actor_that_runs_none_is_refused_at_start(data_dir: Path) -> None:
    """Before, the kind was taken and ``start_workflow`` failed later as a callable it lacks."""
    with pytest.raises(
        TypeError, match=r"Stray\.chores is a @workflow.*subclass of roost\.workflows\.Workflows"
    ):
        async with ActorKit([Stray], data_dir):
            pass


async def test_inspect_shows_the_workflows_by_status_and_what_each_live_one_waits_for(data_dir: Path) -> None:
    async with ActorKit([Shop], data_dir, clock=FakeClock()) as kit:
        await kit.call("shop", "s1", "start_workflow", "chain", 2, "c1")
        await kit.call("shop", "s1", "start_workflow", "paid", {}, "p1")
    report = admin.inspect_actor(data_dir, "shop", "s1")
    assert report["workflows"]["by_status"] == {"completed": 1, "waiting": 1}
    (live,) = report["workflows"]["live"]
    assert (live["id"], live["name"], live["status"], live["steps"]) == ("p1", "paid", "waiting", 2)
    assert live["waiting"]["kind"] == "event"
    assert live["waiting"]["event"] == "payment"
