"""Steps: the pieces of a run (docs/design.md, *Agent runtime*, *One run*).

A run alternates model steps (which plan items) and items (one tool call each). Each run is a
workflow whose body (:mod:`roost.agent.loop`) calls these parts in its in-turn steps: the model's
request (:meth:`Steps.model_request`) and its recorded decision (:meth:`Steps.record_model_step`: a
question, the run's text, or the next items with ``plan_ready``), a model that runs here asked in the
turn (:meth:`Steps.inline_model_step`), an item's start, result and failure, a wait for input.
A run begun before runs were workflows is moved onto the core by the loop (:meth:`Loop.adopt
<roost.agent.loop.Loop.adopt>`); the state machine it began on is gone.

Guarantees (tests in ``tests/test_agent_runtime.py``, ``tests/test_agent_run_workflow.py``):

- **A completed step is never run again**: its status and result commit with its effects.
- **Paused runs survive anything**: waiting for an approval, input or the project's heavy slot is a
  row (and a waiting step of the run's workflow); the call that ends the wait advances the run in
  its own turn.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from roost.agent import memory
from roost.agent.catalog import InvalidToolCall, Tool
from roost.agent.context import Part
from roost.agent.models import ModelError, ModelRequest, ModelStep, StepRecord
from roost.agent.payloads import PayloadError, error_line
from roost.agent.records import Records
from roost.agent.sandbox import SandboxError
from roost.agent.status import EventStatus, ItemStatus, TurnStatus, Waiting
from roost.agent.store import Row, new_id

__all__ = ["Steps"]

shown = Records.shown


class Steps(Part):
    async def drain_released(self) -> None:
        """Advance the runs the project's heavy slot was handed to during this turn, then hand the
        runs that ended to ``agent.on_run_end``."""
        released = self.orchestrator.project.released
        while released:  # each waits for the slot: ``heavy`` (roost.agent.loop)
            await self.orchestrator.loop.notify(released.pop(0), "heavy")
        await self.orchestrator.settle()

    def tool_started(self, run: Row, item: Row, tool: Tool, job: Row | None) -> None:
        """The ``tool_started`` event of an item that starts now (inline, or as ``job``)."""
        payload: dict[str, Any] = {"tool": tool.name, "args": shown(item["args"])}
        if job is not None:
            payload |= {"job_id": job["job_id"], "attempt": 1}
        self.event("tool_started", run, item_id=item["item_id"], status=EventStatus.RUNNING, payload=payload)

    def item_completed(self, run: Row, item: Row, tool: Tool, result: Any) -> bool:
        """Record a step's result (after the payload policy); False if it cannot be stored."""
        try:
            clean = self.records.clean(result)
        except (PayloadError, TypeError) as exc:
            self.item_failed(run, item, tool, f"result not storable: {exc}", retryable=False)
            return False
        try:  # what the step did to the run's workspace commits with its completion
            self.orchestrator.workspaces.commit(run, item)
        except SandboxError as exc:
            self.item_failed(run, item, tool, error_line(exc), retryable=False)
            return False
        self.store.update(
            "items",
            item["item_id"],
            status=ItemStatus.COMPLETED,
            result=clean,
            error=None,
            updated_at=self.now,
        )
        self.event(
            "tool_completed",
            run,
            item_id=item["item_id"],
            status=EventStatus.COMPLETED,
            payload={"tool": tool.name, "result": clean},
        )
        if tool.heavy:
            self.orchestrator.project.release_heavy(run["run_id"])
        return True

    def item_failed(self, run: Row, item: Row, tool: Tool, error: str, *, retryable: bool) -> None:
        """A step failed for good: the item, then its run."""
        error = self.err(error, 500) or "failed"
        self.store.update(
            "items", item["item_id"], status=ItemStatus.FAILED, error=error, updated_at=self.now
        )
        self.event(
            "tool_failed",
            run,
            item_id=item["item_id"],
            status=EventStatus.FAILED,
            payload={"tool": tool.name, "error": error, "retryable": retryable, "will_retry": False},
        )
        self.orchestrator.runs.fail(run, f"{tool.name} failed: {error}", retryable=retryable)

    async def inline_model_step(self, run: Row) -> None:
        """Ask a model that runs here for the run's next step, in this turn, and record it."""
        model = self.agent.model()
        tracer = self.agent.extension.process.tracer
        traced: AbstractContextManager[object] = nullcontext()
        if tracer is not None:  # the step in a span of its run's trace (roost.agent.tracing)
            from roost.agent.tracing import run_spans

            spans = run_spans(tracer)
            assert spans is not None
            traced = spans.model_step(run)
        try:
            with traced:
                step = await model.step(self.model_request(run, original=True))
        except ModelError as exc:
            self.model_failed(run, str(exc), exc.retryable, will_retry=False)
            return
        self.record_model_step(run, step)

    def model_request(self, run: Row, *, original: bool = False) -> ModelRequest:
        """What a model step sees. ``original``: the request as typed, credentials included — only
        for a model that runs here (the local planner), never one behind the network."""
        agent = self.agent
        store = self.store
        turn = store.get("turns", run["turn_id"])
        text = turn["input_text"] if turn else ""
        if original and run.get("request") is not None:
            text = str(self.records.original(run["request"]))
        session = store.get("sessions", run["session_id"])
        summary, after = session["summary"] if session else "", 0
        carried: tuple[str, ...] = ()
        view = self.orchestrator.contexts.view(run["session_id"])  # compacted or reset
        if view is not None:
            summary, after, carried = view.summary, view.cursor, view.carried
        steps = self.orchestrator.contexts.run_view(run["run_id"])  # the run's steps compacted
        cursor = steps["cursor"] if steps else -1
        items = store.select(
            "items", "run_id = ? AND step_index > ?", (run["run_id"], cursor), order="step_index"
        )
        return ModelRequest(
            steps_summary=steps["summary"] if steps else "",
            text=text,
            inputs=shown(list(run["inputs"])),
            summary=summary,
            recent_turns=memory.recent_turns(
                store,
                run["session_id"],
                agent.settings().recent_turns,
                before=run["turn_id"],
                after=after,
                carried=carried,
            ),
            tools=agent.catalog().specs(),
            steps=[
                StepRecord(
                    item_id=i["item_id"],
                    tool=i["tool_name"],
                    args=shown(i["args"]),
                    status=i["status"],
                    result=i["result"],
                )
                for i in items
            ],
            hop=run["hops"],
        )

    def record_model_step(self, run: Row, step: ModelStep) -> bool:
        """Record what a model step decided: a question, the run's text, or the next items."""
        if step.ask:
            self.ask(run, step.ask, None)
            return False
        if not step.tool_calls:
            self.set_run(run, model_done=1, model_text=step.text or "")
            return True
        catalog = self.agent.catalog()
        runs = self.orchestrator.runs
        try:
            checked = [(c.name, catalog.check(c.name, c.args)) for c in step.tool_calls]
        except InvalidToolCall as exc:
            runs.fail(run, f"the model asked for an invalid step: {exc}", retryable=True)
            return False
        try:
            kept = [(name, self.records.keep(args)) for name, args in checked]
        except PayloadError as exc:
            runs.fail(run, f"the model asked for a step that cannot be stored: {exc}", retryable=False)
            return False
        base = self.store.scalar(
            "SELECT coalesce(max(step_index) + 1, 0) FROM roost_agent_items WHERE run_id = ?",
            (run["run_id"],),
        )
        now = self.now
        planned = []
        for offset, (name, args) in enumerate(kept):
            tool = catalog.get(name)
            row = {
                "item_id": new_id("item"),
                "run_id": run["run_id"],
                "turn_id": run["turn_id"],
                "step_index": base + offset,
                "tool_name": name,
                "args": args,
                "approval_mode": tool.approval_mode,
                "status": ItemStatus.PENDING,
                "created_at": now,
                "updated_at": now,
            }
            self.store.insert("items", row)
            planned.append(
                {
                    "item_id": row["item_id"],
                    "step_index": row["step_index"],
                    "tool": name,
                    "args": shown(row["args"]),
                    "approval_mode": tool.approval_mode,
                    "background": tool.background,
                }
            )
        self.set_run(run, hops=run["hops"] + 1)
        self.set_turn(run, status=TurnStatus.PLANNED)
        self.event(
            "plan_ready", run, status=EventStatus.PLANNED, payload={"hop": run["hops"], "items": planned}
        )
        return True

    def model_failed(self, run: Row, error: str, retryable: bool, *, will_retry: bool, **extra: Any) -> None:
        """A model step failed; unless it will be retried, its run fails."""
        self.event(
            "model_step_failed",
            run,
            status=EventStatus.RETRYING if will_retry else EventStatus.FAILED,
            payload={"error": self.err(error), "retryable": retryable, "will_retry": will_retry, **extra},
        )
        if not will_retry:
            self.orchestrator.runs.fail(run, f"model step failed: {error}", retryable=retryable)

    def ask(self, run: Row, question: str, item: Row | None) -> None:
        """Pause the run for input (``provide_input`` resumes it)."""
        self.orchestrator.project.release_heavy(run["run_id"])  # nobody waits on us while we wait
        self.set_run(run, waiting=Waiting.INPUT, question=self.err(question, 1000))
        self.set_turn(run, status=TurnStatus.AWAITING_INPUT)
        if item is not None:
            self.store.update("items", item["item_id"], status=ItemStatus.PENDING, updated_at=self.now)
        self.event(
            "input_requested",
            run,
            item_id=item["item_id"] if item else None,
            status=EventStatus.WAITING_FOR_INPUT,
            payload={"question": self.err(question, 1000)},
        )
