"""SIGKILL tests of the workflow core with real server processes (``roost serve
tests.workflow_app:app``): after a restart on the same data directory the workflow completes, no
in-turn step's effect happens twice (rows counted in the actor's file), an outside step's repeat
carries the same idempotency key (lines counted in a ledger file), and the history shows what was
replayed and what was kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.testing import until
from tests.support import ServerProcess

pytestmark = pytest.mark.slow

APP = "tests.workflow_app:app"


async def _call(server: ServerProcess, method: str, *args: Any) -> Any:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{server.http}/agents/shop/s1/rpc/{method}", json=list(args))
    body = r.json()
    assert body["ok"], body
    return body["result"]


async def _completed(server: ServerProcess, wid: str) -> dict[str, Any] | None:
    status: dict[str, Any] = await _call(server, "workflow_status", wid)
    return status if status["status"] == "completed" else None


async def _history(server: ServerProcess, wid: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await _call(server, "workflow_history", wid, after, 100)
        entries += page["entries"]
        if page["next"] is None:
            return entries
        after = page["next"]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_sigkill_mid_outside_step_reruns_it_under_the_same_key(data_dir: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    spec = {"ledger": str(ledger), "hold": True}
    first = ServerProcess(data_dir, app=APP).start()
    try:
        status = await _call(first, "start_workflow", "order", spec, "w1")
        assert status["status"] == "waiting"
        await until(lambda: len(_lines(ledger)) == 1, timeout=30, interval=0.05)
    finally:
        first.kill()  # mid-step: the charge's first run is under way
    second = ServerProcess(data_dir, app=APP).start()
    try:
        status = await until(lambda: _completed(second, "w1"), timeout=60, interval=0.2)
        history = await _history(second, "w1")
        effects = await _call(second, "effects")
    finally:
        second.kill()
    lines = _lines(ledger)
    key = f"w1:{status['nonce']}:1:1:1"
    assert [line.split()[0] for line in lines] == [key, key]  # one attempt, two runs
    assert lines[0].split()[2] != lines[1].split()[2]  # by two processes
    assert status["result"] == {"receipt": {"key": key, "run": 2}}
    assert effects == {"reserve": 1, "ship": 1}  # no in-turn step ran twice
    events = [(e["event"], e["name"]) for e in history]
    assert events.count(("step_completed", "reserve")) == 1
    assert ("attempt_lost", "charge") in events
    started = [e["detail"]["run"] for e in history if e["event"] == "attempt_started"]
    assert started == [1, 2]
    resumed = [e["detail"]["replayed"] for e in history if e["event"] == "resumed"]
    assert resumed[0] == 1  # after the kill: "reserve" replayed from its record, not run
    assert events[-1] == ("completed", None)


async def test_sigkill_mid_outside_step_its_rerun_starts_from_its_last_checkpoint(
    data_dir: Path, tmp_path: Path
) -> None:
    """``StepAttempt.progress``: the checkpoint committed before the kill is what the rerun (run 2 of
    the same attempt, in the next process) is given, so items done before the kill are not done again;
    the report shown before the kill is the one committed."""
    ledger = tmp_path / "ledger"
    spec = {"ledger": str(ledger), "items": 5, "hold_at": 3}
    first = ServerProcess(data_dir, app=APP).start()
    try:
        await _call(first, "start_workflow", "batch", spec, "w1")

        async def reported() -> dict[str, Any] | None:
            status: dict[str, Any] = await _call(first, "workflow_status", "w1")
            progress = status["steps"][0]["progress"] if status["steps"] else None
            return progress if progress is not None and progress["done"] == 3 else None

        progress = await until(reported, timeout=30, interval=0.05)
        assert (progress["total"], progress["message"]) == (5, "item 3")
    finally:
        first.kill()  # its first run holds after item 3, checkpoint 3 committed
    second = ServerProcess(data_dir, app=APP).start()
    try:
        status = await until(lambda: _completed(second, "w1"), timeout=60, interval=0.2)
    finally:
        second.kill()
    assert status["result"] == {"started_from": 3, "run": 2}
    assert status["steps"][0]["progress"]["message"] == "item 5"
    done = [(line.split()[0], line.split()[1]) for line in _lines(ledger)]
    first_run = [(f"item={i}", "run=1") for i in (1, 2, 3)]
    assert done == [*first_run, ("item=4", "run=2"), ("item=5", "run=2")]


async def test_sigkill_mid_in_turn_step_its_writes_commit_with_its_record_or_not_at_all(
    data_dir: Path, tmp_path: Path
) -> None:
    """Killed inside step b's turn (after b wrote its row, before the commit): b's write is lost with
    the turn, the sleep's wake-up comes again, a is replayed, b and c run once each."""
    marker = tmp_path / "marker"
    first = ServerProcess(data_dir, app=APP).start()
    try:
        status = await _call(first, "start_workflow", "stall", {"marker": str(marker)}, "w1")
        assert status["status"] == "waiting"
        await until(marker.exists, timeout=30, interval=0.05)
    finally:
        first.kill()
    second = ServerProcess(data_dir, app=APP).start()
    try:
        await until(lambda: _completed(second, "w1"), timeout=60, interval=0.2)
        history = await _history(second, "w1")
        effects = await _call(second, "effects")
    finally:
        second.kill()
    assert effects == {"a": 1, "b": 1, "c": 1}
    events = [(e["event"], e["name"]) for e in history]
    assert [n for ev, n in events if ev == "step_completed"] == ["a", "b", "c"]
    resumed = [e["detail"] for e in history if e["event"] == "resumed"]
    assert resumed == [{"replayed": 1, "recorded": 2}]  # a kept; the sleep still pending when replayed
    assert events.count(("sleeping", "gap")) == 1
    assert events.count(("slept", "gap")) == 1


async def test_sigkill_between_steps_waiting_for_an_event(data_dir: Path) -> None:
    """Killed between two in-turn steps while the workflow waits for an event: after the restart the
    event is sent (the waiting workflow's actor is dormant), the first step is replayed from its
    record and the second runs once."""
    first = ServerProcess(data_dir, app=APP).start()
    try:
        status = await _call(first, "start_workflow", "paid", {}, "w1")
        assert status["status"] == "waiting"
    finally:
        first.kill()
    second = ServerProcess(data_dir, app=APP).start()
    try:
        status = await _call(second, "send_event", "w1", "payment", {"amount": 3})
        history = await _history(second, "w1")
        effects = await _call(second, "effects")
    finally:
        second.kill()
    assert status["status"] == "completed"
    assert status["result"] == {"amount": 3}
    assert effects == {"invoice": 1, "settle": 1}
    events = [(e["event"], e["name"]) for e in history]
    assert [n for ev, n in events if ev == "step_completed"] == ["invoice", "settle"]
    assert [e["detail"] for e in history if e["event"] == "resumed"] == [{"replayed": 1, "recorded": 2}]
    assert ("event_received", "payment") in events


async def _step_is(server: ServerProcess, wid: str, pos: int, want: str) -> bool:
    status: dict[str, Any] = await _call(server, "workflow_status", wid)
    return bool(status["steps"][pos]["status"] == want)


async def test_sigkill_while_paused_mid_outside_step_then_resume_completes(
    data_dir: Path, tmp_path: Path
) -> None:
    """Paused during the outside step, then killed: in the next process the lease wake-up comes
    while the workflow is still paused and marks the run ``lost`` (nothing advances); resume runs it
    again under the same key and the workflow completes, each in-turn step once."""
    ledger = tmp_path / "ledger"
    first = ServerProcess(data_dir, app=APP).start()
    try:
        await _call(first, "start_workflow", "order", {"ledger": str(ledger), "hold": True}, "w1")
        await until(lambda: len(_lines(ledger)) == 1, timeout=30, interval=0.05)
        assert (await _call(first, "pause_workflow", "w1"))["status"] == "paused"
    finally:
        first.kill()
    second = ServerProcess(data_dir, app=APP).start()
    try:
        await until(lambda: _step_is(second, "w1", 1, "lost"), timeout=60, interval=0.2)
        assert (await _call(second, "workflow_status", "w1"))["status"] == "paused"
        await _call(second, "resume_workflow", "w1")
        status = await until(lambda: _completed(second, "w1"), timeout=60, interval=0.2)
        effects = await _call(second, "effects")
    finally:
        second.kill()
    key = f"w1:{status['nonce']}:1:1:1"
    assert [line.split()[0] for line in _lines(ledger)] == [key, key]
    assert status["result"] == {"receipt": {"key": key, "run": 2}}
    assert effects == {"reserve": 1, "ship": 1}
