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
    """w1 answers at once, w2 and w3 hold: killed with one task ended and two under way, the
    restarted server keeps w1's answer (not asked again), reruns the other two helpers' steps under
    the keys their first tries had, and the lead's job runs again after its lease (its attempt 2)."""
    marker = tmp_path / "delegation"
    env = {"ROOST_TEST_MARKER": str(marker), "ROOST_TEST_QUICK": "w1"}
    started_file, effects_file = Path(f"{marker}.started"), Path(f"{marker}.effects")
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/holdlead/l1") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            turn = await peer.call("turn", "split alpha beta gamma delta epsilon zeta", timeout=WAIT)

            async def one_ended() -> bool:
                run = await peer.call("get_run", turn["run_id"], timeout=WAIT)
                states = [t["status"] for t in run["delegations"]]
                return states.count("completed") == 1 and len(lines(started_file)) == 3

            await until(one_ended, timeout=WAIT)
            kept = (await peer.call("get_run", turn["run_id"], timeout=WAIT))["delegations"][0]
            srv.kill()
            cursor = max(int(f["seq"]) for f in peer.frames if "seq" in f)
    before = lines(started_file)
    assert [e.split()[0] for e in lines(effects_file)] == ["l1.w1"]  # w1 answered before the kill
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
    assert tasks[0] == kept  # w1's task, kept as it was before the kill: not asked again
    (job,) = run["jobs"]
    assert job["attempt"] == 2  # the lead's wait, lost with its process, ran again after its lease
    effects = lines(effects_file)
    assert sorted(e.split()[0] for e in effects) == ["l1.w1", "l1.w2", "l1.w3"]  # each answer once
    for e in effects:  # under the key its first try had before the kill: the same attempt, run again
        assert e in before
    restarted = lines(started_file)[len(before) :]
    assert sorted(e.split()[0] for e in restarted) == ["l1.w2", "l1.w3"]  # only the two under way
    for t in tasks:  # one run per helper, across the kill
        exported = admin.export_actor(data_dir, "holdhelper", f"l1.{t['worker']}")
        assert len(exported["tables"]["roost_agent_runs"]) == 1


async def test_a_cancel_acknowledged_before_a_sigkill_reaches_every_helper_after_the_restart(
    data_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "delegation"
    env = {"ROOST_TEST_MARKER": str(marker)}
    started_file = Path(f"{marker}.started")
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/holdlead/l1") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            turn = await peer.call("turn", "split alpha beta gamma delta epsilon zeta", timeout=WAIT)
            await until(lambda: len(lines(started_file)) == 3, timeout=WAIT)
            cancelled = await peer.call("cancel", turn["turn_id"], timeout=WAIT)
            srv.kill()  # the cancel committed; its workflow's calls to the helpers maybe not made
    assert cancelled["status"] == "cancelled"
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/holdlead/l1") as peer:

            async def all_cancelled() -> bool:
                run = await peer.call("get_run", turn["run_id"], timeout=WAIT)
                return all(t["status"] == "cancelled" for t in run["delegations"])

            await until(all_cancelled, timeout=WAIT)
            run = await peer.call("get_run", turn["run_id"], timeout=WAIT)
        srv.terminate()
    assert [t["status"] for t in run["delegations"]] == ["cancelled"] * 3
    assert lines(Path(f"{marker}.effects")) == []  # no helper answered
    for t in run["delegations"]:
        exported = admin.export_actor(data_dir, "holdhelper", f"l1.{t['worker']}")
        (helper_run,) = exported["tables"]["roost_agent_runs"]
        assert helper_run["status"] == "cancelled"
