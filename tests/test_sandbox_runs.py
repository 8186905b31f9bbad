"""Sandbox workspaces of agent runs, in process (real SQLite files and directories, a fake clock):
the row beside the run, commits with completed steps, the execution gate, closing and continuing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from roost.agent.payloads import BlobStore
from roost.agent.sandbox import digest_of, load_snapshot
from roost.agent.workspaces import workspace_root
from roost.testing import ActorKit, KitConnection
from tests.agent_support import drive, event_types, events
from tests.sandbox_app import KINDS, MANIFEST


def plan(*calls: tuple[str, dict[str, Any]]) -> str:
    return orjson.dumps([list(c) for c in calls]).decode()


def workspace_events(c: KitConnection) -> list[dict[str, Any]]:
    return [e["payload"] for e in events(c) if e["event_type"] == "workspace"]


async def test_a_completed_steps_workspace_effect_commits_with_its_completion(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "a")
        reply = await c.call("turn", plan(("ws_append", {"line": "one"}), ("ws_append", {"line": "two"})))
        assert reply["status"] == "completed", reply
        run = await c.call("get_run", reply["run_id"])
    ws = run["workspace"]
    assert ws["run_id"] == reply["run_id"]
    assert ws["trace_id"] == run["trace_id"]
    assert ws["manifest_version"] == "v1"
    assert ws["disposition"] == "resumable"
    assert ws["permissions_profile"]["read_write"] == ["notes", "out"]
    assert ws["status"] == "closed"
    log = {e["path"]: e for e in ws["entries"]}["notes/log.txt"]
    assert log["digest"] == digest_of(b"one\ntwo\n")
    actions = [(p["action"], p["version"]) for p in workspace_events(c)]
    assert actions == [("materialised", 1), ("committed", 2), ("committed", 3), ("closed", 3)]
    committed = [p for p in workspace_events(c) if p["action"] == "committed"]
    assert all(p["written"]["paths"] == ["notes/log.txt"] for p in committed)
    # the run ended: its directory is gone, its final snapshot holds what it committed
    root = workspace_root(data_dir, "ws_resumable", "a")
    assert not (root / ws["sandbox_session_id"]).exists()
    snap = load_snapshot(BlobStore(data_dir / "blobs"), ws["snapshot_id"])
    assert snap["notes/log.txt"][0] == digest_of(b"one\ntwo\n")
    assert snap["src/app.py"][0] == next(e.digest for e in MANIFEST.entries if e.path == "src/app.py")


async def test_a_failed_steps_write_is_never_committed(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "f")
        reply = await c.call(
            "turn", plan(("ws_append", {"line": "one"}), ("ws_append_then_fail", {"line": "pending"}))
        )
        assert reply["status"] == "failed"
        run = await c.call("get_run", reply["run_id"])
    snap = load_snapshot(BlobStore(data_dir / "blobs"), run["workspace"]["snapshot_id"])
    assert snap["notes/log.txt"][0] == digest_of(b"one\n")  # not "one\npending\n"


async def test_workspace_write_passes_the_approval_gate_and_the_profile(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "g")
        reply = await c.call("turn", plan(("workspace_write", {"path": "src/app.py", "text": "evil"})))
        assert reply["waiting"] == "approval"  # workspace_write is mutating
        approval = next(e for e in events(c) if e["event_type"] == "approval_requested")["payload"]
        done = await c.call("approve", approval["approval_id"], "grant")
        assert done["status"] == "failed"
        assert "AccessDenied" in done["error"]
        assert "src/app.py" in done["error"]
        run = await c.call("get_run", reply["run_id"])
    app = {e["path"]: e for e in run["workspace"]["entries"]}["src/app.py"]
    assert app["digest"] == digest_of(b"print('app')\n")


async def test_an_escape_through_a_tool_fails_the_step(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "e")
        for path in ("../../../../etc/passwd", "/etc/passwd", "notes/../../x"):
            reply = await c.call("turn", plan(("workspace_read", {"path": path})))
            assert reply["status"] == "failed"
            assert "PathRefused" in reply["error"], reply


async def test_what_a_read_returns_passes_the_payload_policy(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "p")
        secret = "sk-live-0123456789abcdefghij"
        reply = await c.call(
            "turn",
            plan(
                ("workspace_write", {"path": "notes/key.txt", "text": f"key {secret}"}),
                ("workspace_read", {"path": "notes/key.txt"}),
            ),
        )
        approval = next(e for e in events(c) if e["event_type"] == "approval_requested")["payload"]
        done = await c.call("approve", approval["approval_id"], "grant")
        assert done["status"] == "completed"
        read = [e for e in events(c) if e["event_type"] == "tool_completed"][-1]["payload"]
        assert "[redacted]" in read["result"]["text"]
        assert secret not in orjson.dumps(events(c)).decode()
        assert reply["run_id"]


async def test_continue_run_restores_a_closed_workspace_from_its_final_snapshot(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "c")
        reply = await c.call(
            "turn",
            plan(("ws_append", {"line": "one"}), ("workspace_write", {"path": "out/r.md", "text": "r"})),
        )
        assert reply["waiting"] == "approval"
        await c.call("cancel", reply["turn_id"])
        card = (await c.call("get_run", reply["run_id"]))["workspace"]
        assert card["status"] == "closed"
        sid = card["sandbox_session_id"]
        assert not (workspace_root(data_dir, "ws_resumable", "c") / sid).exists()
        await c.call("continue_run", reply["run_id"])
        approval = [e for e in events(c) if e["event_type"] == "approval_requested"][-1]["payload"]
        done = await c.call("approve", approval["approval_id"], "grant")
        assert done["status"] == "completed", done
        await drive(kit, lambda: "turn_completed" in event_types(c))
        card = (await c.call("get_run", reply["run_id"]))["workspace"]
    reopened = [p for p in workspace_events(c) if p["action"] == "reopened"]
    assert len(reopened) == 1
    assert reopened[0]["reason"] == "the run continued"
    assert "notes/log.txt" in reopened[0]["restored"]["paths"]
    entries = {e["path"]: e["digest"] for e in card["entries"]}
    assert entries["notes/log.txt"] == digest_of(b"one\n")  # ws_append ran once: kept, not replayed
    assert entries["out/r.md"] == digest_of(b"r")
    starts = [e["payload"]["tool"] for e in events(c) if e["event_type"] == "tool_started"]
    assert starts.count("ws_append") == 1


async def test_a_symlink_swapped_in_between_steps_is_refused_and_nothing_outside_is_written(
    data_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "s")
        reply = await c.call(
            "turn",
            plan(("ws_append", {"line": "one"}), ("workspace_write", {"path": "notes/x.txt", "text": "x"})),
        )
        assert reply["waiting"] == "approval"
        card = (await c.call("get_run", reply["run_id"]))["workspace"]
        notes = data_dir / "sandboxes" / "ws_resumable"
        (notes,) = list(notes.glob(f"*/{card['sandbox_session_id']}/notes"))
        for f in notes.iterdir():
            f.unlink()
        notes.rmdir()
        notes.symlink_to(outside)  # swapped in while the run waits
        approval = next(e for e in events(c) if e["event_type"] == "approval_requested")["payload"]
        done = await c.call("approve", approval["approval_id"], "grant")
    assert done["status"] == "failed"
    assert "PathRefused" in done["error"]
    assert list(outside.iterdir()) == []


async def test_a_run_can_start_from_the_snapshot_its_session_left(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_session", "s")
        first = await c.call("turn", plan(("ws_append", {"line": "one"})), session_id="s1")
        second = await c.call("turn", plan(("ws_append", {"line": "two"})), session_id="s1")
        other = await c.call("turn", plan(("ws_append", {"line": "alone"})), session_id="s2")
        cards = [(await c.call("get_run", r["run_id"]))["workspace"] for r in (first, second, other)]

    def log(card: dict[str, Any]) -> str:
        return str({e["path"]: e["digest"] for e in card["entries"]}["notes/log.txt"])

    assert cards[0]["started_from"] is None
    assert cards[1]["started_from"] == cards[0]["snapshot_id"]
    assert log(cards[1]) == digest_of(b"one\ntwo\n")
    assert cards[2]["started_from"] is None  # another session starts from the manifest
    assert log(cards[2]) == digest_of(b"alone\n")
    materialised = [p for p in workspace_events(c) if p["action"] == "materialised"]
    assert [p["started_from"] for p in materialised] == [None, cards[0]["snapshot_id"], None]


async def test_a_directory_no_active_workspace_names_is_removed_when_the_next_run_starts(
    data_dir: Path,
) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "o")
        await c.call("turn", plan(("ws_append", {"line": "one"})))
        root = workspace_root(data_dir, "ws_resumable", "o")
        orphan = root / "sbx_left_by_a_rolled_back_turn"
        (orphan / "notes").mkdir(parents=True)
        (orphan / "notes" / "log.txt").write_text("pending")
        waiting = await c.call(
            "turn", plan(("ws_append", {"line": "two"}), ("workspace_write", {"path": "out/a", "text": "a"}))
        )
        assert waiting["waiting"] == "approval"
        card = (await c.call("get_run", waiting["run_id"]))["workspace"]
    assert sorted(p.name for p in root.iterdir()) == [card["sandbox_session_id"]]


async def test_a_run_that_ends_leaves_no_directory_of_its_actor(data_dir: Path) -> None:
    """Each run's directory is removed at its end, and the actor's folder with the last one (it
    was left empty, one per actor that ever ran a workspace)."""
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "a")
        for line in ("one", "two"):
            reply = await c.call("turn", plan(("ws_append", {"line": line})))
            assert reply["status"] == "completed"
    assert not workspace_root(data_dir, "ws_resumable", "a").exists()
