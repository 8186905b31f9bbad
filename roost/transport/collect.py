"""The collection of a data directory's blob store (``roost gc``, ``POST /admin/gc``), and the blobs a
backup takes along. The mark and the sweep themselves are :mod:`roost.storage.blobs`.

- :func:`collect_offline`: a data directory no server holds; each actor file is marked under its own
  exclusive lock (a held one raises ``ActorLocked``: nothing is removed, use the server).
- :func:`collect_online`: a running server's; each actor it serves is marked inside one of its
  turns, between two commits (in a thread while the turn waits), every other file under its lock.
- :func:`copy_blobs`: the blobs the files of a backup reference, transitively, copied beside them.

Neither removes anything unless every actor file was marked: an unreadable file (damaged, held
elsewhere), a turn that timed out, ends the collection with nothing swept. The marks and what was
swept are reported (``marked``, ``missing``: references that pointed at nothing already, ``removed``,
``removed_bytes``, ``young``, ``kept``, ``leftovers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from roost.actors import RpcError
from roost.storage import ActorLocked, actor_path
from roost.storage.blobs import (
    GRACE,
    Marks,
    Missing,
    blob_path,
    mark_blobs,
    mark_connection,
    mark_file_bytes,
    sweep,
)
from roost.transport.admin import listed_actors, locked_file

if TYPE_CHECKING:
    from roost.actors import Actor, Registry

__all__ = [
    "CollectionRefused",
    "actor_files",
    "collect_offline",
    "collect_online",
    "copy_blobs",
    "in_turn_thread",
]

T = TypeVar("T")
#: Files an actor leaves beside its database that may hold references: a WAL refused as older.
_KEPT = ".sqlite-wal.damaged"


class CollectionRefused(Exception):
    """An actor file could not be marked: nothing was removed."""


def actor_files(data: Path) -> Iterator[Path]:
    """Every file under ``DATA/actors`` that may hold references (``*.sqlite``, kept WALs), listed
    or not, one directory listed at a time."""
    for top, dirs, files in os.walk(data / "actors"):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".sqlite") or name.endswith(_KEPT):
                yield Path(top) / name


def _address(data: Path, path: Path) -> tuple[str, str]:
    """(kind, file name) of an actor file, for messages (its name is in the file, a digest here)."""
    parts = path.relative_to(data / "actors").parts
    return parts[0], path.name.split(".")[0]


def mark_file(data: Path, path: Path, marks: Marks) -> None:
    """Mark one actor file (or the raw bytes of a kept WAL) under its exclusive lock."""
    if path.name.endswith(_KEPT):
        mark_file_bytes(path, marks)
        return
    kind, name = _address(data, path)
    try:
        with locked_file(path, kind, name) as conn:
            mark_connection(conn, marks)
    except FileNotFoundError:
        return  # deleted meanwhile: what it referenced is no longer referenced by it
    except sqlite3.DatabaseError as exc:
        raise CollectionRefused(
            f"{path} cannot be read ({exc}): nothing was removed (roost inspect --data DIR lists "
            "damaged actors, roost delete clears one)"
        ) from None
    marks.see(path)


def _finish(data: Path, marks: Marks, started: float, grace: float, dry_run: bool) -> dict[str, Any]:
    root = data / "blobs"
    missing = mark_blobs(root, marks)
    swept = sweep(root, marks, started - grace, dry_run=dry_run)
    return {
        "started_at": started,
        "finished_at": time.time(),
        "grace": grace,
        "dry_run": dry_run,
        "marked": marks.count(),
        "missing": missing.count,
        "missing_examples": missing.examples,
        **swept.to_json(),
    }


def collect_offline(
    data: Path, *, grace: float = GRACE, dry_run: bool = False, now: float | None = None
) -> dict[str, Any]:
    """Collect the blob store of a data directory no server holds: mark every actor file (a held one
    raises ``ActorLocked``, a damaged one :class:`CollectionRefused`: nothing removed), then sweep
    what is unmarked and was stored more than ``grace`` seconds before ``now`` (default: the start)."""
    started = time.time() if now is None else now
    marks = Marks()
    try:
        for path in actor_files(data):
            mark_file(data, path, marks)
        return _finish(data, marks, started, grace, dry_run)
    finally:
        marks.close()


async def in_turn_thread(fn: Callable[[threading.Event], T]) -> T:
    """``fn(stop)`` in a thread, from inside a turn. **The turn does not end while the thread runs**
    (it may hold the turn's connection): when the turn is cancelled (its timeout, a shutdown),
    ``stop`` is set, the thread waited for, and only then is the cancellation let through."""
    stop = threading.Event()
    done = asyncio.get_running_loop().run_in_executor(None, fn, stop)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        stop.set()
        while not done.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({done})
        if not done.cancelled():
            done.exception()  # retrieved: the stop, or whatever the thread met meanwhile
        raise


async def _mark_in_turn(registry: Registry, kind: str, name: str, marks: Marks) -> None:
    """Mark a served actor's file inside one of its turns (its batch committed first), in a thread."""

    async def mark(actor: Actor) -> None:
        actor.extension.checkpoint()  # the batch committed: nothing on the loop touches it now
        conn = actor.extension.connection()
        await in_turn_thread(lambda stop: mark_connection(conn, marks, stop))

    limit = registry.config.turn_timeout + registry.config.call_timeout
    try:
        await registry.run(kind, name, mark, timeout=limit)
    except RpcError as exc:
        raise RpcError(
            exc.code, f"collection stopped at {kind}/{name!r}, nothing removed: {exc.message}"
        ) from exc
    marks.see(actor_path(registry.config.data_dir, kind, name))


async def mark_online(registry: Registry, marks: Marks) -> None:
    """Mark every actor file of a running server's data directory: the actors of the kinds it
    serves inside one of their turns (dormant ones woken), every other file under its lock."""
    data = registry.config.data_dir
    assert registry.directory is not None
    registry.directory.flush()
    for entry in list(listed_actors(registry.directory)):
        if entry.kind not in registry.kinds:
            continue  # marked below, as a file no actor of this server holds
        if not await asyncio.to_thread(actor_path(data, entry.kind, entry.name).exists):
            continue  # deleted since the listing, or never written: it references nothing (and a
            # turn would make it again)
        await _mark_in_turn(registry, entry.kind, entry.name, marks)
    for path in await asyncio.to_thread(lambda: list(actor_files(data))):
        if marks.seen(path):
            continue
        try:
            await asyncio.to_thread(mark_file, data, path, marks)
        except ActorLocked as exc:
            entry = await asyncio.to_thread(_listed_at, registry, path)
            if entry is None:
                raise RpcError(
                    "actor_unavailable",
                    f"collection stopped, nothing removed: another process holds {path} ({exc})",
                ) from exc
            await _mark_in_turn(registry, entry.kind, entry.name, marks)  # made since the listing
        except CollectionRefused as exc:
            raise RpcError("actor_unavailable", str(exc)) from exc


def _listed_at(registry: Registry, path: Path) -> Any:
    """The listed actor of a kind this server serves whose file is ``path`` (None: there is none)."""
    assert registry.directory is not None
    registry.directory.flush()
    data = registry.config.data_dir
    for entry in listed_actors(registry.directory):
        if entry.kind in registry.kinds and actor_path(data, entry.kind, entry.name) == path:
            return entry
    return None


#: One collection at a time per registry.
_running: weakref.WeakKeyDictionary[Registry, asyncio.Lock] = weakref.WeakKeyDictionary()


async def collect_online(
    registry: Registry, *, grace: float = GRACE, dry_run: bool = False
) -> dict[str, Any]:
    """Collect the blob store of a running server's data directory (one collection at a time per
    process): :func:`mark_online`, then the sweep in a thread. ``RpcError`` naming the actor or file
    that could not be marked: nothing was removed."""
    async with _running.setdefault(registry, asyncio.Lock()):
        started = time.time()
        marks = Marks()
        try:
            await mark_online(registry, marks)
            return await asyncio.to_thread(_finish, registry.config.data_dir, marks, started, grace, dry_run)
        finally:
            marks.close()


def copy_blobs(data: Path, out: Path) -> dict[str, Any]:
    """Copy into ``out/blobs`` every blob the actor files copied into ``out`` reference (and what those
    blobs reference), from ``data/blobs``; how many, their bytes, and the references that pointed at
    nothing (``blobs_missing``). The copies are ours: they are read without a lock."""
    marks = Marks()
    try:
        for path in actor_files(out):
            if path.name.endswith(_KEPT):
                continue
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                mark_connection(conn, marks)
            finally:
                conn.close()
        source, target = data / "blobs", out / "blobs"
        mark_blobs(source, marks)
        missing = Missing()  # counted as copied: what the mark missed, or what went since it read it
        copied = copied_bytes = 0
        for digest in marks.digests():
            src, dst = blob_path(source, digest), blob_path(target, digest)
            try:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
            except FileNotFoundError:
                missing.add(digest)
                continue
            copied += 1
            copied_bytes += dst.stat().st_size
        return {
            "blobs": copied,
            "blob_bytes": copied_bytes,
            "blobs_missing": missing.count,
            "blobs_missing_examples": missing.examples,
        }
    finally:
        marks.close()
