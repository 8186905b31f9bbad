"""Data you can see and take away: inspect, export, delete (with an audit record).

Offline (the CLI on a data directory no server holds) and online (``GET /admin/actors/…`` and
``POST /admin/backup`` on a running server). An actor file that a running server holds is locked:
the offline tools say so and touch nothing.

- :func:`inspect_report` / :func:`export_report`: the one report of each kind, over an open
  connection to an actor's file. The offline path (:func:`inspect_actor`, :func:`export_actor`) runs
  it under the file's exclusive lock; the live path (:func:`inspect_live`, :func:`export_live`) runs it
  inside a turn of the live actor, on the turn's connection (``actor.extension.connection()``), so it
  reads the state as of the last commit — the turn's answer is released after its commit. The live
  read runs on the event loop (no thread may share the turn's connection without a commit first), so
  its time, like ``integrity_check``'s, grows with the file. **An actor that does not exist is
  refused with** ``ActorNotFound`` **and nothing is created.**
- :func:`inspect_directory`: what a data directory holds, read-only.
- The export is one format: JSON of meta, state, every table, the logged events and the schedules.
  In Roost's own tables (``roost_*``) JSON text (schedules' ``payload`` and ``trigger``,
  ``roost_state.state``, ``roost_log.frame``, dead letters' ``payload``) is exported as objects and
  every time column (``*_at``, ``at``, ``next_fire``, ``retry_at``, ``last_fire``, ``nominal``,
  ``heavy_since``) as ISO 8601 UTC text, as is ``exported_at``; so are the times inside Roost's own
  records: a trigger's ``at`` (date) and ``start`` (interval), ``roost_meta``'s ``created_at`` (in
  ``inspect`` too), and in logged frames, an agent event's ``*_at`` and a missed wake-up event's
  ``first`` / ``run_for``. Durations (``seconds``, ``misfire_grace``, …) stay seconds. User tables,
  the state and the events a user's actor emits are exported as stored (BLOBs as hex). Kept agent
  secrets are exported as their digests only.
- :func:`delete_actor`: under the actor's exclusive lock, removes its files and its directory row, then
  appends an audit record (JSON line) to ``DATA/audit.log`` and fsyncs it. :func:`delete_live` does
  the same through a running server (``DELETE /admin/actors/…``), inside
  :meth:`Registry.retiring <roost.actors.Registry.retiring>`: the actor stopped, and kept from
  activating until its files and row are gone.
- **Damaged actors** (:mod:`roost.storage.damage`: a file missing, empty, or older than the seq the
  directory recorded it had committed) are shown by :func:`inspect_actor` (``damaged``: the reason,
  ``acked_seq``: the directory's high-water seq) and cleared by :func:`delete_actor`, whatever is
  left of their file; the audit record says what was deleted, and why it was damaged.
- Backups are :mod:`roost.transport.backup`'s; the export's values (JSON text as objects, times as
  ISO 8601 UTC) are made by :mod:`roost.transport.export_format`.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors import ActorDamaged, ActorNotFound, ScheduleStatus, queue_report
from roost.storage import ActorFile, ActorLocked, Directory, actor_path, sandbox_path
from roost.storage.damage import (
    KEPT_WAL,
    WITNESS,
    corrupt_damage,
    file_seq,
    read_witness,
    seq_damage,
    unopened_damage,
)
from roost.transport.export_format import (
    iso_time,
    jsonable,
    logged_frame,
    meta_value,
    queue_times,
    roost_value,
)

if TYPE_CHECKING:
    from roost.actors import Actor, Registry

__all__ = [
    "AUDIT_LOG",
    "delete_actor",
    "delete_live",
    "export_actor",
    "export_live",
    "export_report",
    "inspect_actor",
    "inspect_directory",
    "inspect_live",
    "inspect_report",
    "iso_time",
    "listed_actors",
    "locked_file",
]

AUDIT_LOG = "audit.log"
_REDACTED_TABLES = {"roost_agent_secrets": "value"}


@contextmanager
def locked_file(path: Path, kind: str, name: str, *, write: bool = False) -> Iterator[sqlite3.Connection]:
    """The actor's file, opened by us alone (the server's lock refuses us if it holds the actor)."""
    if not path.exists():
        raise FileNotFoundError(f"no actor {kind}/{name!r} (no file at {path})")
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # takes the lock now
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise ActorLocked(kind, name) from exc
            raise
        yield conn
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]


#: An agent's MCP sessions (roost.agent.capabilities), shown by ``inspect`` when its file has them.
CAPABILITY_TABLE = "roost_agent_capability_sessions"
CAPABILITY_COLUMNS = (
    "capability_session_id",
    "run_id",
    "trace_id",
    "server",
    "transport",
    "status",
    "reason",
    "expires_at",
    "resume_token",
    "approval_state",
    "updated_at",
)


def _capability_sessions(conn: sqlite3.Connection, tables: list[str]) -> list[dict[str, Any]] | None:
    """The newest 100 sessions, oldest first; the server's session id (``resume_token``) as a digest."""
    if CAPABILITY_TABLE not in tables:
        return None
    cols = ", ".join(CAPABILITY_COLUMNS)
    rows = conn.execute(
        f"SELECT {cols} FROM {CAPABILITY_TABLE} ORDER BY created_at DESC LIMIT 100"
    ).fetchall()
    out = []
    for r in reversed(rows):
        row = dict(zip(CAPABILITY_COLUMNS, r, strict=True))
        if row["resume_token"] is not None:
            row["resume_token"] = (
                "sha256:" + hashlib.sha256(str(row["resume_token"]).encode()).hexdigest()[:16]
            )
        if isinstance(row["approval_state"], str):
            row["approval_state"] = orjson.loads(row["approval_state"])
        out.append(row)
    return out


#: An agent's sandbox workspaces (roost.agent.workspaces), shown by ``inspect`` when its file has them.
SANDBOX_TABLE = "roost_agent_sandboxes"
SANDBOX_COLUMNS = (
    "sandbox_session_id",
    "run_id",
    "trace_id",
    "manifest_version",
    "manifest_ref",
    "permissions_profile",
    "disposition",
    "status",
    "snapshot_id",
    "started_from",
    "entries",
    "version",
    "reopened",
    "directory",
    "updated_at",
)


def _workspaces(conn: sqlite3.Connection, tables: list[str]) -> list[dict[str, Any]] | None:
    """The newest 100 workspaces, oldest first: their files counted (``export`` lists them)."""
    if SANDBOX_TABLE not in tables:
        return None
    cols = ", ".join(SANDBOX_COLUMNS)
    rows = conn.execute(f"SELECT {cols} FROM {SANDBOX_TABLE} ORDER BY created_at DESC LIMIT 100").fetchall()
    out = []
    for r in reversed(rows):
        row = dict(zip(SANDBOX_COLUMNS, r, strict=True))
        row["permissions_profile"] = orjson.loads(row["permissions_profile"])
        entries = orjson.loads(row.pop("entries"))
        row["files"] = len(entries)
        row["bytes"] = sum(int(e[1]) for e in entries.values())
        out.append(row)
    return out


#: An actor's workflows (roost.workflows), shown by ``inspect`` when its file has them.
WORKFLOW_TABLE = "roost_wf"


def _workflows(conn: sqlite3.Connection, tables: list[str]) -> dict[str, Any] | None:
    """The workflows' counts by status, and the newest 100 not ended (oldest first): id, name,
    status, generation, what each waits for, its steps recorded. No input or result (``export``
    has them)."""
    if WORKFLOW_TABLE not in tables:
        return None
    counts = dict(conn.execute("SELECT status, count(*) FROM roost_wf GROUP BY status").fetchall())
    rows = conn.execute(
        "SELECT w.id, w.name, w.status, w.generation, w.waiting, w.reason, w.updated_at,"
        " (SELECT count(*) FROM roost_wf_steps AS s WHERE s.workflow_id = w.id)"
        " FROM roost_wf AS w WHERE w.status NOT IN ('completed', 'failed', 'cancelled')"
        " ORDER BY w.updated_at DESC LIMIT 100"
    ).fetchall()
    cols = ("id", "name", "status", "generation", "waiting", "reason", "updated_at", "steps")
    live = []
    for r in reversed(rows):
        row = dict(zip(cols, r, strict=True))
        row["waiting"] = orjson.loads(row["waiting"]) if row["waiting"] else None
        row["updated_at"] = iso_time(float(row["updated_at"]))
        if isinstance(row["waiting"], dict) and isinstance(row["waiting"].get("until"), int | float):
            row["waiting"]["until"] = iso_time(float(row["waiting"]["until"]))
        live.append(row)
    return {"by_status": counts, "live": live}


def inspect_report(conn: sqlite3.Connection, kind: str, name: str, path: Path, state: Any) -> dict[str, Any]:
    """What one actor's file holds, read over ``conn`` (read-only), with its current ``state``."""
    meta = {k: meta_value(k, v) for k, v in conn.execute("SELECT key, value FROM roost_meta").fetchall()}
    versions = dict(
        conn.execute("SELECT component, max(version) FROM roost_migrations GROUP BY component").fetchall()
    )
    head = conn.execute("SELECT coalesce(max(seq), 0), count(*) FROM roost_log").fetchone()
    tables = _tables(conn)
    counts = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    active = conn.execute(
        "SELECT count(*) FROM roost_schedules WHERE status = ?", (ScheduleStatus.ACTIVE.value,)
    ).fetchone()[0]
    integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    report: dict[str, Any] = {
        "kind": kind,
        "name": name,
        "path": str(path),
        "bytes": path.stat().st_size,
        "meta": meta,
        "schema_versions": versions,
        "seq": head[0],
        "logged_frames": head[1],
        "state": state,
        "active_schedules": active,
        "rows": counts,
        "integrity_check": integrity,
    }
    queue = queue_report(conn)
    if queue is not None:  # the actor's durable queue (roost.actors.queue), its times as ISO 8601 UTC
        report["queue"] = queue_times(queue)
    workflows = _workflows(conn, tables)
    if workflows is not None:  # an actor that runs workflows (docs/design.md, *Workflow core*)
        report["workflows"] = workflows
    sessions = _capability_sessions(conn, tables)
    if sessions is not None:  # an agent with MCP sessions: the oldest 100 (docs/design.md)
        report["capability_sessions"] = sessions
    workspaces = _workspaces(conn, tables)
    if workspaces is not None:  # an agent whose runs own sandbox workspaces (docs/design.md)
        report["workspaces"] = workspaces
    return report


def _acked_seq(data: Path, kind: str, name: str) -> int | None:
    """The actor's high-water seq: the higher of the directory's and its witness sidecar's
    (:mod:`roost.storage.damage`); None if the directory does not list it."""
    directory = Directory(data)
    try:
        entry = directory.get(kind, name)
    finally:
        directory.close()
    return None if entry is None else max(entry.acked_seq, read_witness(actor_path(data, kind, name)))


def _damage_report(path: Path, kind: str, name: str, acked: int | None, damage: str) -> dict[str, Any]:
    """The report of a damaged actor whose file cannot (or need not) be opened."""
    return {
        "kind": kind,
        "name": name,
        "path": str(path),
        "bytes": path.stat().st_size if path.exists() else None,
        "acked_seq": acked,
        "damaged": damage,
    }


def inspect_actor(data: Path, kind: str, name: str) -> dict[str, Any]:
    """:func:`inspect_report` of an actor no server holds (``ActorLocked`` if one does), with the
    directory's high-water seq (``acked_seq``) and ``damaged``: None, or why the server refuses it.
    A damaged actor whose file is missing, empty, not an SQLite file or truncated is reported without
    opening it; one SQLite cannot read (not a database, malformed) with SQLite's error."""
    path = actor_path(data, kind, name)
    acked = _acked_seq(data, kind, name)
    damage = unopened_damage(path, acked is not None, acked or 0)
    if damage is not None:
        return _damage_report(path, kind, name, acked, damage)
    try:
        with locked_file(path, kind, name) as conn:
            report = inspect_report(conn, kind, name, path, _current_state(conn, path))
            report["acked_seq"] = acked
            report["damaged"] = seq_damage(file_seq(conn), acked or 0)
            return report
    except sqlite3.DatabaseError as exc:
        corrupt = corrupt_damage(exc)
        if corrupt is None:
            raise
        return _damage_report(path, kind, name, acked, corrupt)


def _current_state(conn: sqlite3.Connection, path: Path) -> Any:
    """The state as the actor would load it (:meth:`storage.ActorFile.current_state`)."""
    return orjson.loads(ActorFile(conn, path, created=False).current_state()[0])


def inspect_directory(data: Path) -> dict[str, Any]:
    """What a data directory holds; ``damaged``: the listed actors whose file is missing, empty, not an
    SQLite file or truncated, told without opening any (a file that came back older, or that only
    SQLite's reading finds malformed, shows in its own ``inspect``)."""
    directory = Directory(data)
    try:
        kinds: dict[str, int] = {}
        damaged: list[dict[str, str]] = []
        for entry in listed_actors(directory):
            kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
            why = unopened_damage(actor_path(data, entry.kind, entry.name), True, entry.acked_seq)
            if why is not None:
                damaged.append({"kind": entry.kind, "name": entry.name, "damaged": why})
        return {
            "data": str(data),
            "actors": directory.count(),
            "by_kind": kinds,
            "damaged": damaged,
            "pending_wakeups": directory.count_alarms(),
            "workers": len(directory.workers()),
            "bytes": sum(p.stat().st_size for p in data.rglob("*") if p.is_file()),
        }
    finally:
        directory.close()


def listed_actors(directory: Directory) -> Iterator[Any]:
    offset = 0
    while True:
        page = directory.list(limit=1000, offset=offset)
        if not page:
            return
        yield from page
        offset += len(page)


def export_report(conn: sqlite3.Connection, kind: str, name: str, state: Any, now: float) -> dict[str, Any]:
    """One actor as JSON, read over ``conn`` (read-only): its current ``state``, every table, the
    logged events and the schedules, exported at ``now`` (epoch seconds), in the one export format
    of this module's docstring."""
    tables: dict[str, list[dict[str, Any]]] = {}
    for table in _tables(conn):
        cur = conn.execute(f'SELECT * FROM "{table}"')
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        hidden = _REDACTED_TABLES.get(table)
        if hidden is not None:
            rows = [{**r, hidden: "[not exported]"} for r in rows]
        if table == "roost_meta":
            tables[table] = [{**r, "value": meta_value(r["key"], r["value"])} for r in rows]
        elif table.startswith("roost_"):
            json_cols = _JSON_COLUMNS.get(table, frozenset())
            tables[table] = [{k: roost_value(k, v, json_cols) for k, v in r.items()} for r in rows]
        else:
            tables[table] = [{k: jsonable(v) for k, v in r.items()} for r in rows]
    events = [
        logged_frame(orjson.loads(r[0])) for r in conn.execute("SELECT frame FROM roost_log ORDER BY seq")
    ]
    return {
        "kind": kind,
        "name": name,
        "exported_at": iso_time(now),
        "state": state,
        "log": events,
        "schedules": tables.get("roost_schedules", []),
        "tables": tables,
    }


def export_actor(data: Path, kind: str, name: str) -> dict[str, Any]:
    """:func:`export_report` of an actor no server holds (``ActorLocked`` if one does)."""
    path = actor_path(data, kind, name)
    with locked_file(path, kind, name) as conn:
        return export_report(conn, kind, name, _current_state(conn, path), time.time())


#: JSON text in Roost's own tables, exported as objects.
_JSON_COLUMNS = {
    "roost_schedules": frozenset({"payload", "trigger"}),
    "roost_state": frozenset({"state"}),
    "roost_log": frozenset({"frame"}),
    "roost_dead_letters": frozenset({"payload"}),
    "roost_call_keys": frozenset({"caller", "outcome"}),
    "roost_queue": frozenset({"payload"}),
    # a workspace's files (path → digest and size: the blobs under DATA/blobs) and its profile
    SANDBOX_TABLE: frozenset({"entries", "permissions_profile"}),
}


async def _live(registry: Registry, kind: str, name: str, report: Callable[[Actor], dict[str, Any]]) -> Any:
    """``report(actor)`` inside a turn of the live actor; ``ActorNotFound`` (nothing created) if it
    was never created."""
    if not registry.exists(kind, name):
        raise ActorNotFound(kind, name)

    async def read(actor: Actor) -> dict[str, Any]:
        return report(actor)  # read whole within the turn: later turns change nothing in it

    return await registry.run(kind, name, read)


def _copy(state: Any) -> Any:
    """The state as committed now (a later turn may change the live object in place)."""
    return orjson.loads(orjson.dumps(state))


async def inspect_live(registry: Registry, kind: str, name: str) -> dict[str, Any]:
    """:func:`inspect_report` of an actor of a running server, read in one of its turns. A damaged
    actor (the server refuses it and holds nothing of it) is answered with :func:`inspect_actor`'s
    damage report, read in a thread."""
    path = actor_path(registry.config.data_dir, kind, name)
    try:
        result: dict[str, Any] = await _live(
            registry,
            kind,
            name,
            lambda actor: inspect_report(actor.extension.connection(), kind, name, path, _copy(actor.state)),
        )
    except ActorDamaged:
        return await asyncio.to_thread(inspect_actor, registry.config.data_dir, kind, name)
    return result


async def export_live(registry: Registry, kind: str, name: str) -> dict[str, Any]:
    """:func:`export_report` of an actor of a running server, read in one of its turns (exported at
    the turn's clock reading)."""
    result: dict[str, Any] = await _live(
        registry,
        kind,
        name,
        lambda actor: export_report(
            actor.extension.connection(), kind, name, _copy(actor.state), actor.extension.now
        ),
    )
    return result


def _remove_workspaces(data: Path, kind: str, name: str) -> int:
    """Remove the actor's sandbox workspaces (``DATA/sandboxes/<kind>/<digest>/``); how many there
    were. Symlinks inside are removed, never followed."""
    root = sandbox_path(data, kind, name)
    if root.is_symlink():
        root.unlink()
        return 0
    if not root.is_dir():
        return 0
    count = sum(1 for _ in root.iterdir())
    shutil.rmtree(root)
    return count


def _unlink(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal", KEPT_WAL, WITNESS):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _last_words(conn: sqlite3.Connection, path: Path) -> tuple[int | None, str | None]:
    """The head seq and the state digest of a file about to go; None for what it cannot tell (a
    damaged file may not hold Roost's tables at all)."""
    try:
        head = int(conn.execute("SELECT coalesce(max(seq), 0) FROM roost_log").fetchone()[0])
        state = orjson.dumps(_current_state(conn, path), option=orjson.OPT_SORT_KEYS)
    except (sqlite3.Error, orjson.JSONDecodeError, TypeError):
        return None, None
    return head, hashlib.sha256(state).hexdigest()


def delete_actor(
    data: Path, kind: str, name: str, *, reason: str = "", by: str | None = None
) -> dict[str, Any]:
    """Delete an actor for good: files, directory row and sandbox workspaces, under its lock; then the
    audit record. Its blobs stay: they are shared by content with other actors, and ``roost gc``
    (:mod:`roost.transport.collect`) removes those nobody references any more.

    A damaged actor is deleted too: a file missing, empty or that is no database needs no lock (no
    server opens it), and what cannot be read of a file is ``None`` in the record, with the reason it
    was damaged; its ``acked_seq`` is the high-water seq of its witnesses, not of the file."""
    path = actor_path(data, kind, name)
    directory = Directory(data)
    try:
        entry = directory.get(kind, name)
        acked = max(entry.acked_seq if entry is not None else 0, read_witness(path))
        damage = unopened_damage(path, entry is not None, acked)
        read = False
        if damage is None and path.exists():
            try:
                with locked_file(path, kind, name, write=True) as conn:
                    head, digest = _last_words(conn, path)
                    if head is not None:
                        damage = seq_damage(max(head, file_seq(conn)), acked)
                    size = path.stat().st_size
                    _unlink(path)  # while we still hold the lock
                    read = True
            except sqlite3.DatabaseError as exc:  # a file SQLite cannot read: no server serves it
                damage = corrupt_damage(exc)
                if damage is None:
                    raise
        if not read:
            head, digest = None, None
            size = path.stat().st_size if path.exists() else 0
            _unlink(path)
        directory.forget(kind, name)
        workspaces = _remove_workspaces(data, kind, name)
    finally:
        directory.close()
    record = {
        "at": time.time(),
        "action": "delete",
        "kind": kind,
        "name": name,
        "file": path.name,
        "bytes": size,
        "last_seq": head,
        "acked_seq": acked,
        "damaged": damage,
        "state_sha256": digest,
        "workspaces_removed": workspaces,
        "by": by if by is not None else getpass.getuser(),
        "reason": reason,
    }
    with open(data / AUDIT_LOG, "ab") as log:
        log.write(orjson.dumps(record) + b"\n")
        log.flush()
        os.fsync(log.fileno())
    return record


async def delete_live(registry: Registry, kind: str, name: str, *, reason: str, by: str) -> dict[str, Any]:
    """:func:`delete_actor` through a running server: the actor is stopped (its connections closed
    with 1000) and kept from activating while its files and row go (:meth:`Registry.retiring`), in a
    thread; inputs meanwhile are refused ``actor_unavailable``, later ones make a new actor.
    ``ActorNotFound`` for an actor never created; ``ActorLocked`` if another process serves it."""
    if not registry.exists(kind, name):
        raise ActorNotFound(kind, name)
    data = registry.config.data_dir
    async with registry.retiring(kind, name):
        record: dict[str, Any] = await asyncio.to_thread(delete_actor, data, kind, name, reason=reason, by=by)
    return record
