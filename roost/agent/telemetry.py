"""Telemetry: the agent's timeline as durable events in the actor's resumable log.

Every event is one frame ``{"type":"event","seq":…,"event":{…}}`` whose ``event`` holds
``event_id, event_type, turn_id, item_id, run_id, session_id, status, payload, trace_id, created_at``.
Payloads pass the payload policy (:meth:`roost.agent.records.Records.clean`) before they are written. A client
resumes the timeline by cursor like any other frame of the log.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from roost.actors.extension import TurnContext
from roost.agent.records import Records
from roost.agent.status import EventStatus

if TYPE_CHECKING:
    from roost.agent.store import Row
    from roost.agent.tracing import RunSpans

__all__ = ["EVENT_TYPES", "Telemetry"]

log = logging.getLogger("roost.agent")

EVENT_TYPES = frozenset(
    {
        "turn_started",
        "plan_ready",
        "tool_started",
        "tool_progress",
        "tool_completed",
        "tool_failed",
        "tool_cancelled",
        "model_step_failed",
        "model_delta",
        "model_stream_interrupted",
        "model_stream_restarted",
        "approval_requested",
        "approval_granted",
        "approval_denied",
        "input_requested",
        "input_received",
        "run_queued",
        "run_started",
        "run_continued",
        "verification_started",
        "verification_completed",
        "turn_completed",
        "turn_failed",
        "turn_cancelled",
        "capability_session",
        "elicitation_refused",
        "context_requested",
        "context_compacted",
        "context_reset",
        "context_failed",
        "workspace",
        "delegation_progress",
    }
)


class Telemetry:
    """The timeline of one agent: every event passes :meth:`Records.clean` and is emitted through the
    extension API, so it is logged in the turn and sent after its commit."""

    __slots__ = ("_ctx", "_records", "_spans", "counts")

    def __init__(self, ctx: TurnContext, records: Records) -> None:
        self._ctx = ctx
        self._records = records
        #: The run spans (:mod:`roost.agent.tracing`) when the app traces; None: one check per event.
        self._spans: RunSpans | None = None
        tracer = ctx.process.tracer
        if tracer is not None:
            from roost.agent.tracing import run_spans

            self._spans = run_spans(tracer)
        #: Events sent by this activation, per type (for logs and tests).
        self.counts: dict[str, int] = {}

    #: The columns of its run that an event reads (a turn that needs the run for events only can
    #: read just these: :meth:`roost.agent.context.Part.run`).
    RUN_COLUMNS = ("run_id", "turn_id", "session_id", "trace_id")

    def event(
        self,
        event_type: str,
        run: Row,
        *,
        item_id: str | None = None,
        status: EventStatus | None = None,
        payload: dict[str, Any] | None = None,
        cleaned: bool = False,
    ) -> int:
        """Log and send one event of ``run``; returns its ``seq``. ``cleaned``: the caller already
        passed every string of ``payload`` through the payload policy (a streamed delta, cleaned with
        the text it extends), so it is not cleaned again."""
        assert event_type in EVENT_TYPES, event_type
        record = {
            "event_id": uuid.uuid4().hex,
            "event_type": event_type,
            "turn_id": run["turn_id"],
            "item_id": item_id,
            "run_id": run["run_id"],
            "session_id": run["session_id"],
            "status": status,
            "payload": (payload or {}) if cleaned else self._records.clean(payload or {}),
            "trace_id": run["trace_id"],
            "created_at": self._ctx.now,
        }
        seq = self._ctx.emit(record)
        if self._spans is not None:
            self._spans.event(event_type, run, item_id)
        self.counts[event_type] = self.counts.get(event_type, 0) + 1
        log.debug("%s run=%s item=%s trace=%s", event_type, run["run_id"], item_id, run["trace_id"])
        return seq
