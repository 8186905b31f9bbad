"""``Workflows``: the actor base class that gives a kind durable workflows, and its wire surface.

::

    class Orders(Workflows):
        kind = "orders"

        @workflow
        async def checkout(self, step: Step, order: dict) -> str:
            await step.do("reserve", lambda: self.sql.execute("INSERT INTO held VALUES (?)", (order["id"],)))
            await step.approval("manager", timeout=3600)
            receipt = await step.external("charge", lambda a: charge(order, key=a.idempotency_key))
            return receipt["id"]

Callables (the principal rules are the actor layer's: a read-only principal may call only the
``readonly`` ones, so it may read workflows and never change one):

- ``start_workflow(name, input=None, workflow_id=None)``: start (idempotent by id); it runs until its
  first wait in this turn.
- ``workflow_status(workflow_id)`` (readonly): status, result or error, what it waits on, its steps
  (without their results).
- ``workflow_steps(workflow_id, after=-1, limit=100)`` (readonly): a page of its steps with their
  results (at most 512 KiB of them); ``next`` is the next page's ``after``.
- ``workflow_history(workflow_id, after=0, limit=100)`` (readonly): a page of its history; ``next``
  is the next page's ``after`` (None: the last page).
- ``list_workflows(status=None, after=None, limit=100)`` (readonly): a page of workflows, by id.
- ``send_event(workflow_id, name, payload=None)``: an event for ``wait_for_event(name)``.
- ``approve_step(workflow_id, name, approved=True, note=None)``: decide the approval it waits on.
- ``cancel_workflow``, ``pause_workflow``, ``resume_workflow``, ``restart_workflow``,
  ``delete_workflow`` (a finished one), each ``(workflow_id)``.

A kind hears every end of its workflows (completed, failed for any reason, cancelled) in
``on_workflow_end``, in the turn that records it, and every line of their history (an attempt
started, failed with its retry time, lost; a step completed; a wait) in ``on_workflow_history``, in
the turn that writes it.

Another actor sends an event as any call: ``await self.actor("orders", "o1").call("send_event", wid,
"paid", {...})``; the advance the event allows runs in that call's turn of the workflow's actor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from roost.actors import Actor, callable, wakeup
from roost.storage import Migration
from roost.workflows.engine import engine_of
from roost.workflows.model import KEPT_FINISHED_WORKFLOWS, MAX_STEPS, PRUNE_BATCH, PRUNE_ROWS
from roost.workflows.schema import WORKFLOW_COMPONENT

__all__ = ["WorkflowHost", "Workflows"]


class WorkflowHost(Actor):
    """An actor whose ``@workflow`` methods run on the workflow core, without the wire surface: its
    own code starts and drives them (``engine_of(self)``), as the agent runtime runs its jobs.
    :class:`Workflows` adds the callables. Combine with another base that has ``components`` by
    listing both: ``components = (*Other.components, WORKFLOW_COMPONENT)``."""

    components: ClassVar[Sequence[tuple[str, Sequence[Migration]]]] = (WORKFLOW_COMPONENT,)
    _roost_runs_workflows: ClassVar[bool] = True  # its @workflow bodies run (roost.actors.decorators)
    #: How long an outside step's run may go without this process being asked whether it still runs
    #: it (its lease wake-up); after a crash, a lost run is taken up again at most this long after it
    #: began (or after the restart, whichever is later).
    workflow_lease: ClassVar[float] = 30.0
    #: Whether each change of a workflow's status is sent to the actor's subscribers (``{"type":
    #: "workflow", "id", "status"}``, in its log); a kind whose workflows are its own machinery (the
    #: agent's jobs) keeps them out of its timeline.
    workflow_announce: ClassVar[bool] = True
    #: Concurrency slots of outside steps (``step.external(..., slot=name)``): a slot's name to how
    #: many steps of the actor's workflows may run in it at once; the others wait, oldest first.
    workflow_slots: ClassVar[Mapping[str, int]] = {}
    #: Finished workflows kept (the newest by their end); once a tenth more have gathered, a workflow
    #: start deletes the older ones, or sets a prune wake-up going that deletes them a batch a turn.
    #: ``delete_workflow`` deletes one before.
    workflow_retention: ClassVar[int] = KEPT_FINISHED_WORKFLOWS
    #: The steps (positions) one workflow's body may take before it fails ``too_many_steps``.
    workflow_max_steps: ClassVar[int] = MAX_STEPS
    #: Finished workflows one turn (a start's, a prune wake-up's) deletes at most.
    workflow_prune_batch: ClassVar[int] = PRUNE_BATCH
    #: Rows (steps, branches, events, history) one such turn deletes at most: it stops before the
    #: workflow that would pass them, but always deletes one.
    workflow_prune_rows: ClassVar[int] = PRUNE_ROWS

    def workflow_clean(self, workflow_id: str, text: str) -> str:
        """Every error the core records of this actor's workflow ``workflow_id`` (a step's, an
        attempt's, a branch's) passes this first: override to apply a payload policy (the agent
        redacts credentials and its runs' secrets). Default: the text as it is."""
        return text

    def workflow_lease_seconds(self) -> float:
        """The lease of this actor's outside steps (default :attr:`workflow_lease`; a kind whose
        settings choose it per instance overrides this)."""
        return float(type(self).workflow_lease)

    async def on_workflow_end(self, workflow: dict[str, Any]) -> None:
        """Override to hear every end of a workflow of this actor (``workflow``: its row as
        ``workflow_status`` shows it, without steps; ``status`` is ``completed``, ``failed`` for any
        reason, or ``cancelled``). Runs in the turn that records the end: its writes and schedules
        commit with that record, and a raise fails that turn (keep it to writes and wake-ups; a call
        to another actor belongs in a wake-up it schedules). Default: nothing."""

    def on_workflow_history(self, workflow_id: str, entry: dict[str, Any]) -> None:
        """Override to hear every line of a workflow's history as it is written, in the turn that
        writes it: ``entry`` as ``workflow_history`` shows it (``seq``, ``at``, ``generation``,
        ``event``, ``position``, ``name``, ``attempt``, ``detail``): a start, an attempt started,
        failed (``detail.retry_at``: when it is tried again) or lost with its process, a step
        completed or failed, a wait, an event received. Its writes and ``emit``s commit with that
        line (a subscriber hears of a retry when it is recorded, not later); a raise fails the turn,
        which then records nothing of what it did. It runs inside the engine's work: keep it to
        writes and emits (no workflow call, no other actor). Default: nothing."""

    @wakeup
    async def workflow_wake(self, payload: dict[str, Any]) -> None:
        await engine_of(self).wake(payload)


class Workflows(WorkflowHost):
    """An actor with durable workflows (``@workflow`` methods) and the callables that start, read and
    drive them (see the module doc)."""

    @callable
    async def start_workflow(
        self, name: str, input: Any = None, workflow_id: str | None = None
    ) -> dict[str, Any]:
        """Start workflow ``name`` with ``input`` (JSON), under ``workflow_id`` (default: a new one).
        Runs it until its first wait in this turn; its status."""
        return await engine_of(self).start(name, input, workflow_id)

    @callable(readonly=True)
    async def workflow_status(self, workflow_id: str) -> dict[str, Any]:
        return engine_of(self).status(workflow_id)

    @callable(readonly=True)
    async def workflow_steps(self, workflow_id: str, after: int = -1, limit: int = 100) -> dict[str, Any]:
        return engine_of(self).steps(workflow_id, after, limit)

    @callable(readonly=True)
    async def workflow_history(self, workflow_id: str, after: int = 0, limit: int = 100) -> dict[str, Any]:
        return engine_of(self).history(workflow_id, after, limit)

    @callable(readonly=True)
    async def list_workflows(
        self, status: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        return engine_of(self).listing(status, after, limit)

    @callable
    async def send_event(self, workflow_id: str, name: str, payload: Any = None) -> dict[str, Any]:
        return await engine_of(self).send_event(workflow_id, name, payload)

    @callable
    async def approve_step(
        self, workflow_id: str, name: str, approved: bool = True, note: str | None = None
    ) -> dict[str, Any]:
        return await engine_of(self).approve(workflow_id, name, approved, note)

    @callable
    async def cancel_workflow(self, workflow_id: str) -> dict[str, Any]:
        return await engine_of(self).cancel(workflow_id)

    @callable
    async def pause_workflow(self, workflow_id: str) -> dict[str, Any]:
        return await engine_of(self).pause(workflow_id)

    @callable
    async def resume_workflow(self, workflow_id: str) -> dict[str, Any]:
        """Resume a paused workflow; a running or waiting one is advanced now (what is due runs). A
        cancelled or failed one goes on after its last completed step: every completed step keeps
        its record, and its last step, if not completed, runs again as its next attempt (an event
        wait or approval past its deadline waits afresh); a completed one is refused (restart it)."""
        return await engine_of(self).resume(workflow_id)

    @callable
    async def restart_workflow(self, workflow_id: str) -> dict[str, Any]:
        return await engine_of(self).restart(workflow_id)

    @callable
    async def delete_workflow(self, workflow_id: str) -> bool:
        return engine_of(self).delete(workflow_id)
