"""Delegation in a real ``roost serve`` killed with SIGKILL while the helpers work (the lead waiting
for them, each helper's answer under way): after a restart the lead's run completes, each helper
ran its task once (one run, one answer under one idempotency key), and no task was dispatched
again."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.testing import connect, until
from roost.transport import admin
from tests.support import server_process

pytestmark = pytest.mark.slow

WAIT = 30.0
APP = "tests.delegation_app:app"


def go(marker: Path) -> None:
    """Let the helpers answer."""
    Path(f"{marker}.go").touch()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_sigkill_while_helpers_work_the_lead_completes_and_each_task_runs_once(
    data_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "delegation"
    env = {"ROOST_TEST_MARKER": str(marker)}
    started_file, effects_file = Path(f"{marker}.started"), Path(f"{marker}.effects")
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/holdlead/l1") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            turn = await peer.call("turn", "split alpha beta gamma delta epsilon zeta", timeout=WAIT)
            await until(lambda: len(lines(started_file)) == 3, timeout=WAIT)  # every helper at work
            srv.kill()
            cursor = max(int(f["seq"]) for f in peer.frames if "seq" in f)
    before = lines(started_file)
    assert lines(effects_file) == []  # nothing answered before the kill
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/holdlead/l1?cursor={cursor}") as peer:
            go(marker)
            await peer.wait_for(
                lambda f: f.get("type") == "event" and f["event"]["event_type"] == "turn_completed", WAIT
            )
            run = await peer.call("get_run", turn["run_id"], timeout=WAIT)
        srv.terminate()
    assert run["status"] == "completed"
    tasks = run["delegations"]
    assert [(t["worker"], t["status"], t["dispatches"]) for t in tasks] == [
        ("w1", "completed", 1),  # dispatched once: the lead's rerun found them dispatched
        ("w2", "completed", 1),
        ("w3", "completed", 1),
    ]
    effects = lines(effects_file)
    assert sorted(e.split()[0] for e in effects) == ["l1.w1", "l1.w2", "l1.w3"]  # each answer once
    for e in effects:  # under the key its first try had before the kill: the same attempt, run again
        assert e in before
    for t in tasks:  # one run per helper, across the kill
        exported = admin.export_actor(data_dir, "holdhelper", f"l1.{t['worker']}")
        assert len(exported["tables"]["roost_agent_runs"]) == 1
