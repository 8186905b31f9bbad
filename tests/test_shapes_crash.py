"""SIGKILL tests of the chaining and routing shapes with real server processes (``roost serve
tests.shapes_app:app``): one server killed while a chain waits at its approval gate and a routed
request waits in its route's queue; the restarted server (whose classifier would now decide
otherwise) finishes both, no stage's effect happens twice, the route is the recorded one, and the
histories show what was replayed from records."""

from __future__ import annotations

import asyncio
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


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _touch(path: Path) -> None:
    path.touch()


async def test_sigkill_inside_a_stage_and_inside_a_fan_out_each_effect_once(
    data_dir: Path, tmp_path: Path
) -> None:
    """A chain killed inside its last stage (``release`` blocks the server in the approval's turn)
    and a fan-out killed with two of three reviewers done: after the restart the chain waits at its
    gate again (the stage's turn, the approval with it, rolled back), is approved again and releases
    once; the fan-out reruns only the third reviewer, under its key, and merges once."""
    marker = tmp_path / "m"
    env = {"SHAPES_MARKER": str(marker), "SHAPES_HOLD_REVIEW": "tone"}
    reviews = Path(f"{marker}.reviews")
    first = ServerProcess(data_dir, app=APP, env={**env, "SHAPES_HANG_AT": "release"}).start()
    try:
        await _call(first, "start_workflow", "parallel", {"text": "three reviewers at once"}, "fan")

        async def two_done() -> bool:
            status = await _call(first, "workflow_status", "fan")
            branches = {b["branch"]: b["status"] for s in status["steps"] for b in s.get("branches", [])}
            return branches.get("style") == branches.get("facts") == "completed" and "tone" in branches

        await until(two_done, timeout=30, interval=0.1)
        chain = await _call(first, "start_workflow", "chaining", {"topic": "crash safety"}, "chain")
        assert chain["waiting"]["step"] == "publish"
        approving = asyncio.ensure_future(_call(first, "approve_step", "chain", "publish", True))
        await until(lambda: Path(f"{marker}.hung").exists(), timeout=30, interval=0.05)
    finally:
        first.kill()  # inside release's turn; the tone reviewer still held
    approving.cancel()
    before = _lines(reviews)
    assert sorted(r.split()[0] for r in before) == ["facts", "style", "tone"]
    second = ServerProcess(data_dir, app=APP, env=env).start()
    try:
        status = await _call(second, "workflow_status", "chain")
        assert status["waiting"]["step"] == "publish"  # the approval rolled back with the stage
        chain = await _call(second, "approve_step", "chain", "publish", True)
        _touch(Path(f"{marker}.go"))
        fan = await until(lambda: _completed(second, "fan"), timeout=60, interval=0.2)
        effects = await _call(second, "effects")
    finally:
        second.kill()
    assert chain["result"]["status"] == "published"
    assert effects == {"draft": 1, "polish": 1, "release": 1, "merge": 1}
    after = _lines(reviews)
    assert [r.split()[0] for r in after[len(before) :]] == ["tone"]  # only the third ran again ...
    tone = [r for r in after if r.startswith("tone ")]
    assert tone[0] == tone[1]  # ... under its key
    assert sorted(fan["result"]["reviews"]) == ["facts", "style", "tone"]
