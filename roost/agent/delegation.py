"""Delegation: a step of a run handed to worker agents (other actors, by name) — the
orchestrator-workers shape inside the agent runtime (docs/design.md, *Delegation*).

**The orchestrator's side.** A tool made by :func:`delegate_tool` is a background job of the run
(:mod:`roost.agent.jobs`); its attempt, outside the agent's turns:

1. ``plan`` (a fenced turn of the attempt): one row of ``roost_agent_delegations`` per worker, keyed
   by its task id ``{run_id}:{item_id}:{n}:{worker}`` (``n``: how many times the item has run, so a
   retry of the attempt or its rerun after a lost process finds the same tasks, and
   ``continue_run`` makes new ones);
2. for each task not dispatched yet: the worker's ``take_task`` (idempotent on the task id: one run
   per task however often it is asked), then ``dispatched`` with the worker's run id (a fenced turn);
3. wait until every task has ended: the workers' reports come back through the orchestrator's
   mailbox (``task_report``, called from each worker's durable wake-ups), each one a row update and
   a ``delegation_progress`` event of the run, and wake the attempt; the job's ``progress`` says how
   many have ended (and renews its lease). Then the tool answers every worker's output, or fails,
   not retried, naming the workers that did not complete.

A run that ends any other way (cancelled, failed) cancels its tasks not ended, from the turn that
ends it: the workflow ``roost.delegation_cancel``, one outside branch per task calling its worker's
``cancel_task``, retried until the worker confirms.

**The worker's side** (any agent): ``take_task`` starts a background turn of the task's text in the
session ``task:{origin kind}/{origin name}``; each step its run completes and the run's end are
reported to the origin from durable wake-ups (at least once; the origin's ``task_report`` ignores a
repeat, a stale progress and anything after the end). ``cancel_task`` cancels the run; one that
comes before the take leaves a tombstone, and the take is refused. The three callables are for
callers in the process only (actors, never a connection).

Guarantees (tests in ``tests/test_delegation.py`` and ``tests/test_delegation_crash.py``):

- **One run per task**: a dispatch repeated (a retry, a rerun after a kill of either side) starts
  nothing new.
- **Workers' progress reaches the orchestrator's run**: ``get_run(run_id)["delegations"]`` shows each
  task's status, progress, the worker's run and how often it was dispatched, and each report is a
  ``delegation_progress`` event of the orchestrator.
- **Partial completion survives a crash of either side**: a task that ended stays ended and is not
  dispatched again; one under way goes on in its worker.
- **A run that ends otherwise cancels its workers**: every task not ended ends cancelled, or never
  starts; a second cancel after ``continue_run`` reaches the tasks made since.
- **continue_run keeps what was answered**: a task that completed is not handed out again.
- **Nothing waits for ever**: a delegation has a deadline (``timeout``); a refusal asking again
  cannot change fails the step at once; a helper whose lead was deleted stops, and makes no lead.
- **Bounded**: 8 tasks a delegation, 4 levels of nesting, no lead delegating to its own kind.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import orjson
from pydantic import BaseModel, Field, model_validator

from roost.actors import RetryPolicy, RpcError, UnknownKind
from roost.agent.catalog import Tool, ToolContext
from roost.agent.context import Part
from roost.agent.errors import InvalidTransition, PolicyRefused
from roost.agent.models import arguments_in
from roost.agent.status import FINISHED, EventStatus, RunStatus
from roost.storage import Migration
from roost.workflows.engine import engine_of

if TYPE_CHECKING:
    from roost.actors import Actor
    from roost.agent.store import Row
    from roost.workflows import Step, StepAttempt

__all__ = [
    "CANCEL_WORKFLOW",
    "DELEGATION_MIGRATIONS",
    "Delegations",
    "TaskSpec",
    "Tasks",
    "delegate_tool",
]

#: The workflow that carries a run's cancel to the workers of its tasks not ended.
CANCEL_WORKFLOW = "roost.delegation_cancel"
MAX_TASKS = 8
#: How deep delegation nests (a worker that delegates in turn is one level more); deeper is refused.
MAX_DEPTH = 4
#: A delegation's deadline by default (seconds on the runtime's clock): past it, its tasks not ended
#: are cancelled and the step fails, so a worker that never answers cannot hold its lead for ever.
TIMEOUT = 3600.0
#: A worker's refusals that asking again cannot change: the step fails at once, naming the worker.
FINAL_CODES = frozenset({"not_found", "method_not_found", "invalid_arguments", "policy_refused",
                         "invalid_transition"})  # fmt: skip
#: What a task's status is once it will not change.
ENDED = ("completed", "failed", "cancelled")
#: A worker's cancel is asked again until it confirms (an hour and more of attempts).
CONFIRM = RetryPolicy(max_attempts=200, base=0.5, cap=30.0)
#: A worker's report is sent again until the origin takes it.
REPORT = RetryPolicy(max_attempts=50, base=0.5, cap=30.0)

DELEGATION_MIGRATIONS: Sequence[Migration] = (
    """
    CREATE TABLE roost_agent_delegations (
        task_id       TEXT PRIMARY KEY,
        run_id        TEXT NOT NULL,
        item_id       TEXT NOT NULL,
        worker        TEXT NOT NULL,
        kind          TEXT NOT NULL,
        task          TEXT NOT NULL,
        status        TEXT NOT NULL,
        steps_done    INTEGER NOT NULL DEFAULT 0,
        worker_run_id TEXT,
        dispatches    INTEGER NOT NULL DEFAULT 0,
        result        TEXT,
        error         TEXT,
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX roost_agent_delegations_run ON roost_agent_delegations (run_id, created_at);
    CREATE TABLE roost_agent_tasks (
        task_id     TEXT PRIMARY KEY,
        origin_kind TEXT NOT NULL,
        origin_name TEXT NOT NULL,
        run_id      TEXT,
        turn_id     TEXT,
        status      TEXT NOT NULL,
        depth       INTEGER NOT NULL DEFAULT 1,
        created_at  REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX roost_agent_tasks_run ON roost_agent_tasks (run_id);
    """,
)


class TaskSpec(BaseModel):
    #: No dot: worker ``w`` of lead ``l`` is the actor ``l.w``, which no other pair may name.
    worker: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    task: str = Field(min_length=1, max_length=4000)


class Tasks(BaseModel):
    """What a delegating tool is asked: one task per worker (by name), 1 to 8, distinct workers."""

    tasks: list[TaskSpec] = Field(min_length=1, max_length=MAX_TASKS)

    @model_validator(mode="after")
    def _distinct(self) -> Tasks:
        if len({t.worker for t in self.tasks}) != len(self.tasks):
            raise ValueError("each task needs a worker of its own")
        return self


class WorkersDidNotComplete(Exception):
    """A task of the delegation failed or was cancelled: the tool fails, naming it (not retried)."""

    retryable = False


class Waiters:
    """The process's wake-ups of attempts waiting for their tasks (service ``agent.delegations``)."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = {}

    def arm(self, key: str) -> asyncio.Event:
        event = self.events.setdefault(key, asyncio.Event())
        event.clear()
        return event

    def wake(self, key: str) -> None:
        event = self.events.get(key)
        if event is not None:
            event.set()

    def forget(self, key: str) -> None:
        self.events.pop(key, None)

    async def stop(self) -> None:
        for event in self.events.values():
            event.set()
        self.events.clear()


def _split(text: str) -> dict[str, Any]:
    """The deterministic planner's tasks: the JSON after the tool's keyword, else the request's
    words shared between workers ``w1``..``w3``."""
    found = arguments_in(text, "delegate", "split")
    if found:
        return found
    words = text.split() or ["(nothing)"]
    size = max(1, -(-len(words) // 3))
    parts = [" ".join(words[i : i + size]) for i in range(0, len(words), size)]
    return {"tasks": [{"worker": f"w{i + 1}", "task": p} for i, p in enumerate(parts)]}


def delegate_tool(
    worker_kind: str,
    *,
    name: str = "delegate",
    keywords: tuple[str, ...] = ("delegate", "split"),
    description: str = "Hand tasks to worker agents by name and wait for their answers.",
    approval_mode: Any = "safe_readonly",
    timeout: float = TIMEOUT,
) -> Tool:
    """A tool that hands ``{"tasks": [{"worker", "task"}]}`` to agents of kind ``worker_kind``
    (the worker ``w`` is the actor ``{worker_kind}/{this agent's name}.{w}``) and answers their
    outputs by worker (see the module doc). ``timeout``: seconds from the delegation's first
    dispatch on the runtime's clock; past it the step fails and its open tasks are cancelled."""

    async def delegate(ctx: ToolContext, args: Tasks) -> dict[str, Any]:
        specs = [(t.worker, t.task) for t in args.tasks]
        rows: list[Row] = await ctx.turn(lambda a: a.orchestrator.delegations.plan(ctx, worker_kind, specs))
        waiters: Waiters = await ctx.turn(lambda a: a.orchestrator.delegations.waiters())
        key = str(ctx.item_id)
        try:
            for row in rows:
                if row["status"] == "pending":
                    await _dispatch(ctx, row)
            interval = await ctx.turn(lambda a: max(0.05, float(a.settings().heartbeat_interval)))
            deadline = min(r["created_at"] for r in rows) + timeout
            shown = -1
            while True:
                event = waiters.arm(key)
                rows, now = await ctx.turn(partial(_rows, [r["task_id"] for r in rows]))
                ended = [r for r in rows if r["status"] in ENDED]
                if len(ended) != shown:  # a tool_progress when it moves, not at every look
                    shown = len(ended)
                    await ctx.progress(shown, len(rows), f"{shown} of {len(rows)} workers done")
                if len(ended) == len(rows):
                    break
                if now >= deadline:
                    raise WorkersDidNotComplete(
                        f"workers did not answer within {timeout:g} s: "
                        f"{sorted(r['worker'] for r in rows if r['status'] not in ENDED)}"
                    )
                await _wait(event, ctx.sleep(min(interval, max(deadline - now, 0.0))))
        finally:
            waiters.forget(key)
        failed = {r["worker"]: r["status"] for r in rows if r["status"] != "completed"}
        if failed:
            raise WorkersDidNotComplete(f"workers did not complete: {failed}")
        outputs = {r["worker"]: r["output"] for r in rows}
        merged = "; ".join(f"{w}: {_short(o)}" for w, o in outputs.items())
        return {"summary": f"{len(rows)} worker{'s' if len(rows) > 1 else ''} answered ({merged})",
                "outputs": outputs}  # fmt: skip

    delegate.worker_kind = worker_kind  # type: ignore[attr-defined]  # (Agent.on_register reads it)
    return Tool(
        name=name,
        fn=delegate,
        args_model=Tasks,
        description=description,
        approval_mode=approval_mode,
        background=True,
        keywords=keywords,
        plan_args=_split,
    )


def _short(output: Any, words: int = 12) -> str:
    """A worker's answer as the merged summary shows it: its first words."""
    text = " ".join(str(output or "").split())
    cut = text.split(" ")
    return " ".join(cut[:words]) + ("…" if len(cut) > words else "")


def _rows(task_ids: list[str], agent: Any) -> tuple[list[Row], float]:
    """The tasks' rows and the turn's time (a fenced turn: a cancelled job's attempt ends here)."""
    rows: list[Row] = agent.orchestrator.delegations.rows(task_ids)
    return rows, float(agent.extension.now)


async def _dispatch(ctx: ToolContext, row: Row) -> None:
    """Start the task's run in its worker (idempotent there), then record it. A refusal asking
    again cannot change (no such kind, not an agent, the task cancelled, nested too deep) fails
    the step at once, not retried."""

    def ref(agent: Any) -> Any:
        origin = local_name(agent.name)
        worker = agent.actor(row["kind"], worker_name(origin, row["worker"]))
        return worker, agent.kind, origin, agent.orchestrator.delegations.depth(ctx.run_id) + 1

    worker, kind, origin, depth = await ctx.turn(ref)
    try:
        started: dict[str, Any] = await worker.call(
            "take_task", kind, origin, row["task_id"], row["task"], depth
        )
    except UnknownKind as exc:
        raise WorkersDidNotComplete(f"worker {row['worker']!r}: {exc}") from None
    except RpcError as exc:
        if exc.code in FINAL_CODES:
            raise WorkersDidNotComplete(f"worker {row['worker']!r} refused its task: {exc}") from None
        raise
    await ctx.turn(lambda a: a.orchestrator.delegations.dispatched(row["task_id"], started["run_id"]))


async def _wait(event: asyncio.Event, sleep: Any) -> None:
    """Until ``event`` is set or ``sleep`` (a coroutine on the runtime's clock) ends."""
    tasks = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(sleep)]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def worker_name(origin: str, worker: str) -> str:
    """The actor name of ``worker`` of the agent ``origin``: ``{origin}.{worker}``."""
    return f"{origin}.{worker}"


def local_name(name: str) -> str:
    """An actor's name within its tenant (``Actor.actor`` puts the tenant back)."""
    return name.rpartition("\x00")[2]


def _decode(row: Row) -> Row:
    """A task's row as the attempt and ``get_run`` see it: ``progress`` (steps its run completed)
    and ``output`` (its run's answer)."""
    row["progress"] = row.pop("steps_done")
    row["output"] = row.pop("result")
    return row


class Delegations(Part):
    """Both sides of delegation for this agent (see the module doc); every method in a turn."""

    # -- the orchestrator's side ---------------------------------------------------------------------
    def waiters(self) -> Waiters:
        return self.agent.extension.process.service("agent.delegations", lambda _: Waiters())

    def plan(self, ctx: ToolContext, kind: str, specs: list[tuple[str, str]]) -> list[Row]:
        """The delegation's rows, one per worker, made once per run of the item; a task that
        completed in an earlier run of the item (before a cancel and ``continue_run``) is kept, not
        done again. Refused past :data:`MAX_DEPTH` nested delegations."""
        if self.depth(ctx.run_id) + 1 > MAX_DEPTH:
            raise WorkersDidNotComplete(f"delegation nested deeper than {MAX_DEPTH} levels")
        item = self.store.get("items", str(ctx.item_id))
        n = item["runs"] if item is not None else 0
        now = self.now
        ids = []
        for worker, task in specs:
            text = self.records.clean_text(task)
            task_id = f"{ctx.run_id}:{ctx.item_id}:{n}:{worker}"
            if self.store.scalar("SELECT 1 FROM roost_agent_delegations WHERE task_id = ?", (task_id,)):
                ids.append(task_id)  # this run of the item made it already (a retry, a rerun)
                continue
            done = self.store.scalar(
                "SELECT task_id FROM roost_agent_delegations WHERE run_id = ? AND item_id = ?"
                " AND worker = ? AND kind = ? AND task = ? AND status = 'completed'"
                " ORDER BY created_at DESC",
                (ctx.run_id, ctx.item_id, worker, kind, text),
            )  # fmt: skip
            if done is not None:
                ids.append(str(done))
                continue
            self.store.execute(
                "INSERT INTO roost_agent_delegations (task_id, run_id, item_id, worker, kind, task,"
                " status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
                (task_id, ctx.run_id, ctx.item_id, worker, kind, text, now, now),
            )  # fmt: skip
            ids.append(task_id)
        return self.rows(ids)

    def depth(self, run_id: str) -> int:
        """How deep in delegation ``run_id`` is: 0 for a run nobody delegated, else its task's depth."""
        found = self.store.scalar("SELECT depth FROM roost_agent_tasks WHERE run_id = ?", (run_id,))
        return int(found) if found is not None else 0

    def rows(self, task_ids: Sequence[str]) -> list[Row]:
        marks = ", ".join("?" * len(task_ids))
        found = {
            r["task_id"]: _decode(r)
            for r in self.store.select("delegations", f"task_id IN ({marks})", list(task_ids))
        }
        return [found[t] for t in task_ids if t in found]

    def of_run(self, run_id: str) -> list[dict[str, Any]]:
        """``get_run``'s ``delegations``: every task of the run, oldest first."""
        rows = self.store.select("delegations", "run_id = ?", (run_id,), order="created_at, task_id")
        return [{k: v for k, v in _decode(r).items() if k != "run_id"} for r in rows]

    def dispatched(self, task_id: str, worker_run_id: str) -> None:
        self.store.execute(
            "UPDATE roost_agent_delegations SET worker_run_id = ?, dispatches = dispatches + 1,"
            " status = CASE WHEN status = 'pending' THEN 'dispatched' ELSE status END, updated_at = ?"
            " WHERE task_id = ?",
            (worker_run_id, self.now, task_id),
        )

    def report(self, task_id: str, status: str, progress: int, output: Any, error: str | None) -> bool:
        """A worker's report (``task_report``): recorded and shown unless it is a repeat, stale, or
        comes after the task's end; whether it was news."""
        self._in_process()
        found = self.rows([task_id])
        if not found or status not in (*ENDED, "running"):
            return False
        row = found[0]
        if row["status"] in ENDED or (status == "running" and progress <= row["progress"]):
            return False
        progress = max(progress, row["progress"])
        self.store.execute(
            "UPDATE roost_agent_delegations SET status = ?, steps_done = ?, result = ?, error = ?,"
            " updated_at = ? WHERE task_id = ?",
            (status, progress, orjson.dumps(output).decode() if output is not None else None,
             self.records.clean_text(error)[:500] if error else None, self.now, task_id),
        )  # fmt: skip
        run = self.run(row["run_id"])
        payload = {"task_id": task_id, "item_id": row["item_id"], "worker": row["worker"],
                   "status": status, "progress": progress}  # fmt: skip
        self.event("delegation_progress", run, status=EventStatus.COMPLETED, payload=payload)
        self.waiters().wake(row["item_id"])
        return True

    async def run_ended(self, run: Row) -> None:
        """A run ended: as an orchestrator, its tasks not ended are cancelled (unless it completed);
        as a worker, its end is reported to the task's origin."""
        if run["status"] != RunStatus.COMPLETED:
            await self._cancel_open(run)
        task = self._task_of(run["run_id"])
        if task is not None:
            output = run.get("output")
            payload = self._report_payload(task, str(run["status"]), output, run.get("error"))
            await self.agent.schedule(0, "delegation_report", payload, key=f"task-end:{task['task_id']}",
                                      retry=REPORT)  # fmt: skip

    async def _cancel_open(self, run: Row) -> None:
        rows = [r for r in self.of_run(run["run_id"]) if r["status"] not in ENDED]
        if not rows:
            return
        engine = engine_of(cast("Actor", self.agent))
        ids = sorted(r["task_id"] for r in rows)  # one cancel per set of open tasks
        wid = "dcancel:" + hashlib.sha256("\n".join(ids).encode()).hexdigest()[:24]
        if engine.store.get(wid) is None:
            tasks = [[r["task_id"], r["kind"], r["worker"]] for r in rows]
            await engine.start(CANCEL_WORKFLOW, {"tasks": tasks}, wid, advance=False)

    def cancel_ended(self, workflow: dict[str, Any]) -> None:
        """The cancel's workflow ended: a task its worker never started (or cannot be reached for)
        ends ``cancelled`` here, since no report of it will come."""
        result = workflow.get("result")
        if workflow["status"] != "completed" or not isinstance(result, dict):
            return
        for task_id, answer in result.items():
            if answer in ("not started", "unreachable"):
                self.report(str(task_id), "cancelled", 0, None, f"cancelled before it started ({answer})")

    async def cancel_body(self, step: Step, tasks: list[list[str]]) -> dict[str, str]:
        """The workflow ``roost.delegation_cancel``: each task's worker asked to cancel it, from
        outside turns, retried until it confirms (``cancelled``, ``ended``, ``not started``)."""
        origin = local_name(self.agent.name)

        def confirm(task_id: str, kind: str, worker: str) -> Any:
            async def go(attempt: StepAttempt) -> str:
                try:
                    ref = cast("Actor", self.agent).actor(kind, worker_name(origin, worker))
                    return str(await ref.call("cancel_task", task_id))
                except UnknownKind:
                    return "unreachable"
                except RpcError as exc:
                    if exc.code in FINAL_CODES:
                        return "unreachable"
                    raise

            return go

        branches = {t[0]: confirm(*t) for t in tasks}
        done: dict[str, str] = await step.parallel("cancel", branches, retry=CONFIRM)
        return done

    # -- the worker's side ---------------------------------------------------------------------------
    def _in_process(self) -> None:
        if self.agent.principal is not None:
            raise PolicyRefused(message="delegation is between actors of this server, not over a connection")

    def _task(self, task_id: str) -> Row | None:
        return self._task_by("task_id", task_id)

    def _task_of(self, run_id: str) -> Row | None:
        """The task a run works for, if any (asked at every step a run completes: one read)."""
        return self._task_by("run_id", run_id)

    def _task_by(self, column: str, value: str) -> Row | None:
        keys = ("task_id", "origin_kind", "origin_name", "run_id", "turn_id", "status")
        row = self.store.one(f"SELECT {', '.join(keys)} FROM roost_agent_tasks WHERE {column} = ?", (value,))
        return None if row is None else dict(zip(keys, row, strict=True))

    async def take(
        self, origin_kind: str, origin_name: str, task_id: str, text: str, depth: int = 1
    ) -> dict[str, Any]:
        """``take_task``: the task's run, started now (a background turn) or the one started before."""
        self._in_process()
        if not isinstance(depth, int) or not 0 < depth <= MAX_DEPTH:
            raise InvalidTransition(message=f"delegation nested deeper than {MAX_DEPTH} levels")
        task = self._task(task_id)
        if task is not None and task["run_id"] is None:
            raise InvalidTransition(message=f"task {task_id} was cancelled before it started")
        if task is not None:
            run = self.run(task["run_id"])
            return {"run_id": run["run_id"], "turn_id": run["turn_id"], "status": run["status"]}
        session = f"task:{origin_kind}/{origin_name}"[:128]
        reply = await self.orchestrator.runs.start(text, session, True)
        self.store.execute(
            "INSERT INTO roost_agent_tasks (task_id, origin_kind, origin_name, run_id, turn_id, status,"
            " depth, created_at) VALUES (?, ?, ?, ?, ?, 'taken', ?, ?)",
            (task_id, origin_kind, origin_name, reply["run_id"], reply["turn_id"], depth, self.now),
        )
        return {"run_id": reply["run_id"], "turn_id": reply["turn_id"], "status": reply["status"]}

    async def cancel(self, task_id: str) -> str:
        """``cancel_task``: the task's run cancelled (``cancelled``), already over (``ended``), or a
        tombstone left so that it never starts (``not started``)."""
        self._in_process()
        task = self._task(task_id)
        if task is None:
            self.store.execute(
                "INSERT INTO roost_agent_tasks (task_id, origin_kind, origin_name, run_id, turn_id, status,"
                " created_at) VALUES (?, '', '', NULL, NULL, 'cancelled', ?)",
                (task_id, self.now),
            )
            return "not started"
        if task["run_id"] is None:
            return "not started"
        run = self.run(task["run_id"])
        if run["status"] in FINISHED:
            return "ended"
        await self.orchestrator.runs.cancel(run["turn_id"])
        return "cancelled"

    async def step_done(self, run: Row) -> None:
        """A step of ``run`` completed: if it is a task's, its progress is reported to the origin."""
        task = self._task_of(run["run_id"])
        if task is None:
            return
        payload = self._report_payload(task, "running", None, None)
        key = f"task-progress:{task['task_id']}:{payload['progress']}"
        await self.agent.schedule(0, "delegation_report", payload, key=key, retry=REPORT)

    def _report_payload(self, task: Row, status: str, output: Any, error: Any) -> dict[str, Any]:
        """A report on ``task``; its progress: the steps the task's run has completed."""
        progress = int(self.store.scalar(
            "SELECT count(*) FROM roost_agent_items WHERE run_id = ? AND status = 'completed'",
            (task["run_id"],),
        ))  # fmt: skip
        return {"origin": [task["origin_kind"], task["origin_name"]], "task_id": task["task_id"],
                "status": status, "progress": progress, "output": output, "error": error}  # fmt: skip
