"""Durable workflows on any actor: named steps recorded once in the actor's file, replayed after a
crash (``docs/design.md``, *Workflow core*; compared with Cloudflare Workflows and DBOS in
``docs/workflows.md``).

::

    from roost.workflows import Step, Workflows, workflow

    class Signup(Workflows):
        kind = "signup"

        @workflow
        async def welcome(self, step: Step, email: str) -> str:
            await step.do("record", lambda: self.set_state({"email": email}))
            await step.sleep("a day later", 86_400)
            return "sent"

This package stands on ``roost.actors``' public names and ``roost.actors.extension`` only.
"""

from roost.actors import RetryPolicy
from roost.workflows.base import WorkflowHost, Workflows
from roost.workflows.decorator import workflow
from roost.workflows.model import (
    KEPT_FINISHED_WORKFLOWS,
    MAX_BRANCHES,
    MAX_HISTORY,
    MAX_LOST_RUNS,
    MAX_PENDING_EVENTS,
    MAX_RESULT_BYTES,
    MAX_STEPS,
    PRUNE_BATCH,
    PRUNE_ROWS,
    STEPS_PER_TURN,
    Approval,
    AttemptError,
    AttemptSuperseded,
    EventTimeout,
    NonRetryable,
    StepAttempt,
    StepFailed,
    StepKind,
    StepStatus,
    WorkflowStatus,
)
from roost.workflows.schema import WORKFLOW_COMPONENT
from roost.workflows.step import Step

__all__ = [
    "KEPT_FINISHED_WORKFLOWS",
    "MAX_BRANCHES",
    "MAX_HISTORY",
    "MAX_LOST_RUNS",
    "MAX_PENDING_EVENTS",
    "MAX_RESULT_BYTES",
    "MAX_STEPS",
    "PRUNE_BATCH",
    "PRUNE_ROWS",
    "STEPS_PER_TURN",
    "WORKFLOW_COMPONENT",
    "Approval",
    "AttemptError",
    "AttemptSuperseded",
    "EventTimeout",
    "NonRetryable",
    "RetryPolicy",
    "Step",
    "StepAttempt",
    "StepFailed",
    "StepKind",
    "StepStatus",
    "WorkflowHost",
    "WorkflowStatus",
    "Workflows",
    "workflow",
]
