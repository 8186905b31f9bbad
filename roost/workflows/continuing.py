"""Taking a stopped workflow up again: what ``resume_workflow`` does to a cancelled or failed one,
from the store's own records (the SQL is :mod:`roost.workflows.store`'s).

Guarantees (tests in ``tests/test_workflows_continue.py``):

- **A cancelled or failed workflow goes on after its last completed step**: ``resume_workflow``
  keeps every completed step's record (a join's completed branches too) and runs the last step, if
  it is not completed, again as its next attempt: a key of its own (the stopped attempt's late
  result is fenced out) and one more try under its retry policy (attempts spent stay spent); history
  ``continued``. A completed workflow is refused (``restart_workflow`` runs it again).
- **A rewind drops the steps from a position on** (``Engine.rewind``, a ``WorkflowHost``'s own
  control): those before are kept, the dropped ones run afresh under a new nonce (keys of their
  own; nothing of a stopped attempt is recorded), the unconsumed events are dropped; ``rewound``.
"""

from __future__ import annotations

from roost.workflows.model import StepKind, StepStatus, WorkflowStatus
from roost.workflows.store import StepRow, WorkflowStore

__all__ = ["reopen"]

#: The states of a step or branch that a resume runs again as its next attempt: failed, stopped
#: mid-run, or failed with its policy not yet applied.
_AGAIN = (StepStatus.FAILED, StepStatus.RUNNING, StepStatus.ATTEMPT_FAILED)


def reopen(store: WorkflowStore, wid: str, now: float) -> StepRow | None:
    """A cancelled or failed workflow goes on: running again, its error cleared, and its last step,
    unless completed, made to run again — an in-turn or outside step in one of :data:`_AGAIN` as its
    next attempt, due now (``retry_wait``); a failed or stopped join's branches that are not
    completed the same way (the completed ones kept); an event wait or approval past its deadline
    (failed by it, or lapsed while the workflow was stopped) dropped: it waits afresh, its deadline
    counted from now; one whose deadline is ahead keeps it. Every earlier step keeps its record.
    The last step as it was (None: there was none)."""
    steps = store.steps(wid)
    tail = steps[-1] if steps else None
    store.set_status(wid, WorkflowStatus.RUNNING, now)
    if tail is None or tail.status is StepStatus.COMPLETED:
        return tail
    pos = tail.position
    if tail.kind in (StepKind.EVENT, StepKind.APPROVAL):
        lapsed = tail.wake_at is not None and tail.wake_at <= now
        if tail.status is StepStatus.FAILED or lapsed:
            store.drop_steps(wid, pos)
    elif tail.kind is StepKind.PARALLEL:
        store.put_step(wid, pos, tail.name, StepKind.PARALLEL, StepStatus.RUNNING, now)
        for b in store.branches(wid, pos):
            if b.status in _AGAIN:
                store.put_branch(
                    wid, pos, b.branch, b.ord, StepStatus.RETRY_WAIT, now, attempt=b.attempt, run=b.run,
                    retryable=b.retryable, error=b.error, wake_at=now,
                )  # fmt: skip
    elif tail.kind in (StepKind.DO, StepKind.EXTERNAL) and tail.status in _AGAIN:
        store.put_step(
            wid, pos, tail.name, tail.kind, StepStatus.RETRY_WAIT, now, attempt=tail.attempt, run=tail.run,
            retryable=tail.retryable, error=tail.error, wake_at=now, slot=tail.slot,
        )  # fmt: skip
    return tail
