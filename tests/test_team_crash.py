"""SIGKILL tests of the orchestrator-workers example with real server processes.

With the default app (``roost serve``): killed while one worker is mid-work and two are done, the
restarted server finishes the run; no worker's part is written twice, no worker is dispatched again,
and the histories show what was kept (the team's plan and join) and what went on (the third
worker's parts). With ``tests.team_app``: killed after a worker's report reached the team and before
its record, the repeat is no news.

With ``tests.team_app``'s hang points, each in one process (both kinds) and in two (the team in one,
its workers in another, linked over HTTP), killing the one server or only the team's or only the
workers': mid-stage (a worker's part written in a turn not yet committed), mid-dispatch (the team's
start of a worker not yet sent), and after an acknowledged cancel (the cancel of a worker not yet
sent). After the restart the run completes (or every worker ends cancelled), no part is written
twice (counted), and the histories show what was replayed and kept."""

from __future__ import annotations

import json
import os
from functools import partial
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
    w3: dict[str, Any] = next((b for b in run["branches"] if b["worker"] == "w3"), {})
    if w3.get("status") != "completed":
        return False  # (the worker may not even exist yet: it is created by its dispatch)
    worker = await _call(server, "team_worker", "t1.w3", "workflow_status", "r1:1:w3")
    report = [s for s in worker["steps"] if s["name"] == "report"]
    return bool(report) and report[0]["status"] == "running"


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


class Servers:
    """The team's server and the workers' server of ``tests.team_app``: one process (``kill_app``,
    ``team is workers``) or two (``team_app``, ``workers_app``, each with its own data, linked over
    HTTP through the peers file), with the hang point ``hang``."""

    def __init__(self, root: Path, *, split: bool, hang: str) -> None:
        self.root, self.split = root, split
        marks = root / "marks"
        marks.mkdir(parents=True)
        self.marks = marks
        self.env = {"ROOST_TEAM_HANG": hang, "ROOST_TEAM_MARKS": str(marks)}
        if split:
            self.env["ROOST_TEAM_PEERS"] = str(root / "peers.json")
        self.team = self._start("team")
        self.workers = self._start("workers") if split else self.team
        self._peers()

    def _start(self, which: str) -> ServerProcess:
        if not self.split:
            return ServerProcess(self.root / "one", app="tests.team_app:kill_app", env=self.env).start()
        app = f"tests.team_app:{which}_app"
        return ServerProcess(self.root / which, app=app, env=self.env).start()

    def _peers(self) -> None:
        """Write the peers file whole, by a rename: a restarted server reads it at once (a lost
        branch's rerun calls the other server as soon as its lease is due), and a write in place
        could be read half done, failing that attempt."""
        if self.split:
            peers = {"team": self.team.http, "team_worker": self.workers.http}
            tmp = self.root / "peers.json.tmp"
            tmp.write_text(json.dumps(peers))
            os.replace(tmp, self.root / "peers.json")

    def hung(self, point: str) -> bool:
        return (self.marks / f"hang-{point}").exists()

    def kill(self, which: str) -> None:
        """SIGKILL the team's server or the workers' (the one server, not split)."""
        (self.team if which == "team" else self.workers).kill()

    def restart(self, which: str) -> None:
        if not self.split:
            self.team = self.workers = self._start("one")
        elif which == "team":
            self.team = self._start("team")
        else:
            self.workers = self._start("workers")
        self._peers()

    def stop(self) -> None:
        self.team.kill()
        self.workers.kill()


SPLIT = pytest.mark.parametrize("split", [False, True], ids=["one process", "two processes"])


async def _run(servers: Servers) -> dict[str, Any]:
    run: dict[str, Any] = await _call(servers.team, "team", "t1", "get_run", "r1")
    return run


async def _branch(servers: Servers, worker: str) -> dict[str, Any]:
    run = await _run(servers)
    found: dict[str, Any] = next((b for b in run["branches"] if b["worker"] == worker), {})
    return found


async def _finished(servers: Servers) -> dict[str, Any] | None:
    run = await _run(servers)
    return run if run["status"] in ("completed", "failed", "cancelled") else None


async def _effects(servers: Servers, *workers: str) -> dict[str, Any]:
    return {w: await _call(servers.workers, "team_worker", f"t1.{w}", "effects") for w in workers}


def _started(history: list[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    """Each branch attempt a join's history started: (branch, run, the branches kept)."""
    return [
        (e["detail"]["branch"], e["detail"]["run"], e["detail"]["kept"])
        for e in history
        if e["event"] == "attempt_started"
    ]


def _events(history: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(e["event"], e["name"]) for e in history]


@SPLIT
async def test_a_worker_killed_mid_part_writes_each_part_once(data_dir: Path, split: bool) -> None:
    """Killed while w2 is in the middle of its work (its part 1 written inside a turn not yet
    committed; the same turn records its progress 0 report, which reached the team), w1 done: the
    workers' server alone when split (the team's server goes on, and still shows w2 at part 1), else
    the one server. After the restart part 1 is written once, the report runs again under the same
    key and is no news, w2 is not dispatched again, and the run completes."""
    servers = Servers(data_dir, split=split, hang="part")
    try:
        spec = {"task": "one two three four", "workers": ["w1", "w2"]}
        await _call(servers.team, "team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: servers.hung("part"), timeout=30, interval=0.05)
        await until(lambda: _branch_is(servers, "w1", "completed"), timeout=30, interval=0.05)
        servers.kill("workers")
        if split:  # the team's server lives on: w2 shows as reported, at part 1 of 2
            w2 = await _branch(servers, "w2")
            assert (w2["status"], w2["progress"]) == ("running", 1)
        servers.restart("workers")
        run = await until(lambda: _finished(servers), timeout=60, interval=0.2)
        effects = await _effects(servers, "w1", "w2")
        w2_history = await _history(servers.workers, "team_worker", "t1.w2", "r1:1:w2")
        w2_steps = await _call(servers.workers, "team_worker", "t1.w2", "workflow_steps", "r1:1:w2")
        team = await _history(servers.team, "team", "t1", "r1")
    finally:
        servers.stop()
    assert run["status"] == "completed"
    assert effects == {w: {f"r1:1:{w}": 2} for w in ("w1", "w2")}  # no part twice
    assert [(b["worker"], b["status"], b["attempt"], b["runs"]) for b in run["branches"]] == [
        ("w1", "completed", 1, 1),
        ("w2", "completed", 1, 1),
    ]
    events = _events(w2_history)
    assert events.count(("step_completed", "part 0")) == 1  # kept
    assert events.count(("step_completed", "part 1")) == 1  # rolled back with the kill, then once
    assert ("attempt_lost", "progress 0") in events
    runs = [
        e["detail"]["run"] for e in w2_history if (e["event"], e["name"]) == ("attempt_started", "progress 0")
    ]
    assert runs == [1, 2]  # the report lost with its record ran again (the same key)
    news = {s["name"]: s["result"] for s in w2_steps["steps"] if s["name"].startswith(("progress", "report"))}
    assert news == {"progress 0": False, "progress 1": True, "report": True}  # the repeat was no news
    assert any(e["event"] == "resumed" and e["detail"]["replayed"] >= 3 for e in w2_history)
    assert [e["detail"]["branch"] for e in team if e["event"] == "attempt_started"] == ["w1", "w2"]
    assert _events(team).count(("step_completed", "plan")) == 1


async def _branch_is(servers: Servers, worker: str, status: str) -> bool:
    return bool((await _branch(servers, worker)).get("status") == status)


@SPLIT
async def test_the_team_killed_mid_dispatch_dispatches_the_rest_once(data_dir: Path, split: bool) -> None:
    """Killed while its start of w2 is not yet sent, w1 started and at work: the team's server alone
    when split (w1 goes on in the workers' server, its report failing while the team is down), else
    the one server. After the restart the lost branch runs again (``attempt_lost``, ``run: 2``, w1
    kept), w2 starts once, no part is written twice, and the run completes."""
    servers = Servers(data_dir, split=split, hang="dispatch")
    try:
        spec = {"task": "one two three four", "workers": ["w1", "w2"], "delays": {"w1": 1.0}}
        await _call(servers.team, "team", "t1", "start_workflow", "team", spec, "r1")
        await until(lambda: servers.hung("dispatch"), timeout=30, interval=0.05)
        await until(lambda: _branch_is(servers, "w1", "dispatched"), timeout=30, interval=0.05)
        servers.kill("team")
        if split:  # the workers' server lives on: w1 works, and its report finds no team

            async def report_failed() -> bool:
                w1 = await _history(servers.workers, "team_worker", "t1.w1", "r1:1:w1")
                return ("attempt_failed", "progress 0") in _events(w1)

            await until(report_failed, timeout=30, interval=0.1)
        servers.restart("team")
        run = await until(lambda: _finished(servers), timeout=60, interval=0.2)
        effects = await _effects(servers, "w1", "w2")
        team = await _history(servers.team, "team", "t1", "r1")
        w2 = await _history(servers.workers, "team_worker", "t1.w2", "r1:1:w2")
    finally:
        servers.stop()
    assert run["status"] == "completed"
    assert effects == {w: {f"r1:1:{w}": 2} for w in ("w1", "w2")}
    assert [(b["worker"], b["status"], b["attempt"], b["runs"]) for b in run["branches"]] == [
        ("w1", "completed", 1, 1),
        ("w2", "completed", 1, 2),
    ]
    assert _started(team) == [("w1", 1, []), ("w2", 1, []), ("w2", 2, ["w1"])]
    assert [e["detail"]["branch"] for e in team if e["event"] == "attempt_lost"] == ["w2"]
    assert _events(team).count(("step_completed", "plan")) == 1
    assert _events(w2).count(("started", None)) == 1


@SPLIT
async def test_a_cancel_acknowledged_reaches_every_worker_after_a_kill(data_dir: Path, split: bool) -> None:
    """Killed after the team acknowledged the cancel, with w1 cancelled and the cancel of w2 not yet
    sent: the team's server alone when split (w2 is still at work in the workers' server), else the
    one server. After the restart the cancel of w2 runs again (``attempt_lost``, ``run: 2``, w1 kept)
    and every worker ends cancelled, with no part written."""
    servers = Servers(data_dir, split=split, hang="cancel")
    try:
        spec = {"task": "one two three four", "workers": ["w1", "w2"], "delays": {"w1": 60, "w2": 60}}
        await _call(servers.team, "team", "t1", "start_workflow", "team", spec, "r1")
        for w in ("w1", "w2"):
            await until(partial(_branch_is, servers, w, "dispatched"), timeout=30, interval=0.05)
        acked = await _call(servers.team, "team", "t1", "cancel_run", "r1")
        assert acked["status"] == "cancelled"
        await until(lambda: servers.hung("cancel"), timeout=30, interval=0.05)
        await until(lambda: _worker_is(servers, "w1", "cancelled"), timeout=30, interval=0.05)
        servers.kill("team")
        if split:  # half done: w2 goes on until the team's cancel reaches it
            assert await _worker_is(servers, "w2", "waiting")
        servers.restart("team")
        for w in ("w1", "w2"):
            await until(partial(_worker_is, servers, w, "cancelled"), timeout=60, interval=0.2)
        run = await until(lambda: _cancel_done(servers), timeout=60, interval=0.2)
        cancel = await _history(servers.team, "team", "t1", run["cancel"]["id"])
        effects = await _effects(servers, "w1", "w2")
    finally:
        servers.stop()
    assert run["status"] == "cancelled"
    assert [(b["worker"], b["status"]) for b in run["branches"]] == [("w1", "cancelled"), ("w2", "cancelled")]
    assert run["cancel"]["workers"] == {
        "w1": {"status": "completed", "runs": 1},
        "w2": {"status": "completed", "runs": 2},
    }
    assert _started(cancel) == [("w1", 1, []), ("w2", 1, []), ("w2", 2, ["w1"])]
    assert [e["detail"]["branch"] for e in cancel if e["event"] == "attempt_lost"] == ["w2"]
    assert effects == {"w1": {}, "w2": {}}


async def _worker_is(servers: Servers, worker: str, status: str) -> bool:
    wid = f"r1:1:{worker}"
    got = await _call(servers.workers, "team_worker", f"t1.{worker}", "workflow_status", wid)
    return bool(got["status"] == status)


async def _cancel_done(servers: Servers) -> dict[str, Any] | None:
    run = await _run(servers)
    return run if run["cancel"] is not None and run["cancel"]["status"] == "completed" else None
