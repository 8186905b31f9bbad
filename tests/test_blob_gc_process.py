"""The blob store's collection and backup around real ``roost serve`` and ``roost gc`` processes, and
SIGKILLs: a run whose background step hangs with a write pending (``tests.sandbox_app``) keeps an
active ``resumable`` workspace; after the kill and a restart its next attempt rebuilds the
workspace from the blob store, so whatever the collection removed or the backup left out shows."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from roost.agent.payloads import BlobStore
from roost.agent.sandbox import digest_of, load_snapshot
from roost.cli import main
from roost.storage.blobs import Marks, mark_blobs
from roost.testing import connect, until
from roost.transport.collect import actor_files, mark_file
from tests.support import ROOT, server_process
from tests.test_blob_gc import age, blob_files
from tests.test_sandbox_process import APP, PLAN, WAIT, is_event

pytestmark = pytest.mark.slow

KIND, NAME = "ws_resumable", "k"
GARBAGE = 5000


async def hung_run(data_dir: Path, env: dict[str, str], marker: Path) -> Any:
    """A server on ``data_dir`` running PLAN until its background step hangs (the write of "two"
    pending): the server, still running, and the run's reply."""
    srv = server_process(data_dir, app=APP, env=env)
    server = srv.__enter__()
    async with connect(f"{server.ws}/agents/{KIND}/{NAME}") as peer:
        await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
        reply = await peer.call("turn", PLAN, timeout=WAIT)
        assert reply["status"] == "in_progress"
    await until(marker.exists, timeout=WAIT, interval=0.02, message="the job did not write")
    return srv, server, reply


async def completes(data_dir: Path, env: dict[str, str], run_id: str) -> dict[str, Any]:
    """Serve ``data_dir`` again: the job's next attempt reopens the workspace from the blob store
    and the run completes. Its workspace card, and the run's workspace events."""
    with server_process(data_dir, app=APP, env=env) as srv:
        async with connect(f"{srv.ws}/agents/{KIND}/{NAME}?cursor=0") as peer:
            await peer.wait_for(is_event("turn_completed"), WAIT)
            run = await peer.call("get_run", run_id, timeout=WAIT)
    assert run["status"] == "completed", run
    card: dict[str, Any] = run["workspace"]
    snap = load_snapshot(BlobStore(data_dir / "blobs"), card["snapshot_id"])
    assert snap["notes/log.txt"][0] == digest_of(b"one\ntwo\nthree\n")
    card["events"] = [
        f["event"]["payload"]
        for f in peer.frames
        if f.get("type") == "event" and f["event"]["event_type"] == "workspace"
    ]
    return card


def referenced(data_dir: Path) -> set[str]:
    """What the actor files reference, transitively (stored or not)."""
    marks = Marks()
    try:
        for path in actor_files(data_dir):
            mark_file(data_dir, path, marks)
        mark_blobs(data_dir / "blobs", marks)
        return set(marks.digests())
    finally:
        marks.close()


def garbage(data_dir: Path, n: int) -> set[str]:
    store = BlobStore(data_dir / "blobs")
    return {store.put(f"nobody's {i}".encode())[7:] for i in range(n)}


async def test_sigkill_of_a_collection_removes_nothing_still_referenced(
    data_dir: Path, tmp_path: Path
) -> None:
    """``roost gc`` is SIGKILLed while it sweeps thousands of unreferenced blobs: every referenced
    blob is still there, a second collection finishes the work, and the workspace the server was
    killed in is rebuilt from the blob store: the run completes with each line once."""
    marker = tmp_path / "marker"
    env = {"SANDBOX_MARKER": str(marker)}
    srv, server, reply = await hung_run(data_dir, env, marker)
    server.kill()  # SIGKILL: "two" pending in the directory, "one" committed
    srv.__exit__(None, None, None)
    junk = garbage(data_dir, GARBAGE)
    age(data_dir)  # every blob is old: only its references keep it
    kept = referenced(data_dir)
    assert kept
    assert not kept & junk
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    gc = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-m", "roost.cli", "gc", "--data", str(data_dir)],
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        await until(
            lambda: gc.poll() is not None or len(blob_files(data_dir) & junk) < GARBAGE,
            timeout=WAIT,
            interval=0.005,
            message="the collection removed nothing",
        )
    finally:
        if gc.poll() is None:
            os.killpg(gc.pid, signal.SIGKILL)
        gc.wait(10)
    assert kept <= blob_files(data_dir)  # killed or not, nothing referenced went
    assert await asyncio.to_thread(main, ["gc", "--data", str(data_dir)]) == 0
    assert blob_files(data_dir) == kept
    card = await completes(data_dir, env, reply["run_id"])
    reopened = next(p for p in card["events"] if p["action"] == "reopened")
    assert reopened["reverted"]["paths"] == ["notes/log.txt"]  # "two", pending, put back from "one"


async def test_a_collection_while_serving_keeps_what_live_actors_reference(
    data_dir: Path, tmp_path: Path
) -> None:
    """``roost gc --server``: the live actor is marked inside one of its turns; the unreferenced
    blobs go, the referenced stay (all of them old), and the run completes after a SIGKILL."""
    marker = tmp_path / "marker"
    env = {"SANDBOX_MARKER": str(marker)}
    srv, server, reply = await hung_run(data_dir, env, marker)
    try:
        junk = garbage(data_dir, 20)
        age(data_dir)
        assert await asyncio.to_thread(main, ["gc", "--data", str(data_dir)]) == 1  # held: refused
        assert junk <= blob_files(data_dir)
        assert await asyncio.to_thread(main, ["gc", "--data", str(data_dir), "--server", server.http]) == 0
        left = blob_files(data_dir)
        assert not left & junk
    finally:
        server.kill()
        srv.__exit__(None, None, None)
    assert left == referenced(data_dir) != set()
    await completes(data_dir, env, reply["run_id"])


async def test_a_backup_while_serving_restores_a_usable_resumable_workspace(
    data_dir: Path, tmp_path: Path
) -> None:
    """``roost backup --server`` while the run is in progress, the server SIGKILLed and its data
    directory lost; served from the backup, the workspace (no directory in the backup) is rebuilt
    from the backup's blobs at the job's next attempt, and the run completes."""
    marker = tmp_path / "marker"
    env = {"SANDBOX_MARKER": str(marker)}
    srv, server, reply = await hung_run(data_dir, env, marker)
    try:
        argv = ["backup", "--data", str(data_dir), "--out", "live", "--server", server.http]
        assert await asyncio.to_thread(main, argv) == 0
    finally:
        server.kill()
        srv.__exit__(None, None, None)
    restored = tmp_path / "restored"
    shutil.copytree(data_dir.parent / "backups" / "live", restored)
    shutil.rmtree(data_dir)
    assert not (restored / "sandboxes").exists()
    card = await completes(restored, env, reply["run_id"])
    reopened = next(p for p in card["events"] if p["action"] == "reopened")
    assert reopened["restored"]["paths"] == ["README.md", "notes/log.txt", "src/app.py"]  # no directory


async def test_sigkill_of_a_server_collecting_removes_nothing_still_referenced(
    data_dir: Path, tmp_path: Path
) -> None:
    """The server is SIGKILLed while its ``POST /admin/gc`` sweeps: the command reports no answer,
    every referenced blob is still there, and after a restart the run completes on its workspace."""
    marker = tmp_path / "marker"
    env = {"SANDBOX_MARKER": str(marker)}
    srv, server, reply = await hung_run(data_dir, env, marker)
    try:
        junk = garbage(data_dir, GARBAGE)
        age(data_dir)
        argv = ["gc", "--data", str(data_dir), "--server", server.http]
        asked = asyncio.ensure_future(asyncio.to_thread(main, argv))
        await until(
            lambda: asked.done() or len(blob_files(data_dir) & junk) < GARBAGE,
            timeout=WAIT,
            interval=0.005,
            message="the collection removed nothing",
        )
    finally:
        server.kill()
        srv.__exit__(None, None, None)
    assert await asked in (0, 1)  # 1: no answer, the server died mid-sweep
    left = len(blob_files(data_dir) & junk)
    assert left < GARBAGE  # the collection ran
    kept = referenced(data_dir)  # stored or not
    assert kept
    assert not kept & junk
    assert kept <= blob_files(data_dir)
    await completes(data_dir, env, reply["run_id"])
