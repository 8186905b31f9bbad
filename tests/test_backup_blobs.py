"""Backups hold the blobs their actors reference, so a restored backup keeps its workspaces usable
(``roost.transport.backup``, ``roost.transport.collect.copy_blobs``), in process; a backup of a running
server restored after a SIGKILL is in ``tests/test_blob_gc_process.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson

from roost.agent.payloads import BlobStore
from roost.agent.sandbox import digest_of, load_snapshot
from roost.cli import main
from roost.testing import ActorKit
from tests.agent_support import events
from tests.sandbox_app import KINDS
from tests.test_blob_gc import blob_files, finish, referenced, row, waiting


async def test_a_restored_offline_backup_keeps_a_resumable_workspace_usable(
    data_dir: Path, tmp_path: Path
) -> None:
    """The backup holds the blobs its actors reference (not the garbage, not the sandbox
    directories); served as a data directory of its own, the active workspace is rebuilt from them and
    its run completes on what was committed."""
    async with ActorKit(KINDS, data_dir) as kit:
        await waiting(kit, "r")
    garbage = BlobStore(data_dir / "blobs").put(b"nobody's")[7:]
    out = tmp_path / "bak"
    assert main(["backup", "--data", str(data_dir), "--out", str(out)]) == 0
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["blobs"] == len(blob_files(out)) > 0
    assert manifest["blobs_missing"] == 0
    assert referenced(data_dir, "r") <= blob_files(out)
    assert garbage not in blob_files(out)
    assert not (out / "sandboxes").exists()
    shutil.rmtree(data_dir)  # the original is lost
    async with ActorKit(KINDS, out) as kit:
        c = await finish(kit, "r")
    reopened = [e["payload"] for e in events(c) if e["event_type"] == "workspace"][2]
    assert reopened["action"] == "reopened"
    assert reopened["restored"]["paths"] == ["README.md", "notes/log.txt", "src/app.py"]
    final = load_snapshot(BlobStore(out / "blobs"), row(out, "r")["snapshot_id"])
    assert final["notes/log.txt"][0] == digest_of(b"kept\n")
    assert final["out/r.md"][0] == digest_of(b"r")


async def test_a_backup_reports_a_reference_to_a_missing_blob(data_dir: Path, tmp_path: Path) -> None:
    """A reference that points at nothing already is counted in the manifest, and the command fails."""
    async with ActorKit(KINDS, data_dir) as kit:
        await waiting(kit, "m")
    lost = row(data_dir, "m")["entries"]["notes/log.txt"][0]
    BlobStore(data_dir / "blobs").path(lost[7:]).unlink()
    assert main(["backup", "--data", str(data_dir), "--out", str(tmp_path / "bak")]) == 1
    manifest = orjson.loads((tmp_path / "bak" / "manifest.json").read_bytes())
    assert manifest["blobs_missing"] == 1
    assert manifest["blobs_missing_examples"] == [lost]
    assert manifest["blobs"] > 0
