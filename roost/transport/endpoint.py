"""The WebSocket endpoint: moves frames between one socket and one actor's mailbox.

A raw ASGI application (no per-frame wrapper). Per connection there are two tasks: the handler reading
frames and a :class:`~roost.transport.sink.SocketSink` writer draining the outbound queue, so a slow
client never blocks the actor. The endpoint needs the app's runtime, not the app: it is given a
:class:`~roost.transport.interfaces.Runtime` (registry, access gate, limits, open sockets). Every
decision about a connection and its frames is made by its
:class:`~roost.transport.protocol.ConnectionProtocol`; the endpoint gathers what admission needs (the
address, the access gate's verdict, a connection slot), feeds the protocol events (a frame and the
time from either path, the welcome and closes through the sink, the disconnect) and carries out the
actions it returns (:class:`_Executor`): inputs to the actor, frames and closes to the sink.

Guarantees:

- A bad frame (not JSON, not an object, binary, wrong field types, unknown type) gets an ``error`` frame
  and the connection stays open; a frame over the size limit closes with 1009. Nothing reaches the actor.
- A client that does not read fast enough is closed with 1013 once ``send_queue`` frames are waiting,
  instead of growing memory; it can reconnect and resume from its cursor.
- Server shutdown closes every connection with 1001 after the frames already released were sent.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection

from roost.actors import Connection, Principal, Subscriptions
from roost.actors.errors import ActorUnavailable, InvalidActorAddress, Overloaded, UnknownKind
from roost.actors.host import ActorHost, Call, Deliver, Message
from roost.transport.access import Refused
from roost.transport.protocol import (
    Action,
    Close,
    ConnectionProtocol,
    ProtocolError,
    Reply,
    Verify,
    actor_address,
    parse_connect_query,
    refusal,
)
from roost.transport.security import SUBPROTOCOL, hide_token, offered_subprotocols
from roost.transport.sink import SocketSink

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from roost.transport.interfaces import Runtime

__all__ = ["WebSocketEndpoint"]

log = logging.getLogger("roost.ws")


class WebSocketEndpoint:
    """ASGI app for ``/agents/{kind}/{name}``: admission, then one :class:`ConnectionProtocol` per
    connection whose actions it carries out (:meth:`_execute`)."""

    def __init__(self, app: Runtime) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.app
        await app.ensure_started()
        msg = await receive()
        if msg["type"] != "websocket.connect":
            return
        hide_token(scope)  # before anything (uvicorn's "[accepted]" line included) can log the URL
        conn = HTTPConnection(scope)

        async def refuse(code: str, message: str) -> None:
            close = refusal(code, message)
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": close.frame})
            await send({"type": "websocket.close", "code": close.code, "reason": close.reason})

        try:
            kind, name = actor_address(scope)
            params = parse_connect_query(scope.get("query_string", b""))
            subs = Subscriptions.parse(params.subscribe)
            app.registry.validate(kind, name)
        except (ProtocolError, ValueError) as exc:
            return await refuse("bad_address", exc.message if isinstance(exc, ProtocolError) else str(exc))
        except UnknownKind as exc:
            return await refuse("unknown_kind", str(exc))

        verdict = await app.access.admit(conn, kind, name, "connect")
        if isinstance(verdict, Refused):
            return await refuse(verdict.code, verdict.message)
        principal, public, name = verdict.principal, name, verdict.name
        try:
            app.registry.validate(kind, name)  # the name within the tenant may be too long
        except InvalidActorAddress as exc:
            return await refuse("bad_address", str(exc))
        if principal.claims.get("read_only") and not app.registry.exists(kind, name):
            return await refuse("forbidden", "read-only principals cannot create actors")
        client = conn.client.host if conn.client else None
        if not app.access.open(principal, kind, name, client):
            return await refuse("too_many_connections", "too many connections to this actor or principal")
        try:
            await self._connected(receive, send, conn, principal, kind, public, name, params.cursor, subs)
        finally:  # the slot is given back however the connection ends (a failed accept included)
            app.access.close(principal, kind, name, client)

    async def _connected(
        self,
        receive: Receive,
        send: Send,
        conn: HTTPConnection,
        principal: Principal,
        kind: str,
        public: str,
        name: str,
        cursor: int | None,
        subs: Subscriptions,
    ) -> None:
        app = self.app
        accept: dict[str, Any] = {"type": "websocket.accept"}
        if SUBPROTOCOL in offered_subprotocols(conn):
            accept["subprotocol"] = SUBPROTOCOL
        await send(accept)
        sink = SocketSink(send, app.send_queue)
        connection = Connection(uuid.uuid4().hex[:16], sink, principal=principal, subscriptions=subs)
        gate = app.access.frame_gate(principal, kind, public, conn.client.host if conn.client else None)
        protocol = ConnectionProtocol(
            connection, gate, cursor, max_frame_bytes=app.max_frame_bytes, max_in_flight=app.max_in_flight
        )
        sink.protocol = protocol
        sink.start()
        app.sinks.add(sink)
        close_code = 1006
        host: ActorHost | None = None
        try:
            try:
                host = app.registry.submit(kind, name, protocol.accept())
            except (ActorUnavailable, Overloaded) as exc:
                _close(sink, protocol.connect_failed(exc.code, exc.message, exc.code))
                close_code = await self._drain_until_disconnect(receive)
                return
            except InvalidActorAddress as exc:
                _close(sink, protocol.connect_failed("bad_address", str(exc)))
                close_code = await self._drain_until_disconnect(receive)
                return
            run = _Executor(protocol, host, sink, app.access.clock)
            close_code = await run.serve(receive)
        finally:
            app.sinks.discard(sink)
            gone = protocol.disconnected(close_code)
            if gone is not None and host is not None and not host.stopping:
                try:
                    host.submit(gone)
                except ActorUnavailable:
                    pass
            await sink.finish()

    @staticmethod
    async def _drain_until_disconnect(receive: Receive) -> int:
        while True:
            msg = await receive()
            if msg["type"] == "websocket.disconnect":
                return int(msg.get("code", 1006))


def _close(sink: SocketSink, close: Close) -> None:
    if close.frame is not None:
        sink.send_text(close.frame)
    sink.close(close.code, close.reason)


class _Executor:
    """Carries out a connection's actions: frames in from either path, actions out to the actor and
    the sink. Decides nothing itself (:class:`ConnectionProtocol` does)."""

    __slots__ = ("clock", "host", "protocol", "sink")

    def __init__(
        self, protocol: ConnectionProtocol, host: ActorHost, sink: SocketSink, clock: Callable[[], float]
    ) -> None:
        self.protocol = protocol
        self.host = host
        self.sink = sink
        self.clock = clock

    def execute(self, action: Action) -> Verify | None:
        """Carry out one action; a :class:`Verify` is returned for the caller to wait on
        (:meth:`verify`)."""
        while action is not None:
            kind = type(action)
            if kind is Call or kind is Message:
                try:
                    self.host.run_now(action)  # type: ignore[arg-type]
                    return None
                except (Overloaded, ActorUnavailable) as exc:
                    action = self.protocol.refused(action, exc.code, exc.message)  # type: ignore[arg-type]
            elif kind is Deliver:
                try:
                    self.host.submit(action)  # type: ignore[arg-type]
                    return None
                except ActorUnavailable as exc:  # the actor is stopping
                    action = self.protocol.refused(action, exc.code, exc.message)  # type: ignore[arg-type]
            elif kind is Reply:
                self.sink.send_text(action.text)  # type: ignore[union-attr]
                return None
            elif kind is Close:
                _close(self.sink, action)  # type: ignore[arg-type]
                return None
            elif kind is Verify:
                return action  # type: ignore[return-value]
            else:  # HOLD: the reader waits for a pending verdict before it reads on, so never here
                return None
        return None

    async def verify(self, pending: Verify) -> None:
        """Wait for a verdict (frames that arrive meanwhile are held), then act on it."""
        refused = await pending.pending
        self.execute(self.protocol.verdict(pending, refused))

    async def serve(self, receive: Receive) -> int:
        """Read frames until the socket closes; a frame that waits for an asynchronous verdict is waited
        for before the next one is read, so frames are acted on in the order they were sent."""
        protocol = self.protocol
        clock = self.clock
        while True:
            msg = await receive()
            kind = msg["type"]
            if kind == "websocket.disconnect":
                return int(msg.get("code", 1006))
            pending = self.execute(protocol.receive_text(msg.get("text"), clock()))
            if pending is not None:
                await self.verify(pending)
