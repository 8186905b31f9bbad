"""SIGKILL test of the parallel shape with real server processes (``roost serve
tests.fanout_app:app``): killed after 2 of 3 branches completed, the restarted server runs only the
third again (under the same idempotency key), the other two are kept (one ledger line each), the
in-turn step after the join runs once, and the history shows what was kept and what was rerun."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.testing import until
from tests.support import ServerProcess

pytestmark = pytest.mark.slow

APP = "tests.fanout_app:app"


async def _call(server: ServerProcess, method: str, *args: Any) -> Any:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{server.http}/agents/fan/f1/rpc/{method}", json=list(args))
    body = r.json()
    assert body["ok"], body
    return body["result"]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def _two_of_three(server: ServerProcess, ledger: Path) -> bool:
    status = await _call(server, "workflow_status", "w1")
    join = {b["branch"]: b["status"] for b in status["steps"][0]["branches"]}
    return join == {"a": "completed", "b": "completed", "c": "running"} and len(_lines(ledger)) == 3


async def _completed(server: ServerProcess) -> dict[str, Any] | None:
    status: dict[str, Any] = await _call(server, "workflow_status", "w1")
    return status if status["status"] == "completed" else None


async def test_sigkill_after_two_of_three_branches_reruns_only_the_third(
    data_dir: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    first = ServerProcess(data_dir, app=APP).start()
    try:
        status = await _call(first, "start_workflow", "fanout", {"ledger": str(ledger), "hold": ["c"]}, "w1")
        assert status["status"] == "waiting"
        await until(lambda: _two_of_three(first, ledger), timeout=30, interval=0.05)
    finally:
        first.kill()  # a and b recorded, c's first run under way
    second = ServerProcess(data_dir, app=APP).start()
    try:
        status = await until(lambda: _completed(second), timeout=60, interval=0.2)
        history = (await _call(second, "workflow_history", "w1", 0, 500))["entries"]
        effects = await _call(second, "effects")
    finally:
        second.kill()
    by_key: dict[str, list[str]] = {}
    for line in _lines(ledger):
        key, _, pid = line.split()
        by_key.setdefault(key, []).append(pid)
    s = f"w1:{status['nonce']}:1:0"
    assert {k: len(v) for k, v in by_key.items()} == {f"{s}:a:1": 1, f"{s}:b:1": 1, f"{s}:c:1": 2}
    assert by_key[f"{s}:c:1"][0] != by_key[f"{s}:c:1"][1]  # by two processes
    assert status["result"]["c"] == {"branch": "c", "key": f"{s}:c:1", "run": 2}
    assert status["result"]["a"]["run"] == 1
    assert effects == {"merge": 1}
    assert [(b["branch"], b["attempt"], b["run"]) for b in status["steps"][0]["branches"]] == [
        ("a", 1, 1),
        ("b", 1, 1),
        ("c", 1, 2),
    ]
    started = [
        (e["detail"]["branch"], e["detail"]["run"]) for e in history if e["event"] == "attempt_started"
    ]
    assert sorted(started) == [("a", 1), ("b", 1), ("c", 1), ("c", 2)]
    rerun = next(e["detail"] for e in history if e["event"] == "attempt_started" and e["detail"]["run"] == 2)
    assert rerun["kept"] == ["a", "b"]
    assert [e["detail"]["branch"] for e in history if e["event"] == "attempt_lost"] == ["c"]
    completed = [e["detail"]["branch"] for e in history if e["event"] == "branch_completed"]
    assert sorted(completed) == ["a", "b", "c"]
    assert [e["event"] for e in history][-1] == "completed"
