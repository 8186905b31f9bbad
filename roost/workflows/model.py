"""The workflow core's vocabulary: states, limits, errors and the small records a body sees.

Errors a body sees (raised by a step call, recorded, and raised again on every replay)::

    StepFailed (RuntimeError)        a step's attempts are spent, or it failed for good
    └── EventTimeout (TimeoutError)  an event wait or an approval passed its deadline

An outside step's function may see ``AttemptSuperseded`` from :meth:`StepAttempt.progress`: its
attempt is no longer the step's current one (the workflow was cancelled, restarted or ended, or the
run was declared lost and another took over), so nothing it reports is recorded and it should stop.

Errors a caller sees over the wire are :class:`roost.actors.RpcError` with a ``code``
(:data:`CODES`). ``NonRetryable`` is raised *by a step function* to fail its step at once.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from roost.actors import Actor, RpcError

__all__ = [
    "CODES",
    "KEEP",
    "KEPT_FINISHED_WORKFLOWS",
    "MAX_BRANCHES",
    "MAX_ERROR",
    "MAX_HISTORY",
    "MAX_LOST_RUNS",
    "MAX_NAME",
    "MAX_PENDING_EVENTS",
    "MAX_RESULT_BYTES",
    "MAX_STEPS",
    "PAGE_BYTES",
    "PRUNE_BATCH",
    "PRUNE_ROWS",
    "STEPS_PER_TURN",
    "Approval",
    "AttemptError",
    "AttemptSuperseded",
    "EventTimeout",
    "NonRetryable",
    "Reporter",
    "StepAttempt",
    "StepFailed",
    "StepKind",
    "StepStatus",
    "Suspend",
    "WorkflowStatus",
    "clean_error",
    "error_text",
    "progress_record",
    "refuse",
    "short",
]

#: A step's result, a workflow's input or result, an event's payload: at most this many bytes of JSON.
MAX_RESULT_BYTES = 256 * 1024
#: Step positions per generation of a workflow; past it the workflow fails (``too many steps``).
MAX_STEPS = 1000
#: In-turn steps one advance runs before it lets the mailbox go (a wake-up at once goes on).
STEPS_PER_TURN = 64
#: Events sent to a workflow and not yet consumed; past it ``send_event`` is refused.
MAX_PENDING_EVENTS = 64
#: History rows kept per workflow, the newest.
MAX_HISTORY = 5000
#: Finished (completed, failed, cancelled) workflows kept per actor by default, the newest by their
#: end (``Workflows.workflow_retention``); older ones are deleted with their steps and history once a
#: tenth of the bound more have gathered: by the workflow start that finds them when they are at most
#: :data:`PRUNE_BATCH`, else by a prune wake-up that a start sets going, a batch a turn.
KEPT_FINISHED_WORKFLOWS = 1000
#: Finished workflows one turn deletes at most, with their rows (``Workflows.workflow_prune_batch``).
PRUNE_BATCH = 100
#: Rows (steps, branches, events, history) of finished workflows one turn deletes at most
#: (``Workflows.workflow_prune_rows``): a turn stops before the workflow that would pass it, but
#: always deletes one, whose rows are bounded by :data:`MAX_STEPS` and :data:`MAX_HISTORY`.
PRUNE_ROWS = 20_000
#: Workflow ids, step and event names: 1 to this many characters.
MAX_NAME = 128
#: A recorded error (a step's, a workflow's) keeps at most this many characters.
MAX_ERROR = 1000
#: Bytes of step results one ``workflow_steps`` page carries at most (a page has at least one step).
PAGE_BYTES = 512 * 1024
#: Branches of one ``step.parallel`` join at most.
MAX_BRANCHES = 32
#: Runs of one outside attempt lost with their process before the step fails (``lost``).
MAX_LOST_RUNS = 5

#: The ``code`` of each refusal a caller can get.
CODES = {
    "not_found": "workflow_not_found",
    "conflict": "workflow_conflict",
    "state": "workflow_state",
    "too_large": "too_large",
    "too_many": "too_many_events",
    "bad_name": "invalid_arguments",
    "unknown": "unknown_workflow",
    "forbidden": "forbidden",
}


def short(text: str) -> str:
    """``text`` cut to :data:`MAX_ERROR` characters (an exception's text can be anything)."""
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 1] + "…"


def refuse(what: str, message: str) -> RpcError:
    """The error a caller gets for ``what`` (a key of :data:`CODES`)."""
    return RpcError(CODES[what], message)


class WorkflowStatus(StrEnum):
    RUNNING = "running"  # an advance has work to do now
    WAITING = "waiting"  # suspended: a sleep, an event, an approval, a retry's backoff, an outside step
    PAUSED = "paused"  # nothing advances it until resume_workflow
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (WorkflowStatus.COMPLETED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)


class StepStatus(StrEnum):
    RUNNING = "running"  # an outside attempt is in flight
    LOST = "lost"  # the process that ran an outside attempt is gone: run it again, same key
    ATTEMPT_FAILED = "attempt_failed"  # an outside attempt failed: the next replay applies the policy
    RETRY_WAIT = "retry_wait"  # a failed attempt waits for its backoff
    WAITING = "waiting"  # a sleep, an event wait or an approval
    COMPLETED = "completed"
    FAILED = "failed"


class StepKind(StrEnum):
    DO = "do"  # in the turn, exactly once
    EXTERNAL = "external"  # outside turns, at least once, keyed
    SLEEP = "sleep"
    EVENT = "event"
    APPROVAL = "approval"
    PARALLEL = "parallel"  # a join of outside branches (``roost_wf_branches``)


class Suspend(BaseException):
    """Raised by a step call that cannot finish in this turn: the advance ends here. A
    ``BaseException``, so that a body's ``except Exception`` does not swallow it."""


class StepFailed(RuntimeError):
    """A step failed for good; ``step`` is its name, ``error`` the recorded reason."""

    def __init__(self, step: str, error: str) -> None:
        super().__init__(f"step {step!r} failed: {error}")
        self.step = step
        self.error = error


class EventTimeout(StepFailed, TimeoutError):
    """An event wait or an approval passed its deadline."""


class NonRetryable(Exception):
    """Raise from a step function to fail the step at once, without retries."""


class AttemptError(Exception):
    """Raise from a step function to fail the attempt with this text as its recorded error, as it is
    (without the exception's type): for a caller that has worded the error already. Retried like any
    failure."""


def error_text(exc: BaseException) -> str:
    """What the core records of an exception: its type and the first line of its text (never a
    traceback or the rest of a long message), or an :class:`AttemptError`'s text as it is. Not cut:
    :func:`clean_error` cleans, then cuts, what is recorded."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    if isinstance(exc, AttemptError):
        return first
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class AttemptSuperseded(Exception):
    """:meth:`StepAttempt.progress` of an attempt that is no longer its step's current one: nothing was
    recorded, and nothing the attempt returns will be."""


#: ``checkpoint`` left out of :meth:`StepAttempt.progress`: the step's checkpoint stays as it is.
KEEP: Any = object()


def progress_record(done: float, total: float | None, message: str, at: float) -> dict[str, Any]:
    """A progress report as recorded: ``done`` and ``total`` finite numbers, not negative (``total``
    may be None: unknown; an integer at most 2⁶³ − 1), ``message`` cut to :data:`MAX_ERROR`
    characters. ValueError or TypeError for anything else, before anything is recorded."""
    for what, value in (("done", done), ("total", total)):
        if value is None and what == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"progress {what} must be a number, got {type(value).__name__}")
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer past what a float holds
            finite = False
        if not finite or value < 0 or (isinstance(value, int) and value.bit_length() > 63):
            raise ValueError(f"progress {what} must be a finite number, not negative, got {str(value)[:40]}")
    if not isinstance(message, str):
        raise TypeError(f"progress message must be text, got {type(message).__name__}")
    return {"done": done, "total": total, "message": short(message), "at": at}


#: What records a report of a running attempt: ``(done, total, message, checkpoint)`` to True if
#: recorded, False if the attempt is no longer current (see :meth:`StepAttempt.progress`).
Reporter = Callable[[float, float | None, str, Any], Awaitable[bool]]


T = TypeVar("T")

#: Runs ``fn(actor)`` in a turn of the attempt's actor if the attempt is still current, and returns
#: what it returned; raises :class:`AttemptSuperseded` (``fn`` not called) otherwise.
Fenced = Callable[[Callable[[Actor], Awaitable[Any]]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class StepAttempt:
    """What an outside step's function is given. ``idempotency_key`` is ``f"{step_id}:{attempt}"``
    (``step_id`` is ``{workflow_id}:{nonce}:{generation}:{position}``; the nonce is drawn at random
    when the workflow starts, so no other workflow, of this actor or another, nor this id deleted and
    started again, has the key): the same for every run of one attempt (a rerun after its process was
    lost), another for the next attempt. Hand it to the system the effect goes to, so that it can
    drop a repeat.

    ``checkpoint`` is what an earlier attempt or run of this step (or branch) last saved with
    :meth:`progress` (None: nothing): a long step that saves where it got to starts again from
    there after a failure or a crash, instead of from the beginning."""

    workflow_id: str
    step: str
    step_id: str
    attempt: int
    run: int
    checkpoint: Any = None
    _report: Reporter | None = field(default=None, repr=False, compare=False)
    _fenced: Fenced | None = field(default=None, repr=False, compare=False)

    @property
    def idempotency_key(self) -> str:
        return f"{self.step_id}:{self.attempt}"

    async def progress(
        self, done: float, total: float | None = None, message: str = "", *, checkpoint: Any = KEEP
    ) -> None:
        """Report how far the attempt got, in a turn of its actor, committed before this returns.

        **A report is fenced as the outcome is**: it is recorded only while this attempt and run are
        the step's current ones; otherwise it raises :class:`AttemptSuperseded` and records nothing.
        **The step shows its running attempt's last report**: ``workflow_status`` gives each step
        (and branch) ``progress`` (``done``, ``total``, ``message``, ``at``), cleared when the next
        attempt or run starts (while a failed attempt backs off, its last report stays shown).
        **A checkpoint outlives the attempt**: ``checkpoint`` (JSON, at most
        :data:`MAX_RESULT_BYTES`), when given, replaces the step's (``None`` clears it; left out,
        the step's stays as it is), and every later attempt and run of the step gets it as
        :attr:`checkpoint`; it is dropped when the step is over for good (completed or failed). The
        fence is the workflow's too: a ticket of a workflow deleted and started again under its id
        is not current in the new one. A report is not a history line (a report a second for an
        hour would be 3,600 of them), and each is a turn and a commit: report at a reader's pace,
        not per item of a tight loop."""
        if self._report is None:
            raise RuntimeError("this attempt was not given by a workflow's step")
        if not await self._report(done, total, message, checkpoint):
            raise AttemptSuperseded(
                f"attempt {self.attempt} (run {self.run}) of {self.step!r} is no longer current"
            )

    async def turn(self, fn: Callable[[Actor], Awaitable[T]]) -> T:
        """Run ``await fn(actor)`` in a turn of the step's actor and return its result.

        **A turn of an attempt is fenced as its outcome is**: ``fn`` runs only while this attempt and
        run (of this generation; of this branch, for a branch of a join) are the step's current ones,
        checked in the same turn; otherwise :class:`AttemptSuperseded` is raised and ``fn`` is not
        called. Its writes, ``set_state`` and ``emit`` commit with the turn before this returns (an
        ``emit`` reaches subscribers after that commit, and is in the log a reconnecting client
        resumes from), so what an attempt writes while it runs (a batch of its streamed output, a
        partial result) never comes from an attempt that was cancelled, restarted or taken over. A
        raise of ``fn`` rolls that turn's writes back and reaches this call as any failed turn reaches
        its caller: an :class:`~roost.actors.RpcError` as it was raised, anything else logged and
        raised as ``handler_error`` with its reference. ``fn`` runs as the actor's turns do (no
        waiting on the network inside it)."""
        if self._fenced is None:
            raise RuntimeError("this attempt was not given by a workflow's step")
        result: T = await self._fenced(fn)
        return result


@dataclass(frozen=True, slots=True)
class Approval:
    """An approval step's outcome: who decided (a principal id), and their note."""

    approved: bool
    by: str
    note: str | None = None

    @classmethod
    def of(cls, payload: Any) -> Approval:
        return cls(bool(payload["approved"]), str(payload["by"]), payload.get("note"))


def clean_error(actor: Actor, wid: str, error: str | None) -> str | None:
    """``error`` as the actor's kind has it recorded: every error the core writes (a step's, an
    attempt's, a branch's) passes ``WorkflowHost.workflow_clean(workflow_id, text)`` first, so a
    kind with a payload policy (the agent's: credentials and its runs' secrets redacted) never has
    one written as raised; then it is cut to :data:`MAX_ERROR` characters (cleaned first, so a cut
    never leaves the start of a credential its pattern would no longer recognise)."""
    if not error:
        return error
    hook = getattr(actor, "workflow_clean", None)
    return short(hook(wid, error) if hook is not None else error)
