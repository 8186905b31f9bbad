"""The chaining, routing and parallel shapes of ``roost.examples.shapes`` in process: a gate stops the
chain, the approval gate holds it until decided, a recorded route is never re-decided on replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roost.examples.shapes import classify
from roost.scheduler.clock import FakeClock
from roost.testing import ActorKit, until
from tests.shapes_app import FlipShapes


async def _start(kit: ActorKit, name: str, spec: dict[str, Any], wid: str = "w1") -> dict[str, Any]:
    status: dict[str, Any] = await kit.call("shapes", "s1", "start_workflow", name, spec, wid)
    return status


async def test_a_gate_stops_the_chain_nothing_after_a_failed_check_runs(data_dir: Path) -> None:
    async with ActorKit([FlipShapes], data_dir, clock=FakeClock()) as kit:
        status = await _start(kit, "chaining", {"topic": ""})
        assert status["status"] == "completed"
        assert status["result"]["status"] == "rejected"
        assert status["result"]["at"] == "check"
        assert await kit.call("shapes", "s1", "effects") == {"draft": 1}


async def test_the_approval_gate_holds_the_chain_until_decided(data_dir: Path) -> None:
    async with ActorKit([FlipShapes], data_dir, clock=FakeClock()) as kit:
        status = await _start(kit, "chaining", {"topic": "durable runs"})
        assert status["status"] == "waiting"
        assert status["waiting"]["kind"] == "approval"
        assert await kit.call("shapes", "s1", "effects") == {"draft": 1, "polish": 1}
        status = await kit.call("shapes", "s1", "approve_step", "w1", "publish", True, "ok")
        assert status["result"]["status"] == "published"
        assert await kit.call("shapes", "s1", "effects") == {"draft": 1, "polish": 1, "release": 1}
        await _start(kit, "chaining", {"topic": "durable runs"}, "w2")
        status = await kit.call("shapes", "s1", "approve_step", "w2", "publish", False, "not yet")
        assert status["result"] == {"status": "denied", "at": "publish", "by": "unknown", "note": "not yet"}
        assert (await kit.call("shapes", "s1", "effects"))["release"] == 1


async def test_a_recorded_route_is_never_re_decided_on_replay(data_dir: Path) -> None:
    """The classifier says ``billing``, then would say ``support``: the hand-off after the queue's
    sleep (a replay from the top) goes to ``billing``, and the classifier is asked once."""
    clock = FakeClock()
    FlipShapes.route, FlipShapes.asked = "billing", 0
    try:
        async with ActorKit([FlipShapes], data_dir, clock=clock) as kit:
            status = await _start(kit, "routing", {"text": "my invoice is wrong", "queue": 30})
            assert status["steps"][0]["name"] == "classify"
            assert status["waiting"]["step"] == "queue:billing"
            FlipShapes.route = "support"
            await kit.call("shapes", "s1", "resume_workflow", "w1")  # a replay, still queued
            clock.advance(30)
            await kit.fire_due("shapes", "s1")
            done = await until(lambda: _done(kit))
            assert done["result"] == {"route": "billing"}
            assert FlipShapes.asked == 1
            assert await kit.call("shapes", "s1", "effects") == {"classify": 1, "handle:billing": 1}
    finally:
        FlipShapes.route = "billing"


async def _done(kit: ActorKit) -> dict[str, Any] | None:
    status: dict[str, Any] = await kit.call("shapes", "s1", "workflow_status", "w1")
    return status if status["status"] == "completed" else None


def test_the_deterministic_classifier() -> None:
    assert classify("please refund me") == "billing"
    assert classify("the app is broken") == "support"
    assert classify("what do you sell") == "sales"


async def test_parallel_reviews_run_at_once_and_merge_once(data_dir: Path) -> None:
    async with ActorKit([FlipShapes], data_dir, clock=FakeClock()) as kit:
        await _start(kit, "parallel", {"text": "three words here"})
        status = await until(lambda: _done(kit))
        reviews = status["result"]["reviews"]
        assert list(reviews) == ["style", "facts", "tone"]
        assert reviews["facts"] == {"angle": "facts", "words": 3, "key": f"w1:{status['nonce']}:1:0:facts:1"}
        assert await kit.call("shapes", "s1", "effects") == {"merge": 1}
