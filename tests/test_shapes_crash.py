"""SIGKILL tests of the chaining and routing shapes with real server processes (``roost serve
tests.shapes_app:app``): one server killed while a chain waits at its approval gate and a routed
request waits in its route's queue; the restarted server (whose classifier would now decide
otherwise) finishes both, no stage's effect happens twice, the route is the recorded one, and the
histories show what was replayed from records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.testing import until
from tests.support import ServerProcess

pytestmark = pytest.mark.slow

APP = "tests.shapes_app:app"


async def _call(server: ServerProcess, method: str, *args: Any) -> Any:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{server.http}/agents/shapes/s1/rpc/{method}", json=list(args))
    body = r.json()
    assert body["ok"], body
    return body["result"]


async def _history(server: ServerProcess, wid: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = (await _call(server, "workflow_history", wid, 0, 500))["entries"]
    return entries


async def _completed(server: ServerProcess, wid: str) -> dict[str, Any] | None:
    status: dict[str, Any] = await _call(server, "workflow_status", wid)
    return status if status["status"] == "completed" else None


async def test_sigkill_at_a_gate_and_in_a_queue_the_runs_complete_with_their_records(data_dir: Path) -> None:
    first = ServerProcess(data_dir, app=APP, env={"SHAPES_ROUTE": "billing"}).start()
    try:
        chain = await _call(first, "start_workflow", "chaining", {"topic": "crash safety"}, "chain")
        route = await _call(
            first, "start_workflow", "routing", {"text": "refund please", "queue": 3}, "route"
        )
    finally:
        first.kill()  # the chain at its approval gate, the request in the billing queue
    assert chain["waiting"]["step"] == "publish"
    assert route["waiting"]["step"] == "queue:billing"
    second = ServerProcess(data_dir, app=APP, env={"SHAPES_ROUTE": "support"}).start()
    try:
        chain = await _call(second, "approve_step", "chain", "publish", True, "go")
        route = await until(lambda: _completed(second, "route"), timeout=60, interval=0.2)
        effects = await _call(second, "effects")
        chain_history = await _history(second, "chain")
        route_history = await _history(second, "route")
    finally:
        second.kill()
    assert chain["result"]["status"] == "published"
    assert route["result"] == {"route": "billing"}  # recorded before the kill, not re-decided
    assert effects == {"draft": 1, "polish": 1, "release": 1, "classify": 1, "handle:billing": 1}
    chain_events = [(e["event"], e["name"]) for e in chain_history]
    assert [n for ev, n in chain_events if ev == "step_completed"] == ["draft", "check", "polish", "release"]
    assert {"replayed": 3, "recorded": 4} in [e["detail"] for e in chain_history if e["event"] == "resumed"]
    route_events = [(e["event"], e["name"]) for e in route_history]
    assert [n for ev, n in route_events if ev == "step_completed"] == ["classify", "handle"]
    assert next(e["detail"] for e in route_history if e["event"] == "resumed") == {
        "replayed": 1,
        "recorded": 2,
    }
    assert route_events[-1] == ("completed", None)
