"""The docs agent against real ``roost serve`` processes: over a WebSocket, and through a SIGKILL."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from roost.testing import WsClient, connect, until
from tests.support import server_process

pytestmark = pytest.mark.slow

REQUEST = "analyze the documents and make a report"
CONFIG = """
[agent]
heartbeat_interval = 0.25
lease_ttl = 1.0
[agent.tools.analyze_documents]
delay_s = 0.4
"""


#: Waits are long: the agent's tools take their time in another process.
WAIT = 20.0


def events(peer: WsClient) -> list[dict[str, Any]]:
    return [f["event"] for f in peer.frames if f.get("type") == "event"]


def types(peer: WsClient) -> list[str]:
    return [e["event_type"] for e in events(peer)]


def has_event(kind: str, **payload: Any) -> Any:
    def match(frame: dict[str, Any]) -> bool:
        if frame.get("type") != "event" or frame["event"]["event_type"] != kind:
            return False
        return all(frame["event"]["payload"].get(k) == v for k, v in payload.items())

    return match


def workers(data_dir: Path) -> dict[int, int]:
    """pid → running jobs, as each worker process last reported it in the directory."""
    conn = sqlite3.connect(data_dir / "directory.sqlite", timeout=5)
    try:
        return dict(conn.execute("SELECT pid, running_jobs FROM workers").fetchall())
    finally:
        conn.close()


async def test_docs_flow_over_a_websocket_every_event_in_order(data_dir: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text(CONFIG)
    with server_process(data_dir, "--config", str(cfg)) as srv:
        async with connect(f"{srv.ws}/agents/docs/acme") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            reply = await peer.call("turn", REQUEST, timeout=WAIT)
            approval = await peer.wait_for(has_event("approval_requested"), WAIT)
            await peer.call("approve", approval["event"]["payload"]["approval_id"], "grant", timeout=WAIT)
            await peer.wait_for(has_event("turn_completed"), WAIT)
            run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
        timeline = types(peer)
        assert timeline[:4] == ["turn_started", "plan_ready", "tool_started", "tool_completed"]
        assert timeline.count("tool_progress") == 7
        assert timeline[-7:] == [
            "approval_requested",
            "approval_granted",
            "tool_started",
            "tool_completed",
            "verification_started",
            "verification_completed",
            "turn_completed",
        ]
        seqs = [f["seq"] for f in peer.frames if f.get("type") == "event"]
        assert seqs == list(range(1, len(seqs) + 1))  # none missing, none repeated
        assert run["verification_result"] == "pass"
        # a second client replays the same timeline from the log
        async with connect(f"{srv.ws}/agents/docs/acme?cursor=0") as late:
            await late.wait_for(has_event("turn_completed"), WAIT)
            assert types(late) == timeline


async def test_sigkill_during_analyze_resumes_alone_and_writes_the_report_once(
    data_dir: Path, tmp_path: Path
) -> None:
    """SIGKILL during ``analyze_documents``; the server restarts with no client connected: the lease
    expires, the scheduler wakes the agent, attempt 2 runs to the end. ``collect_documents`` does not
    run again; after approval the report is written exactly once."""
    cfg = tmp_path / "roost.toml"
    cfg.write_text(CONFIG)
    with server_process(data_dir, "--config", str(cfg)) as srv:
        async with connect(f"{srv.ws}/agents/docs/acme") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            reply = await peer.call("turn", REQUEST, timeout=WAIT)
            await peer.wait_for(has_event("tool_progress", done=2), WAIT)
            srv.kill()  # SIGKILL, mid-analysis
    with server_process(data_dir, "--config", str(cfg)) as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        # no client: only the directory tells us, by the new worker's heartbeats
        await until(
            lambda: workers(data_dir).get(pid, 0) >= 1,
            timeout=10,
            interval=0.05,
            message="the job did not resume in the new process",
        )
        await until(
            lambda: workers(data_dir).get(pid) == 0,
            timeout=15,
            interval=0.05,
            message="the resumed job did not finish in the new process",
        )
        async with connect(f"{srv.ws}/agents/docs/acme?cursor=0") as peer:
            approval = await peer.wait_for(has_event("approval_requested"), WAIT)
            starts = [e["payload"] for e in events(peer) if e["event_type"] == "tool_started"]
            assert [s["tool"] for s in starts] == [
                "collect_documents",
                "analyze_documents",
                "analyze_documents",
            ]
            assert starts[2]["attempt"] == 2
            lost = [e["payload"] for e in events(peer) if e["event_type"] == "tool_failed"]
            assert lost[0]["error"] == "lease expired (worker lost)"
            await peer.call("approve", approval["event"]["payload"]["approval_id"], "grant", timeout=WAIT)
            await peer.wait_for(has_event("turn_completed"), WAIT)
            turn = await peer.call("get_turn", reply["turn_id"], timeout=WAIT)
            assert [i["runs"] for i in turn["items"]] == [1, 1, 1]  # the retry is a job attempt
            # attempt 2 went on from attempt 1's checkpoint: documents already analysed were not read again
            second = [
                e["payload"]
                for e in events(peer)
                if e["event_type"] == "tool_progress" and e["payload"]["attempt"] == 2
            ]
            assert second[0]["message"] == "resuming"
            assert second[0]["done"] >= 2
            reports = [
                e["payload"]
                for e in events(peer)
                if e["event_type"] == "tool_completed" and e["payload"]["tool"] == "generate_report"
            ]
            assert len(reports) == 1  # the report step completed once
            assert reports[0]["result"]["written"] is True  # and it wrote the file (once: no other run)
            run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
            assert [(j["tool"], j["attempt"], j["status"]) for j in run["jobs"]] == [
                ("analyze_documents", 2, "completed")
            ]
            assert turn["items"][2]["result"]["written"] is True
            assert (run["workflow"]["status"], run["workflow"]["last_step"]["name"]) == (
                "completed",
                "verify",
            )
            page = await peer.call("run_history", reply["run_id"], 0, 500, timeout=WAIT)
            done = [e["name"] for e in page["entries"] if e["event"] == "step_completed"]
            collect = turn["items"][0]["item_id"]
            assert done.count("model:0:0") == done.count(f"item:{collect}:0") == 1  # kept, not redone
            replays = [e["detail"]["replayed"] for e in page["entries"] if e["event"] == "resumed"]
            assert replays
            assert min(replays) >= 2  # after the kill too, the kept steps were replayed
            seqs = [f["seq"] for f in peer.frames if f.get("type") == "event"]
            assert seqs == list(range(1, len(seqs) + 1))
    reports = [p for p in (data_dir / "reports").rglob("*") if p.is_file()]
    assert len(reports) == 1
    assert reports[0].name == f"{reply['run_id']}.md"
    assert reports[0].stat().st_size == turn["items"][2]["result"]["bytes"]
