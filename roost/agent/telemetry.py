"""Telemetry: the agent's timeline as durable events in the actor's resumable log.

Every event is one frame ``{"type":"event","seq":…,"event":{…}}`` whose ``event`` holds
``event_id, event_type, turn_id, item_id, run_id, session_id, status, payload, trace_id, created_at``.
Payloads pass the payload policy (:mod:`roost.agent.payloads`) before they are written. A client
resumes the timeline by cursor like any other frame of the log.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import orjson

from roost.agent.payloads import (
    REDACTED,
    BlobStore,
    Vault,
    display,
    redact_text,
    resolve,
    sanitize,
    secret_parts,
)
from roost.agent.store import Store

if TYPE_CHECKING:
    from roost.actors.host import ActorHost
    from roost.agent.store import Row

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
    }
)


class Telemetry:
    def __init__(self, host: ActorHost, blobs: BlobStore, threshold: int, limit: int) -> None:
        self._host = host
        self.blobs = blobs
        self.threshold = threshold
        self.limit = limit
        self.counts: dict[str, int] = {}
        #: Per run, the secrets it was given or handed to its tools: never shown again wherever they
        #: turn up in that run's records (a tool's result or error that echoes its token). Per run,
        #: so that one principal's request can never probe another's secrets.
        self._known: dict[str, list[str]] = {}
        #: The run the orchestrator is working on (set by it); scrubbing uses that run's secrets.
        self.run_id: str | None = None

    # -- the payload policy's entry points (see roost.agent.payloads) -------------------------------
    def store(self) -> Store:
        """The current turn's rows, with free text cleaned on the way in."""
        return Store(self._host.turn_connection(), self.clean_text)

    def clean(self, value: Any) -> Any:
        """What may be shown: secrets redacted, heavy strings to blobs (events, results, cards)."""
        return sanitize(value, self.blobs, self.threshold, limit=self.limit, scrub=self.scrub)

    def scrub(self, text: str) -> str:
        """``text`` without the secrets of the current run."""
        for secret in self._known.get(self.run_id or "", ()):
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def _learn(self, value: Any) -> None:
        if self.run_id is None:
            return
        known = self._known.pop(self.run_id, [])
        for part in secret_parts(value):
            if part not in known:
                known.append(part)
        # longest first, so that a secret is scrubbed whole before any part of it
        self._known[self.run_id] = sorted(known, key=len, reverse=True)[:64]
        while len(self._known) > 256:
            del self._known[next(iter(self._known))]

    def salt(self) -> str:
        """The agent's random salt for secret digests (made once, kept in its file)."""
        return self.store().salt(self._host._now)

    def keep(self, value: Any) -> Any:
        """What a step needs later, kept intact but out of sight (arguments, inputs, checkpoints)."""
        store = self.store()
        now = self._host._now

        def put(digest: str, text: str) -> None:
            store.put_secret(digest, text, now)
            self._learn(orjson.loads(text))

        vault = Vault(put, self.salt())
        return sanitize(value, self.blobs, self.threshold, vault=vault, limit=self.limit)

    def digest(self, value: Any) -> dict[str, str]:
        """The kept form of a secret value, without keeping it (to compare scopes with arguments)."""
        return {"$secret": Vault(lambda d, t: None, self.salt()).digest(value)}

    @staticmethod
    def shown(kept: Any) -> Any:
        """A kept value as events, cards and models may see it."""
        return display(kept)

    def original(self, kept: Any) -> Any:
        """A kept value as the tool gets it back."""
        store = self.store()

        def secret(digest: str) -> Any:
            value = store.get_secret(digest)
            self._learn(value)
            return value

        return resolve(kept, secret, self.blobs)

    def clean_text(self, text: str) -> str:
        """Free text (an error, an output): credentials redacted; beyond the threshold, the full
        text goes to the blob store and the column keeps its start and the reference."""
        text = redact_text(self.scrub(text))
        if len(text) > self.threshold:
            ref = self.blobs.put(text.encode())
            return text[: self.threshold // 4] + f" … [full text: {ref}]"
        return text

    def event(
        self,
        event_type: str,
        run: Row,
        *,
        item_id: str | None = None,
        status: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> int:
        """Log and send one event of ``run``; returns its ``seq``."""
        assert event_type in EVENT_TYPES, event_type
        record = {
            "event_id": uuid.uuid4().hex,
            "event_type": event_type,
            "turn_id": run["turn_id"],
            "item_id": item_id,
            "run_id": run["run_id"],
            "session_id": run["session_id"],
            "status": status,
            "payload": self.clean(payload or {}),
            "trace_id": run["trace_id"],
            "created_at": self._host._now,
        }
        seq = self._host.emit(record)
        self.counts[event_type] = self.counts.get(event_type, 0) + 1
        log.debug("%s run=%s item=%s trace=%s", event_type, run["run_id"], item_id, run["trace_id"])
        return seq
