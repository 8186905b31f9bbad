"""The run's loop on the workflow core: each run is a workflow of its agent (``roost.run``, id = the run's
id) whose body is the model/tool loop (docs/design.md, *A run on the workflow core*).

The body decides nothing from the agent's rows: each of its steps is an in-turn step (``step.do``)
that does one piece of the run's work through the step parts (:mod:`roost.agent.steps`) and records
*what comes next* — a small JSON answer — so that a replay takes the same path:

- ``model:{hop}:{k}`` — a model step (inline: the model asked in the turn and its decision recorded;
  else a job started): ``{"items": [...]}``, ``{"done": true}``, a wait, or ``{"end": true}`` (the run
  ended: failed); past ``[agent.context.run]``, first a compaction of the run's older steps (a wait
  for ``context:{op_id}``);
- ``item:{item_id}:{k}`` — one planned tool call (its approval gate, the project's heavy slot, the
  call inline or its job): ``{"ok": true}``, a wait, or ``{"end": true}``;
- ``verify`` — the run's stop condition checked and the run ended.

A wait is a step of the core: a job's end is the event ``job:{job_id}`` (its outcome as payload,
sent by the job's end), an approval ``step.approval(approval_id)`` (decided by ``approve``), input
the event ``input`` (sent by ``provide_input``), the heavy slot the event ``heavy`` (sent when the
slot is handed to the run). After a wait the piece runs again as ``{k + 1}``: it finds its approval
granted, its slot taken, its input given, and goes on.

``cancel`` cancels the run's workflow with the rest of what the run owns; ``continue_run`` rewinds it
to the first step of the piece the run stopped in (:func:`stopped_at`), so settled pieces keep their
records and the stopped one runs afresh. A run begun before runs were workflows (a file of an
earlier release: ``runs.on_core`` 0) has no workflow: the first entry that reaches it (a job's end,
an approval decided, input, the heavy slot, a wake-up, ``continue_run``) **moves it onto the core**,
after its rows are written: a workflow is started for it whose body begins with ``adopted:{k}``, a
piece that reads where the run stands (a job it waits on, an approval, input or the slot; its
pending calls; a model step next; its check) and goes on from there as any run.

Guarantees (tests in ``tests/test_agent_run_workflow.py``):

- **A run is a workflow of its agent**: its steps, waits and history are the core's, shown by
  ``get_run`` (``workflow``) and ``run_history``.
- **A settled piece never runs again**: a replay returns its recorded answer; ``continue_run``
  rewinds only the piece the run stopped in, and nothing when it stopped between two pieces.
- **A runtime error fails the run, not the turn, and stops what the run owns**: a piece that raises
  fails its step, the workflow and then the run (retryable: ``continue_run`` runs the piece again);
  its jobs are cancelled and its pending approvals closed. A run past the core's bounds (more than
  ``MAX_STEPS`` steps) or whose body no longer replays its record fails the same way, not retryable.
- **A run whose workflow is no longer kept is not continued**: after the core's retention deleted
  it, ``continue_run`` is refused (``invalid_transition``), never taken for a run of an earlier
  release.
- **A run of an earlier release goes on on the core**: moved there by the first entry that reaches
  it, it takes up what it waited for and does no completed step again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from roost.actors import RetryPolicy
from roost.agent import policy
from roost.agent.catalog import NeedInput
from roost.agent.context import Part
from roost.agent.errors import InvalidTransition
from roost.agent.payloads import error_line
from roost.agent.status import (
    ACTIVE_JOB,
    FINISHED,
    ApprovalStatus,
    ItemStatus,
    RunStatus,
    TurnStatus,
    Waiting,
)
from roost.agent.store import Row
from roost.workflows.engine import Engine, engine_of
from roost.workflows.model import StepKind, StepStatus, WorkflowStatus
from roost.workflows.store import StepRow, WorkflowRow

if TYPE_CHECKING:
    from roost.actors import Actor
    from roost.workflows import Step

__all__ = ["RUN_WORKFLOW", "Loop"]

#: The workflow each run is (``Agent``'s ``roost.run`` body).
RUN_WORKFLOW = "roost.run"
#: A piece of a run is one attempt: a raise is a runtime error (the run fails; ``continue_run`` redoes it).
_ONCE = RetryPolicy(max_attempts=1)
Answer = dict[str, Any]
#: The reasons of a failed run workflow after which ``continue_run`` may help: a piece raised.
_RETRYABLE = frozenset({"step_failed", "error"})


def stopped_at(steps: Sequence[StepRow]) -> int:
    """Where ``continue_run`` takes a run's workflow back to: the first step of the piece it stopped
    in, or nowhere (all its steps kept) when its last piece had settled (an item done, a model step
    that planned or was done) and the run stopped before the next began. A piece spans its in-turn
    steps (``{group}:{k}``) and the waits after each."""
    last: StepRow | None = None
    start = 0
    for s in steps:
        if s.kind is StepKind.DO and s.name != "verify":
            group = s.name.rsplit(":", 1)[0]
            if last is None or last.name.rsplit(":", 1)[0] != group:
                start = s.position
            last = s
    if last is None:
        return len(steps)
    tail = steps[-1]
    if tail.name == "verify":
        return tail.position
    settled = tail.status is StepStatus.COMPLETED and isinstance(tail.result, dict)
    answer = tail.result if settled else {}
    if tail.kind in (StepKind.DO, StepKind.EVENT) and ({"items", "done", "ok"} & set(answer)):
        return len(steps)
    return start


class Loop(Part):
    def _engine(self) -> Engine:
        return engine_of(cast("Actor", self.agent))

    def owns(self, run_id: str) -> bool:
        """Whether ``run_id`` runs on the workflow core (False: a run of an earlier release)."""
        run = self.store.fields("runs", run_id, ("on_core",))
        return run is not None and bool(run["on_core"])

    def check_continuable(self, run: Row) -> None:
        """``continue_run`` of a run whose workflow the core's retention deleted (it ended over
        ``workflow_retention`` finished workflows ago): InvalidTransition, nothing changed."""
        if run.get("on_core") and self._engine().store.get(run["run_id"]) is None:
            raise InvalidTransition(
                message=f"run {run['run_id']} ended too long ago to continue: its workflow is no longer "
                "kept (workflow_retention); start a new turn"
            )

    def _live(self, run_id: str) -> WorkflowRow | None:
        """The run's workflow, if it has not ended."""
        wf = self._engine().store.get(run_id)
        return wf if wf is not None and not wf.status.terminal else None

    async def _on_core(self, run_id: str) -> WorkflowRow | None:
        """The run's live workflow, for an entry to deliver to; None when there is none to. A run
        of an earlier release is moved onto the core here (:meth:`adopt`): its rows already say
        what the entry did, so nothing is delivered to it."""
        if not self.owns(run_id) and await self.adopt(run_id):
            return None
        return self._live(run_id)

    async def adopt(self, run_id: str) -> bool:
        """Move a run of an earlier release onto the core: a workflow whose body begins where the run
        stands (``adopted``), advanced now; True. False when there is nothing to move: the run is
        finished (it stays as it is), or it has a workflow already (it is marked so)."""
        run = self.store.get("runs", run_id)
        if run is None or run["on_core"] or run["status"] in FINISHED:
            return False
        self.store.update("runs", run_id, on_core=1)
        if self._engine().store.get(run_id) is not None:
            return False
        await self._engine().start(RUN_WORKFLOW, {"run_id": run_id, "adopted": True}, run_id)
        return True

    # -- the entries ----------------------------------------------------------------------------------
    async def start(self, run_id: str, *, background: bool) -> None:
        """The run's workflow, advanced now (or, ``background``, by a wake-up at once)."""
        await self._engine().start(RUN_WORKFLOW, {"run_id": run_id}, run_id, advance=not background)

    async def poke(self, run_id: str) -> None:
        """Advance the run (what is due runs)."""
        if await self._on_core(run_id):
            await self._engine().advance(run_id)

    async def notify(self, run_id: str, event: str, payload: Any = None) -> None:
        """Deliver ``event`` to the run's body (a job's end, input, the heavy slot), which goes on."""
        if await self._on_core(run_id):
            await self._engine().notify(run_id, event, payload)

    async def input_given(self, run_id: str) -> None:
        """``provide_input`` answered the run: its body hears ``input`` if it waits for it (an answer
        to an MCP server that asked inside a job goes to the job's attempt instead)."""
        wf = await self._on_core(run_id)
        if wf is not None and (wf.waiting or {}).get("event") == "input":
            await self._engine().notify(run_id, "input", None)

    async def decided(self, run_id: str, approval_id: str, approved: bool) -> None:
        """An approval of the run was decided (its records written): the body goes on."""
        if await self._on_core(run_id):
            await self._engine().approve(run_id, approval_id, approved, None)

    async def cancel(self, run_id: str) -> None:
        if self._live(run_id):
            await self._engine().cancel(run_id)

    async def rewind(self, run_id: str) -> None:
        """``continue_run``: back to the first step of the piece the run stopped in, then on (a run
        of an earlier release: moved onto the core, from where it stands)."""
        engine = self._engine()
        if not self.owns(run_id) and await self.adopt(run_id):
            return
        await engine.rewind(run_id, stopped_at(engine.store.steps(run_id)))

    async def ended(self, workflow: dict[str, Any]) -> None:
        """The run's workflow ended. Failed (a piece raised, a body that diverged, past the bound
        on steps): its run fails, retryable only when a piece raised, and what it owns stops.
        Completed or cancelled: the run's records say so already."""
        if workflow["status"] != WorkflowStatus.FAILED:
            return
        run = self.store.get("runs", str(workflow["id"]))
        if run is None or run["status"] in FINISHED:
            return
        self.records.concern(run["run_id"])
        orc = self.orchestrator
        await orc.runs.stop_owned(run, "runtime error")  # nothing of the run goes on behind its failure
        error = str(workflow.get("error") or "failed")
        # a piece that raised may work when run again; a run past the core's bounds, or a body that
        # no longer replays its record, would fail the same way
        retryable = workflow.get("reason") in _RETRYABLE
        orc.runs.fail(run, f"runtime error: {error}", retryable=retryable)

    # -- the body -------------------------------------------------------------------------------------
    async def body(self, step: Step, run_id: str, adopted: bool = False) -> Any:
        """The model/tool loop (see the module doc); ``adopted``: a run of an earlier release, taken
        up where it stands."""
        hop = 0
        out: Answer | None = None
        if adopted:
            out = await self._piece(step, "adopted", lambda: self.adopted_piece(run_id), settles=False)
            if out is None:
                return None
            hop = int(out["hop"])
        while True:
            if out is None or out.get("model"):
                out = await self._piece(step, f"model:{hop}", lambda: self.model_piece(run_id))
                if out is None:
                    return None
            if out.get("done"):
                break
            for item_id in out["items"]:
                got = await self._piece(
                    step, f"item:{item_id}", partial(self.item_piece, run_id, item_id, step)
                )
                if got is None:
                    return None
            hop += 1
            out = None
        await step.do("verify", lambda: self.verify_piece(run_id), retry=_ONCE)
        return None

    async def _piece(
        self, step: Step, group: str, fn: Callable[[], Awaitable[Answer]], *, settles: bool = True
    ) -> Answer | None:
        """Run a piece until it settles: its answer, or None when the run ended in it. A job's end
        is the piece's answer (``settles``), or the piece runs again after it."""
        k = 0
        while True:
            out: Answer = await step.do(f"{group}:{k}", fn, retry=_ONCE)
            if out.get("wait") == "job":
                ended = await step.wait_for_event(f"job:{out['job']}")
                if settles:
                    out = ended
                else:
                    k += 1
                    continue
            wait = out.get("wait")
            if wait is None:
                return None if out.get("end") else out
            if wait == "approval":
                decision = await step.approval(str(out["approval"]))
                if not decision.approved:
                    return None  # the denial ended the run (approve recorded it)
            else:  # "input", "heavy", or a compaction of the run's steps ("context", its event)
                await step.wait_for_event(str(out.get("event", wait)))
            k += 1

    # -- the pieces (each in its step's turn) ---------------------------------------------------------
    async def model_piece(self, run_id: str) -> Answer:
        """A model step of the run: inline, asked and recorded now; else a job."""
        steps = self.orchestrator.steps
        run = self.run(run_id)
        if run["status"] in FINISHED:
            return {"end": True}
        cfg = self.agent.settings()
        if run["hops"] >= cfg.max_tool_hops:
            self.orchestrator.runs.fail(
                run, f"stopped after max_tool_hops ({cfg.max_tool_hops}) model steps", retryable=False
            )
            return {"end": True}
        op = await self.orchestrator.contexts.before_model(run)
        if op is not None:  # the run's older steps are compacted first
            return {"wait": "context", "event": f"context:{op}"}
        model = self.agent.model()
        if not model.inline:
            job = await self.orchestrator.jobs.start(run, None, "model", {"hop": run["hops"]})
            return {"wait": "job", "job": job["job_id"]}
        await steps.inline_model_step(run)
        return self.after_model(run_id)

    def after_model(self, run_id: str) -> Answer:
        """What a recorded model step leaves the run to do next (its answer)."""
        run = self.run(run_id)
        if run["status"] in FINISHED:
            return {"end": True}
        if run["waiting"] == Waiting.INPUT:
            return {"wait": "input"}
        if run["model_done"]:
            return {"done": True}
        items = self.store.select(
            "items", "run_id = ? AND status = ?", (run_id, ItemStatus.PENDING), order="step_index"
        )
        return {"items": [i["item_id"] for i in items]}

    async def item_piece(self, run_id: str, item_id: str, step: Step | None = None) -> Answer:
        """One planned tool call: its approval, the heavy slot, then the call (inline or a job; an
        inline call gets the idempotency key of ``step``'s in-turn step it runs in)."""
        orc = self.orchestrator
        steps = orc.steps
        run = self.run(run_id)
        item = self.store.get("items", item_id)
        if run["status"] in FINISHED or item is None:
            return {"end": True}
        if item["status"] == ItemStatus.COMPLETED:
            return {"ok": True}
        if item["status"] != ItemStatus.PENDING:
            return {"end": True}
        tool = self.agent.catalog().get(item["tool_name"])
        if policy.needs_approval(tool.approval_mode) and item["grant_id"] is None:
            if not orc.approvals.reuse_grant(run, item, tool):
                return {"wait": "approval", "approval": orc.approvals.request(run, item, tool)}
        if tool.heavy and not orc.project.take_heavy(run):
            return {"wait": "heavy"}
        self.set_turn(run, status=TurnStatus.RUNNING)
        self.store.update(
            "items", item_id, status=ItemStatus.RUNNING, runs=item["runs"] + 1, updated_at=self.now
        )
        if tool.background:
            job = await orc.jobs.start(run, item, tool.name, item["args"])
            steps.tool_started(run, item, tool, job)
            return {"wait": "job", "job": job["job_id"]}
        steps.tool_started(run, item, tool, None)
        try:
            result = await orc.execution.run_inline(run, item, tool, step.idempotency_key if step else None)
        except NeedInput as need:
            steps.ask(run, need.prompt, item)
            return {"wait": "input"}
        except Exception as exc:
            steps.item_failed(run, item, tool, error_line(exc), retryable=False)
            return {"end": True}
        if not steps.item_completed(run, item, tool, result):
            return {"end": True}
        await orc.delegations.step_done(run)  # a task's run: its origin hears how far it got
        return {"ok": True}

    def after_item(self, run_id: str, item_id: str) -> Answer:
        """What a recorded tool call leaves the run to do next (its answer)."""
        run = self.run(run_id)
        item = self.store.get("items", item_id)
        if run["status"] in FINISHED or item is None:
            return {"end": True}
        if run["waiting"] == Waiting.INPUT:
            return {"wait": "input"}
        return {"ok": True} if item["status"] == ItemStatus.COMPLETED else {"end": True}

    async def adopted_piece(self, run_id: str) -> Answer:
        """Where a run of an earlier release stands, as what comes next: a wait (a job of the run,
        an approval of its next call, input, the heavy slot), its pending calls, a model step, its
        check, or its end. ``hop``: the loop's count of model steps the answer stands at (its names go on
        from it as they would have)."""
        run = self.run(run_id)
        if run["status"] in FINISHED:
            return {"end": True}
        job = self.store.scalar(
            "SELECT job_id FROM roost_agent_jobs WHERE run_id = ? AND status IN (?, ?, ?) "
            "ORDER BY created_at LIMIT 1",
            (run_id, *ACTIVE_JOB),
        )
        if job is not None:
            return {"wait": "job", "job": job}
        if run["waiting"] == Waiting.APPROVAL:
            approval = self.store.scalar(
                "SELECT approval_id FROM roost_agent_approvals WHERE run_id = ? AND status = ? "
                "ORDER BY created_at LIMIT 1",
                (run_id, ApprovalStatus.PENDING),
            )
            if approval is not None:
                return {"wait": "approval", "approval": approval}
        if run["waiting"] == Waiting.INPUT:
            return {"wait": "input"}
        if run["waiting"] == Waiting.PROJECT:
            return {"wait": "heavy"}
        hop = run["hops"]
        items = self.store.select(
            "items",
            "run_id = ? AND status NOT IN (?, ?)",
            (run_id, ItemStatus.COMPLETED, ItemStatus.SKIPPED),
            order="step_index",
        )
        if items:
            return {
                "items": [i["item_id"] for i in items],
                "hop": max(hop - 1, 0),
            }  # the calls of the last model step
        if run["model_done"]:
            return {"done": True, "hop": hop}
        return {"model": True, "hop": hop}

    async def verify_piece(self, run_id: str) -> Answer:
        run = self.run(run_id)
        if run["status"] == RunStatus.IN_PROGRESS and not run["waiting"]:
            await self.orchestrator.verification.finish(run)
        return {"end": True}
