"""The SQL that reads and writes the workflow tables in the actor's own file (their schema:
:mod:`roost.workflows.schema`).

Every method runs on the turn's connection (``actor.extension.connection()``), inside the turn's
transaction: what an advance writes commits with the turn, or not at all. One generation of steps is
kept per workflow (a restart drops the old one; its history stays, pruned to the newest
:data:`~roost.workflows.model.MAX_HISTORY` rows).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from roost.workflows.model import (
    MAX_HISTORY,
    MAX_RESULT_BYTES,
    StepKind,
    StepStatus,
    WorkflowStatus,
    refuse,
)

__all__ = [
    "BranchRow",
    "StepRow",
    "WorkflowRow",
    "WorkflowStore",
    "encode",
]


def encode(value: Any, what: str) -> str:
    """``value`` as JSON text, refused (``too_large``) past :data:`MAX_RESULT_BYTES`, or ``TypeError``
    if it is not JSON."""
    data = orjson.dumps(value)
    if len(data) > MAX_RESULT_BYTES:
        raise refuse("too_large", f"{what} is {len(data)} bytes of JSON, over the {MAX_RESULT_BYTES} limit")
    return data.decode()


def _load(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


@dataclass(frozen=True, slots=True)
class WorkflowRow:
    id: str
    name: str
    input: Any
    status: WorkflowStatus
    generation: int
    result: Any
    error: str | None
    reason: str | None
    waiting: Any
    created_by: str | None
    created_at: float
    updated_at: float
    nonce: str

    @property
    def step_prefix(self) -> str:
        """What every step id of this workflow starts with: ``{id}:{nonce}`` (``{id}`` for a row
        written before the nonce existed, so that its attempts keep their keys)."""
        return f"{self.id}:{self.nonce}" if self.nonce else self.id

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "status": str(self.status),
            "generation": self.generation,
            "result": self.result,
            "error": self.error,
            "reason": self.reason,
            "waiting": self.waiting,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "nonce": self.nonce,
        }


@dataclass(frozen=True, slots=True)
class StepRow:
    position: int
    name: str
    kind: StepKind
    status: StepStatus
    attempt: int
    run: int
    retryable: bool
    result: Any
    error: str | None
    wake_at: float | None
    started_at: float
    updated_at: float
    progress: Any = None
    checkpoint: Any = None
    slot: str | None = None

    def to_json(self, *, result: bool = True) -> dict[str, Any]:
        """The step as JSON; without its ``result`` when ``result`` is false (status pages)."""
        out = {
            "position": self.position,
            "name": self.name,
            "kind": str(self.kind),
            "status": str(self.status),
            "attempt": self.attempt,
            "run": self.run,
            "error": self.error,
            "wake_at": self.wake_at,
            "progress": self.progress,
        }
        if self.slot is not None:
            out["slot"] = self.slot
        if result:
            out["result"] = self.result
        return out


@dataclass(frozen=True, slots=True)
class BranchRow:
    """One branch of a ``parallel`` join (its own outside attempts)."""

    position: int
    branch: str
    ord: int
    status: StepStatus
    attempt: int
    run: int
    retryable: bool
    result: Any
    error: str | None
    wake_at: float | None
    updated_at: float
    progress: Any = None
    checkpoint: Any = None

    def to_json(self, *, result: bool = True) -> dict[str, Any]:
        out = {
            "branch": self.branch,
            "status": str(self.status),
            "attempt": self.attempt,
            "run": self.run,
            "error": self.error,
            "wake_at": self.wake_at,
            "progress": self.progress,
        }
        if result:
            out["result"] = self.result
        return out


T = TypeVar("T")

_BRANCH = (
    "position, branch, ord, status, attempt, run, retryable, result, error, wake_at, updated_at,"
    " progress, checkpoint"
)


def _branch(row: tuple[Any, ...]) -> BranchRow:
    v = list(row)
    return BranchRow(
        v[0], v[1], v[2], StepStatus(v[3]), v[4], v[5], bool(v[6]), _load(v[7]), v[8], v[9], v[10],
        _load(v[11]), _load(v[12]),
    )  # fmt: skip


_WF = (
    "id, name, input, status, generation, result, error, reason, waiting, created_by, created_at, updated_at,"
    " nonce"
)
_STEP = (
    "position, name, kind, status, attempt, run, retryable, result, error, wake_at, started_at, updated_at,"
    " progress, checkpoint, slot"
)
#: The condition on ``roost_wf`` of a finished workflow.
_ENDED = f"status IN ('{WorkflowStatus.COMPLETED}', '{WorkflowStatus.FAILED}', '{WorkflowStatus.CANCELLED}')"
#: The statuses of a step or branch that is over for good: no later attempt needs its checkpoint.
_OVER = f"('{StepStatus.COMPLETED}', '{StepStatus.FAILED}')"
#: The tables of a workflow's rows (besides its own row in ``roost_wf``).
_WF_TABLES = ("roost_wf_steps", "roost_wf_branches", "roost_wf_events", "roost_wf_history")


def _wf(row: tuple[Any, ...]) -> WorkflowRow:
    v = list(row)
    return WorkflowRow(
        v[0], v[1], _load(v[2]), WorkflowStatus(v[3]), v[4], _load(v[5]), v[6], v[7], _load(v[8]), *v[9:]
    )


def _step(row: tuple[Any, ...]) -> StepRow:
    v = list(row)
    return StepRow(
        v[0], v[1], StepKind(v[2]), StepStatus(v[3]), v[4], v[5], bool(v[6]), _load(v[7]), v[8], v[9],
        v[10], v[11], _load(v[12]), _load(v[13]), v[14],
    )  # fmt: skip


#: Hears each history line as it is written: ``(workflow id, entry)``, the entry as
#: :meth:`WorkflowStore.history` gives it (``Workflows.on_workflow_history``).
HistoryHook = Callable[[str, dict[str, Any]], None]
_HISTORY_KEYS = ("seq", "at", "generation", "event", "position", "name", "attempt")


class WorkflowStore:
    """One actor's workflows, through the turn's connection. ``on_log``: called with every history
    line this store writes, right after it is written (in the same transaction)."""

    __slots__ = ("conn", "on_log")

    def __init__(self, conn: sqlite3.Connection, on_log: HistoryHook | None = None) -> None:
        self.conn = conn
        self.on_log = on_log

    def _rows(self, sql: str, args: Sequence[Any], build: Callable[[tuple[Any, ...]], T]) -> list[T]:
        """Every row ``sql`` reads, each made into its object by ``build``."""
        return [build(row) for row in self.conn.execute(sql, args).fetchall()]

    def _row(self, sql: str, args: Sequence[Any], build: Callable[[tuple[Any, ...]], T]) -> T | None:
        """The first row ``sql`` reads made into its object by ``build``; None if it reads none."""
        row = self.conn.execute(sql, args).fetchone()
        return None if row is None else build(row)

    # -- workflows ----------------------------------------------------------------------------------
    def get(self, wid: str) -> WorkflowRow | None:
        return self._row(f"SELECT {_WF} FROM roost_wf WHERE id = ?", (wid,), _wf)

    def insert(self, wid: str, name: str, input_json: str, by: str | None, now: float, nonce: str) -> None:
        self.conn.execute(
            "INSERT INTO roost_wf (id, name, input, status, generation, created_by, created_at, updated_at,"
            " nonce) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?)",
            (wid, name, input_json, WorkflowStatus.RUNNING, by, now, now, nonce),
        )

    def set_status(
        self,
        wid: str,
        status: WorkflowStatus,
        now: float,
        *,
        result: str | None = None,
        error: str | None = None,
        reason: str | None = None,
        waiting: Any = None,
    ) -> None:
        self.conn.execute(
            "UPDATE roost_wf SET status = ?, result = ?, error = ?, reason = ?, waiting = ?, updated_at = ?"
            " WHERE id = ?",
            (
                status,
                result,
                error,
                reason,
                None if waiting is None else orjson.dumps(waiting).decode(),
                now,
                wid,
            ),
        )

    def new_generation(self, wid: str, now: float) -> int:
        """The next generation: its steps, branches and unconsumed events dropped (an approval or
        event sent to the old one does not carry over), its history kept."""
        for table in ("roost_wf_steps", "roost_wf_branches", "roost_wf_events"):
            self.conn.execute(f"DELETE FROM {table} WHERE workflow_id = ?", (wid,))
        self.conn.execute(
            "UPDATE roost_wf SET generation = generation + 1, status = ?, result = NULL, error = NULL,"
            " reason = NULL, waiting = NULL, updated_at = ? WHERE id = ?",
            (WorkflowStatus.RUNNING, now, wid),
        )
        generation: int = self.conn.execute(
            "SELECT generation FROM roost_wf WHERE id = ?", (wid,)
        ).fetchone()[0]
        return generation

    def drop_steps(self, wid: str, position: int) -> None:
        """Drop the steps (and branches) at ``position`` and after."""
        for table in ("roost_wf_steps", "roost_wf_branches"):
            self.conn.execute(f"DELETE FROM {table} WHERE workflow_id = ? AND position >= ?", (wid, position))

    def rewind(self, wid: str, position: int, now: float, nonce: str) -> None:
        """Drop the steps (and branches) at ``position`` and after, and the unconsumed events; the
        workflow running again under ``nonce``."""
        self.drop_steps(wid, position)
        self.conn.execute("DELETE FROM roost_wf_events WHERE workflow_id = ?", (wid,))
        self.set_status(wid, WorkflowStatus.RUNNING, now)
        self.conn.execute("UPDATE roost_wf SET nonce = ? WHERE id = ?", (nonce, wid))

    def page(self, status: str | None, limit: int, after: str | None) -> list[WorkflowRow]:
        where, args = ["id > ?"], [after or ""]
        if status is not None:
            where.append("status = ?")
            args.append(status)
        return self._rows(
            f"SELECT {_WF} FROM roost_wf WHERE {' AND '.join(where)} ORDER BY id LIMIT ?", (*args, limit), _wf
        )

    def finished_count(self) -> int:
        """How many workflows are finished (completed, failed, cancelled)."""
        return int(self.conn.execute(f"SELECT count(*) FROM roost_wf WHERE {_ENDED}").fetchone()[0])

    def oldest_finished(self) -> tuple[str, float] | None:
        """The id and end of the finished workflow that ended first (the next to be pruned)."""
        row = self.conn.execute(
            f"SELECT id, updated_at FROM roost_wf WHERE {_ENDED} ORDER BY updated_at, id LIMIT 1"
        ).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))

    def prune_finished(self, count: int, max_rows: int) -> int:
        """Delete at most ``count`` of the finished workflows that ended first, with their rows,
        stopping before the one whose rows would take the deleted rows past ``max_rows`` (the first
        is always deleted); how many went."""
        old = self.conn.execute(
            f"SELECT id FROM roost_wf WHERE {_ENDED} ORDER BY updated_at, id LIMIT ?", (max(0, count),)
        ).fetchall()
        rows = 0
        for n, (wid,) in enumerate(old):
            rows += self.row_count(str(wid))
            if n and rows > max_rows:
                return n
            self.delete(str(wid))
        return len(old)

    def row_count(self, wid: str) -> int:
        """The rows of ``wid`` in the tables a delete empties of it, its own row left out."""
        count = "SELECT count(*) FROM {} WHERE workflow_id = ?"
        return sum(int(self.conn.execute(count.format(t), (wid,)).fetchone()[0]) for t in _WF_TABLES)

    def delete(self, wid: str) -> None:
        for table in _WF_TABLES:
            self.conn.execute(f"DELETE FROM {table} WHERE workflow_id = ?", (wid,))
        self.conn.execute("DELETE FROM roost_wf WHERE id = ?", (wid,))

    # -- steps --------------------------------------------------------------------------------------
    def set_wake(self, wid: str, position: int, at: float) -> None:
        """A running step's lease now ends at ``at`` (its lease wake-up found its run alive)."""
        self.conn.execute(
            "UPDATE roost_wf_steps SET wake_at = ? WHERE workflow_id = ? AND position = ?",
            (at, wid, position),
        )

    def fence(self, wid: str, position: int) -> tuple[int, str, str, str, int, int] | None:
        """What decides whether an outside attempt at ``position`` is current, in one read of a few
        columns (an attempt's turns ask it, a streamed batch every few milliseconds): the workflow's
        generation, status and nonce, and the step's status, attempt and run (None: no such step)."""
        row = self.conn.execute(
            "SELECT w.generation, w.status, w.nonce, s.status, s.attempt, s.run FROM roost_wf w"
            " JOIN roost_wf_steps s ON s.workflow_id = w.id AND s.position = ? WHERE w.id = ?",
            (position, wid),
        ).fetchone()
        return (
            None
            if row is None
            else (int(row[0]), str(row[1]), str(row[2]), str(row[3]), int(row[4]), int(row[5]))
        )

    def steps(self, wid: str) -> list[StepRow]:
        return self._rows(
            f"SELECT {_STEP} FROM roost_wf_steps WHERE workflow_id = ? ORDER BY position", (wid,), _step
        )

    def step(self, wid: str, position: int) -> StepRow | None:
        return self._row(
            f"SELECT {_STEP} FROM roost_wf_steps WHERE workflow_id = ? AND position = ?",
            (wid, position),
            _step,
        )

    def put_step(
        self,
        wid: str,
        position: int,
        name: str,
        kind: StepKind,
        status: StepStatus,
        now: float,
        *,
        attempt: int = 0,
        run: int = 0,
        retryable: bool = True,
        result: str | None = None,
        error: str | None = None,
        wake_at: float | None = None,
        slot: str | None = None,
    ) -> None:
        self.conn.execute(
            "INSERT INTO roost_wf_steps (workflow_id, position, name, kind, status, attempt, run, retryable,"
            " result, error, wake_at, started_at, updated_at, slot)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (workflow_id, position) DO UPDATE SET status = excluded.status,"
            " attempt = excluded.attempt, run = excluded.run, retryable = excluded.retryable,"
            " result = excluded.result, error = excluded.error, wake_at = excluded.wake_at,"
            " updated_at = excluded.updated_at, slot = coalesce(excluded.slot, slot),"
            f" checkpoint = CASE WHEN excluded.status IN {_OVER} THEN NULL ELSE checkpoint END",
            (
                wid,
                position,
                name,
                kind,
                status,
                attempt,
                run,
                int(retryable),
                result,
                error,
                wake_at,
                now,
                now,
                slot,
            ),
        )

    # -- concurrency slots ----------------------------------------------------------------------------
    def slot_running(self, slot: str) -> int:
        """Places of ``slot`` taken now: its steps running, and those lost with their process whose
        rerun has not started yet (it keeps its place: a lost step of a paused workflow stays
        ``lost`` until the resume), of workflows not finished (a finished one's run is over)."""
        count: int = self.conn.execute(
            "SELECT count(*) FROM roost_wf_steps s JOIN roost_wf w ON w.id = s.workflow_id"
            f" WHERE s.slot = ? AND s.status IN (?, ?) AND NOT w.{_ENDED}",
            (slot, StepStatus.RUNNING, StepStatus.LOST),
        ).fetchone()[0]
        return count

    def queue_for_slot(self, wid: str, position: int, slot: str) -> None:
        """The step's place in ``slot``'s queue: after every step waiting in it (the order matters only
        among those waiting)."""
        self.conn.execute(
            "UPDATE roost_wf_steps SET slot_seq ="
            " (SELECT coalesce(max(slot_seq), 0) + 1 FROM roost_wf_steps WHERE status = ? AND slot = ?)"
            " WHERE workflow_id = ? AND position = ?",
            (StepStatus.WAITING, slot, wid, position),
        )

    def slot_queue(self, slot: str | None = None) -> list[tuple[str, str, int]]:
        """``(slot, workflow id, position)`` of the steps waiting for a slot (``slot``'s, or every
        slot's), in the order they queued, of workflows that can go on (running or waiting: not
        paused)."""
        where, more = ("", ()) if slot is None else (" AND s.slot = ?", (slot,))
        rows = self.conn.execute(
            "SELECT s.slot, s.workflow_id, s.position FROM roost_wf_steps s JOIN roost_wf w"
            " ON w.id = s.workflow_id WHERE s.slot IS NOT NULL AND s.status = ? AND w.status IN (?, ?)"
            f"{where} ORDER BY s.slot, s.slot_seq",
            (
                StepStatus.WAITING,
                WorkflowStatus.RUNNING,
                WorkflowStatus.WAITING,
                *more,
            ),
        ).fetchall()
        return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    def set_progress(self, wid: str, position: int, progress: str | None, checkpoint: str | None) -> None:
        """The step's progress report (JSON text; None clears it) and, unless None, its checkpoint."""
        self.conn.execute(
            "UPDATE roost_wf_steps SET progress = ?, checkpoint = coalesce(?, checkpoint)"
            " WHERE workflow_id = ? AND position = ?",
            (progress, checkpoint, wid, position),
        )

    def set_branch_progress(
        self, wid: str, position: int, branch: str, progress: str | None, checkpoint: str | None
    ) -> None:
        """:meth:`set_progress` of a branch of the join at ``position``."""
        self.conn.execute(
            "UPDATE roost_wf_branches SET progress = ?, checkpoint = coalesce(?, checkpoint)"
            " WHERE workflow_id = ? AND position = ? AND branch = ?",
            (progress, checkpoint, wid, position, branch),
        )

    # -- branches of parallel joins -------------------------------------------------------------------
    def branches(self, wid: str, position: int | None = None) -> list[BranchRow]:
        """The branches of the join at ``position`` (every join's, by position, when None), in the
        order the body gave them."""
        where = "workflow_id = ?"
        args: list[Any] = [wid]
        if position is not None:
            where += " AND position = ?"
            args.append(position)
        return self._rows(
            f"SELECT {_BRANCH} FROM roost_wf_branches WHERE {where} ORDER BY position, ord", args, _branch
        )

    def branch(self, wid: str, position: int, branch: str) -> BranchRow | None:
        return self._row(
            f"SELECT {_BRANCH} FROM roost_wf_branches WHERE workflow_id = ? AND position = ? AND branch = ?",
            (wid, position, branch),
            _branch,
        )

    def put_branch(
        self,
        wid: str,
        position: int,
        branch: str,
        ord: int,
        status: StepStatus,
        now: float,
        *,
        attempt: int,
        run: int,
        retryable: bool = True,
        result: str | None = None,
        error: str | None = None,
        wake_at: float | None = None,
    ) -> None:
        self.conn.execute(
            "INSERT INTO roost_wf_branches (workflow_id, position, branch, ord, status, attempt, run,"
            " retryable, result, error, wake_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (workflow_id, position, branch) DO UPDATE SET status = excluded.status,"
            " attempt = excluded.attempt, run = excluded.run, retryable = excluded.retryable,"
            " result = excluded.result, error = excluded.error, wake_at = excluded.wake_at,"
            " updated_at = excluded.updated_at,"
            f" checkpoint = CASE WHEN excluded.status IN {_OVER} THEN NULL ELSE checkpoint END",
            (wid, position, branch, ord, status, attempt, run, int(retryable), result, error, wake_at, now),
        )

    # -- events -------------------------------------------------------------------------------------
    def add_event(self, wid: str, name: str, payload_json: str, by: str | None, now: float) -> None:
        self.conn.execute(
            "INSERT INTO roost_wf_events (workflow_id, name, payload, sent_by, sent_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (wid, name, payload_json, by, now),
        )

    def pending_events(self, wid: str) -> int:
        count: int = self.conn.execute(
            "SELECT count(*) FROM roost_wf_events WHERE workflow_id = ?", (wid,)
        ).fetchone()[0]
        return count

    def take_event(self, wid: str, name: str) -> tuple[Any, str | None] | None:
        """The oldest unconsumed event ``name`` of ``wid`` (its payload and sender), consumed."""
        row = self.conn.execute(
            "SELECT id, payload, sent_by FROM roost_wf_events WHERE workflow_id = ? AND name = ?"
            " ORDER BY id LIMIT 1",
            (wid, name),
        ).fetchone()
        if row is None:
            return None
        self.conn.execute("DELETE FROM roost_wf_events WHERE id = ?", (row[0],))
        return orjson.loads(row[1]), row[2]

    # -- history ------------------------------------------------------------------------------------
    def log(
        self,
        wid: str,
        generation: int,
        event: str,
        now: float,
        *,
        position: int | None = None,
        name: str | None = None,
        attempt: int | None = None,
        detail: Any = None,
    ) -> None:
        seq: int = self.conn.execute(
            "INSERT INTO roost_wf_history (workflow_id, seq, at, generation, event, position, name, attempt,"
            " detail) SELECT ?, coalesce(max(seq), 0) + 1, ?, ?, ?, ?, ?, ?, ? FROM roost_wf_history"
            " WHERE workflow_id = ? RETURNING seq",
            (
                wid,
                now,
                generation,
                event,
                position,
                name,
                attempt,
                None if detail is None else orjson.dumps(detail).decode(),
                wid,
            ),
        ).fetchone()[0]
        if seq > MAX_HISTORY and seq % 100 == 0:
            self.conn.execute(
                "DELETE FROM roost_wf_history WHERE workflow_id = ? AND seq <= ?", (wid, seq - MAX_HISTORY)
            )
        if self.on_log is not None:
            line = (seq, now, generation, event, position, name, attempt)
            self.on_log(wid, {**dict(zip(_HISTORY_KEYS, line, strict=True)), "detail": detail})

    def history(self, wid: str, after: int, limit: int) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT seq, at, generation, event, position, name, attempt, detail FROM roost_wf_history"
            " WHERE workflow_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (wid, after, limit),
        ).fetchall()
        return [{**dict(zip(_HISTORY_KEYS, r[:7], strict=True)), "detail": _load(r[7])} for r in rows]
