"""The actors behind ``roost.integrations.langgraph``: :class:`CheckpointThread`, one LangGraph thread's
checkpoints and pending writes in the actor's own tables, and :class:`RunIndex`, which threads each
run wrote to (kept only by a saver given ``run_index``). Values arrive as the saver serialized them
(``dumps_typed`` bytes, base64 over the wire); this module imports no LangGraph, so a server can
host the kinds without it. The guarantees: ``roost.integrations.langgraph``'s docstring.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from roost.actors import Actor, RpcError, callable

__all__ = [
    "INDEX_KIND",
    "KIND",
    "LIMIT_CODES",
    "MAX_CHECKPOINT_BYTES",
    "MAX_PENDING_BYTES",
    "MAX_WRITES_BYTES",
    "PAGE_ROWS",
    "STRATEGIES",
    "CheckpointLimitExceeded",
    "CheckpointThread",
    "RunIndex",
    "check_checkpoint",
    "check_writes",
    "encode",
]

#: The actor kind of a thread: ``ws://HOST/agents/langgraph_thread/{thread_id}``.
KIND = "langgraph_thread"
#: The actor kind of a run index (``langgraph_runs/{run_index}``, one per name a saver is given, e.g.
#: per tenant) that ``delete_for_runs`` reads.
INDEX_KIND = "langgraph_runs"
#: The largest checkpoint, serialized, with its metadata's JSON: 512 KiB (a ``put`` fits a 1 MiB frame).
MAX_CHECKPOINT_BYTES = 512 * 1024
#: The largest ``put_writes``, its values serialized and summed: 512 KiB.
MAX_WRITES_BYTES = 512 * 1024
#: The most bytes of pending writes one checkpoint holds: 2 MiB (a tuple fits one reply).
MAX_PENDING_BYTES = 2 * 1024 * 1024
#: A page of ``list`` holds at most this many checkpoints, and stops past 3 MiB (replies are ≤ 8 MiB).
PAGE_ROWS = 100
PAGE_BYTES = 3 * 1024 * 1024
#: The error codes of the bounds (guarantee 5).
LIMIT_CODES = frozenset({"checkpoint_too_large", "writes_too_large", "pending_writes_full"})
STRATEGIES = ("keep_latest", "delete")


class CheckpointLimitExceeded(ValueError):
    """A write past a bound of guarantee 5; ``code`` is the actor's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def encode(data: bytes) -> str:
    """``data`` as base64 text, as it crosses the wire."""
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise RpcError("invalid_arguments", "a value is not base64") from None


def check_checkpoint(size: int) -> None:
    """:class:`CheckpointLimitExceeded` for a checkpoint of ``size`` bytes over its bound."""
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointLimitExceeded(
            "checkpoint_too_large",
            f"the checkpoint and its metadata are {size} bytes serialized, over {MAX_CHECKPOINT_BYTES}",
        )


def check_writes(size: int) -> None:
    """:class:`CheckpointLimitExceeded` for one ``put_writes`` of ``size`` bytes over its bound."""
    if size > MAX_WRITES_BYTES:
        raise CheckpointLimitExceeded(
            "writes_too_large", f"the writes are {size} bytes serialized, over {MAX_WRITES_BYTES}"
        )


def _refusal(exc: CheckpointLimitExceeded) -> RpcError:
    return RpcError(exc.code, str(exc))


class CheckpointThread(Actor):
    """One LangGraph thread's checkpoints and pending writes, in the actor's own tables."""

    kind = KIND
    initial_state = {}
    migrations = (
        "CREATE TABLE lg_checkpoints (ns TEXT NOT NULL, id TEXT NOT NULL, parent TEXT, type TEXT NOT NULL,"
        " checkpoint BLOB NOT NULL, metadata TEXT NOT NULL, run_id TEXT, PRIMARY KEY (ns, id))",
        "CREATE TABLE lg_writes (ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL,"
        " idx INTEGER NOT NULL, channel TEXT NOT NULL, type TEXT NOT NULL, value BLOB NOT NULL,"
        " task_path TEXT NOT NULL, PRIMARY KEY (ns, checkpoint_id, task_id, idx))",
        "CREATE INDEX lg_checkpoints_run ON lg_checkpoints (run_id)",
    )

    @callable
    async def put(
        self,
        ns: str,
        checkpoint_id: str,
        parent: str | None,
        type: str,
        checkpoint: str,
        metadata: dict[str, Any],
        run_id: str | None = None,
    ) -> None:
        """Store a checkpoint (``checkpoint``: its ``dumps_typed`` bytes, base64); the same id replaces."""
        data = _unb64(checkpoint)
        meta = orjson.dumps(metadata).decode()
        try:
            check_checkpoint(len(data) + len(meta))
        except CheckpointLimitExceeded as exc:
            raise _refusal(exc) from None
        self.sql.execute(
            "INSERT OR REPLACE INTO lg_checkpoints (ns, id, parent, type, checkpoint, metadata, run_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (ns, checkpoint_id, parent, type, data, meta, run_id),
        )

    @callable
    async def put_writes(
        self, ns: str, checkpoint_id: str, task_id: str, task_path: str, writes: list[list[Any]]
    ) -> None:
        """Store a task's writes ``[[idx, channel, type, value_base64], ...]`` against a checkpoint. A
        regular write (idx ≥ 0) already stored for (task, idx) is kept; a special one (error, interrupt,
        resume...: idx < 0) replaces."""
        rows: list[tuple[int, str, str, bytes]] = []
        for write in writes:
            if (
                len(write) != 4
                or not isinstance(write[0], int)
                or not all(isinstance(part, str) for part in write[1:])
            ):
                raise RpcError("invalid_arguments", "each write is [idx, channel, type, value_base64]")
            rows.append((write[0], write[1], write[2], _unb64(write[3])))
        size = sum(len(value) for *_, value in rows)
        held = self.sql.one(
            "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM lg_writes WHERE ns = ? AND checkpoint_id = ?",
            (ns, checkpoint_id),
        )
        try:
            check_writes(size)
            if held is not None and held[0] + size > MAX_PENDING_BYTES:
                raise CheckpointLimitExceeded(
                    "pending_writes_full",
                    f"the checkpoint would hold {held[0] + size} bytes of pending writes;"
                    f" it holds at most {MAX_PENDING_BYTES}",
                )
        except CheckpointLimitExceeded as exc:
            raise _refusal(exc) from None
        for idx, channel, type_, value in rows:
            verb = "INSERT OR IGNORE" if idx >= 0 else "INSERT OR REPLACE"
            self.sql.execute(
                f"{verb} INTO lg_writes (ns, checkpoint_id, task_id, idx, channel, type, value, task_path)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (ns, checkpoint_id, task_id, idx, channel, type_, value, task_path),
            )

    def _row(self, row: tuple[Any, ...]) -> dict[str, Any]:
        ns, checkpoint_id, parent, type_, data, meta = row
        writes = self.sql.execute(
            "SELECT task_id, channel, type, value FROM lg_writes WHERE ns = ? AND checkpoint_id = ?"
            " ORDER BY task_path, task_id, idx",
            (ns, checkpoint_id),
        )
        return {
            "ns": ns,
            "id": checkpoint_id,
            "parent": parent,
            "type": type_,
            "checkpoint": encode(data),
            "metadata": orjson.loads(meta),
            "writes": [[task, channel, t, encode(value)] for task, channel, t, value in writes],
        }

    @callable(readonly=True)
    async def get(self, ns: str, checkpoint_id: str | None = None) -> dict[str, Any] | None:
        """The checkpoint ``checkpoint_id`` of namespace ``ns`` (the newest when ``None``) with its
        pending writes in LangGraph's order; ``None`` when there is none."""
        columns = "ns, id, parent, type, checkpoint, metadata"
        if checkpoint_id is None:
            row = self.sql.one(
                f"SELECT {columns} FROM lg_checkpoints WHERE ns = ? ORDER BY id DESC LIMIT 1", (ns,)
            )
        else:
            row = self.sql.one(
                f"SELECT {columns} FROM lg_checkpoints WHERE ns = ? AND id = ?", (ns, checkpoint_id)
            )
        return None if row is None else self._row(row)

    @callable(readonly=True)
    async def page(
        self,
        ns: str | None = None,
        checkpoint_id: str | None = None,
        before: str | None = None,
        after: list[str] | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = PAGE_ROWS,
    ) -> list[dict[str, Any]]:
        """Checkpoints newest first (by id, then namespace), of namespace ``ns`` (all for ``None``), with
        id ``checkpoint_id``, older than ``before``, past the cursor ``after`` ([id, ns] of the last one
        of the previous page), whose metadata holds every pair of ``filter``: at most ``limit`` (at most
        :data:`PAGE_ROWS`) and about :data:`PAGE_BYTES`."""
        where, params = ["1"], []
        for clause, value in (("ns = ?", ns), ("id = ?", checkpoint_id), ("id < ?", before)):
            if value is not None:
                where.append(clause)
                params.append(value)
        if after is not None:
            if len(after) != 2:
                raise RpcError("invalid_arguments", "after is [checkpoint_id, ns]")
            where.append("(id, ns) < (?, ?)")
            params += after
        limit = max(0, min(limit, PAGE_ROWS))
        found: list[dict[str, Any]] = []
        size = 0
        for ns_, id_, meta in self.sql.execute(
            f"SELECT ns, id, metadata FROM lg_checkpoints WHERE {' AND '.join(where)}"
            " ORDER BY id DESC, ns DESC",
            tuple(params),
        ):
            if len(found) >= limit or size > PAGE_BYTES:
                break
            if filter:
                stored = orjson.loads(meta)
                if not all(stored.get(key) == value for key, value in filter.items()):
                    continue
            row = self.sql.one(
                "SELECT ns, id, parent, type, checkpoint, metadata FROM lg_checkpoints"
                " WHERE ns = ? AND id = ?",
                (ns_, id_),
            )
            assert row is not None
            found.append(self._row(row))
            size += len(row[4]) + sum(len(w[3]) for w in found[-1]["writes"])
        return found

    def _drop_where(self, where: str, params: tuple[Any, ...]) -> None:
        self.sql.execute(
            "DELETE FROM lg_writes WHERE (ns, checkpoint_id) IN"
            f" (SELECT ns, id FROM lg_checkpoints WHERE {where})",
            params,
        )
        self.sql.execute(f"DELETE FROM lg_checkpoints WHERE {where}", params)

    @callable
    async def delete_thread(self) -> None:
        """Remove every checkpoint and write of the thread."""
        self.sql.execute("DELETE FROM lg_writes")
        self.sql.execute("DELETE FROM lg_checkpoints")

    @callable
    async def delete_runs(self, run_ids: list[str]) -> None:
        """Remove the checkpoints of the runs ``run_ids`` (metadata ``run_id``) and their writes."""
        for run_id in run_ids:
            self._drop_where("run_id = ?", (run_id,))

    @callable
    async def prune(self, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only the newest checkpoint of each namespace (and its writes);
        ``delete``: remove everything."""
        if strategy == "delete":
            await self.delete_thread()
        elif strategy == "keep_latest":
            self._drop_where(
                "id < (SELECT MAX(c.id) FROM lg_checkpoints AS c WHERE c.ns = lg_checkpoints.ns)", ()
            )
        else:
            raise RpcError("invalid_arguments", f"strategy must be one of {STRATEGIES}, got {strategy!r}")


class RunIndex(Actor):
    """Which threads each run wrote checkpoints to (for ``delete_for_runs``)."""

    kind = INDEX_KIND
    initial_state = {}
    migrations = (
        "CREATE TABLE lg_runs (run_id TEXT NOT NULL, thread_id TEXT NOT NULL,"
        " PRIMARY KEY (run_id, thread_id))",
        "CREATE INDEX lg_runs_thread ON lg_runs (thread_id)",
    )

    @callable
    async def record(self, run_id: str, thread_id: str) -> None:
        """Note that run ``run_id`` writes to thread ``thread_id``."""
        self.sql.execute(
            "INSERT OR IGNORE INTO lg_runs (run_id, thread_id) VALUES (?, ?)", (run_id, thread_id)
        )

    @callable(readonly=True)
    async def threads(self, run_ids: list[str]) -> list[str]:
        """The threads the runs ``run_ids`` wrote to."""
        found: set[str] = set()
        for run_id in run_ids:
            found.update(
                t for (t,) in self.sql.execute("SELECT thread_id FROM lg_runs WHERE run_id = ?", (run_id,))
            )
        return sorted(found)

    @callable
    async def forget(self, run_ids: list[str] | None = None, thread_id: str | None = None) -> None:
        """Forget the runs ``run_ids``, or every run of ``thread_id``."""
        for run_id in run_ids or []:
            self.sql.execute("DELETE FROM lg_runs WHERE run_id = ?", (run_id,))
        if thread_id is not None:
            self.sql.execute("DELETE FROM lg_runs WHERE thread_id = ?", (thread_id,))
