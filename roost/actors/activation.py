"""Activation: a first input's file and directory row made ahead of it (:func:`prepare`), and a
dormant or new actor made live (:func:`get`), or refused as unavailable or damaged. These are
:class:`~roost.actors.registry.Registry` methods (bound in its class body), kept here because they are
one concern: the registry's module doc states their guarantees (single activation, damaged files,
bounded files and descriptors, the directory lists only actors whose file existed).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import TYPE_CHECKING, Protocol

import orjson

from roost.actors import queue
from roost.actors.descriptors import out_of_descriptors
from roost.actors.errors import (
    ActorDamaged,
    ActorLocked,
    ActorUnavailable,
    MigrationError,
    RoostError,
    shown_name,
)
from roost.actors.host import ActorHost
from roost.actors.parts import RegistryCore
from roost.actors.turn import log_failure
from roost.storage import ActorFile, Directory, DirectoryBusy, Durability, actor_digest, actor_path
from roost.storage.damage import (
    WITNESS,
    Witness,
    corrupt_damage,
    file_seq,
    keep_wal,
    read_witness,
    seq_damage,
    unopened_damage,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from roost.actors.actor import Actor
    from roost.actors.config import RuntimeConfig
    from roost.actors.decorators import CallableInfo
    from roost.actors.directory_thread import DirectoryThread
    from roost.actors.refs import Key
    from roost.actors.releases import FileReleases
    from roost.scheduler import Clock

__all__ = [
    "Activating",
    "creator",
    "get",
    "no_descriptor",
    "not_opened",
    "prepare",
    "refuse_damaged",
    "register_inline",
    "took_fresh",
]

log = logging.getLogger("roost.registry")


class Activating(RegistryCore, Protocol):
    """What activation reads and writes of the registry (:class:`~roost.actors.registry.Registry` is
    one; a protocol, so that this module does not import the registry that binds it)."""

    hosts: dict[Key, ActorHost]
    directory: Directory | None
    directory_thread: DirectoryThread | None
    file_releases: FileReleases
    activations: int
    _callables: dict[str, dict[str, CallableInfo]]
    _fresh: dict[Key, tuple[ActorFile, float]]
    _preparing: dict[Key, asyncio.Future[None]]
    _retiring: set[Key]
    _damaged: set[tuple[Key, str]]

    @property
    def config(self) -> RuntimeConfig: ...

    @property
    def clock(self) -> Clock: ...

    def kind_of(self, kind: str) -> type[Actor]: ...

    def validate(self, kind: str, name: str) -> None: ...

    def release_file(
        self, key: Key, file: ActorFile, last_state: tuple[str, int, float] | None = None
    ) -> None: ...

    def _make_room(self) -> None: ...

    def evictable(self, host: ActorHost) -> bool: ...


async def prepare(reg: Activating, kind: str, name: str) -> None:
    """Before a first input that may create the actor: create its file (opened, its schema
    committed) and then write its directory row, both in the directory thread (where
    waiting for another process's lock stalls nobody), so that :meth:`get` finds both and writes
    nothing on the loop. **The directory lists only actors whose file existed**: the row is
    written after the file, so a listed actor whose file is missing or empty is damaged
    (:mod:`roost.storage.damage`); a crash between the two leaves a file with no row, adopted by
    the next activation. The file is left open for :meth:`get` (released by the sweep if no
    input takes it); if the row cannot be written, the file just created is removed again.
    Concurrent prepares of one name share one. Does nothing for a live actor, one with a row, or
    when every live actor is busy at ``max_active`` (:meth:`get` refuses it ``Overloaded``); a
    failure is left for :meth:`get` to report."""
    key = (kind, name)
    if key in reg.hosts or reg.directory is None or reg.directory_thread is None:
        return
    pending = reg._preparing.get(key)
    if pending is not None:
        await asyncio.shield(pending)
        return
    if len(reg.hosts) >= reg.config.max_active and not any(reg.evictable(h) for h in reg.hosts.values()):
        return  # get() refuses it Overloaded: nothing is created for it
    try:
        reg.validate(kind, name)
        if reg.directory.get(kind, name) is not None:
            return
    except (RoostError, sqlite3.Error, OSError):
        log.debug("actor %s/%r: not registered ahead", kind, name, exc_info=True)
        return
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    reg._preparing[key] = done
    try:
        create = creator(reg, kind, name)
        digest, now = actor_digest(kind, name), reg.clock.now()

        def file_then_row(d: Directory) -> ActorFile | None:
            made = create()
            try:
                d.register(kind, name, digest, now)
            except BaseException:
                if made is not None:
                    made.close()
                    _remove_new(made.path)
                raise
            return made

        job = asyncio.ensure_future(reg.directory_thread.run(file_then_row))
        job.add_done_callback(lambda j: took_fresh(reg, key, j))  # even if this wait is cancelled
        await asyncio.shield(job)
    except (RoostError, sqlite3.Error, OSError):
        log.debug("actor %s/%r: not registered ahead", kind, name, exc_info=True)
    finally:
        del reg._preparing[key]
        done.set_result(None)


def took_fresh(reg: Activating, key: Key, job: asyncio.Future[ActorFile | None]) -> None:
    if job.cancelled() or job.exception() is not None:
        return
    file = job.result()
    if file is None:
        return
    if reg.directory is None:  # stopped meanwhile
        file.close()
    elif key in reg._fresh or key in reg.hosts or key in reg._retiring:
        reg.release_file(key, file)  # not wanted any more (a delete under way)
    else:
        reg._fresh[key] = (file, reg.clock.monotonic())


def creator(reg: Activating, kind: str, name: str) -> Callable[[], ActorFile | None]:
    """What creates the actor's file if it does not exist yet, returning it open (None if it
    existed). Runs in any thread."""
    cls = reg.kind_of(kind)
    path = actor_path(reg.config.data_dir, kind, name)
    initial = _initial_json(cls)
    durability = reg.config.durability

    def create() -> ActorFile | None:
        if path.exists():
            return None
        return _open_file(cls, path, kind, name, durability, initial)

    return create


def get(reg: Activating, kind: str, name: str) -> ActorHost:
    """The live host of ``(kind, name)``, activating it if needed. Single-flight: no await.

    Every failure to start is ``ActorUnavailable`` (logged with its cause; the transport answers
    503 or an ``error`` frame and close 1013), and leaves nothing live: the directory cannot
    record a new actor (a full disk, a read-only database: then no file is created either), its
    file cannot be opened or migrated, or its class cannot be constructed. ``ActorLocked`` (another
    process has it) is ``ActorUnavailable`` too; ``Overloaded`` when every live actor is busy.

    ``ActorDamaged`` when the directory lists the actor with a high-water seq its file does not
    reach (missing, empty, or older): the file is neither created nor kept open. A new actor's
    row is written here only if :meth:`prepare` did not write it, without waiting: when another
    process holds the directory's lock, that is ``ActorUnavailable`` (try again)."""
    host = reg.hosts.get((kind, name))
    if host is not None and not host.stopping:
        return host
    if (kind, name) in reg._retiring:
        raise ActorUnavailable(message=f"actor {kind}/{shown_name(name)!r} is being deleted")
    reg.file_releases.claim((kind, name))  # deactivated a moment ago: its lock goes with it
    cls = reg.kind_of(kind)
    path = actor_path(reg.config.data_dir, kind, name)
    if len(reg.hosts) >= reg.config.max_active:
        reg._make_room()
    assert reg.directory is not None, "Registry.start() was not called"
    try:  # a read: never waits for a writer (WAL)
        entry = reg.directory.get(kind, name)
    except sqlite3.Error as exc:
        log.exception("actor %s/%r: the directory cannot be read", kind, name)
        raise ActorUnavailable(message=f"actor failed to start: the directory cannot be read: {exc}") from exc
    listed = entry is not None
    row_created = entry.created_at if entry is not None else None
    # a file prepare() just created is open already: not read past SQLite (closing another
    # descriptor of it would drop this process's locks on it), and nothing can be wrong with it
    fresh = reg._fresh.pop((kind, name), None)
    try:  # the higher of the two witnesses of what the actor had committed
        acked = max(entry.acked_seq if entry is not None else 0, read_witness(path))
        damage = None if fresh is not None else unopened_damage(path, listed, acked)
    except OSError as exc:
        if fresh is not None:
            fresh[0].close()
        raise not_opened(reg, kind, name, path, exc) from exc
    if damage is not None:
        raise refuse_damaged(reg, kind, name, path, damage)
    created = not path.exists()
    try:
        file = (
            fresh[0]
            if fresh is not None
            else _open_file(cls, path, kind, name, reg.config.durability, _initial_json(cls))
        )
    except ActorLocked as exc:
        raise ActorUnavailable(message=str(exc)) from exc
    except (MigrationError, sqlite3.Error, OSError) as exc:
        raise not_opened(reg, kind, name, path, exc) from exc
    if not listed:
        # the file first, then its row (prepare did neither): the directory lists only actors
        # whose file existed. A file found without a row is adopted
        row_created = register_inline(reg, kind, name, file, created)
    try:
        seq = file_seq(file.conn)
    except sqlite3.Error as exc:
        file.close()
        raise not_opened(reg, kind, name, path, exc, descriptors=False) from exc
    damage = seq_damage(seq, acked)
    if damage is not None:
        keep_wal(path)  # closing checkpoints the WAL's readable part and drops the rest
        file.close()
        raise refuse_damaged(reg, kind, name, path, damage)
    try:
        file.witness = Witness(path, seq)
    except OSError as exc:
        file.close()
        raise not_opened(reg, kind, name, path, exc) from exc
    try:
        host = ActorHost(reg, cls, kind, name, file, reg._callables[kind])
    except Exception as exc:  # the kind's __init__ or a corrupt state row
        file.close()
        raise not_opened(reg, kind, name, path, exc, "start", descriptors=False) from exc
    host.row_created = row_created
    reg.hosts[(kind, name)] = host
    reg.directory.touch(kind, name, reg.clock.now(), seq, row_created)
    reg.activations += 1
    return host


def register_inline(reg: Activating, kind: str, name: str, file: ActorFile, created: bool) -> float | None:
    """Write the row of an actor whose file is open and has none, without waiting: its
    ``created_at``. If the file was just created and the row cannot be written (another process
    holds the directory's lock, a full disk), the file is removed again and that is
    ``ActorUnavailable``; a file found without a row is served even so (its row is tried again at
    its next activation)."""
    assert reg.directory is not None
    now = reg.clock.now()
    try:
        reg.directory.register(kind, name, actor_digest(kind, name), now)
        return now
    except (DirectoryBusy, sqlite3.Error, OSError) as exc:
        if not created:
            log.warning(
                "actor %s/%r: its file has no directory row, and the row cannot be written now: %s",
                kind,
                name,
                exc,
            )
            return None
        file.close()
        _remove_new(file.path)
        if isinstance(exc, DirectoryBusy):  # another process writes it now: not waited for on the loop
            raise ActorUnavailable(
                message="actor failed to start: the directory is busy (another process is writing it); "
                "try again"
            ) from exc
        log.exception("actor %s/%r: the directory cannot record it", kind, name)
        raise ActorUnavailable(
            message=f"actor failed to start: the directory cannot record it: {exc}"
        ) from exc


def not_opened(
    reg: Activating,
    kind: str,
    name: str,
    path: Path,
    exc: Exception,
    step: str = "open",
    *,
    descriptors: bool = True,
) -> ActorUnavailable:
    """What a failure to ``step`` the actor (open its file, start) is told as: a file SQLite cannot
    read is damaged; a want of descriptors (when ``descriptors``: the failure was opening a file)
    is a capacity error, with no traceback; anything else failed to start."""
    corrupt = corrupt_damage(exc)
    if corrupt is not None:
        return refuse_damaged(reg, kind, name, path, corrupt)
    if descriptors and out_of_descriptors(exc):
        return no_descriptor(reg, kind, name)
    return _start_failed(kind, name, exc, step)


def no_descriptor(reg: Activating, kind: str, name: str) -> ActorUnavailable:
    log.warning("actor %s/%r: not opened, no file descriptor left", kind, shown_name(name))
    return ActorUnavailable(
        message=f"the server is out of file descriptors ({len(reg.hosts)} actors live); try again later"
    )


def refuse_damaged(reg: Activating, kind: str, name: str, path: Path, reason: str) -> ActorDamaged:
    """The refusal of a damaged actor, logged (with its path and reason) once per process."""
    if ((kind, name), reason) not in reg._damaged:
        reg._damaged.add(((kind, name), reason))
        log.error(
            "actor %s/%r refused as damaged: %s (file %s; "
            "roost inspect KIND NAME --data DIR or --server URL shows it, roost delete clears it)",
            kind,
            name,
            reason,
            path,
        )
    return ActorDamaged(kind, name, reason)


def _start_failed(kind: str, name: str, exc: Exception, step: str) -> ActorUnavailable:
    """What the callers of an actor that failed to ``step`` (open its file, start) are told: Roost's
    own errors (a failed migration) say what is wrong; other exceptions (the kind's ``__init__``, a
    corrupt file) are logged and told only by their reference id."""
    ref = log_failure((kind, name), exc, step)
    why = f": {exc}" if isinstance(exc, RoostError) else ""
    return ActorUnavailable(message=f"actor failed to start{why} (ref {ref})")


def _remove_new(path: Path) -> None:
    """Remove an actor file just created (closed), whose directory row could not be written."""
    for suffix in ("", "-wal", "-shm", WITNESS):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def _open_file(
    cls: type[Actor], path: Path, kind: str, name: str, durability: Durability, initial: str
) -> ActorFile:
    """Open (or create) the actor's file with its kind's schema and first state."""
    return ActorFile.open(
        path,
        kind,
        name,
        kind_migrations=cls.migrations,
        components=((queue.COMPONENT, queue.MIGRATIONS), *cls.components),
        durability=durability,
        initial_state=initial,
        state_version=cls.state_version,
        page_size=cls.page_size,
    )


def _initial_json(cls: type[Actor]) -> str:
    return orjson.dumps(cls.initial_state).decode()
