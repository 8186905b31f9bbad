"""A context operation's summary call on the workflow core: the attempt's side.

Each compaction or reset of a session's context is a workflow of its agent (:data:`CONTEXT_WORKFLOW`,
id = the operation's ``op_id``; :mod:`roost.agent.compaction` is the operation's record). For a model
whose summary needs I/O (the HTTP model) its one step is an outside step, whose attempts, lease,
full-jitter retries, fences and lost-process reruns are the core's; :func:`summary_attempt` is its
function, in the core's runner, outside every turn:

1. ``begin`` (a fenced turn of the attempt): the operation still pending, its ``attempt`` counted,
   the request to send (its idempotency key: the ``op_id``, the same for every attempt);
2. the model's ``summarize``, outside every turn;
3. ``record`` (a fenced turn of the attempt): the summary applied — artifact, cursor, ``done`` in
   one transaction. A superseded attempt's turns are refused by the core, so it records nothing.

A retryable :class:`~roost.agent.models.ModelError` fails the attempt (:class:`SummaryFailed`: the core
retries it); any other error is final (:class:`SummaryRefused`): the workflow fails and the operation
with it (``context_failed``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from roost.agent.models import ModelError, SummaryRequest
from roost.agent.payloads import error_line
from roost.workflows import AttemptError, NonRetryable, StepAttempt

if TYPE_CHECKING:
    from roost.actors import Actor

__all__ = ["CONTEXT_WORKFLOW", "SummaryFailed", "SummaryRefused", "summary_attempt"]

#: The workflow each context operation is (``Agent``'s ``roost.context`` body).
CONTEXT_WORKFLOW = "roost.context"


class ContextOps(Protocol):
    """What the attempt asks of the operation's record (:class:`roost.agent.compaction.Contexts`),
    each in a fenced turn of the attempt."""

    def begin(self, op_id: str) -> tuple[SummaryRequest, Callable[[SummaryRequest], Awaitable[Any]]] | None:
        """The request and the model's ``summarize`` (None: the operation is over)."""

    def record(self, op_id: str, text: str) -> None:
        """Apply the summary (if the operation is still pending)."""


class SummaryFailed(AttemptError):
    """A summary call that failed in a way another attempt may not: the core retries it."""


class SummaryRefused(NonRetryable, AttemptError):
    """A summary call that failed for good (the model refused, or its answer is unusable)."""


def _contexts(actor: Actor) -> ContextOps:
    ops: ContextOps = actor.orchestrator.contexts  # type: ignore[attr-defined]
    return ops


async def summary_attempt(attempt: StepAttempt, op_id: str) -> dict[str, Any]:
    """One attempt (or rerun) of the operation's summary call (see the module doc)."""

    async def begin(actor: Actor) -> Any:
        return _contexts(actor).begin(op_id)

    begun = await attempt.turn(begin)
    if begun is None:
        return {"ok": True}  # nothing left to do: the operation ended meanwhile
    request, summarize = begun
    try:
        text = str(await summarize(request))
    except ModelError as exc:
        if exc.retryable:
            raise SummaryFailed(str(exc)) from exc
        raise SummaryRefused(str(exc)) from exc
    except Exception as exc:  # a model's bug: not worth retrying
        raise SummaryRefused(error_line(exc)) from exc

    async def record(actor: Actor) -> None:
        _contexts(actor).record(op_id, text)

    await attempt.turn(record)
    return {"ok": True}
