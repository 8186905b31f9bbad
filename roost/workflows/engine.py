"""The engine: one actor's workflows, driven in its turns (start, advance, wake-ups, controls).

Every method runs inside a turn of the actor (a callable, a wake-up, or a turn an outside step's task
asks for through ``process.run``). See ``docs/design.md`` (*Workflow core*) for the state machines.

Guarantees (tests in ``tests/test_workflows*.py``):

- **Start is idempotent by workflow id**: the same id with the same name and input answers the
  existing workflow; with another name or input, ``workflow_conflict``.
- **Nothing advances a paused or finished workflow**: a wake-up, an event or an outside result that
  comes meanwhile is recorded (events, results) or ignored (wake-ups); ``resume_workflow`` goes on.
- **A cancelled or failed workflow goes on after its last completed step**, and **a rewind drops
  the steps from a position on**: :mod:`roost.workflows.continuing`.
- **A start may leave its first advance to a wake-up** (``start(..., advance=False)``): nothing of
  the body runs in the starting turn.
- **A pause does not lose an outside step**: a lease's end while paused still asks the runner; a
  lost attempt is marked ``lost`` (nothing advances) and ``resume_workflow`` runs it again.
- **An outside attempt's result is recorded only while it is current**: the same generation (none
  after ``restart_workflow``), attempt and run, the workflow not finished (the fence); wake-ups of an
  older generation do nothing either.
- **Finished workflows are bounded**: the finished ones but the newest ``workflow_retention``
  (default :data:`KEPT_FINISHED_WORKFLOWS`) are deleted with their steps, events and history once a
  tenth more have gathered; running, waiting and paused ones are never deleted.
- **A turn prunes at most a batch**: a start deletes the finished workflows past the retention
  itself only when they are at most ``workflow_prune_batch`` (default :data:`PRUNE_BATCH`) with at
  most ``workflow_prune_rows`` rows (default :data:`PRUNE_ROWS`); more, and it sets a prune wake-up
  going (one at a time) that deletes a batch a turn (as many workflows as fit in the rows, one at
  least), waking again at once until the retention holds. **A prune wake-up that found nothing
  does not stop the next** (its key, named after the oldest finished workflow, is spent: the next
  start takes another).
- **A restart drops the events of the old generation**: an event or approval sent before
  ``restart_workflow`` and not consumed is not seen by the new generation.
- **Every end is heard in its own turn**: ``Workflows.on_workflow_end(workflow)`` runs in the turn
  that records a workflow's end (completed, failed for any reason, cancelled); its writes commit
  with that record.
- **A lost outside attempt runs again under the same key**: the lease wake-up asks this process's
  runner; no live task → ``lost`` → the next advance runs it again, ``run + 1``, same attempt.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from dataclasses import replace
from typing import Any

from roost.actors import Actor
from roost.workflows import continuing, retention
from roost.workflows.decorator import bodies_of
from roost.workflows.fanout import branch_lease
from roost.workflows.model import (
    KEPT_FINISHED_WORKFLOWS,
    MAX_LOST_RUNS,
    MAX_NAME,
    MAX_PENDING_EVENTS,
    MAX_STEPS,
    PAGE_BYTES,
    PRUNE_BATCH,
    PRUNE_ROWS,
    StepFailed,
    StepKind,
    StepStatus,
    Suspend,
    WorkflowStatus,
    clean_error,
    error_text,
    refuse,
    short,
)
from roost.workflows.runner import Outcome, runner
from roost.workflows.step import Diverged, Step, TooManySteps, approval_event, lease_key
from roost.workflows.store import WorkflowRow, WorkflowStore, encode
from roost.workflows.wakes import schedule_wake

log = logging.getLogger("roost.workflows")

__all__ = ["Engine", "engine_of"]

_ATTR = "_roost_workflow_engine"
_LIVE = (WorkflowStatus.RUNNING, WorkflowStatus.WAITING)


def engine_of(actor: Actor) -> Engine:
    """The engine of ``actor`` (made on first use, kept on the instance)."""
    found: Engine | None = actor.__dict__.get(_ATTR)
    if found is None:
        found = Engine(actor)
        actor.__dict__[_ATTR] = found
    return found


def _check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_NAME or "\x00" in value:
        raise refuse("bad_name", f"{what} must be 1 to {MAX_NAME} characters without NUL, got {value!r}")
    return value


class Engine:
    """One actor's workflows."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.retention = int(getattr(type(actor), "workflow_retention", KEPT_FINISHED_WORKFLOWS))
        self.max_steps = int(getattr(type(actor), "workflow_max_steps", MAX_STEPS))
        self.prune_batch = max(1, int(getattr(type(actor), "workflow_prune_batch", PRUNE_BATCH)))
        self.prune_rows = max(1, int(getattr(type(actor), "workflow_prune_rows", PRUNE_ROWS)))
        self._admitting = False

    def of(self, actor: Actor) -> Engine:
        return engine_of(actor)

    @property
    def lease(self) -> float:
        """The lease of the actor's outside steps (``WorkflowHost.workflow_lease_seconds``)."""
        lease_of = getattr(self.actor, "workflow_lease_seconds", None)
        if lease_of is not None:
            return float(lease_of())
        return float(getattr(type(self.actor), "workflow_lease", 30.0))

    @property
    def store(self) -> WorkflowStore:
        return WorkflowStore(
            self.actor.extension.connection(), getattr(self.actor, "on_workflow_history", None)
        )

    @property
    def now(self) -> float:
        return self.actor.extension.now

    def _get(self, wid: str) -> WorkflowRow:
        wf = self.store.get(_check_name(wid, "a workflow id"))
        if wf is None:
            raise refuse("not_found", f"no workflow {wid!r}")
        return wf

    def _who(self) -> str | None:
        principal = self.actor.principal
        return principal.id if principal is not None else None

    def _log(self, wf: WorkflowRow, event: str, detail: Any = None) -> None:
        self.store.log(wf.id, wf.generation, event, self.now, detail=detail)

    def _announce(self, wid: str, status: WorkflowStatus) -> None:
        if getattr(type(self.actor), "workflow_announce", True):
            self.actor.emit({"type": "workflow", "id": wid, "status": str(status)})

    # -- start and advance ------------------------------------------------------------------------
    async def start(
        self, name: str, input: Any, workflow_id: str | None, *, advance: bool = True
    ) -> dict[str, Any]:
        """Start a workflow (idempotent by id) and advance it in this turn, or with ``advance``
        False in a wake-up at once (the caller's turn ends first)."""
        if name not in bodies_of(type(self.actor)):
            raise refuse("unknown", f"{type(self.actor).__name__} has no workflow {name!r}")
        wid = _check_name(workflow_id, "a workflow id") if workflow_id is not None else uuid.uuid4().hex
        text = encode(input, "the workflow's input")
        store = self.store
        existing = store.get(wid)
        if existing is not None:
            if existing.name != name or encode(existing.input, "input") != text:
                raise refuse("conflict", f"workflow {wid!r} exists with another name or input")
            return self.status(wid)
        await retention.bound_finished(self, store)
        store.insert(wid, name, text, self._who(), self.now, secrets.token_hex(8))
        wf = store.get(wid)
        assert wf is not None
        self._log(wf, "started", {"by": wf.created_by})
        if advance:
            await self.advance(wid)
        else:
            payload = {"why": "advance", "id": wid, "gen": wf.generation, "nonce": wf.nonce}
            await schedule_wake(self.actor, self.now, payload)
        return self.status(wid)

    async def advance(self, wid: str) -> None:
        """Replay the body of ``wid`` from the top and run it until it suspends or ends."""
        store = self.store
        wf = store.get(wid)
        if wf is None or wf.status not in _LIVE:
            return
        method = bodies_of(type(self.actor)).get(wf.name)
        if method is None:
            await self._finish(
                wf, WorkflowStatus.FAILED, error=f"no workflow {wf.name!r} in this kind", reason="unknown"
            )
            return
        steps = store.steps(wid)
        done = sum(1 for s in steps if s.status in (StepStatus.COMPLETED, StepStatus.FAILED))
        if done:
            self._log(wf, "resumed", {"replayed": done, "recorded": len(steps)})
        step = Step(self, wf, steps)
        try:
            value = await getattr(self.actor, method)(step, wf.input)
        except Suspend:
            status = WorkflowStatus.RUNNING if step.again else WorkflowStatus.WAITING
            store.set_status(wid, status, self.now, waiting=step.waiting)
            if status is not wf.status:
                self._announce(wid, status)
            return
        except Diverged as exc:
            await self._finish(wf, WorkflowStatus.FAILED, error=str(exc), reason="nondeterministic")
            return
        except TooManySteps as exc:
            await self._finish(wf, WorkflowStatus.FAILED, error=str(exc), reason="too_many_steps")
            return
        except StepFailed as exc:
            await self._finish(wf, WorkflowStatus.FAILED, error=short(str(exc)), reason="step_failed")
            return
        except Exception as exc:  # the body's own code raised
            await self._finish(wf, WorkflowStatus.FAILED, error=error_text(exc), reason="error")
            return
        if step.positions < step.recorded:
            error = f"the body returned after {step.positions} steps; {step.recorded} were recorded"
            await self._finish(wf, WorkflowStatus.FAILED, error=error, reason="nondeterministic")
            return
        try:
            result = encode(value, "the workflow's result")
        except Exception as exc:
            await self._finish(wf, WorkflowStatus.FAILED, error=str(exc), reason="result")
            return
        await self._finish(wf, WorkflowStatus.COMPLETED, result=result)

    async def _finish(
        self,
        wf: WorkflowRow,
        status: WorkflowStatus,
        *,
        result: str | None = None,
        error: str | None = None,
        reason: str | None = None,
    ) -> None:
        error = clean_error(self.actor, wf.id, error)  # cleaned, then cut
        self.store.set_status(wf.id, status, self.now, result=result, error=error, reason=reason)
        self._log(wf, str(status), {"error": error, "reason": reason} if error else None)
        self._announce(wf.id, status)
        if status is not WorkflowStatus.COMPLETED:  # failed or cancelled mid-step: its runs are over
            runner(self.actor.extension.process).cancel(self.actor.kind, self.actor.name, wf.id)
        ended = self.store.get(wf.id)
        hook = getattr(self.actor, "on_workflow_end", None)
        if ended is not None and hook is not None:
            await hook(ended.to_json())
        await self._admit()  # a place its running step held is free

    # -- wake-ups and outside results -------------------------------------------------------------
    async def wake(self, payload: dict[str, Any]) -> None:
        """A ``workflow_wake`` wake-up: a sleep's end, a deadline, a backoff's end, the next batch of
        in-turn steps, a lease's end, or a batch of the retention's prune."""
        if payload.get("why") == "prune":
            await retention.prune(self)
            return
        wid, gen = str(payload["id"]), int(payload["gen"])
        wf = self.store.get(wid)
        if wf is None or wf.generation != gen or wf.status.terminal:
            return
        if payload.get("nonce", wf.nonce) != wf.nonce:
            return  # a wake-up of a workflow deleted and started again under its id: not this one's
        # A lease's end is looked at whatever the status: while paused, a lost attempt is marked
        # ``lost`` (the advance that follows does nothing until ``resume_workflow``), so that the
        # resume runs it again; dropped, the step would stay ``running`` for ever.
        if payload.get("why") == "branch_lease":
            await branch_lease(self, payload)
            return
        if payload.get("why") == "lease":
            await self._lease(wf, int(payload["pos"]), int(payload["attempt"]), int(payload["run"]))
            await self._admit()  # a run lost for good frees its place
            return
        if wf.status in _LIVE:
            await self.advance(wid)

    async def _lease(self, wf: WorkflowRow, pos: int, attempt: int, run: int) -> None:
        store = self.store
        rec = store.step(wf.id, pos)
        if rec is None or rec.status is not StepStatus.RUNNING or (rec.attempt, rec.run) != (attempt, run):
            return
        actor = self.actor
        key = (actor.kind, actor.name, wf.id, wf.generation, pos, attempt, run, "")
        payload = {
            "why": "lease",
            "id": wf.id,
            "gen": wf.generation,
            "pos": pos,
            "attempt": attempt,
            "run": run,
            "nonce": wf.nonce,
        }
        if runner(actor.extension.process).alive(key):
            store.set_wake(wf.id, pos, self.now + self.lease)  # what status shows: the lease's end
            await schedule_wake(actor, self.now + self.lease, payload)
            return
        store.log(
            wf.id,
            wf.generation,
            "attempt_lost",
            self.now,
            position=pos,
            name=rec.name,
            attempt=attempt,
            detail={"run": run},
        )
        if run >= MAX_LOST_RUNS:
            error = f"lost with its process {run} times"
            store.put_step(
                wf.id,
                pos,
                rec.name,
                rec.kind,
                StepStatus.FAILED,
                self.now,
                attempt=attempt,
                run=run,
                error=error,
            )
        else:
            store.put_step(
                wf.id, pos, rec.name, rec.kind, StepStatus.LOST, self.now, attempt=attempt, run=run
            )
        await self.advance(wf.id)

    # -- concurrency slots ----------------------------------------------------------------------------
    def slot_limit(self, slot: str) -> int:
        """How many steps of ``slot`` may run at once (``Workflows.workflow_slots``); ValueError if
        the kind declares no such slot."""
        slots = getattr(type(self.actor), "workflow_slots", {})
        limit = slots.get(slot) if isinstance(slot, str) else None
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"{type(self.actor).__name__} has no workflow slot {slot!r} (workflow_slots)")
        return limit

    def slot_free(self, slot: str, wid: str, pos: int) -> bool:
        """Whether the step at ``pos`` of ``wid`` may start in ``slot`` now: among the first of the
        slot's queue (oldest first) that the places left can take; a step not queued comes last."""
        store = self.store
        places = self.slot_limit(slot) - store.slot_running(slot)
        if places <= 0:
            return False
        queue = [(w, p) for _, w, p in store.slot_queue(slot)]
        ahead = queue.index((wid, pos)) if (wid, pos) in queue else len(queue)
        return ahead < places

    async def _admit(self) -> None:
        """Start what waits for a place in a slot, oldest first, as far as places are free: called by
        everything that may free one (a step of a slot ended or went to retry, was lost for good, its
        workflow cancelled or restarted), in the same turn, so no place stays free while a step waits
        for it. Each waiting workflow is advanced at most once per call (a body that no longer asks
        for the slot, or a paused one, does not hold the queue)."""
        if self._admitting or not getattr(type(self.actor), "workflow_slots", None):
            return  # a kind without slots has nothing to admit (and reads nothing for it)
        self._admitting = True
        try:
            tried: set[tuple[str, int]] = set()
            while True:
                store = self.store
                ready: list[tuple[str, int]] = []
                free: dict[str, int] = {}
                for slot, wid, pos in store.slot_queue():
                    if slot not in free:
                        try:
                            free[slot] = self.slot_limit(slot) - store.slot_running(slot)
                        except ValueError:
                            free[slot] = 0  # a slot no longer declared: its steps fail when advanced
                            ready.append((wid, pos))
                            continue
                    if free[slot] > 0 and (wid, pos) not in tried:
                        free[slot] -= 1
                        ready.append((wid, pos))
                ready = [r for r in ready if r not in tried]
                if not ready:
                    return
                for wid, pos in ready:
                    tried.add((wid, pos))
                    await self._admit_one(wid)
        finally:
            self._admitting = False

    async def _admit_one(self, wid: str) -> None:
        """Advance a workflow admitted to a slot, under a savepoint: a failure of its advance (its
        ``on_workflow_end`` raising, say) is rolled back and logged, and never takes the turn that
        freed the place (another workflow's recorded outcome) with it; that workflow stays waiting."""
        savepoint = self.actor.extension.savepoint("roost_wf_admit")
        try:
            await self.advance(wid)
        except Exception:
            savepoint.rollback()
            log.exception(
                "workflow %r of %s/%r: its admission to a slot failed", wid, self.actor.kind, self.actor.name
            )
            return
        savepoint.release()

    def holds(self, wid: str, gen: int, pos: int, attempt: int, run: int, nonce: str | None = None) -> bool:
        """Whether outside attempt ``(attempt, run)`` at ``pos`` of generation ``gen`` is current (of
        the workflow drawn with ``nonce``, when given: the attempt's own calls give it, so a ticket of
        a workflow deleted and started again under its id is not current in the new one)."""
        fence = self.store.fence(wid, pos)
        if fence is None:
            return False
        generation, status, drawn, step_status, step_attempt, step_run = fence
        return (
            generation == gen
            and not WorkflowStatus(status).terminal
            and (nonce is None or drawn == nonce)
            and step_status == StepStatus.RUNNING
            and (step_attempt, step_run) == (attempt, run)
        )

    async def finish_external(
        self, wid: str, gen: int, pos: int, attempt: int, run: int, outcome: Outcome, nonce: str | None = None
    ) -> None:
        """Record an outside attempt's outcome (fenced), then advance."""
        if not self.holds(wid, gen, pos, attempt, run, nonce):
            return
        if outcome.error:
            outcome = replace(outcome, error=clean_error(self.actor, wid, outcome.error))
        store = self.store
        wf = store.get(wid)
        assert wf is not None
        await self.actor.cancel_schedule(lease_key(wf.step_prefix, gen, pos, attempt, run))
        rec = store.step(wid, pos)
        assert rec is not None
        now = self.now
        if outcome.ok:
            try:
                text = encode(outcome.result, f"the result of step {rec.name!r}")
            except Exception as exc:
                outcome = Outcome(False, error=clean_error(self.actor, wid, str(exc)), retryable=False)
            else:
                store.put_step(
                    wid,
                    pos,
                    rec.name,
                    StepKind.EXTERNAL,
                    StepStatus.COMPLETED,
                    now,
                    attempt=attempt,
                    run=run,
                    result=text,
                )
                store.log(
                    wid,
                    gen,
                    "step_completed",
                    now,
                    position=pos,
                    name=rec.name,
                    attempt=attempt,
                    detail={"run": run},
                )
        if not outcome.ok:
            store.put_step(
                wid,
                pos,
                rec.name,
                StepKind.EXTERNAL,
                StepStatus.ATTEMPT_FAILED,
                now,
                attempt=attempt,
                run=run,
                retryable=outcome.retryable,
                error=outcome.error,
            )
        await self.advance(wid)
        await self._admit()  # a place of its slot may be free

    # -- events and approvals ---------------------------------------------------------------------
    async def send_event(self, wid: str, name: str, payload: Any) -> dict[str, Any]:
        _check_name(name, "an event name")
        if name.startswith("approval:"):
            raise refuse("bad_name", "events named approval:… are sent by approve_step only")
        return await self._deliver(self._get(wid), name, payload)

    async def approve(self, wid: str, name: str, approved: bool, note: str | None) -> dict[str, Any]:
        wf = self._get(wid)
        waiting = wf.waiting or {}
        if wf.status.terminal or waiting.get("kind") != StepKind.APPROVAL or waiting.get("step") != name:
            raise refuse("state", f"workflow {wid!r} is not waiting for approval {name!r}")
        by = self._who() or "unknown"
        approvers = waiting.get("approvers")
        if approvers is not None and by not in approvers:
            raise refuse("forbidden", f"approval {name!r} of workflow {wid!r} is not {by!r}'s to decide")
        return await self._deliver(wf, approval_event(name), {"approved": approved, "by": by, "note": note})

    async def notify(self, wid: str, name: str, payload: Any) -> None:
        """``send_event`` from the kind's own code (a ``WorkflowHost``): no status built."""
        await self._deliver(self._get(wid), name, payload, status=False)

    async def _deliver(
        self, wf: WorkflowRow, event: str, payload: Any, *, status: bool = True
    ) -> dict[str, Any]:
        if wf.status.terminal:
            raise refuse("state", f"workflow {wf.id!r} is {wf.status}: it takes no events")
        store = self.store
        if store.pending_events(wf.id) >= MAX_PENDING_EVENTS:
            raise refuse("too_many", f"workflow {wf.id!r} has {MAX_PENDING_EVENTS} events not yet consumed")
        store.add_event(wf.id, event, encode(payload, "an event's payload"), self._who(), self.now)
        self._log(wf, "event_sent", {"event": event, "by": self._who()})
        await self.advance(wf.id)
        return self.status(wf.id) if status else {}

    # -- controls ---------------------------------------------------------------------------------
    async def cancel(self, wid: str) -> dict[str, Any]:
        wf = self._get(wid)
        if wf.status.terminal:
            raise refuse("state", f"workflow {wid!r} is {wf.status} already")
        await self._finish(wf, WorkflowStatus.CANCELLED, error="cancelled", reason="cancelled")
        return self.status(wid)

    async def pause(self, wid: str) -> dict[str, Any]:
        wf = self._get(wid)
        if wf.status not in _LIVE:
            raise refuse("state", f"workflow {wid!r} is {wf.status}: only a running or waiting one pauses")
        self.store.set_status(wid, WorkflowStatus.PAUSED, self.now, waiting=wf.waiting)
        self._log(wf, "paused", {"by": self._who()})
        self._announce(wid, WorkflowStatus.PAUSED)
        return self.status(wid)

    async def resume(self, wid: str) -> dict[str, Any]:
        wf = self._get(wid)
        if wf.status is WorkflowStatus.COMPLETED:
            raise refuse("state", f"workflow {wid!r} is completed: restart it instead")
        if wf.status.terminal:  # cancelled or failed: on after its last completed step
            tail = continuing.reopen(self.store, wid, self.now)
            detail = {"by": self._who(), "from": str(wf.status), "step": tail.name if tail else None}
            self._log(wf, "continued", detail)
            self._announce(wid, WorkflowStatus.RUNNING)
            await self.advance(wid)
            await self._admit()  # its step may queue for a slot again, or take a free place
            return self.status(wid)
        if wf.status is WorkflowStatus.PAUSED:  # a live one is advanced now (after a dead-lettered advance)
            self.store.set_status(wid, WorkflowStatus.RUNNING, self.now, waiting=wf.waiting)
        self._log(wf, "resumed_by", {"by": self._who()})
        await self.advance(wid)
        return self.status(wid)

    async def restart(self, wid: str) -> dict[str, Any]:
        wf = self._get(wid)
        runner(self.actor.extension.process).cancel(self.actor.kind, self.actor.name, wid)
        gen = self.store.new_generation(wid, self.now)
        self.store.log(wid, gen, "restarted", self.now, detail={"by": self._who(), "from": wf.generation})
        await self.advance(wid)
        await self._admit()  # the old generation's places are free
        return self.status(wid)

    async def rewind(self, wid: str, position: int) -> None:
        """Back to ``position`` (a ``WorkflowHost``'s own control, as the agent's ``continue_run``):
        the steps from there on and the unconsumed events dropped, the steps before kept, a new
        nonce (nothing of the dropped steps, an attempt or a wake-up, is recorded any more), running
        again from the top of the body; history ``rewound``."""
        wf = self._get(wid)
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise refuse("bad_name", f"a position is an integer >= 0, got {position!r}")
        runner(self.actor.extension.process).cancel(self.actor.kind, self.actor.name, wid)
        self.store.rewind(wid, position, self.now, secrets.token_hex(8))
        self._log(wf, "rewound", {"by": self._who(), "from": str(wf.status), "position": position})
        await self.advance(wid)
        await self._admit()  # places the dropped steps held are free

    def delete(self, wid: str) -> bool:
        wf = self._get(wid)
        if not wf.status.terminal:
            raise refuse("state", f"workflow {wid!r} is {wf.status}: cancel it first")
        self.store.delete(wid)
        return True

    # -- reads ------------------------------------------------------------------------------------
    def status(self, wid: str) -> dict[str, Any]:
        """The workflow and its steps, without the steps' results (``workflow_steps`` pages them)."""
        wf = self._get(wid)
        joins = self._joins(wid, result=False)
        steps = [s.to_json(result=False) | joins.get(s.position, {}) for s in self.store.steps(wid)]
        return {**wf.to_json(), "steps": steps}

    def _joins(self, wid: str, *, result: bool) -> dict[int, dict[str, Any]]:
        """The branches of the workflow's ``parallel`` joins, by position (the join state)."""
        joins: dict[int, dict[str, Any]] = {}
        for b in self.store.branches(wid):
            joins.setdefault(b.position, {"branches": []})["branches"].append(b.to_json(result=result))
        return joins

    def steps(self, wid: str, after: int, limit: int) -> dict[str, Any]:
        """Steps after position ``after`` with their results: at most ``limit`` (1 to 500), and at
        most :data:`PAGE_BYTES` of results (at least one step)."""
        self._get(wid)
        limit = max(1, min(limit, 500))
        page: list[dict[str, Any]] = []
        size = 0
        more = False
        joins = self._joins(wid, result=True)
        for rec in self.store.steps(wid):
            if rec.position <= after:
                continue
            entry = rec.to_json() | joins.get(rec.position, {})
            cost = len(encode(entry.get("result"), "a step's result")) + len(
                encode(entry.get("branches"), "a join's branches")
            )
            if page and (len(page) == limit or size + cost > PAGE_BYTES):
                more = True
                break
            page.append(entry)
            size += cost
        return {"steps": page, "next": page[-1]["position"] if more else None}

    def history(self, wid: str, after: int, limit: int) -> dict[str, Any]:
        self._get(wid)
        limit = max(1, min(limit, 500))
        entries = self.store.history(wid, after, limit)
        return {"entries": entries, "next": entries[-1]["seq"] if len(entries) == limit else None}

    def listing(self, status: str | None, after: str | None, limit: int) -> list[dict[str, Any]]:
        if status is not None and status not in set(WorkflowStatus):
            raise refuse("bad_name", f"no workflow status {status!r}")
        return [wf.to_json() for wf in self.store.page(status, max(1, min(limit, 500)), after)]
