"""Sandbox workspaces through a SIGKILL of a real ``roost serve`` process, one test per disposition.

The plan is three appends to ``notes/log.txt``: ``one`` inline, ``two`` as a background job whose
first attempt hangs after its write (the server is killed there, the write pending), ``three``
inline. After the restart nobody intervenes: the job's lease expires, attempt 2 finds the workspace
not as last committed and applies the disposition, and the run completes. The effects are counted
twice: in the workspace (each line once) and in a file outside it (how often each step ran).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from roost.agent.payloads import BlobStore
from roost.agent.sandbox import digest_of, load_snapshot
from roost.agent.workspaces import workspace_root
from roost.storage import actor_path
from roost.testing import WsClient, connect, until
from tests.support import server_process

pytestmark = pytest.mark.slow

WAIT = 30.0
APP = "tests.sandbox_app:app"
PLAN = orjson.dumps(
    [["ws_append", {"line": "one"}], ["ws_append_slow", {"line": "two"}], ["ws_append", {"line": "three"}]]
).decode()


def events(peer: WsClient) -> list[dict[str, Any]]:
    return [f["event"] for f in peer.frames if f.get("type") == "event"]


def is_event(kind: str) -> Any:
    return lambda f: f.get("type") == "event" and f["event"]["event_type"] == kind


def effects(path: Path) -> list[tuple[str, str, str]]:
    """(item, attempt, line) of every step execution, in order."""
    return [tuple(line.split(" ")) for line in path.read_text().splitlines()]  # type: ignore[misc]


def workspace_row(data_dir: Path, kind: str, name: str) -> dict[str, Any]:
    conn = sqlite3.connect(actor_path(data_dir, kind, name))
    conn.row_factory = sqlite3.Row
    try:
        return dict(conn.execute("SELECT * FROM roost_agent_sandboxes").fetchone())
    finally:
        conn.close()


EXPECTED_LOG = {
    "resumable": b"one\ntwo\nthree\n",
    "snapshot": b"one\ntwo\nthree\n",
    # recreate: the workspace after the restart is the manifest's; "one"'s step is not re-run
    "recreate": b"two\nthree\n",
}


@pytest.mark.parametrize("disposition", ["resumable", "snapshot", "recreate"])
async def test_sigkill_with_a_pending_workspace_write_the_run_completes_and_no_write_survives_twice(
    data_dir: Path, tmp_path: Path, disposition: str
) -> None:
    kind, name = f"ws_{disposition}", "k"
    marker, effects_file = tmp_path / "marker", tmp_path / "effects.txt"
    env = {"SANDBOX_MARKER": str(marker), "SANDBOX_EFFECTS": str(effects_file)}
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/{kind}/{name}") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            reply = await peer.call("turn", PLAN, timeout=WAIT)
            assert reply["status"] == "in_progress"
            await until(marker.exists, timeout=WAIT, interval=0.02, message="the job did not write")
            srv.kill()  # SIGKILL: "two" is written in the directory, not committed
    row = workspace_row(data_dir, kind, name)
    directory = data_dir / row["directory"]
    assert (directory / "notes" / "log.txt").read_bytes() == b"one\ntwo\n"  # the pending write
    assert orjson.loads(row["entries"])["notes/log.txt"][0] == digest_of(b"one\n")  # the commit
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/{kind}/{name}?cursor=0") as peer:
            await peer.wait_for(is_event("turn_completed"), WAIT)
            run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
    assert run["status"] == "completed"
    card = run["workspace"]
    assert card["status"] == "closed"
    snap = load_snapshot(BlobStore(data_dir / "blobs"), card["snapshot_id"])
    assert snap["notes/log.txt"][0] == digest_of(EXPECTED_LOG[disposition])  # "two" once
    assert card["reopened"] == 1
    # how often each step ran: "one" and "three" once (completed steps are never re-run), "two" twice
    ran = effects(effects_file)
    assert [(line, attempt) for _, attempt, line in ran] == [
        ("one", "1"),
        ("two", "1"),
        ("two", "2"),
        ("three", "1"),
    ]
    # the history: what was kept and what was replayed
    evs = events(peer)
    completed = [e["payload"]["result"]["appended"] for e in evs if e["event_type"] == "tool_completed"]
    assert completed == ["one", "two", "three"]
    ws = [e["payload"] for e in evs if e["event_type"] == "workspace"]
    assert [p["action"] for p in ws] == [
        "materialised",
        "committed",
        "reopened",
        "committed",
        "committed",
        "closed",
    ]
    reopened = ws[2]
    assert reopened["disposition"] == disposition
    if disposition == "resumable":
        assert reopened["reverted"]["paths"] == ["notes/log.txt"]  # the pending write, put back
        assert reopened["kept"]["paths"] == ["README.md", "src/app.py"]
    elif disposition == "snapshot":
        assert reopened["restored"]["paths"] == ["README.md", "notes/log.txt", "src/app.py"]
        assert reopened["snapshot_id"] == ws[1]["snapshot_id"]  # the snapshot of the last commit
    else:
        assert reopened["discarded"]["paths"] == ["notes/log.txt"]  # "one", committed, then dropped
    assert not (workspace_root(data_dir, kind, name) / card["sandbox_session_id"]).exists()


async def test_sigkill_inside_a_turn_puts_back_its_pending_writes_before_the_call_is_retried(
    data_dir: Path, tmp_path: Path
) -> None:
    """The approved turn writes ``out/a`` and a line ``two``, then is killed: its rows are rolled
    back, its writes are on disk. After the restart the client sends its unanswered ``approve``
    again; the workspace is put back to the last commit first (``out/a`` removed, the log reverted),
    so the steps run again on it and every write lands once."""
    kind, name = "ws_resumable", "inline"
    marker, effects_file = tmp_path / "marker", tmp_path / "effects.txt"
    env = {"SANDBOX_INLINE_MARKER": str(marker), "SANDBOX_EFFECTS": str(effects_file)}
    plan = orjson.dumps(
        [
            ["ws_append", {"line": "one"}],
            ["workspace_write", {"path": "out/a", "text": "a"}],
            ["ws_append_hang", {"line": "two"}],
        ]
    ).decode()
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/{kind}/{name}") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            reply = await peer.call("turn", plan, timeout=WAIT)
            assert reply["waiting"] == "approval"
            approval = (await peer.wait_for(is_event("approval_requested"), WAIT))["event"]["payload"]
            pending = asyncio.ensure_future(
                peer.call("approve", approval["approval_id"], "grant", timeout=WAIT)
            )
            await until(marker.exists, timeout=WAIT, interval=0.02, message="the turn did not write")
            srv.kill()  # SIGKILL inside the approve turn: out/a and "two" written, nothing committed
            with contextlib.suppress(Exception):
                await pending
    row = workspace_row(data_dir, kind, name)
    directory = data_dir / row["directory"]
    assert (directory / "out" / "a").read_text() == "a"  # pending writes on disk
    assert (directory / "notes" / "log.txt").read_text() == "one\ntwo\n"
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/{kind}/{name}?cursor=0") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            done = await peer.call("approve", approval["approval_id"], "grant", timeout=WAIT)  # the retry
            assert done["status"] == "completed", done
            run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
    entries = {e["path"]: e["digest"] for e in run["workspace"]["entries"]}
    assert entries["notes/log.txt"] == digest_of(b"one\ntwo\n")  # "two" once
    assert entries["out/a"] == digest_of(b"a")
    lines = [line for _, _, line in effects(effects_file)]
    assert lines == ["one", "two", "two"]  # "one" completed before: kept, never run again
    evs = events(peer)
    ws = [e["payload"] for e in evs if e["event_type"] == "workspace"]
    reopened = [p for p in ws if p["action"] == "reopened"]
    assert len(reopened) == 1
    assert reopened[0]["reverted"]["paths"] == ["notes/log.txt"]
    assert "out/a" in reopened[0]["removed"]["paths"]
    starts = [e["payload"]["tool"] for e in evs if e["event_type"] == "tool_started"]
    assert starts.count("ws_append") == 1
