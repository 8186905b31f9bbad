"""OpenTelemetry spans of agent runs, made from the run's own timeline (:mod:`roost.agent.telemetry`).

Only when the app has a tracer (``Process.tracer``, from ``create_app(tracer_provider=...)``); without
one no object of this module exists, and the agent's events pay one ``None`` check each.

- ``roost.agent.run``: a run, from ``turn_started`` (or ``run_started``/``run_continued`` in a process
  that did not see it start) to ``turn_completed``/``turn_failed``/``turn_cancelled``. Its trace id is
  the run's ``trace_id`` (a 32-hex W3C trace id, made by the turn that started the run): its parent is
  the remote span context ``(trace_id, span id from the run id)``, so every process and every restart
  that traces the run puts its spans in the same trace.
- ``roost.agent.tool``: one tool call, ``tool_started`` to ``tool_completed``/``_failed``/``_cancelled``
  (inline or as a job), a child of its run's span.
- ``roost.agent.model``: a model step that runs in the turn (an inline model such as the
  deterministic planner), a child of its run's span.
- ``roost.agent.job``: one attempt of a background job (a model step, streamed or not, or a tool),
  around its execution on the worker, a child of its run's span (``roost.job.attempt``).
- ``roost.mcp.call``: one call of an MCP server's tool (:mod:`roost.agent.mcp_tools`), a child of
  its job attempt's span (``roost.mcp.server``, ``roost.mcp.tool``).

Open spans are per process (a run that moves to another process goes on there in the same trace),
and bounded: at most :data:`MAX_OPEN` runs' and as many tools' spans are open in a process; past that
the oldest is ended there and then, marked ``roost.incomplete`` (its end event never came here: the
run moved to another process, or its process lost track of it).

Guarantees (tests in ``tests/test_tracing.py``):

- **A run is one trace.** Its run span, tool spans and job attempts share the run's ``trace_id``.
- **Open spans are bounded.** Runs and tools whose end never arrives keep at most :data:`MAX_OPEN`
  spans open each; the oldest are ended, marked ``roost.incomplete``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, StatusCode, TraceFlags

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from roost.agent.store import Row

__all__ = ["MAX_OPEN", "RunSpans", "job_spans", "run_spans"]

#: The most run spans, and the most tool spans, open at once in a process (per tracer).
MAX_OPEN = 10_000

_STARTS = frozenset({"turn_started", "run_started", "run_continued"})
_ENDS = {"turn_completed": StatusCode.OK, "turn_failed": StatusCode.ERROR, "turn_cancelled": StatusCode.UNSET}
_TOOL_ENDS = {
    "tool_completed": StatusCode.OK,
    "tool_failed": StatusCode.ERROR,
    "tool_cancelled": StatusCode.UNSET,
}
_BY_TRACER: dict[int, RunSpans] = {}  # one per tracer (per app) in the process
#: The run spans of the job attempt running in this task (its MCP calls are traced with them).
_JOB: ContextVar[RunSpans | None] = ContextVar("roost_job_spans", default=None)


def job_spans() -> RunSpans | None:
    """The run spans of the traced job attempt this task runs, if any (``roost.mcp.call``)."""
    return _JOB.get()


def run_spans(tracer: object) -> RunSpans | None:
    """The process's open run spans for ``tracer`` (None: tracing is off)."""
    if tracer is None:
        return None
    found = _BY_TRACER.get(id(tracer))
    if found is None or found.tracer is not tracer:
        found = _BY_TRACER[id(tracer)] = RunSpans(tracer)  # type: ignore[arg-type]
    return found


def run_context(run: Row) -> Context:
    """The remote parent of a run's spans: the run's trace id, a span id derived from its run id."""
    span_id = int.from_bytes(hashlib.blake2b(str(run["run_id"]).encode(), digest_size=8).digest()) or 1
    parent = SpanContext(int(run["trace_id"], 16), span_id, is_remote=True, trace_flags=TraceFlags(1))
    return trace.set_span_in_context(NonRecordingSpan(parent))


class RunSpans:
    """The open spans of runs and their tools in this process."""

    def __init__(self, tracer: Tracer, most: int = MAX_OPEN) -> None:
        self.tracer = tracer
        self.most = most
        self.runs: dict[str, Span] = {}  # oldest first
        self.tools: dict[str, Span] = {}

    def _bound(self, spans: dict[str, Span]) -> None:
        """End the oldest of ``spans`` past :attr:`most` (their end event never came here)."""
        while len(spans) > self.most:
            oldest = spans.pop(next(iter(spans)))
            oldest.set_attribute("roost.incomplete", True)
            oldest.end()

    def event(self, event_type: str, run: Row, item_id: str | None) -> None:
        """One event of ``run``'s timeline (called by :meth:`Telemetry.event`)."""
        run_id = run["run_id"]
        if event_type in _STARTS:
            self.span_of(run)
        elif event_type == "tool_started" and item_id is not None:
            self.tools[item_id] = self.tracer.start_span(
                "roost.agent.tool", context=self.parent(run), attributes={"roost.run_id": run_id}
            )
            self._bound(self.tools)
        elif event_type in _TOOL_ENDS and item_id is not None:
            tool = self.tools.pop(item_id, None)
            if tool is not None:
                tool.set_status(_TOOL_ENDS[event_type])
                tool.end()
        elif event_type in _ENDS:
            span = self.runs.pop(run_id, None)
            if span is not None:
                span.set_status(_ENDS[event_type])
                span.end()

    def span_of(self, run: Row) -> Span:
        """The run's open span in this process, started now if none is."""
        span = self.runs.get(run["run_id"])
        if span is None:
            span = self.runs[run["run_id"]] = self.tracer.start_span(
                "roost.agent.run",
                context=run_context(run),
                attributes={"roost.run_id": run["run_id"], "roost.turn_id": run["turn_id"]},
            )
            self._bound(self.runs)
        return span

    def parent(self, run: Row) -> Context:
        span = self.runs.get(run["run_id"])
        return trace.set_span_in_context(span) if span is not None else run_context(run)

    def model_step(self, run: Row) -> AbstractContextManager[Span]:
        """A ``roost.agent.model`` span around a model step that runs in the turn (an inline model:
        one as a job is inside its ``roost.agent.job`` span), a child of its run's span."""
        attributes: dict[str, str | int] = {
            "roost.run_id": str(run["run_id"]),
            "roost.model.hop": int(run["hops"]),
        }
        return self.tracer.start_as_current_span(
            "roost.agent.model", context=self.parent(run), attributes=attributes
        )

    def job(
        self, run: Row, job: Row, attempt: int, execute: Callable[[Any], Awaitable[Any]]
    ) -> Callable[[Any], Awaitable[Any]]:
        """``execute`` (one attempt of ``job``) inside a ``roost.agent.job`` span."""
        attributes: dict[str, str | int] = {
            "roost.run_id": str(run["run_id"]),
            "roost.job.kind": str(job["job_kind"]),
            "roost.job.tool": str(job["tool_name"] or ""),
            "roost.job.attempt": attempt,
        }

        async def traced(ctx: Any) -> Any:
            with self.tracer.start_as_current_span(
                "roost.agent.job", context=self.parent(run), attributes=attributes
            ):
                token = _JOB.set(self)
                try:
                    return await execute(ctx)
                finally:
                    _JOB.reset(token)

        return traced
