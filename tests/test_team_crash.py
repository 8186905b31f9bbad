"""SIGKILL test of the orchestrator-workers example with real server processes (the default app,
``roost serve``): killed while one worker is mid-work and two are done, the restarted server finishes
the run; no worker's part is written twice, no worker is dispatched again, and the histories show
what was kept (the team's plan and join) and what went on (the third worker's parts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.testing import until
from tests.support import ServerProcess

pytestmark = pytest.mark.slow


async def _call(server: ServerProcess, kind: str, name: str, method: str, *args: Any) -> Any:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{server.http}/agents/{kind}/{name}/rpc/{method}", json=list(args))
    body = r.json()
    assert body["ok"], body
    return body["result"]


async def _history(server: ServerProcess, kind: str, name: str, wid: str) -> list[dict[str, Any]]:
    page = await _call(server, kind, name, "workflow_history", wid, 0, 500)
    entries: list[dict[str, Any]] = page["entries"]
    return entries


async def _two_done_one_working(server: ServerProcess) -> bool:
    run = await _call(server, "team", "t1", "get_run", "r1")
    shown = {b["worker"]: (b["status"], b["progress"]) for b in run["branches"]}
    return (
        shown.get("w1") == ("completed", 2)
        and shown.get("w2") == ("completed", 2)
        and shown.get("w3")
        == (
            "dispatched",
            0,
        )
    )


async def _completed(server: ServerProcess) -> dict[str, Any] | None:
    run: dict[str, Any] = await _call(server, "team", "t1", "get_run", "r1")
    return run if run["status"] == "completed" else None


async def test_sigkill_mid_work_the_run_completes_and_no_workers_effect_doubles(data_dir: Path) -> None:
    spec = {"task": "one two three four five six", "workers": ["w1", "w2", "w3"], "delays": {"w3": 3.0}}
    first = ServerProcess(data_dir).start()
    try:
        await _call(first, "team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: _two_done_one_working(first), timeout=30, interval=0.05)
    finally:
        first.kill()  # w3 sleeps before its first part; the team waits for it
    second = ServerProcess(data_dir).start()
    try:
        run = await until(lambda: _completed(second), timeout=60, interval=0.2)
        effects = {w: await _call(second, "team_worker", f"t1.{w}", "effects") for w in ("w1", "w2", "w3")}
        team = await _history(second, "team", "t1", "r1")
        w3 = await _history(second, "team_worker", "t1.w3", "r1:1:w3")
    finally:
        second.kill()
    assert effects == {w: {f"r1:1:{w}": 2} for w in ("w1", "w2", "w3")}
    assert [(b["worker"], b["status"], b["attempt"], b["runs"]) for b in run["branches"]] == [
        ("w1", "completed", 1, 1),
        ("w2", "completed", 1, 1),
        ("w3", "completed", 1, 1),
    ]
    assert sorted(run["result"]["answers"]) == ["w1", "w2", "w3"]
    events = [(e["event"], e["name"]) for e in team]
    assert events.count(("step_completed", "plan")) == 1  # kept, never re-planned
    assert [e["detail"]["branch"] for e in team if e["event"] == "attempt_started"] == ["w1", "w2", "w3"]
    assert events[-1] == ("completed", None)
    w3_events = [(e["event"], e["name"]) for e in w3]
    assert [n for ev, n in w3_events if ev == "step_completed"].count("part 0") == 1
    assert ("slept", "think 0") in w3_events


async def _reported_not_recorded(server: ServerProcess) -> bool:
    run = await _call(server, "team", "t1", "get_run", "r1")
    worker = await _call(server, "team_worker", "t1.w3", "workflow_status", "r1:1:w3")
    report = [s for s in worker["steps"] if s["name"] == "report"]
    w3: dict[str, Any] = next((b for b in run["branches"] if b["worker"] == "w3"), {})
    return w3.get("status") == "completed" and bool(report) and report[0]["status"] == "running"


async def test_sigkill_after_a_workers_report_reached_the_team_the_repeat_is_no_news(data_dir: Path) -> None:
    """Killed after w3's final report reached the team (w2 still at work, so the run waits) and before
    the report's record: after the restart the report runs again under the same key, the team takes
    it as no news (one ``done:w3`` event, one merge), and both workflows complete."""
    spec = {"task": "one two three", "workers": ["w1", "w2", "w3"], "delays": {"w2": 3.0}}
    first = ServerProcess(data_dir, app="tests.team_app:app").start()
    try:
        await _call(first, "team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: _reported_not_recorded(first), timeout=30, interval=0.05)
    finally:
        first.kill()
    second = ServerProcess(data_dir, app="tests.team_app:app").start()
    try:
        worker = await until(lambda: _worker_done(second), timeout=60, interval=0.2)
        run = await until(lambda: _completed(second), timeout=60, interval=0.2)
        w3 = await _history(second, "team_worker", "t1.w3", "r1:1:w3")
        team = await _history(second, "team", "t1", "r1")
        effects = await _call(second, "team_worker", "t1.w3", "effects")
    finally:
        second.kill()
    assert worker["status"] == "completed"
    assert sorted(run["result"]["answers"]) == ["w1", "w2", "w3"]
    assert effects == {"r1:1:w3": 2}
    runs = [(e["name"], e["detail"]["run"]) for e in w3 if e["event"] == "attempt_started"]
    assert runs.count(("report", 1)) == 1
    assert runs.count(("report", 2)) == 1
    assert ("attempt_lost", "report") in [(e["event"], e["name"]) for e in w3]
    sent = [e for e in team if e["event"] == "event_sent" and e["detail"]["event"] == "done:w3"]
    assert len(sent) == 1  # the repeated report was no news
    assert [e["name"] for e in team if e["event"] == "step_completed"].count("merge") == 1


async def _worker_done(server: ServerProcess) -> dict[str, Any] | None:
    status: dict[str, Any] = await _call(server, "team_worker", "t1.w3", "workflow_status", "r1:1:w3")
    return status if status["status"] == "completed" else None
