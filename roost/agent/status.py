"""Every status the agent runtime stores or sends, one ``StrEnum`` per field, one spelling per value.

A member *is* its string (``RunStatus.CANCELLED == "cancelled"``), so rows, replies and events carry
plain strings and clients compare them as before. The fields and their values are listed in
``docs/protocol.md`` (*Agent statuses*).

Guarantees (tests in ``tests/test_agent_units.py`` and, for a file written before, in
``tests/test_agent_runtime.py``):

- **One spelling**: the runtime writes only ``cancelled``. Before, runs and jobs were written
  ``canceled``; a file written then is rewritten by the agent's schema migration 4, and parsing a
  status (``RunStatus("canceled")``) still accepts the old spelling and answers the new one.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ACTIVE_JOB",
    "FINISHED",
    "ApprovalStatus",
    "EventStatus",
    "ItemStatus",
    "JobStatus",
    "RunStatus",
    "StreamStatus",
    "TurnStatus",
    "VerificationResult",
    "Waiting",
]

#: The spelling written before ``cancelled`` was chosen (runs and jobs), accepted when parsing.
LEGACY_CANCELLED = "canceled"


class _Status(StrEnum):
    @classmethod
    def _missing_(cls, value: object) -> _Status | None:
        if value == LEGACY_CANCELLED:
            return cls("cancelled")
        return None


class RunStatus(_Status):
    """``runs.status``, ``get_run().status`` and the ``status`` of every agent reply."""

    QUEUED = "queued"  # waiting for the project's heavy slot (``waiting`` is ``project``)
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: A run in one of these ends only through ``continue_run``.
FINISHED = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


class Waiting(StrEnum):
    """``runs.waiting``: what an ``in_progress`` (or ``queued``) run waits for; ``None`` when nothing."""

    APPROVAL = "approval"
    INPUT = "input"
    PROJECT = "project"


class TurnStatus(_Status):
    """``turns.status`` and ``get_turn().status``."""

    CREATED = "created"
    PLANNED = "planned"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_INPUT = "awaiting_input"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ItemStatus(StrEnum):
    """``items.status``: one step of a plan."""

    PENDING = "pending"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"  # denied, or its run was cancelled


class JobStatus(_Status):
    """``jobs.status`` and ``get_run().jobs[].status``."""

    QUEUED = "queued"
    RUNNING = "running"
    RETRY_WAIT = "retry_wait"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: A job in one of these still owns its run's next step.
ACTIVE_JOB = (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RETRY_WAIT)


class StreamStatus(StrEnum):
    """A streamed message's row (``roost_agent_streams``)."""

    STREAMING = "streaming"
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"  # its step failed after text was shown; continue_run takes it up
    FAILED = "failed"  # its step failed before any text was shown
    CANCELLED = "cancelled"


class ApprovalStatus(_Status):
    """``approvals.status``."""

    PENDING = "pending"
    GRANTED = "granted"
    DENIED = "denied"
    CANCELLED = "cancelled"  # its run was cancelled while it was pending


class VerificationResult(StrEnum):
    """``runs.verification_result``: what verification found."""

    PASS = "pass"
    FAIL = "fail"
    WARNING = "warning"
    BLOCKED = "blocked"


class EventStatus(StrEnum):
    """An event's own ``status``: what the event reports (``None`` for events that report none).

    The turn's status for ``turn_*`` events, the step's for ``tool_*``, and for the others what the
    run or approval became; ``verification_completed`` carries the :class:`VerificationResult`.
    """

    CREATED = "created"  # turn_started
    PLANNED = "planned"  # plan_ready
    RUNNING = "running"  # tool_started
    RETRYING = "retrying"  # tool_failed, will retry
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    AWAITING_APPROVAL = "awaiting_approval"  # approval_requested
    GRANTED = "granted"  # approval_granted
    REUSED = "reused"  # approval_granted: a live grant covered the step
    DENIED = "denied"  # approval_denied
    WAITING_FOR_INPUT = "waiting_for_input"  # input_requested
    IN_PROGRESS = "in_progress"  # input_received, run_started, run_continued
    QUEUED = "queued"  # run_queued
    VERIFYING = "verifying"  # verification_started
    PASS = "pass"  # verification_completed: the VerificationResult
    FAIL = "fail"
    WARNING = "warning"
    BLOCKED = "blocked"
