"""The collection of the blob store, in process (real SQLite files, real blob files, agents with
sandbox workspaces): ``roost.storage.blobs``, ``roost.transport.collect``. The SIGKILL cases and a
collection while serving are in ``tests/test_blob_gc_process.py``; backups in
``tests/test_backup_blobs.py``."""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from roost.agent.payloads import BlobStore
from roost.agent.sandbox import digest_of, load_snapshot
from roost.cli import main
from roost.storage import ActorLocked, actor_path
from roost.storage.blobs import GRACE, LOCK_FILE, Marks, mark_blobs, mark_bytes, sweep
from roost.testing import ActorKit, KitConnection, until
from roost.transport import admin
from roost.transport.collect import CollectionRefused, collect_offline
from tests.agent_support import drive, event_types, events
from tests.sandbox_app import KINDS, MANIFEST

KIND = "ws_resumable"


def plan(*calls: tuple[str, dict[str, Any]]) -> str:
    return orjson.dumps([list(c) for c in calls]).decode()


FINISHED = plan(("ws_append", {"line": "one"}), ("ws_append", {"line": "two"}))
#: One committed step, then a mutating one waiting for approval: the workspace stays active.
WAITING = plan(("ws_append", {"line": "kept"}), ("workspace_write", {"path": "out/r.md", "text": "r"}))


def blob_files(data: Path) -> set[str]:
    """The names of the files under ``data/blobs`` but its lock (directories a collection removes
    meanwhile are passed over)."""
    return {n for _, _, files in os.walk(data / "blobs") for n in files if n != LOCK_FILE}


def age(data: Path, seconds: float = 2 * GRACE) -> None:
    """Every blob stored ``seconds`` ago (older than the grace period)."""
    old = time.time() - seconds
    for p in (data / "blobs").rglob("*"):
        if p.is_file():
            os.utime(p, (old, old))


def hexes(*contents: bytes) -> set[str]:
    return {digest_of(c)[7:] for c in contents}


def manifest_blobs() -> set[str]:
    return {e.digest[7:] for e in MANIFEST.entries}


def row(data: Path, name: str) -> dict[str, Any]:
    conn = sqlite3.connect(actor_path(data, KIND, name))
    conn.row_factory = sqlite3.Row
    try:
        found = dict(conn.execute("SELECT * FROM roost_agent_sandboxes").fetchone())
    finally:
        conn.close()
    found["entries"] = orjson.loads(found["entries"])
    return found


def referenced(data: Path, name: str) -> set[str]:
    """What the workspace row of actor ``name`` names: entries, snapshot, manifest, and the snapshot's."""
    r = row(data, name)
    out = {e[0][7:] for e in r["entries"].values()}
    out |= {r["snapshot_id"][7:], r["manifest_ref"][7:]}
    out |= {e[0][7:] for e in load_snapshot(BlobStore(data / "blobs"), r["snapshot_id"]).values()}
    return out


async def waiting(kit: ActorKit, name: str) -> tuple[KitConnection, dict[str, Any]]:
    c = kit.connect(KIND, name)
    reply = await c.call("turn", WAITING)
    assert reply["waiting"] == "approval", reply
    return c, reply


async def finish(kit: ActorKit, name: str) -> KitConnection:
    """Approve the waiting step of actor ``name``: its run completes on its workspace."""
    c = kit.connect(KIND, name, cursor=0)
    await drive(kit, lambda: "approval_requested" in event_types(c))
    approval = [e for e in events(c) if e["event_type"] == "approval_requested"][-1]["payload"]
    done = await c.call("approve", approval["approval_id"], "grant")
    assert done["status"] == "completed", done
    return c


async def test_a_blob_is_removed_only_when_no_actors_file_references_it(data_dir: Path) -> None:
    """Blobs are keyed by content: ``a`` and ``b`` ran the same steps, so they share every blob, and
    ``c`` shares the manifest's. Deleting ``a`` frees nothing ``b`` or ``c`` still use; deleting ``b``
    frees what only it used; the garbage of no one, and a workspace file's replaced content, go at the
    first collection."""
    async with ActorKit(KINDS, data_dir) as kit:
        for name in ("a", "b"):
            reply = await kit.connect(KIND, name).call("turn", FINISHED)
            assert reply["status"] == "completed"
        await waiting(kit, "c")
    store = BlobStore(data_dir / "blobs")
    garbage = {store.put(f"nobody's {i}".encode())[7:] for i in range(3)}
    age(data_dir)
    used_by_b, used_by_c = referenced(data_dir, "b"), referenced(data_dir, "c")
    assert referenced(data_dir, "a") == used_by_b
    assert hexes(b"one\ntwo\n") <= used_by_b - used_by_c
    assert manifest_blobs() - hexes(b"") <= used_by_b & used_by_c  # b's log is no longer empty

    admin.delete_actor(data_dir, KIND, "a")
    report = collect_offline(data_dir)
    # the garbage, and "one\n": the log as of the first step, replaced by the second in a and b
    assert report["removed"] == len(garbage) + 1
    assert report["missing"] == 0
    assert blob_files(data_dir) >= used_by_b | used_by_c
    assert not blob_files(data_dir) & (garbage | hexes(b"one\n"))

    admin.delete_actor(data_dir, KIND, "b")
    report = collect_offline(data_dir)
    assert report["removed"] > 0
    assert blob_files(data_dir) >= used_by_c
    assert not blob_files(data_dir) & (used_by_b - used_by_c)  # "one\ntwo\n", b's snapshots
    assert manifest_blobs() <= blob_files(data_dir)  # still c's

    async with ActorKit(KINDS, data_dir) as kit:  # c's workspace is whole: its run completes on it
        await finish(kit, "c")
    assert (store.get(row(data_dir, "c")["entries"]["out/r.md"][0])) == b"r"

    admin.delete_actor(data_dir, KIND, "c")
    assert collect_offline(data_dir)["young"] > 0  # what c's last run stored: within the grace period
    age(data_dir)
    collect_offline(data_dir)
    assert blob_files(data_dir) == set()  # nobody left: nothing kept


async def test_a_blob_stored_again_during_a_collection_is_kept(tmp_path: Path, marks: Marks) -> None:
    """The mark read the actor before its commit (nothing marked); the commit's ``put`` of content
    already stored comes before the sweep: the blob is fresh again and kept. A blob nobody stored
    again goes."""
    root = tmp_path / "blobs"
    store = BlobStore(root)
    again, gone = store.put(b"snapshot"), store.put(b"old")
    age(tmp_path)
    started = time.time()
    assert store.put(b"snapshot") == again  # a snapshot written meanwhile, of the same content
    swept = sweep(root, marks, started - GRACE)
    assert (swept.removed, swept.young) == (1, 1)
    assert store.get(again) == b"snapshot"
    assert not store.path(gone[7:]).exists()


@pytest.fixture
def marks() -> Iterator[Marks]:
    """A mark set for a test, closed after it (an unclosed SQLite connection warns on 3.13)."""
    made = Marks()
    yield made
    made.close()


def _blocked_on(path: Path) -> bool:
    """Whether some process waits for an ``flock`` on ``path`` (``/proc/locks``: a ``->`` line)."""
    inode = str(os.stat(path).st_ino)
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if len(parts) > 6 and parts[1] == "->" and parts[2] == "FLOCK" and parts[6].split(":")[-1] == inode:
            return True
    return False


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
async def test_a_removal_waits_for_a_put_in_progress_and_keeps_what_it_stored(
    tmp_path: Path, marks: Marks
) -> None:
    """A ``put`` holds the store's lock shared while it makes an old blob fresh; the sweep, come to
    that blob meanwhile, waits for the lock, then finds it fresh and keeps it."""
    root = tmp_path / "blobs"
    store = BlobStore(root)
    ref = store.put(b"snapshot")
    age(tmp_path)
    fd = store.locked(fcntl.LOCK_SH)  # a put of the same content, in progress
    swept = asyncio.ensure_future(asyncio.to_thread(sweep, root, marks, time.time() - GRACE))
    try:
        await until(lambda: _blocked_on(root / LOCK_FILE), timeout=10, message="the sweep did not wait")
        os.utime(store.path(ref[7:]))  # what the put does under the lock
    finally:
        os.close(fd)
    assert (await swept).young == 1
    assert store.get(ref) == b"snapshot"


def test_what_a_marked_blob_names_is_marked(tmp_path: Path, marks: Marks) -> None:
    """A snapshot names its files' blobs, a whole payload its heavy strings: marked in turn, to any
    depth; a reference to nothing is reported, not fatal."""
    root = tmp_path / "blobs"
    store = BlobStore(root)
    leaf = store.put(b"leaf")
    middle = store.put(orjson.dumps({"entries": {"a": [leaf, 4]}, "lost": "sha256:" + "0" * 64}))
    top = store.put(orjson.dumps({"$blob": middle, "json": True}))
    other = store.put(b"other")
    marks.add([top[7:]])
    missing = mark_blobs(root, marks)
    assert (missing.count, missing.examples) == (1, ["sha256:" + "0" * 64])
    assert all(marks.has(r[7:]) for r in (top, middle, leaf))
    assert not marks.has(other[7:])


def test_a_reference_cut_by_a_chunk_boundary_is_marked(marks: Marks) -> None:
    ref = b"sha256:" + b"ab" * 32
    mark_bytes([b"x" * 10 + ref[:20], ref[20:] + b"y"], marks)
    assert marks.has("ab" * 32)
    assert marks.count() == 1


async def test_a_collection_removes_nothing_when_an_actor_file_cannot_be_marked(data_dir: Path) -> None:
    """An actor held by a running server, or a file SQLite cannot read: its references are unknown,
    so the collection stops before removing anything."""
    async with ActorKit(KINDS, data_dir) as kit:
        await waiting(kit, "held")
        store = BlobStore(data_dir / "blobs")
        garbage = store.put(b"nobody's")[7:]
        age(data_dir)
        with pytest.raises(ActorLocked):
            collect_offline(data_dir)
        assert garbage in blob_files(data_dir)
        assert main(["gc", "--data", str(data_dir)]) == 1
        assert garbage in blob_files(data_dir)
    damaged = actor_path(data_dir, KIND, "damaged")
    damaged.parent.mkdir(parents=True, exist_ok=True)
    damaged.write_bytes(b"not a database, but long enough to look like one's header" * 4)
    with pytest.raises(CollectionRefused, match="nothing was removed"):
        collect_offline(data_dir)
    assert garbage in blob_files(data_dir)
    damaged.unlink()
    assert main(["gc", "--data", str(data_dir), "--dry-run"]) == 0
    assert garbage in blob_files(data_dir)
    assert main(["gc", "--data", str(data_dir)]) == 0
    assert garbage not in blob_files(data_dir)
    assert referenced(data_dir, "held") <= blob_files(data_dir)
