"""Backups of a data directory: SQLite's online backup of every actor's file and of the directory
into a new directory, then the blobs those copies reference (``blobs/``, :func:`copy_blobs`), with a
``manifest.json`` (counts, ``integrity_check`` of every copy, the blobs copied and any missing).

**A restored backup keeps its workspaces usable**: the sandbox directories (``DATA/sandboxes``) are
not copied, since every disposition rebuilds one from the blob store when a step opens it in a new
process — ``resumable`` from the committed entries, ``snapshot`` from the last snapshot,
``recreate`` from the manifest — and a closed workspace is a snapshot already. What a step had
written and not committed is not in the backup (it is never trusted: the step runs again).

- :func:`backup_offline`: a data directory no server holds (the CLI, ``roost backup``); each file is
  copied under its own exclusive lock (:func:`roost.transport.admin.locked_file`), so a held actor
  raises ``ActorLocked``.
- :func:`backup_online`: a running server's (``POST /admin/backup``): each actor copied inside one
  of its turns, between two commits (:func:`copy_database` in a thread while the turn waits).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors import RpcError
from roost.storage import ActorLocked, Directory, actor_path
from roost.transport.admin import listed_actors, locked_file
from roost.transport.collect import copy_blobs, in_turn_thread

if TYPE_CHECKING:
    from roost.actors import Actor, Registry

__all__ = ["BackupStopped", "backup_offline", "backup_online", "copy_database"]

#: Pages copied per backup step: between steps, a stop asked for by the turn's timeout is seen.
_BACKUP_STEP = 1024


class BackupStopped(Exception):
    """The copy was stopped between two steps (the turn it ran in timed out or was cancelled)."""


def copy_database(src: sqlite3.Connection, target: Path, stop: threading.Event | None = None) -> str:
    """Copy ``src`` into a new file ``target`` with SQLite's online backup, 1,024 pages a step (``stop``
    set: it stops after the current step and raises ``BackupStopped``); then ``integrity_check`` of
    the copy, whose answer it returns ("ok")."""
    target.parent.mkdir(parents=True, exist_ok=True)
    dst = sqlite3.connect(target)

    def progress(_status: int, _remaining: int, _total: int) -> None:
        if stop is not None and stop.is_set():
            raise BackupStopped(f"backup of {target.name} stopped")

    try:
        src.backup(dst, pages=_BACKUP_STEP, progress=progress)
        result: str = dst.execute("PRAGMA integrity_check").fetchone()[0]
        return result
    finally:
        dst.close()


def _relative(data: Path, kind: str, name: str) -> Path:
    return actor_path(data, kind, name).relative_to(data)


def _manifest(data: Path, out: Path, entries: list[dict[str, Any]], started: float) -> dict[str, Any]:
    """The blobs copied (:func:`copy_blobs`), then ``manifest.json``: written last, so a backup
    without one is incomplete."""
    blobs = copy_blobs(data, out)
    bad = [e for e in entries if e["integrity_check"] != "ok"]
    manifest = {
        "started_at": started,
        "finished_at": time.time(),
        "actors": len([e for e in entries if e.get("kind")]),
        "files": entries,
        "integrity_failures": len(bad),
        **blobs,
    }
    (out / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    return manifest


def _copy_unserved(data: Path, kind: str, name: str, target: Path) -> str | None:
    """Copy one actor's file under its own lock, as :func:`backup_offline` does; None if it has none."""
    path = actor_path(data, kind, name)
    if not path.exists():
        return None
    with locked_file(path, kind, name) as conn:
        conn.execute("ROLLBACK")  # the backup API reads on its own
        check = copy_database(conn, target)
        conn.execute("BEGIN")
    return check


def backup_offline(data: Path, out: Path) -> dict[str, Any]:
    """Copy a data directory no server holds (a held actor raises ``ActorLocked``: use the server)."""
    started = time.time()
    out.mkdir(parents=True, exist_ok=False)
    entries: list[dict[str, Any]] = []
    directory = Directory(data)
    try:
        directory.backup(out / "directory.sqlite")
        actors = list(listed_actors(directory))
    finally:
        directory.close()
    entries.append({"file": "directory.sqlite", "integrity_check": "ok"})
    for entry in actors:
        check = _copy_unserved(data, entry.kind, entry.name, out / _relative(data, entry.kind, entry.name))
        if check is not None:
            entries.append({"kind": entry.kind, "name": entry.name, "integrity_check": check})
    return _manifest(data, out, entries, started)


async def _copy_in_turn(conn: sqlite3.Connection, target: Path) -> str:
    """:func:`copy_database` in a thread, from inside a turn. **The turn does not end while the thread holds
    the connection**: when the turn is cancelled (its timeout, a shutdown), the copy is told to stop
    after its current step and waited for, and only then is the cancellation let through — the
    rollback that follows, or the file's close, never touches the connection under the thread
    (:func:`roost.transport.collect.in_turn_thread`)."""
    return await in_turn_thread(lambda stop: copy_database(conn, target, stop))


async def backup_online(registry: Registry, out: Path) -> dict[str, Any]:
    """Copy the data directory of a running server: each actor is copied inside one of its turns (a
    consistent snapshot, between two commits), dormant ones are woken for it and sleep again later.

    An actor of a kind this server does not serve (left by another app on the same data directory)
    cannot be live here: its file is copied as the offline backup copies it, under the file's own
    lock (another process serving it refuses that: the backup then fails naming the actor). An actor
    whose copy fails (its turn's timeout, say) ends the backup with an :class:`RpcError` naming the
    actor; what was copied stays in ``out``, without a ``manifest.json``."""
    started = time.time()
    data = registry.config.data_dir
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=False)
    assert registry.directory is not None
    registry.directory.flush()
    registry.directory.backup(out / "directory.sqlite")
    entries: list[dict[str, Any]] = [{"file": "directory.sqlite", "integrity_check": "ok"}]
    for entry in list(listed_actors(registry.directory)):
        target = out / _relative(data, entry.kind, entry.name)

        async def copy(actor: Actor, target: Path = target) -> str:
            # inside the actor's turn, off the loop. Its batch is committed first, so that nothing
            # on the loop (the early commit of a batch behind a suspended turn) touches the
            # connection while the thread has it
            actor.extension.checkpoint()
            return await _copy_in_turn(actor.extension.connection(), target)

        if entry.kind not in registry.kinds:
            try:
                check = await asyncio.to_thread(_copy_unserved, data, entry.kind, entry.name, target)
            except ActorLocked as exc:
                raise RpcError(
                    "actor_unavailable",
                    f"backup incomplete at {entry.kind}/{entry.name!r}: another process holds it ({exc})",
                ) from exc
            if check is not None:
                entries.append({"kind": entry.kind, "name": entry.name, "integrity_check": check})
            continue
        try:
            # waits longer than the turn may run: a timeout is the turn's, after the copy stopped
            limit = registry.config.turn_timeout + registry.config.call_timeout
            check = await registry.run(entry.kind, entry.name, copy, timeout=limit)
        except RpcError as exc:  # e.g. the turn's timeout: the backup is incomplete, and says where
            raise RpcError(
                exc.code, f"backup incomplete at {entry.kind}/{entry.name!r}: {exc.message}"
            ) from exc
        entries.append({"kind": entry.kind, "name": entry.name, "integrity_check": check})
    return await asyncio.to_thread(_manifest, data, out, entries, started)
