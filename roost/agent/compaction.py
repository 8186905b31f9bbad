"""Compaction and reset of a session's context: the state machine over ``roost_agent_context_ops``
(docs/design.md, *Compaction and reset of a context*, draws it; the rows are
:mod:`roost.agent.context_rows`, the hand-off :mod:`roost.agent.handoff`).

A session's *context* is what the model sees of its history: a summary and its recent turns.
**compact** keeps the context and replaces its older turns by the model's summary of them; **reset**
starts a fresh context (a new ``context_id``) from a structured hand-off artifact. Both are started by
a budget of ``[agent.context.compact]`` / ``[agent.context.reset]`` when a run of the session ends, or
by a call (``compact(session_id)``, ``reset(session_id, note)``), and completed in a later turn.
The summary is the model's ``summarize(SummaryRequest)`` (:mod:`roost.agent.models`): inside that
turn for a model whose ``summarizes_inline`` is true (the deterministic planner), in a task of the
process's :class:`ContextRunner` for any other (the HTTP model); a model without ``summarize`` gets
:func:`~roost.agent.models.deterministic_summary`.

Guarantees (tests in ``tests/test_compaction*.py``):

- **The cursor moves only with its artifact**: the summary (or hand-off), the context's new cursor and
  the operation's ``done`` commit in one transaction, fenced by the operation's status and attempt;
  a summarised range is recorded once.
- **A summary call is made only under a committed attempt**: the attempt is recorded in a turn that
  commits before the call leaves (the call runs outside every turn), so a crash leaves no call without
  its record, and a turn that rolls back has asked nothing.
- **An interrupted summary is redone, never doubled**: the wake-up that completes an operation is
  delivered at least once, an HTTP summary call lost with its process is asked again as the next
  attempt (recorded before it is asked; every attempt of an operation carries the same idempotency
  key, its ``op_id``), and the result of a superseded attempt is refused. A failed attempt is tried
  again after the jobs' retry policy (full jitter, ``job_backoff`` to ``job_backoff_cap``).
- **Nothing is lost**: every turn, run and message stays readable and exported with the agent;
  ``context(session_id)`` shows each operation's range and artifact.
- **Triggers are checked at a turn boundary, never mid-stream**: after a run ended, and only while
  no run of the session is stepping.
- **A secret in the history never reaches a summary**: the summariser sees the history after the
  payload policy, cleaned once more, and its summary is cleaned before it is stored or shown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from roost.actors import Actor, InvalidArguments, RetryPolicy
from roost.actors.extension import Process
from roost.agent import handoff as handoffs
from roost.agent.context import Part
from roost.agent.context_rows import (
    CONTEXTS,
    OPS,
    OpKind,
    OpStatus,
    Trigger,
    View,
    decode,
    encode,
    op_card,
)
from roost.agent.errors import AgentNotFound, InvalidTransition
from roost.agent.models import ModelError, SummaryRequest, deterministic_summary
from roost.agent.payloads import error_line
from roost.agent.status import EventStatus, RunStatus
from roost.agent.store import Row, new_id

__all__ = ["SERVICE", "ContextRunner", "Contexts", "context_runner"]

log = logging.getLogger("roost.agent")

SERVICE = "agent.context"
MAX_PAGE = 100


class Contexts(Part):
    """The compaction and reset of this agent's sessions' contexts (see the module doc)."""

    # -- what the model sees ------------------------------------------------------------------------
    def view(self, session_id: str) -> View | None:
        """The session's context as the model sees it — its summary, the run ordinal its visible
        turns are above, and the runs below it that no operation summarised — or None when it was
        never compacted or reset (the session's own view)."""
        row = self._context(session_id)
        return None if row is None else View(row["summary"], row["cursor"], tuple(row["carried"]))

    def _context(self, session_id: str) -> Row | None:
        rows = self.store.select("contexts", "session_id = ?", (session_id,))
        return decode(rows[0]) if rows else None

    def _op(self, op_id: str) -> Row | None:
        rows = self.store.select("context_ops", "op_id = ?", (op_id,))
        return decode(rows[0]) if rows else None

    def _pending(self, session_id: str) -> Row | None:
        rows = self.store.select(
            "context_ops", "session_id = ? AND status = ?", (session_id, OpStatus.PENDING)
        )
        return decode(rows[0]) if rows else None

    def _stepping(self, session_id: str) -> bool:
        """A run of the session is running (not waiting for approval, input or the project)."""
        return bool(
            self.store.scalar(
                "SELECT 1 FROM roost_agent_runs "
                "WHERE session_id = ? AND status IN (?, ?) AND waiting IS NULL",
                (session_id, RunStatus.QUEUED, RunStatus.IN_PROGRESS),
            )
        )

    # -- triggers -------------------------------------------------------------------------------------
    async def after_run(self, run: Row) -> None:
        """A run ended (a turn boundary): start a reset or a compaction of its session's context if
        a budget is passed, no run of the session steps and none is pending."""
        cfg = self.agent.settings().context
        if cfg.compact is None and cfg.reset is None:
            return
        session_id = run["session_id"]
        if self._stepping(session_id) or self._pending(session_id) is not None:
            return
        view = self.view(session_id) or View("", 0, ())
        seen = handoffs.measure(
            view.summary, handoffs.ended_runs(self.store, session_id, view.cursor, view.carried)
        )
        for op, budget in ((OpKind.RESET, cfg.reset), (OpKind.COMPACT, cfg.compact)):
            trigger = handoffs.passed(budget, seen)
            if trigger is not None:
                await self._request(session_id, op, Trigger(trigger), None)
                return

    async def request(self, op: OpKind, session_id: Any, note: Any = None) -> dict[str, Any]:
        """``compact`` / ``reset``: start the operation (or answer the one pending for the session)."""
        if note is not None and (not isinstance(note, str) or len(note) > 2000):
            raise InvalidArguments(message="note must be a string of at most 2000 characters")
        session = self.orchestrator.runs.session_for(session_id)
        if self.store.get("sessions", session) is None:
            raise AgentNotFound(message=f"no session {session!r}")
        pending = self._pending(session)
        if pending is not None:
            return op_card(pending)
        if self._stepping(session):
            raise InvalidTransition(message=f"a run of session {session} is running; {op} when it ends")
        row = await self._request(session, op, Trigger.EXPLICIT, note)
        if row is None:
            raise InvalidTransition(message=f"nothing to compact in session {session}")
        return op_card(row)

    async def _request(self, session_id: str, op: OpKind, trigger: Trigger, note: str | None) -> Row | None:
        """The pending operation over a fixed range, and the wake-up that completes it."""
        ctx = self._context(session_id)
        cursor = ctx["cursor"] if ctx else 0
        ended = handoffs.ended_runs(self.store, session_id, cursor, ctx["carried"] if ctx else ())
        if op == OpKind.COMPACT:  # the turns above the cursor stay one piece: none past an open run
            still = [r for r in handoffs.open_runs(self.store, session_id) if r["ordinal"] > cursor]
            if still:
                ended = [r for r in ended if r["ordinal"] < still[0]["ordinal"]]
            keep = self.agent.settings().context.keep_recent
            ended = ended[: len(ended) - keep] if keep else ended
            if not ended:
                return None
        to = max(cursor, ended[-1]["ordinal"] if ended else cursor)
        now = self.now
        row: Row = {
            "op_id": new_id("ctxop"),
            "session_id": session_id,
            "op": op,
            "trigger": trigger,
            "status": OpStatus.PENDING,
            "trace_id": self.agent.extension.trace_id,
            "context_id": ctx["context_id"] if ctx else None,
            "new_context_id": None,
            "generation": None,
            "from_ordinal": cursor + 1,
            "to_ordinal": to,
            "turn_ids": [r["turn_id"] for r in ended],
            "message_range": self._message_range([r["run_id"] for r in ended]),
            "note": self.err(note, 2000),
            "attempt": 0,
            "artifact": None,
            "error": None,
            "created_at": now,
            "updated_at": now,
            "done_at": None,
        }
        cols = list(row)
        self.store.execute(
            f"INSERT INTO {OPS} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [encode(c, row[c]) for c in cols],
        )
        self._event("context_requested", row, EventStatus.QUEUED, {"op": op_card(row)})
        await self.agent.schedule(0, "agent_context", {"op_id": row["op_id"]})
        return row

    def _message_range(self, run_ids: list[str]) -> list[int] | None:
        """The chat messages' ordinals of ``run_ids`` (first, last), for an agent that keeps them."""
        if not run_ids or not self.store.scalar(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'roost_agent_chat_messages'"
        ):
            return None
        marks = ", ".join("?" * len(run_ids))
        found = self.store.one(
            "SELECT min(m.ordinal), max(m.ordinal) FROM roost_agent_chat_messages AS m "
            f"WHERE m.run_id IN ({marks}) OR m.message_id IN (SELECT reply_to FROM roost_agent_chat_messages "
            f"WHERE run_id IN ({marks}) AND reply_to IS NOT NULL)",
            (*run_ids, *run_ids),
        )
        return None if found is None or found[0] is None else [found[0], found[1]]

    # -- the summary ----------------------------------------------------------------------------------
    async def work(self, op_id: str) -> None:
        """The wake-up of a pending operation: its summary made here (a model that needs no I/O), or
        asked of the model by the next attempt's task, with a redo wake-up should it be lost."""
        op = self._op(op_id)
        if op is None or op["status"] != OpStatus.PENDING:
            return
        model = self.agent.model()
        request = self._summary_request(op)
        summarize = getattr(model, "summarize", None)
        if summarize is None or getattr(model, "summarizes_inline", False):
            text = await summarize(request) if summarize is not None else deterministic_summary(request)
            self.apply(op, str(text))
            return
        attempt = op["attempt"] + 1
        self._update(op, attempt=attempt)
        cfg = self.agent.settings()
        await self.agent.schedule(
            cfg.model_timeout + cfg.lease_ttl, "agent_context_redo", {"op_id": op_id, "attempt": attempt}
        )
        request = request.model_copy(update={"idempotency_key": op_id})
        runner = context_runner(self.agent.extension.process)  # it asks only once this turn committed
        runner.spawn(self.agent.kind, self.agent.name, op_id, attempt, lambda: summarize(request))

    def holds(self, op_id: str, attempt: int) -> bool:
        """Attempt ``attempt`` of operation ``op_id`` is recorded and still current: the operation is
        pending at that attempt. A task of the runner asks this in a turn of its own before its
        summary call; that turn comes after the one that recorded the attempt, and the task goes on
        only once it has committed."""
        op = self._op(op_id)
        return op is not None and op["status"] == OpStatus.PENDING and op["attempt"] == attempt

    async def redo(self, op_id: str, attempt: int) -> None:
        """The redo wake-up of attempt ``attempt``: still pending at that attempt, its task is lost
        (the process died) unless it lives here — then it is given another while."""
        op = self._op(op_id)
        if op is None or op["status"] != OpStatus.PENDING or op["attempt"] != attempt:
            return
        if context_runner(self.agent.extension.process).alive(op_id, attempt):
            cfg = self.agent.settings()
            await self.agent.schedule(
                cfg.model_timeout + cfg.lease_ttl, "agent_context_redo", {"op_id": op_id, "attempt": attempt}
            )
            return
        await self.work(op_id)

    async def finish(self, op_id: str, attempt: int, text: str | None, error: ModelError | None) -> None:
        """An attempt's outcome, fenced: only the current attempt of a pending operation counts."""
        op = self._op(op_id)
        if op is None or op["status"] != OpStatus.PENDING or op["attempt"] != attempt:
            return
        if error is None:
            self.apply(op, text or "")
            return
        cfg = self.agent.settings()
        if error.retryable and attempt < cfg.job_max_attempts:
            # the jobs' policy: full jitter, from the process's rng (roost.actors.RetryPolicy)
            policy = RetryPolicy(cfg.job_max_attempts, cfg.job_backoff, cfg.job_backoff_cap)
            delay = policy.delay(attempt, self.agent.extension.process.rng)
            log.info(
                "context %s: summary attempt %d failed, retrying in %.2f s: %s", op_id, attempt, delay, error
            )
            await self.agent.schedule(delay, "agent_context", {"op_id": op_id})
            return
        message = self.err(str(error), 500)
        self._update(op, status=OpStatus.FAILED, error=message, done_at=self.now)
        self._event("context_failed", op, EventStatus.FAILED, {"op": op_card(op)})

    def _summary_request(self, op: Row) -> SummaryRequest:
        cfg = self.agent.settings().context
        runs = self._range(op)
        ctx = self._context(op["session_id"])
        previous = ctx["summary"] if ctx and op["op"] == OpKind.COMPACT else ""
        messages = handoffs.messages_of(runs, self._clean_as)
        self.records.vault.run_id = None  # what follows concerns no run: credential patterns only
        return SummaryRequest(
            prompt=cfg.summary_prompt,
            previous=self.records.clean_text(previous),
            messages=messages,
            max_chars=cfg.summary_chars,
        )

    def _clean_as(self, run_id: str, text: str) -> str:
        """``text`` of run ``run_id`` cleaned as that run's own (its secrets scrubbed, no other's)."""
        self.records.concern(run_id)
        return self.records.clean_text(text)

    def _range(self, op: Row) -> list[Row]:
        return handoffs.runs_of(self.store, op["turn_ids"])

    # -- the record -----------------------------------------------------------------------------------
    def apply(self, op: Row, text: str) -> None:
        """Record the summary: the artifact, the context's cursor and the operation's end, together."""
        cfg = self.agent.settings().context
        self.records.vault.run_id = None  # a summary concerns no one run: credential patterns only
        summary = self.records.clean_text(text)[: cfg.summary_chars]
        session_id = op["session_id"]
        now = self.now
        ctx = self._context(session_id)
        generation = (ctx["generation"] if ctx else 0) + 1
        old_id = ctx["context_id"] if ctx else new_id("ctx")
        if op["op"] == OpKind.RESET:
            context_id = new_id("ctx")
            artifact = self.records.clean(
                handoffs.handoff(
                    self.store, session_id, self._range(op), summary, from_context=old_id, note=op["note"]
                )
            )
            shown, kept = handoffs.render(artifact), artifact
        else:
            context_id, artifact = old_id, {"summary": summary}
            shown, kept = summary, (ctx["handoff"] if ctx else None)
        values = {
            "context_id": context_id,
            "generation": generation,
            "cursor": op["to_ordinal"],
            "carried": self._carried(op, ctx),
            "summary": self.records.clean_text(shown),
            "handoff": kept,
            "updated_at": now,
        }
        if ctx is None:
            row = {"session_id": session_id, **values, "started_at": now}
            cols = list(row)
            self.store.execute(
                f"INSERT INTO {CONTEXTS} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [encode(c, row[c]) for c in cols],
            )
        else:
            if op["op"] == OpKind.RESET:
                values["started_at"] = now
            self.store.execute(
                f"UPDATE {CONTEXTS} SET {', '.join(f'{c} = ?' for c in values)} WHERE session_id = ?",
                [*(encode(c, v) for c, v in values.items()), session_id],
            )
        self._update(
            op,
            status=OpStatus.DONE,
            context_id=old_id,
            new_context_id=context_id if op["op"] == OpKind.RESET else None,
            generation=generation,
            artifact=artifact,
            done_at=now,
        )
        kind = "context_reset" if op["op"] == OpKind.RESET else "context_compacted"
        self._event(
            kind, op, EventStatus.COMPLETED, {"op": op_card(op), "visible": self._visible(session_id)}
        )

    def _carried(self, op: Row, ctx: Row | None) -> list[str]:
        """The runs at or below the new cursor that no operation summarised (open when ``op`` was
        requested): the carried ones before, and those of the range between the two cursors."""
        before = list(ctx["carried"]) if ctx else []
        between = self.store.select(
            "runs",
            "session_id = ? AND ordinal > ? AND ordinal <= ?",
            (op["session_id"], ctx["cursor"] if ctx else 0, op["to_ordinal"]),
            order="ordinal",
        )
        summarised = set(op["turn_ids"])
        turns = {r["run_id"]: r["turn_id"] for r in between}
        if before:
            marks = ", ".join("?" * len(before))
            for r in self.store.select("runs", f"run_id IN ({marks})", tuple(before)):
                turns[r["run_id"]] = r["turn_id"]
        return [
            run_id
            for run_id in [*before, *(r["run_id"] for r in between)]
            if turns.get(run_id) not in summarised
        ]

    def _visible(self, session_id: str) -> dict[str, Any]:
        """What the model sees of the session now: the summary's size and the turns above the cursor."""
        ctx = self._context(session_id)
        cursor = ctx["cursor"] if ctx else 0
        carried = ctx["carried"] if ctx else []
        turns = handoffs.ended_runs(self.store, session_id, cursor, carried)
        return {
            "context_id": ctx["context_id"] if ctx else None,
            "generation": ctx["generation"] if ctx else 0,
            "cursor": cursor,
            "carried_run_ids": carried,
            "summary_chars": len(ctx["summary"]) if ctx else 0,
            "turn_ids": [r["turn_id"] for r in turns],
        }

    def _update(self, op: Row, **values: Any) -> None:
        values["updated_at"] = self.now
        self.store.execute(
            f"UPDATE {OPS} SET {', '.join(f'{c} = ?' for c in values)} WHERE op_id = ?",
            [*(encode(c, v) for c, v in values.items()), op["op_id"]],
        )
        op.update(values)

    def _event(self, event_type: str, op: Row, status: EventStatus, payload: dict[str, Any]) -> None:
        run = {"run_id": None, "turn_id": None, "session_id": op["session_id"], "trace_id": op["trace_id"]}
        self.event(event_type, run, status=status, payload=payload)

    # -- reads ------------------------------------------------------------------------------------------
    def card(self, session_id: Any, before: Any = None, limit: Any = 20) -> dict[str, Any]:
        """``context(session_id)``: what the model sees now, and a page of the operations, newest first
        (those created before ``before``, an op id; ``next_before`` pages further back)."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= MAX_PAGE:
            raise InvalidArguments(message=f"limit must be 1 to {MAX_PAGE}")
        session = self.orchestrator.runs.session_for(session_id, write=False)
        ctx = self._context(session)
        where, params = "session_id = ?", [session]
        if before is not None:
            mark = self._op(before) if isinstance(before, str) else None
            if mark is None or mark["session_id"] != session:
                raise InvalidArguments(message="before must be an op_id of this session")
            where += " AND (created_at, op_id) < (?, ?)"
            params += [mark["created_at"], mark["op_id"]]
        rows = [
            decode(r)
            for r in self.store.select(
                "context_ops", where, params, order=f"created_at DESC, op_id DESC LIMIT {limit + 1}"
            )
        ]
        page = rows[:limit]
        return {
            "session_id": session,
            "context": self._visible(session)
            | {"summary": ctx["summary"] if ctx else None, "handoff": ctx["handoff"] if ctx else None},
            "ops": [op_card(r) for r in page],
            "next_before": page[-1]["op_id"] if len(rows) > limit else None,
        }


def context_runner(process: Process) -> ContextRunner:
    """This process's runner of summary calls (created on first use, stopped with the registry)."""
    runner: ContextRunner = process.service(SERVICE, ContextRunner)
    return runner


class ContextRunner:
    """Runs the summary calls of a model behind the network, one task per ``(op_id, attempt)``
    (named ``agent.context:<op_id>:<attempt>``). A task's life, as an outside step's
    (:mod:`roost.workflows.runner`): (1) a turn of its agent checks that the attempt is recorded —
    the turn that spawned the task may have rolled back: then it stops, having asked nothing;
    (2) the call, outside every turn; (3) a turn records the outcome, fenced by ``(op_id, attempt)``.

    **A summary call is made only under a committed attempt**: no request leaves before the attempt
    that makes it is durable, and none for an attempt whose turn rolled back.

    **Every task it starts has an owner**: it is in :attr:`tasks` until it ends, and :meth:`stop`
    cancels and awaits every one (the operation stays pending; its redo wake-up takes it up again).
    """

    def __init__(self, process: Process) -> None:
        self.process = process
        self.tasks: dict[tuple[str, int], asyncio.Task[None]] = {}

    def spawn(
        self, kind: str, name: str, op_id: str, attempt: int, call: Callable[[], Awaitable[Any]]
    ) -> None:
        """Once a turn of the agent saw attempt ``attempt`` recorded (:meth:`Contexts.holds`), run
        ``call()`` (the model's summary of the operation) and record its outcome in a turn."""
        task = asyncio.get_running_loop().create_task(
            self._work(kind, name, op_id, attempt, call), name=f"{SERVICE}:{op_id}:{attempt}"
        )
        self.tasks[(op_id, attempt)] = task
        task.add_done_callback(lambda _: self.tasks.pop((op_id, attempt), None))

    def alive(self, op_id: str, attempt: int) -> bool:
        task = self.tasks.get((op_id, attempt))
        return task is not None and not task.done()

    async def _work(
        self, kind: str, name: str, op_id: str, attempt: int, call: Callable[[], Awaitable[Any]]
    ) -> None:
        async def claimed(actor: Actor) -> bool:
            return bool(actor.orchestrator.contexts.holds(op_id, attempt))  # type: ignore[attr-defined]

        try:  # a turn after the one that spawned this task: it committed the attempt, or rolled back
            if not await self.process.run(kind, name, claimed):
                return  # the attempt was never recorded (or is over): nothing is asked
        except asyncio.CancelledError:
            raise
        except Exception:  # the actor is stopping: the redo wake-up takes the operation up again
            log.warning("context %s: attempt %d not begun", op_id, attempt, exc_info=True)
            return
        text: str | None = None
        error: ModelError | None = None
        try:
            text = str(await call())
        except ModelError as exc:
            error = exc
        except Exception as exc:  # a model's bug: not worth retrying
            error = ModelError(error_line(exc), retryable=False)

        async def record(actor: Actor) -> None:
            await actor.orchestrator.contexts.finish(op_id, attempt, text, error)  # type: ignore[attr-defined]

        try:
            await self.process.run(kind, name, record)
        except Exception:  # the redo wake-up takes the operation up again
            log.warning("context %s: attempt %d not recorded", op_id, attempt, exc_info=True)

    async def stop(self) -> None:
        tasks = list(self.tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.tasks.clear()
