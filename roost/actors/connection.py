"""Connections as an actor sees them: id, principal, their own small state, tags, subscriptions.

A :class:`Connection` is created by the transport for each WebSocket and handed to the actor's hooks. It
knows nothing of sockets: frames leave through a :class:`Sink` that the transport provides. Everything an
actor sends to a connection during a turn goes through the output gate (it leaves after the commit):
from its connect turn on, the connection is attached to its actor's host, which it sees only as a
:class:`Gate` (:class:`~roost.actors.host.ActorHost` is one), so this module imports nothing of the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from roost.protocol import frames

__all__ = [
    "ANONYMOUS",
    "MAX_CONNECTION_STATE_BYTES",
    "Connection",
    "Gate",
    "Principal",
    "Sink",
    "Subscriptions",
]

MAX_CONNECTION_STATE_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is on the other end, as decided by the transport's ``authenticate`` hook."""

    id: str
    tenant: str | None = None
    claims: dict[str, Any] = field(default_factory=dict)


ANONYMOUS = Principal(id="anonymous")


@dataclass(slots=True)
class Subscriptions:
    """Which broadcast frames a connection wants. Replies to its own calls always arrive."""

    state: bool = True
    events: bool = True
    messages: bool = True

    @classmethod
    def parse(cls, text: str | None) -> Subscriptions:
        """From the ``subscribe`` query value: ``none`` or a comma list of state,events,messages."""
        if text is None:
            return cls()
        parts = {p.strip() for p in text.split(",") if p.strip()}
        if parts == {"none"}:
            return cls(False, False, False)
        unknown = parts - {"state", "events", "messages"}
        if unknown or not parts:
            raise ValueError(f"subscribe: unknown value(s) {sorted(unknown) or [text]}")
        return cls("state" in parts, "events" in parts, "messages" in parts)

    def wants(self, log_kind: str) -> bool:
        if log_kind == "state":
            return self.state
        if log_kind == "event":
            return self.events
        return self.messages


class Sink(Protocol):
    """Where a connection's frames go. Implemented by the transport; must not block."""

    def send_text(self, text: str) -> None: ...

    def close(self, code: int, reason: str) -> None: ...


class Gate(Protocol):
    """Where an attached connection's frames go: its actor's output gate (the host)."""

    def gate_frame(self, conn: Connection, text: str) -> None:
        """Hold a frame for ``conn`` until the writes before it are committed."""

    def gate_close(self, conn: Connection, code: int, reason: str) -> None:
        """Hold a close of ``conn`` the same way."""


class Connection:
    """One client connection to one actor."""

    __slots__ = ("_host", "_sink", "_state", "id", "in_flight", "principal", "subscriptions", "tags")

    def __init__(
        self,
        id: str,
        sink: Sink,
        *,
        principal: Principal = ANONYMOUS,
        subscriptions: Subscriptions | None = None,
    ) -> None:
        self.id = id
        self.principal = principal
        self.subscriptions = subscriptions or Subscriptions()
        self.tags: set[str] = set()
        self._state: Any = None
        self.in_flight = 0  # calls and messages queued for the actor, not yet handled
        self._sink = sink
        self._host: Gate | None = None

    @property
    def state(self) -> Any:
        """This connection's own small state (in memory; gone when the connection closes)."""
        return self._state

    def set_state(self, state: Any) -> None:
        """Replace this connection's state; must be JSON and at most 16 KiB encoded."""
        if len(orjson.dumps(state)) > MAX_CONNECTION_STATE_BYTES:
            raise ValueError(f"connection state larger than {MAX_CONNECTION_STATE_BYTES} bytes")
        self._state = state

    def send(self, data: Any) -> None:
        """Send ``{"type":"message","data":data}`` to this connection alone (gated inside a turn)."""
        text = frames.message(data)
        self.send_frame(text)

    def send_frame(self, text: str) -> None:
        """Send an encoded frame through the actor's output gate (after the writes before it commit)."""
        if self._host is not None:
            self._host.gate_frame(self, text)
        else:
            self._sink.send_text(text)

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the connection, through the output gate like any frame."""
        if self._host is not None:
            self._host.gate_close(self, code, reason)
        else:
            self._sink.close(code, reason)

    def attach(self, host: Gate) -> None:
        """From its connect turn on, what the connection sends goes through ``host``'s output gate."""
        self._host = host

    def detach(self) -> None:
        """Closed (or refused): frames go straight to the sink, and nothing of the actor is kept."""
        self._host = None

    def deliver(self, text: str) -> None:
        """Hand a frame to the sink now. Used by the output gate after a commit."""
        self._sink.send_text(text)

    def deliver_close(self, code: int, reason: str) -> None:
        self._sink.close(code, reason)

    def __repr__(self) -> str:
        return f"<Connection {self.id} principal={self.principal.id!r}>"
