"""Compaction and reset of a session's context: the state machine over ``roost_agent_context_ops``
(docs/design.md, *Compaction and reset of a context*, draws it; the rows are
:mod:`roost.agent.context_rows`, the hand-off :mod:`roost.agent.handoff`).

A session's *context* is what the model sees of its history: a summary and its recent turns.
**compact** keeps the context and replaces its older turns by the model's summary of them; **reset**
starts a fresh context (a new ``context_id``) from a structured hand-off artifact. Both are started by
a budget of ``[agent.context.compact]`` / ``[agent.context.reset]`` when a run of the session ends, or
by a call (``compact(session_id)``, ``reset(session_id, note)``), and completed in a later turn.
Each operation is a workflow of the agent on the workflow core (``roost.context``, id = its
``op_id``): the summary is the model's ``summarize(SummaryRequest)`` (:mod:`roost.agent.models`), an
in-turn step for a model whose ``summarizes_inline`` is true (the deterministic planner), an outside
step for any other (the HTTP model: :mod:`roost.agent.context_ops`, its attempts, lease, retries and
fences the core's); a model without ``summarize`` gets
:func:`~roost.agent.models.deterministic_summary`.

Guarantees (tests in ``tests/test_compaction*.py``):

- **The cursor moves only with its artifact**: the summary (or hand-off), the context's new cursor and
  the operation's ``done`` commit in one transaction, fenced by the operation's status (pending) and,
  for an outside attempt, by the core's fence of that attempt; a summarised range is recorded once.
- **A summary call is made only under a committed attempt**: the attempt is recorded in a turn that
  commits before the call leaves (the call runs outside every turn), so a crash leaves no call without
  its record, and a turn that rolls back has asked nothing.
- **An interrupted summary is redone, never doubled**: the wake-up that completes an operation is
  delivered at least once, an HTTP summary call lost with its process is asked again when its lease
  ends (each try counted in the op's ``attempt`` before it asks; every try of an operation carries
  the same idempotency key, its ``op_id``), and a superseded attempt records nothing (the core's
  fence). A failed attempt is tried again after the jobs' retry policy (full jitter, ``job_backoff``
  to ``job_backoff_cap``).
- **Nothing is lost**: every turn, run and message stays readable and exported with the agent;
  ``context(session_id)`` shows each operation's range and artifact.
- **Triggers are checked at a turn boundary, never mid-stream**: after a run ended, and only while
  no run of the session is stepping.
- **A long run is compacted before its next model step, never mid-step**: past
  ``[agent.context.run]``, the run's older steps are summarised (one operation per run and hop)
  while the run waits; its next model step sees the summary and the steps after it, every step
  stays readable, and a run killed while it waits goes on once the operation ends.
- **A secret in the history never reaches a summary**: the summariser sees the history after the
  payload policy, cleaned once more, and its summary is cleaned before it is stored or shown.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from roost.actors import InvalidArguments, RetryPolicy
from roost.agent import handoff as handoffs
from roost.agent.context import Part
from roost.agent.context_ops import CONTEXT_WORKFLOW, summary_attempt
from roost.agent.context_rows import (
    CONTEXTS,
    OPS,
    RUN_CONTEXTS,
    OpKind,
    OpStatus,
    Trigger,
    View,
    decode,
    encode,
    op_card,
)
from roost.agent.errors import AgentNotFound, InvalidTransition
from roost.agent.models import SummaryRequest, deterministic_summary
from roost.agent.records import Records
from roost.agent.status import EventStatus, RunStatus
from roost.agent.store import Row, new_id
from roost.workflows.engine import engine_of

if TYPE_CHECKING:
    from roost.actors import Actor
    from roost.workflows import Step

__all__ = ["Contexts"]

log = logging.getLogger("roost.agent")

MAX_PAGE = 100
#: The in-turn summary is one attempt: a raise fails the operation (a bug of the model's own code).
_ONCE = RetryPolicy(max_attempts=1)


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

    # -- a run's own steps ---------------------------------------------------------------------------
    def run_view(self, run_id: str) -> Row | None:
        """Where a run's steps stand for the model after a compaction of them — ``cursor`` (the step
        index its visible steps are above), ``summary`` (what it sees instead), ``generation``,
        ``hop`` — or None when they were never compacted."""
        rows = self.store.select("run_contexts", "run_id = ?", (run_id,))
        return rows[0] if rows else None

    async def before_model(self, run: Row) -> str | None:
        """Before a model step of ``run`` (in its piece's turn): when the run's visible steps passed
        ``[agent.context.run]``, start a compaction of the older ones (all but
        ``keep_recent_steps``) and answer its op id — the run waits for ``context:{op_id}``, sent
        when the operation ends, done or failed; else None (ask the model). One operation per hop: a
        pending one (the piece run again after a rewind) is waited for again, one that ended is
        not tried again at that hop."""
        cfg = self.agent.settings().context
        run_id, hop = run["run_id"], int(run["hops"])
        view = self.run_view(run_id)
        asked = bool(view and view["requested"])  # compact(session_id) while the run stepped
        if cfg.run is None and not asked:
            return None
        tried = self.store.select("context_ops", "run_id = ? AND hop = ?", (run_id, hop))
        if tried:
            return str(tried[0]["op_id"]) if tried[0]["status"] == OpStatus.PENDING else None
        if self._pending(run["session_id"]) is not None:
            return None  # one operation of a session at a time: the next hop looks again
        cursor, since = (view["cursor"], view["hop"]) if view else (-1, 0)
        steps = self.store.select(
            "items", "run_id = ? AND step_index > ?", (run_id, cursor), order="step_index"
        )
        seen = handoffs.measure_steps(view["summary"] if view else "", steps, hop - since)
        trigger = "explicit" if asked else handoffs.passed(cfg.run, seen)
        summarised = steps[: max(0, len(steps) - cfg.keep_recent_steps)]
        if trigger is None or not summarised:
            return None  # (asked, with nothing to summarise yet: asked again at the next model step)
        if asked:  # the asked-for compaction is this one
            self.store.execute(f"UPDATE {RUN_CONTEXTS} SET requested = 0 WHERE run_id = ?", (run_id,))
        row = self._new_op(run["session_id"], OpKind.COMPACT, Trigger(trigger), None)
        row |= {
            "context_id": None,
            "from_ordinal": summarised[0]["step_index"],
            "to_ordinal": summarised[-1]["step_index"],
            "turn_ids": [run["turn_id"]],
            "run_id": run_id,
            "hop": hop,
        }
        await self._insert(row)
        return str(row["op_id"])

    async def request(self, op: OpKind, session_id: Any, note: Any = None) -> dict[str, Any]:
        """``compact`` / ``reset``: start the operation (or answer the one pending for the session)."""
        if note is not None and (not isinstance(note, str) or len(note) > 2000):
            raise InvalidArguments(message="note must be a string of at most 2000 characters")
        session = self.orchestrator.runs.session_for(session_id)
        if self.store.get("sessions", session) is None:
            raise AgentNotFound(message=f"no session {session!r}")
        pending = self._pending(session)
        if pending is not None and pending["run_id"] is not None:
            raise InvalidTransition(
                message=f"a compaction of run {pending['run_id']}'s steps is under way in session "
                f"{session}; {op} when it ends"
            )
        if pending is not None:
            return op_card(pending)
        if self._stepping(session):
            if op == OpKind.COMPACT:
                return self._ask_runs(session)
            raise InvalidTransition(message=f"a run of session {session} is running; {op} when it ends")
        row = await self._request(session, op, Trigger.EXPLICIT, note)
        if row is None:
            raise InvalidTransition(message=f"nothing to compact in session {session}")
        return op_card(row)

    def _ask_runs(self, session_id: str) -> dict[str, Any]:
        """``compact`` while runs of the session step: each compacts its own steps before its next
        model step (trigger ``explicit``); the answer says which (``status`` ``requested``)."""
        runs = [
            str(r[0])
            for r in self.store.rows(
                "SELECT run_id FROM roost_agent_runs WHERE session_id = ? AND status IN (?, ?)"
                " AND waiting IS NULL",
                (session_id, RunStatus.QUEUED, RunStatus.IN_PROGRESS),
            )
        ]
        for run_id in runs:
            self.store.execute(
                f"INSERT INTO {RUN_CONTEXTS} (run_id, cursor, summary, generation, hop, updated_at,"
                " requested) VALUES (?, -1, '', 0, 0, ?, 1) ON CONFLICT (run_id) DO UPDATE SET requested = 1",
                (run_id, self.now),
            )
        return {"op": OpKind.COMPACT, "status": "requested", "session_id": session_id, "run_ids": runs}

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
            ended = ended[: max(0, len(ended) - keep)]
            if not ended:
                return None
        to = max(cursor, ended[-1]["ordinal"] if ended else cursor)
        row = self._new_op(session_id, op, trigger, note)
        row |= {
            "context_id": ctx["context_id"] if ctx else None,
            "from_ordinal": cursor + 1,
            "to_ordinal": to,
            "turn_ids": [r["turn_id"] for r in ended],
            "message_range": self._message_range([r["run_id"] for r in ended]),
        }
        await self._insert(row)
        return row

    def _new_op(self, session_id: str, op: OpKind, trigger: Trigger, note: str | None) -> Row:
        now = self.now
        return {
            "op_id": new_id("ctxop"),
            "session_id": session_id,
            "op": op,
            "trigger": trigger,
            "status": OpStatus.PENDING,
            "trace_id": self.agent.extension.trace_id,
            "context_id": None,
            "new_context_id": None,
            "generation": None,
            "from_ordinal": 0,
            "to_ordinal": 0,
            "turn_ids": [],
            "message_range": None,
            "note": self.err(note, 2000),
            "attempt": 0,
            "artifact": None,
            "error": None,
            "created_at": now,
            "updated_at": now,
            "done_at": None,
            "run_id": None,
            "hop": None,
        }

    async def _insert(self, row: Row) -> None:
        """The pending operation written, and its workflow started (its work in a later turn: a
        wake-up at once)."""
        cols = list(row)
        self.store.execute(
            f"INSERT INTO {OPS} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [encode(c, row[c]) for c in cols],
        )
        self._event("context_requested", row, EventStatus.QUEUED, {"op": op_card(row)})
        engine = engine_of(cast("Actor", self.agent))
        await engine.start(CONTEXT_WORKFLOW, {"op_id": row["op_id"]}, row["op_id"], advance=False)

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

    # -- the summary (each operation a workflow of the core: roost.agent.context_ops) ---------------------
    def _inline(self) -> bool:
        model = self.agent.model()
        summarize = getattr(model, "summarize", None)
        return summarize is None or bool(getattr(model, "summarizes_inline", False))

    async def body(self, step: Step, op_id: str) -> Any:
        """The operation's workflow: its summary made in the turn (a model that needs no I/O), or
        asked of the model by an outside step under the jobs' retry policy."""
        if self._inline():
            await step.do("summary", lambda: self._summarise_here(op_id), retry=_ONCE)
            return None
        cfg = self.agent.settings()
        policy = RetryPolicy(cfg.job_max_attempts, cfg.job_backoff, cfg.job_backoff_cap)
        await step.external("summary", lambda attempt: summary_attempt(attempt, op_id), retry=policy)
        return None

    async def _summarise_here(self, op_id: str) -> dict[str, Any]:
        op = self._op(op_id)
        if op is None or op["status"] != OpStatus.PENDING:
            return {"ok": True}
        summarize = getattr(self.agent.model(), "summarize", None)
        request = self._summary_request(op)
        text = await summarize(request) if summarize is not None else deterministic_summary(request)
        self.apply(op, str(text))
        return {"ok": True}

    def begin(self, op_id: str) -> tuple[SummaryRequest, Callable[[SummaryRequest], Awaitable[Any]]] | None:
        """An attempt of the summary call begins (a fenced turn of it): the operation's ``attempt``
        counts it; the request, under the operation's idempotency key (its ``op_id``), and the
        model's ``summarize``. None if the operation is no longer pending."""
        op = self._op(op_id)
        if op is None or op["status"] != OpStatus.PENDING:
            return None
        self._update(op, attempt=op["attempt"] + 1)
        request = self._summary_request(op).model_copy(update={"idempotency_key": op_id})
        summarize: Callable[[SummaryRequest], Awaitable[Any]] = self.agent.model().summarize  # type: ignore[attr-defined]
        return request, summarize

    def record(self, op_id: str, text: str) -> None:
        """The summary of the current attempt (a fenced turn of it): applied, if still pending."""
        op = self._op(op_id)
        if op is not None and op["status"] == OpStatus.PENDING:
            self.apply(op, text)

    async def ended(self, workflow: dict[str, Any]) -> None:
        """The operation's workflow ended: failed (the model refused, or its attempts are spent), the
        operation fails with the step's error and the context is left as it was."""
        op = self._op(str(workflow["id"]))
        if op is None:
            return
        if op["status"] == OpStatus.PENDING and workflow["status"] != "completed":
            error = workflow.get("error") or "failed"
            if workflow.get("reason") == "step_failed":  # the step's own error, without the step's name
                steps = engine_of(cast("Actor", self.agent)).store.steps(op["op_id"])
                error = next((s.error for s in reversed(steps) if s.error), None) or error
            self._update(op, status=OpStatus.FAILED, error=self.err(str(error), 500), done_at=self.now)
            self._event("context_failed", op, EventStatus.FAILED, {"op": op_card(op)})
        if op["run_id"] is not None:  # the run waits for it, whatever its end, and goes on now:
            # after the op's status is final (its next piece reads it in this same turn)
            await self.orchestrator.loop.notify(op["run_id"], f"context:{op['op_id']}")

    async def adopt(self, op_id: str) -> None:
        """A wake-up of an operation begun before operations ran on the workflow core (a file of an
        earlier release): still pending and without a workflow, it gets one now."""
        op = self._op(op_id)
        engine = engine_of(cast("Actor", self.agent))
        if op is None or op["status"] != OpStatus.PENDING or engine.store.get(op_id) is not None:
            return
        await engine.start(CONTEXT_WORKFLOW, {"op_id": op_id}, op_id)

    def _summary_request(self, op: Row) -> SummaryRequest:
        cfg = self.agent.settings().context
        if op["run_id"] is not None:  # a run's own steps, and the summary of its steps before
            run_id = str(op["run_id"])
            items = self.store.select(
                "items",
                "run_id = ? AND step_index >= ? AND step_index <= ?",
                (run_id, op["from_ordinal"], op["to_ordinal"]),
                order="step_index",
            )
            view = self.run_view(run_id)
            self.records.concern(run_id)
            shown = [{**i, "args": Records.shown(i["args"])} for i in items]  # as the model sees them
            return SummaryRequest(
                prompt=cfg.summary_prompt,
                previous=self.records.clean_text(view["summary"] if view else ""),
                messages=handoffs.steps_of(shown, self.records.clean_text),
                max_chars=cfg.summary_chars,
            )
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
        if op["run_id"] is not None:
            self._apply_run(op, text)
            return
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

    def _apply_run(self, op: Row, text: str) -> None:
        """Record a summary of a run's steps: the run's cursor, its summary and the operation's
        end, together; the session's context is not touched."""
        run_id = str(op["run_id"])
        self.records.concern(run_id)
        summary = self.records.clean_text(text)[: self.agent.settings().context.summary_chars]
        view = self.run_view(run_id)
        generation = (view["generation"] if view else 0) + 1
        self.store.execute(
            f"INSERT INTO {RUN_CONTEXTS} (run_id, cursor, summary, generation, hop, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET cursor = excluded.cursor, "
            "summary = excluded.summary, generation = excluded.generation, hop = excluded.hop, "
            "updated_at = excluded.updated_at",
            (run_id, op["to_ordinal"], summary, generation, op["hop"], self.now),
        )
        self._update(op, status=OpStatus.DONE, artifact={"summary": summary}, done_at=self.now)
        visible = self.store.select(
            "items", "run_id = ? AND step_index > ?", (run_id, op["to_ordinal"]), order="step_index"
        )
        shown = {"run_id": run_id, "generation": generation, "cursor": op["to_ordinal"]}
        shown |= {"item_ids": [i["item_id"] for i in visible], "summary_chars": len(summary)}
        payload = {"op": op_card(op), "visible": shown}
        self._event("context_compacted", op, EventStatus.COMPLETED, payload)

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
        run = {"run_id": op.get("run_id"), "turn_id": None, "session_id": op["session_id"],
               "trace_id": op["trace_id"]}  # fmt: skip
        if run["run_id"] is not None:
            run["turn_id"] = op["turn_ids"][0]
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
