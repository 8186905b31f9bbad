"""OpenTelemetry traces (``create_app(tracer_provider=...)``, ``roost serve --otel``).

Off by default: without a provider the app has no tracer, the registry no observer, and nothing here
runs. With one (the ``opentelemetry-api`` names only; the SDK is the provider's business), these spans:

- ``roost.connection`` (SERVER): one WebSocket connection, accept to close (``roost.close_code``);
  its parent is the handshake's W3C ``traceparent`` (a header, or the ``traceparent`` query
  parameter for browsers, which cannot set headers on a WebSocket).
- ``roost.call`` (SERVER): one ``POST /agents/{kind}/{name}/rpc/{method}``, from the request to the
  answer; its parent is the request's ``traceparent`` header.
- ``roost.turn``: one committed turn, a child of its caller's span (the connection's, its close
  turn included, the HTTP call's, or an MCP request's ``traceparent``; a turn with no traced caller
  starts a trace of its own); ``roost.wakeup`` for a fire turn, with ``roost.lateness_s``.
- ``roost.commit``: one batch commit, with ``roost.batch.turns`` and the output gate's hold time as
  its duration; a child of the parent of the last turn of the batch (of that actor: each host has an
  observer of its own, :meth:`Tracing.for_host`, so the turns and commits of actors that interleave
  on the loop keep to their own traces).

Turn and commit spans are made when the turn or commit has ended, from the times the runtime measured
(:class:`roost.actors.Observer`): the runtime's hot path opens no span and sets no context. A turn
whose caller's span is not sampled (``OTEL_TRACES_SAMPLER``, e.g. ``parentbased_traceidratio``) makes
no span at all: sampling is how a busy server keeps tracing cheap.

Guarantees (tests in ``tests/test_tracing.py``):

- **A traceparent is the parent.** An HTTP call or a WebSocket connection with a ``traceparent``
  joins that trace: its span's parent is the given span, and its turns are its children.
- **A run is in its caller's trace.** An agent run started by an HTTP call or over a WebSocket
  connection takes the caller's trace id as its ``trace_id`` (its spans join the caller's trace).
- **A commit is in its actor's trace.** Two actors whose turns and commits interleave each have every
  commit span under the parent of their own batch's last turn, never in the other's trace nor a new one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from roost.actors import Call, Connect, Disconnect, Message, Observer, Wake

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["TRACER_NAME", "Tracing", "parent_context"]

TRACER_NAME = "roost"
_PROPAGATOR = TraceContextTextMapPropagator()
#: No parent: a new trace, never the ambient context (a host's context is copied when it is made).
_ROOT = Context()


def parent_context(headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> Context | None:
    """The W3C trace context of a request: its ``traceparent`` header (and ``tracestate``), else the
    ``traceparent`` query parameter; None when it has none or an invalid one."""
    carrier: dict[str, str] = {}
    for name in ("traceparent", "tracestate"):
        value = headers.get(name)
        if value is None and query is not None:
            value = query.get(name)
        if value is not None:
            carrier[name] = value
    if "traceparent" not in carrier:
        return None
    context = _PROPAGATOR.extract(carrier)
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None  # a malformed traceparent is ignored (a trace of our own), never refused
    return context


class Tracing(Observer):
    """The runtime's spans (the module doc); ``tracer`` also serves the transport's own spans."""

    def __init__(self, provider: TracerProvider, tracer: Tracer | None = None) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer(TRACER_NAME) if tracer is None else tracer
        self._last: Context = _ROOT  # the parent of this host's last turn (its batch's commit)
        self._lateness: float | None = None  # of this host's fire turn under way

    def for_host(self, kind: str, name: str) -> Tracing:
        """A tracer of the host's own: its last turn's parent and its wake-up's lateness are its own."""
        return Tracing(self.provider, self.tracer)

    def trace_id(self, item: object) -> str | None:
        """The trace id of the input's caller (its HTTP call's span, its connection's): a turn that
        starts an agent run gives it to the run, so the run's spans are in the caller's trace."""
        parent = _parent_of(item)
        if parent is _ROOT:
            return None
        context = trace.get_current_span(parent).get_span_context()
        return format(context.trace_id, "032x") if context.is_valid else None

    def turn(self, kind: str, seconds: float, item: object) -> None:
        parent = _parent_of(item)
        self._last = parent
        if parent is not _ROOT and not _sampled(parent):
            return  # its caller's trace is not sampled: no span is made for it (nor for its commit)
        ended = time.time_ns()
        attributes: dict[str, str | float]
        if isinstance(item, Wake):
            name, attributes = "roost.wakeup", {"roost.kind": kind, "roost.lateness_s": self._lateness or 0.0}
            self._lateness = None
        else:
            method = item.method if isinstance(item, Call) else ""
            name, attributes = "roost.turn", {"roost.kind": kind, "roost.method": method}
        span = self.tracer.start_span(
            name, context=parent, attributes=attributes, start_time=ended - int(seconds * 1e9)
        )
        span.end(ended)

    def commit(self, kind: str, turns: int, held: float) -> None:
        if self._last is not _ROOT and not _sampled(self._last):
            self._last = _ROOT
            return
        ended = time.time_ns()
        span = self.tracer.start_span(
            "roost.commit",
            context=self._last,
            attributes={"roost.kind": kind, "roost.batch.turns": turns},
            start_time=ended - int(held * 1e9),
        )
        span.end(ended)
        self._last = _ROOT

    def wake(self, kind: str, lateness: float) -> None:
        self._lateness = lateness

    def connection(self, kind: str, name: str, parent: Context | None) -> Span:
        """The span of one WebSocket connection (ended by the endpoint when the socket closes)."""
        return self.tracer.start_span(
            "roost.connection",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"roost.kind": kind, "roost.name": name},
        )


def _sampled(context: Context) -> bool:
    return trace.get_current_span(context).get_span_context().trace_flags.sampled


def _parent_of(item: object) -> Context:
    """The trace context an input carries: a call's own (HTTP, in process), else its connection's;
    else none (a new trace), whatever span was current when the actor's host was made."""
    if isinstance(item, Call):
        if isinstance(item.trace, Context):
            return item.trace
        conn = item.conn
    elif isinstance(item, Message | Connect | Disconnect):
        conn = item.conn
    else:
        return _ROOT
    if conn is not None and isinstance(conn.trace, Context):
        return conn.trace
    return _ROOT
