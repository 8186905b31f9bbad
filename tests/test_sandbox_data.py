"""``roost inspect | export | delete`` cover an agent's sandbox workspaces (offline, on real files)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from roost.agent.sandbox import digest_of
from roost.cli import main
from roost.storage import sandbox_path
from roost.testing import ActorKit
from tests.sandbox_app import KINDS


async def make_runs(data_dir: Path) -> tuple[str, str]:
    """One run completed (its workspace closed), one waiting for an approval (its workspace active)."""
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("ws_resumable", "d")
        done = await c.call("turn", orjson.dumps([["ws_append", {"line": "one"}]]).decode())
        assert done["status"] == "completed"
        waiting = await c.call(
            "turn",
            orjson.dumps(
                [["ws_append", {"line": "two"}], ["workspace_write", {"path": "out/a", "text": "a"}]]
            ).decode(),
        )
        assert waiting["waiting"] == "approval"
    return done["run_id"], waiting["run_id"]


async def test_inspect_and_export_show_each_runs_workspace(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done, waiting = await make_runs(data_dir)
    assert main(["inspect", "ws_resumable", "d", "--data", str(data_dir)]) == 0
    info = orjson.loads(capsys.readouterr().out)
    by_run = {w["run_id"]: w for w in info["workspaces"]}
    assert by_run[done]["status"] == "closed"
    assert by_run[waiting]["status"] == "active"
    assert by_run[waiting]["files"] == 3
    assert by_run[waiting]["disposition"] == "resumable"
    assert by_run[waiting]["permissions_profile"]["name"] == "notes"
    assert (data_dir / by_run[waiting]["directory"] / "notes" / "log.txt").read_text() == "two\n"
    out = tmp_path / "d.json"
    assert main(["export", "ws_resumable", "d", "--data", str(data_dir), "--out", str(out)]) == 0
    exported = orjson.loads(out.read_bytes())
    rows = {r["run_id"]: r for r in exported["tables"]["roost_agent_sandboxes"]}
    assert rows[done]["entries"]["notes/log.txt"] == [digest_of(b"one\n"), 4]
    assert rows[done]["snapshot_id"].startswith("sha256:")
    assert rows[waiting]["permissions_profile"]["read_only"] == ["src", "README.md"]
    assert rows[waiting]["updated_at"].endswith("+00:00")  # a time, as every time column


async def test_delete_removes_the_actors_workspaces(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await make_runs(data_dir)
    root = sandbox_path(data_dir, "ws_resumable", "d")
    assert len(list(root.iterdir())) == 1  # the active workspace (the closed one was removed at its end)
    other = sandbox_path(data_dir, "ws_resumable", "other")
    other.mkdir(parents=True)
    assert main(["delete", "ws_resumable", "d", "--data", str(data_dir), "--yes"]) == 0
    out = capsys.readouterr().out
    record = orjson.loads(out[out.index("{") :])
    assert record["workspaces_removed"] == 1
    assert not root.exists()
    assert other.exists()  # another actor's are not touched
