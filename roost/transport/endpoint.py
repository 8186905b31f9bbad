"""The WebSocket endpoint: moves frames between one socket and one actor's mailbox.

A raw ASGI application (no per-frame wrapper). Per connection there are two tasks: the handler reading
frames and a :class:`SocketSink` writer draining the outbound queue, so a slow client never blocks the
actor. All decisions about frames are made by :mod:`roost.transport.protocol`.

Guarantees:

- A bad frame (not JSON, not an object, binary, wrong field types, unknown type) gets an ``error`` frame
  and the connection stays open; a frame over the size limit closes with 1009. Nothing reaches the actor.
- A client that does not read fast enough is closed with 1013 once ``send_queue`` frames are waiting,
  instead of growing memory; it can reconnect and resume from its cursor.
- Server shutdown closes every connection with 1001 after the frames already released were sent.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection

from roost.actors import Connection, Principal, Subscriptions
from roost.actors.errors import ActorUnavailable, InvalidActorAddress, Overloaded, UnknownKind
from roost.actors.host import Call, Connect, Deliver, Disconnect, Message
from roost.protocol import frames
from roost.protocol.codes import CloseCode
from roost.transport.access import FrameGate, Refused
from roost.transport.protocol import (
    ClientFrame,
    MessageFrame,
    PingFrame,
    ProtocolError,
    RpcFrame,
    actor_address,
    error_frame,
    parse_client_frame,
    parse_connect_query,
)
from roost.transport.security import SUBPROTOCOL, hide_token, offered_subprotocols
from roost.transport.uvicorn_ws import DIRECT, RoostWebSocketProtocol

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from roost.transport.app import RoostApp

__all__ = ["SocketSink", "WebSocketEndpoint"]

#: Close codes of the access gate's refusals of a connection.
_REFUSAL_CLOSE = {
    "bad_address": CloseCode.BAD_ADDRESS,
    "origin_refused": CloseCode.FORBIDDEN,
    "unauthenticated": CloseCode.UNAUTHENTICATED,
    "forbidden": CloseCode.FORBIDDEN,
}

log = logging.getLogger("roost.ws")

#: The reader's queue item for a frame taken by the direct path that waits for an async verdict.
_HELD = "roost.held"


class _Waits:
    """How many frames of a connection wait for an asynchronous ``authorize`` verdict (0 or 1)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class SocketSink:
    """Outbound queue of one socket, drained by its own writer task. ``send_text`` never blocks."""

    __slots__ = (
        "_blocked",
        "_closing",
        "_queue",
        "_send",
        "_wake",
        "closed",
        "direct",
        "max_queue",
        "task",
        "welcomed",
    )

    def __init__(self, send: Send, max_queue: int) -> None:
        self._send = send
        self._queue: deque[str] = deque()
        self._wake: asyncio.Future[None] | None = None
        self._closing: tuple[int, str] | None = None
        self.closed = False
        self.welcomed = False  # the actor's first frame (always the welcome) was queued
        self._blocked = False  # the writer waits on the socket: the client is not reading
        self.max_queue = max_queue
        self.task: asyncio.Task[None] | None = None
        #: The protocol's direct path (``roost.transport.uvicorn_ws``), when the server offers it: a frame
        #: is written at once when the writer has nothing queued and the socket takes it.
        self.direct: RoostWebSocketProtocol | None = None

    @property
    def closing(self) -> bool:
        """A close was asked for (by us): the connection is ending."""
        return self._closing is not None or self.closed

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="roost:ws-writer")

    def send_text(self, text: str) -> None:
        """Queue a frame. A client is a slow consumer, and is closed with 1013, only when more than
        ``max_queue`` frames wait *while the socket does not take them*: a burst (a long replay) that
        the socket drains is not a reason to close."""
        if self._closing is not None or self.closed:
            return
        self.welcomed = True
        direct = self.direct
        if direct is not None and not self._queue:
            wake = self._wake
            if wake is not None and not wake.done():  # the writer is parked: nothing is in flight
                written = direct.write_text(text)
                if written:
                    return
                if written is None:  # the client is gone; the reader sees the disconnect
                    self.closed = True
                    self._poke()
                    return
        self._queue.append(text)
        if self._blocked and len(self._queue) > self.max_queue:
            self._queue.clear()
            self.close(CloseCode.TRY_AGAIN_LATER, "slow consumer: send queue full")
            return
        self._poke()

    def close(self, code: int, reason: str) -> None:
        """Close after the frames already queued; idempotent (the first close wins)."""
        if self._closing is None and not self.closed:
            self._closing = (code, reason[:120])
            self._poke()

    def _poke(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        send = self._send
        queue = self._queue
        try:
            while True:
                while queue:
                    self._blocked = True  # stays True only while send() is suspended on the socket
                    await send({"type": "websocket.send", "text": queue.popleft()})
                    self._blocked = False
                if self._closing is not None:
                    code, reason = self._closing
                    await send({"type": "websocket.close", "code": code, "reason": reason})
                    return
                if self.closed:  # a direct write found the client gone
                    return
                self._wake = loop.create_future()
                await self._wake
                self._wake = None
        except (OSError, RuntimeError):
            pass  # the client is gone; the reader sees the disconnect
        except Exception:
            log.exception("websocket writer failed")
        finally:
            self.closed = True
            queue.clear()

    async def finish(self) -> None:
        """Stop the writer (used when the socket is already gone)."""
        self.closed = True
        self._poke()
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


_call_error = frames.rpc_error


class WebSocketEndpoint:
    """ASGI app for ``/agents/{kind}/{name}``."""

    def __init__(self, app: RoostApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.app
        await app.ensure_started()
        msg = await receive()
        if msg["type"] != "websocket.connect":
            return
        hide_token(scope)  # before anything (uvicorn's "[accepted]" line included) can log the URL
        conn = HTTPConnection(scope)

        async def refuse(code: int, error: str, message: str) -> None:
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": error_frame(error, message)})
            await send({"type": "websocket.close", "code": code, "reason": message[:120]})

        try:
            kind, name = actor_address(scope)
            params = parse_connect_query(scope.get("query_string", b""))
            subs = Subscriptions.parse(params.subscribe)
            app.registry.validate(kind, name)
        except (ProtocolError, ValueError) as exc:
            text = exc.message if isinstance(exc, ProtocolError) else str(exc)
            return await refuse(CloseCode.BAD_ADDRESS, "bad_address", text)
        except UnknownKind as exc:
            return await refuse(CloseCode.UNKNOWN_KIND, "unknown_kind", str(exc))

        verdict = await app.access.admit(conn, kind, name, "connect")
        if isinstance(verdict, Refused):
            return await refuse(_REFUSAL_CLOSE[verdict.code], verdict.code, verdict.message)
        principal, public, name = verdict.principal, name, verdict.name
        try:
            app.registry.validate(kind, name)  # the name within the tenant may be too long
        except InvalidActorAddress as exc:
            return await refuse(CloseCode.BAD_ADDRESS, "bad_address", str(exc))
        if principal.claims.get("read_only") and not app.registry.exists(kind, name):
            return await refuse(CloseCode.FORBIDDEN, "forbidden", "read-only principals cannot create actors")
        client = conn.client.host if conn.client else None
        if not app.access.open(principal, kind, name, client):
            return await refuse(
                CloseCode.TRY_AGAIN_LATER,
                "too_many_connections",
                "too many connections to this actor or principal",
            )
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
        sink.start()
        app.sinks.add(sink)
        close_code = 1006
        host = None
        try:
            try:
                host = app.registry.submit(kind, name, Connect(connection, cursor))
            except (ActorUnavailable, Overloaded) as exc:
                sink.send_text(error_frame(exc.code, exc.message))
                sink.close(CloseCode.TRY_AGAIN_LATER, exc.code)
                close_code = await self._drain_until_disconnect(receive)
                return
            except InvalidActorAddress as exc:
                sink.send_text(error_frame("bad_address", str(exc)))
                sink.close(CloseCode.BAD_ADDRESS, str(exc))
                close_code = await self._drain_until_disconnect(receive)
                return
            extension = conn.scope.get("extensions", {}).get(DIRECT)
            protocol = extension.get("protocol") if isinstance(extension, dict) else None
            direct = protocol if isinstance(protocol, RoostWebSocketProtocol) else None
            waits = _Waits()
            if direct is not None:
                sink.direct = direct
                direct.frame_handler = self._direct(direct, sink, connection, host, gate, waits)
            try:
                close_code = await self._serve(receive, sink, connection, host, gate, waits)
            finally:  # nothing the client sends after its disconnect is acted on
                if direct is not None:
                    direct.frame_handler = None
        finally:
            app.sinks.discard(sink)
            if host is not None and not host.stopping:
                try:
                    host.submit(Disconnect(connection, close_code))
                except ActorUnavailable:
                    pass
            await sink.finish()

    async def _serve(
        self, receive: Receive, sink: SocketSink, conn: Connection, host: Any, gate: FrameGate, waits: _Waits
    ) -> int:
        """Read frames until the socket closes (under ``roost serve``: disconnects, and the frames
        queued behind one that waits for an asynchronous verdict; the rest come by :meth:`_direct`).

        While a frame waits for its verdict, ``waits.count`` keeps the direct path from taking later
        frames: they queue here, behind it, whichever path the waiting frame came by.
        """
        while True:
            msg = await receive()
            kind = msg["type"]
            if kind == "websocket.disconnect":
                return int(msg.get("code", 1006))
            if kind == _HELD:  # a frame taken directly waits for its verdict (counted when queued)
                later = msg["later"]
            else:
                later = self._frame(host, sink, conn, msg.get("text"), gate)
                if later is None:
                    continue
                waits.count += 1
            try:
                await later
            except ActorUnavailable as exc:
                self._unavailable(sink, exc)
            finally:
                waits.count -= 1

    def _direct(
        self,
        protocol: RoostWebSocketProtocol,
        sink: SocketSink,
        conn: Connection,
        host: Any,
        gate: FrameGate,
        waits: _Waits,
    ) -> Callable[[str | None], bool]:
        """The frame handler of the direct path: runs in the protocol's ``data_received``, so an idle
        actor's turn, its commit and the reply happen without a task switch. A frame that must wait for
        an asynchronous verdict is handed to the reader task, and frames after it are queued behind it
        (the protocol queues while anything is queued; ``waits`` covers the wait itself)."""

        def on_frame(text: str | None) -> bool:
            if waits.count:
                return False
            later = self._frame(host, sink, conn, text, gate)
            if later is not None:
                waits.count += 1
                protocol.queue.put_nowait({"type": _HELD, "later": later})  # type: ignore[arg-type]
            return True

        return on_frame

    def _frame(
        self, host: Any, sink: SocketSink, conn: Connection, text: str | None, gate: FrameGate
    ) -> Awaitable[None] | None:
        """One client frame, from either path. Returns an awaitable only when an asynchronous
        ``authorize`` hook must be waited for before the next frame."""
        if sink.closing:  # closed by us (1009, 1013 …): nothing more it sends is acted on
            return None
        max_bytes = self.app.max_frame_bytes
        if text is not None and (
            len(text) > max_bytes or (len(text) * 4 > max_bytes and len(text.encode()) > max_bytes)
        ):
            sink.close(CloseCode.MESSAGE_TOO_BIG, f"frame larger than {max_bytes} bytes")
            return None
        try:
            return self._handle(host, sink, conn, text, self.app.max_in_flight, gate)
        except ActorUnavailable as exc:
            self._unavailable(sink, exc)
            return None

    @staticmethod
    def _unavailable(sink: SocketSink, exc: ActorUnavailable) -> None:
        sink.send_text(error_frame(exc.code, exc.message))
        sink.close(CloseCode.TRY_AGAIN_LATER, "actor restarting")

    @staticmethod
    def _handle(
        host: Any, sink: SocketSink, conn: Connection, text: str | None, max_in_flight: int, gate: FrameGate
    ) -> Awaitable[None] | None:
        """One client frame: parse it, check it against the gate, queue what it asks for at the actor
        (or run it at once: ``ActorHost.run_now``). Returns an awaitable only when an asynchronous
        ``authorize`` hook must be waited for."""
        frame: ClientFrame | None = None
        bad: tuple[str, str] | None = None
        if text is None:
            bad = ("bad_frame", "binary frames are not accepted; send text")
        else:
            try:
                frame = parse_client_frame(text)
            except ProtocolError as exc:
                bad = (exc.code, exc.message)
        limited = gate.rate()  # every frame counts: bad ones, pings and subscriptions too
        if limited is not None:
            _refuse(host, sink, conn, frame, limited, max_in_flight)
            return None
        if bad is not None or frame is None:
            _answer(host, sink, conn, error_frame(*(bad or ("bad_frame", "no frame"))), max_in_flight)
            return None
        if isinstance(frame, RpcFrame | MessageFrame):
            # in_flight counts inputs queued or running at the actor for this connection
            if conn.in_flight >= max_in_flight:
                why = f"more than {max_in_flight} calls and messages in flight on this connection"
                _refuse(host, sink, conn, frame, Refused("overloaded", why), max_in_flight)
                return None
            check = gate.call(frame.method) if isinstance(frame, RpcFrame) else gate.message()
            if check is None or isinstance(check, Refused):
                _submit(host, sink, conn, frame, check, max_in_flight)
                return None
            return _submit_later(host, sink, conn, frame, check, max_in_flight)
        if isinstance(frame, PingFrame):  # a pong keeps its place behind earlier replies: a Deliver
            if conn.in_flight >= max_in_flight:
                why = f"more than {max_in_flight} frames in flight"
                _answer(host, sink, conn, error_frame("overloaded", why), max_in_flight)
                return None
            conn.in_flight += 1
            host.submit(Deliver(conn, frames.pong(frame.id)))
            return None
        subs = conn.subscriptions
        if frame.state is not None:
            subs.state = frame.state
        if frame.events is not None:
            subs.events = frame.events
        if frame.messages is not None:
            subs.messages = frame.messages
        return None

    @staticmethod
    async def _drain_until_disconnect(receive: Receive) -> int:
        while True:
            msg = await receive()
            if msg["type"] == "websocket.disconnect":
                return int(msg.get("code", 1006))


def _answer(host: Any, sink: SocketSink, conn: Connection, frame_text: str, max_in_flight: int) -> None:
    """An answer of the endpoint's own. Once welcomed, it goes out at once (a refusal must not wait
    behind the very backlog it refuses; the send queue bounds it); before, it queues behind the
    welcome, counted against the connection's in-flight bound like a call."""
    if sink.welcomed:
        sink.send_text(frame_text)
    elif conn.in_flight >= max_in_flight:
        sink.close(CloseCode.TRY_AGAIN_LATER, "too many frames before the welcome")
    else:
        conn.in_flight += 1
        host.submit(Deliver(conn, frame_text))


def _refuse(
    host: Any, sink: SocketSink, conn: Connection, frame: ClientFrame | None, why: Refused, max_in_flight: int
) -> None:
    """A refused frame's answer: a failed ``rpc_result`` for a call, an ``error`` frame otherwise."""
    if isinstance(frame, RpcFrame):
        _answer(host, sink, conn, _call_error(frame.id, why.code, why.message), max_in_flight)
    else:
        _answer(host, sink, conn, error_frame(why.code, why.message), max_in_flight)


def _submit(
    host: Any,
    sink: SocketSink,
    conn: Connection,
    frame: RpcFrame | MessageFrame,
    verdict: Refused | None,
    max_in_flight: int,
) -> None:
    """Hand an allowed call or message to its actor (refused ones are answered)."""
    if verdict is not None:
        _refuse(host, sink, conn, frame, verdict, max_in_flight)
        return
    item: Call | Message
    if isinstance(frame, RpcFrame):
        item = Call(frame.method, frame.args, frame.kwargs, conn=conn, id=frame.id)
    else:
        item = Message(conn, frame.data)
    conn.in_flight += 1  # before: an idle actor runs the turn at once, and counts it down
    try:
        host.run_now(item)
    except Overloaded as exc:  # the actor's mailbox is full: refuse this input, keep going
        conn.in_flight -= 1
        _refuse(host, sink, conn, frame, Refused(exc.code, exc.message), max_in_flight)
    except ActorUnavailable:
        conn.in_flight -= 1
        raise


async def _submit_later(
    host: Any,
    sink: SocketSink,
    conn: Connection,
    frame: RpcFrame | MessageFrame,
    pending: Awaitable[Refused | None],
    max_in_flight: int,
) -> None:
    _submit(host, sink, conn, frame, await pending, max_in_flight)
