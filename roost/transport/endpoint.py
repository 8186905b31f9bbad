"""The WebSocket endpoint: moves frames between one socket and one actor's mailbox.

A raw ASGI application (no per-frame wrapper). Per connection there are two tasks: the handler reading
frames and a :class:`~roost.transport.sink.SocketSink` writer draining the outbound queue, so a slow
client never blocks the actor. Under ``roost serve``'s protocol class the endpoint takes the direct
frame path (:mod:`roost.transport.uvicorn_ws`): text frames come from the protocol's
``data_received`` instead of ``receive()``, and a call's or a message's turn runs at once when the
actor is idle (``run_now``, an inline turn), so a reply needs no task switch; the reader then sees
only disconnects, and frames queued behind one that waits for an asynchronous verdict. The endpoint
needs the app's runtime, not the app: it is given a
:class:`~roost.transport.interfaces.Runtime` (registry, access gate, limits, open sockets). It decides
nothing itself: two sans-I/O state machines do, and it carries out the actions they return.

- Admission (:class:`~roost.transport.admission.Admission`): the endpoint feeds it the scope, and then
  the answer to each thing it asks for (the registry's check of the address, the access gate's
  verdict, whether the actor exists, whether it may be created, a connection slot), until it
  refuses (one ``error`` frame and the failure's close code) or accepts.
- The connection (:class:`~roost.transport.protocol.ConnectionProtocol`): the endpoint feeds it
  events (a frame and the time, the welcome and closes through the sink, the disconnect) and carries
  out the actions it returns (:class:`_Executor`): inputs to the actor, frames and closes to the sink.

Guarantees:

- A bad frame (not JSON, not an object, binary, wrong field types, unknown type) gets an ``error`` frame
  and the connection stays open; a frame over the size limit closes with 1009. Nothing reaches the actor.
- A client that does not read fast enough is closed with 1013 once ``send_queue`` frames or
  ``send_queue_bytes`` bytes are waiting, instead of growing memory; it can reconnect and resume from
  its cursor. The close does not wait on its socket (:meth:`SocketSink.overflow
  <roost.transport.sink.SocketSink.overflow>`): the reader sees the disconnect at once, so the actor
  loses the connection and its slot is given back (``tests/test_slow_consumers.py``).
- Server shutdown closes every connection with 1001 after the frames already released were sent.
- A connection is closed with 4401 when its principal's token expires (its ``exp`` claim), by a
  timer on the runtime's clock (:attr:`Registry.clock <roost.actors.Registry>`, so a test's
  :class:`~roost.scheduler.FakeClock` fires it) that an accepted renewal (an ``auth`` frame) moves;
  a principal without ``exp`` has no timer.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection

from roost.actors import (
    ActorUnavailable,
    Call,
    Connection,
    Deliver,
    InvalidActorAddress,
    Mailbox,
    Message,
    Overloaded,
    Principal,
    UnknownKind,
)
from roost.protocol.codes import CloseCode
from roost.transport.access import Refused
from roost.transport.admission import (
    Accept,
    Admission,
    NeedCreation,
    NeedExists,
    NeedSlot,
    NeedValidate,
    NeedVerdict,
    Refuse,
)
from roost.transport.cloudflare import CloudflareSink, refusal_for_cloudflare, requested_dialect
from roost.transport.direct import DirectPath, offered
from roost.transport.protocol import (
    Action,
    Close,
    ConnectionProtocol,
    Renew,
    Reply,
    Verify,
    token_deadline,
)
from roost.transport.security import SUBPROTOCOL, hide_token, offered_subprotocols
from roost.transport.sink import SocketSink

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from roost.scheduler.clock import Clock, TimerHandle
    from roost.transport.interfaces import Runtime

__all__ = ["WebSocketEndpoint"]

log = logging.getLogger("roost.ws")

#: The reader's queue item for a frame taken by the direct path that waits for an async verdict.
_HELD = "roost.held"


class WebSocketEndpoint:
    """ASGI app for ``/agents/{kind}/{name}``: one :class:`Admission`, then one
    :class:`ConnectionProtocol` per connection, whose actions it carries out."""

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
        client = conn.client.host if conn.client else None
        admission = Admission()
        step = admission.connect(scope)
        while True:  # carry out what admission asks for, until it accepts or refuses
            match step:
                case NeedValidate(kind, name):
                    step = admission.validated(_validation_error(app, kind, name))
                case NeedVerdict(kind, name):
                    step = admission.verdict(await app.access.admit(conn, kind, name, "connect"))
                case NeedExists(kind, name):
                    step = admission.exists(app.registry.exists(kind, name))
                case NeedCreation(principal, kind, name):
                    step = admission.creation(app.access.creation(principal, kind, name, client))
                case NeedSlot(principal, kind, name):
                    step = admission.slot(app.access.open(principal, kind, name, client))
                case Refuse():
                    return await _refuse(send, step.close, requested_dialect(scope.get("query_string", b"")))
                case Accept():
                    break
        try:
            await self._connected(receive, send, conn, client, step)
        finally:  # the slot is given back however the connection ends (a failed accept included)
            app.access.close(step.principal, step.kind, step.name, client)

    async def _connected(
        self, receive: Receive, send: Send, conn: HTTPConnection, client: str | None, admitted: Accept
    ) -> None:
        app = self.app
        principal, kind, name = admitted.principal, admitted.kind, admitted.name
        accept: dict[str, Any] = {"type": "websocket.accept"}
        if SUBPROTOCOL in offered_subprotocols(conn):
            accept["subprotocol"] = SUBPROTOCOL
        # a new actor's directory row, written off the loop before the 101: once accepted, the
        # connection reaches its actor with nothing awaited in between
        await app.registry.prepare(kind, name)
        await send(accept)
        cursor = admitted.cursor
        translate: Callable[[str | None], str | None] | None = None
        if admitted.dialect == "cf":  # the Cloudflare Agents dialect (roost.transport.cloudflare)
            key = (kind, name, admitted.pk) if admitted.pk is not None else None
            if cursor is None and key is not None:
                cursor = app.cloudflare_cursors.get(key)
            cf = CloudflareSink(
                send, app.send_queue, app.send_queue_bytes, cursors=app.cloudflare_cursors, key=key
            )
            translate = functools.partial(cf.inbound, max_bytes=app.max_frame_bytes)
            sink: SocketSink = cf
        else:
            sink = SocketSink(send, app.send_queue, app.send_queue_bytes)
        connection = Connection(
            uuid.uuid4().hex[:16],
            sink,
            principal=principal,
            subscriptions=admitted.subscriptions,
            request=admitted.request,
        )
        gate = app.access.frame_gate(principal, kind, admitted.public, client)
        timers = app.registry.clock
        protocol = ConnectionProtocol(
            connection,
            gate,
            cursor,
            max_frame_bytes=app.max_frame_bytes,
            max_in_flight=app.max_in_flight,
            expires=token_deadline(principal, timers.now(), timers.monotonic()),
        )
        sink.protocol = protocol
        span = None
        if app.tracing is not None:  # the connection's span, a child of the handshake's traceparent
            from opentelemetry.trace import set_span_in_context

            from roost.transport.tracing import parent_context

            span = app.tracing.connection(kind, name, parent_context(conn.headers, conn.query_params))
            connection.trace = set_span_in_context(span)
        sink.start()
        app.sinks.add(sink)
        close_code = 1006
        host: Mailbox | None = None
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
            renew = functools.partial(app.access.renew, conn, kind=kind, name=admitted.public)
            run = _Executor(protocol, host, sink, app.access.clock, timers, renew, translate)
            direct = offered(conn.scope)
            if direct is not None:
                sink.direct = direct
                direct.frame_handler = run.direct_handler(direct)
            run.arm()
            try:
                close_code = await run.serve(receive)
            finally:  # nothing the client sends after its disconnect is acted on
                run.disarm()
                if direct is not None:
                    direct.frame_handler = None
        finally:
            app.sinks.discard(sink)
            gone = protocol.disconnected(close_code)
            if gone is not None and host is not None and not host.stopping:
                try:
                    host.submit(gone)
                except ActorUnavailable:
                    pass
            try:
                await sink.finish()
            finally:
                if span is not None:
                    span.set_attribute("roost.close_code", close_code)
                    span.end()

    @staticmethod
    async def _drain_until_disconnect(receive: Receive) -> int:
        while True:
            msg = await receive()
            if msg["type"] == "websocket.disconnect":
                return int(msg.get("code", 1006))


def _validation_error(app: Runtime, kind: str, name: str) -> UnknownKind | InvalidActorAddress | None:
    """What the registry's check of an address raised, if anything."""
    try:
        app.registry.validate(kind, name)
    except (UnknownKind, InvalidActorAddress) as exc:
        return exc
    return None


async def _refuse(send: Send, close: Close, dialect: str = "roost") -> None:
    """A refusal before the connection exists: accept, the ``error`` frame, the close (in the
    Cloudflare dialect as its client reads them: :func:`.cloudflare.refusal_for_cloudflare`)."""
    frame, code, reason = close.frame, close.code, close.reason
    if dialect == "cf" and frame is not None:
        frame, code, reason = refusal_for_cloudflare(frame, code, reason)
    await send({"type": "websocket.accept"})
    if frame is not None:
        await send({"type": "websocket.send", "text": frame})
    await send({"type": "websocket.close", "code": code, "reason": reason})


def _close(sink: SocketSink, close: Close) -> None:
    if close.frame is not None:
        sink.send_text(close.frame)
    sink.close(close.code, close.reason)


#: A token sent in an ``auth`` frame → its principal, or the refusal (:meth:`Access.renew`).
Renewal = Callable[[str], Awaitable[Principal | Refused]]


class _Executor:
    """Carries out a connection's actions: frames in from the reader, actions out to the actor and
    the sink, and the expiry timer of the principal's token. Decides nothing itself
    (:class:`ConnectionProtocol` does).

    ``clock`` is the access gate's (the time of frames); deadlines are read from ``timers``, the
    runtime's clock, and its expiry timer runs there. The app gives the access gate that clock's
    ``monotonic`` (:func:`roost.transport.app.create_app`), so a frame and the timer see one time."""

    __slots__ = ("clock", "host", "protocol", "renewal", "sink", "timer", "timers", "translate", "waits")

    def __init__(
        self,
        protocol: ConnectionProtocol,
        host: Mailbox,
        sink: SocketSink,
        clock: Callable[[], float],
        timers: Clock,
        renewal: Renewal,
        translate: Callable[[str | None], str | None] | None = None,
    ) -> None:
        self.protocol = protocol
        #: A client frame in another dialect → the Roost frame it stands for (None: Roost's own).
        self.translate = translate
        self.host = host
        self.sink = sink
        self.clock = clock
        self.timers = timers
        self.renewal = renewal
        #: The armed expiry timer, if any (:meth:`arm`).
        self.timer: TimerHandle | None = None
        #: Frames that wait for an asynchronous verdict (in the reader, or queued for it by the direct
        #: path): while there is one, the direct path declines later frames, which queue behind it.
        self.waits = 0

    # -- the token's expiry --------------------------------------------------------------------------
    def arm(self) -> None:
        """Arm the expiry timer at the protocol's deadline (replacing one armed before); none without
        a deadline or once the connection is closing."""
        self.disarm()
        deadline = self.protocol.deadline
        if deadline is not None and self.protocol.state.value < 3:
            self.timer = self.timers.call_at(deadline, self._expire)

    def disarm(self) -> None:
        """Cancel the expiry timer (the socket is gone, or the deadline moved)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        close = self.protocol.tick(self.timers.monotonic())
        if close is None:  # early by a rounding of the clocks, or the deadline moved: wait on
            self.arm()
        else:
            self.execute(close)

    # -- actions -------------------------------------------------------------------------------------
    def execute(self, action: Action) -> Verify | Renew | None:
        """Carry out one action; a :class:`Verify` or a :class:`Renew` is returned for the caller to
        wait on (:meth:`verify`)."""
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
            elif kind is Verify or kind is Renew:
                return action  # type: ignore[return-value]
            else:  # HOLD: the reader waits for a pending verdict before it reads on, so never here
                return None
        return None

    def frame(self, text: str | None) -> Verify | Renew | None:
        """One client frame, by either path: the protocol's action, carried out. An ``authorize`` hook
        that raises closes this connection with 1011 (logged with its traceback); the server goes on."""
        try:
            if self.translate is not None:
                text = self.translate(text)
            return self.execute(self.protocol.receive_text(text, self.clock()))
        except Exception:
            self._hook_failed()
            return None

    async def verify(self, pending: Verify | Renew) -> None:
        """Wait for a verdict (frames that arrive meanwhile are held), then act on it. For a renewal,
        the new token's deadline goes to the protocol with it, and the expiry timer follows the
        protocol's deadline. A hook that raises meanwhile closes the connection with 1011."""
        try:
            if isinstance(pending, Renew):
                verdict = await self.renewal(pending.frame.token)
                expires = None
                if isinstance(verdict, Principal):
                    expires = token_deadline(verdict, self.timers.now(), self.timers.monotonic())
                self.execute(self.protocol.renewed(pending, verdict, expires))
                self.arm()
                return
            refused = await pending.pending
        except Exception:
            self._hook_failed()
            return
        self.execute(self.protocol.verdict(pending, refused))

    def _hook_failed(self) -> None:
        log.exception("the authorize hook raised; closing the connection with 1011")
        _close(self.sink, Close(CloseCode.INTERNAL_ERROR, "internal error"))

    def direct_handler(self, direct: DirectPath) -> Callable[[str], bool]:
        """The direct path's frame handler: runs in the protocol's ``data_received``. A frame that
        must wait for an asynchronous verdict is handed to the reader task (behind whatever is
        queued there), and frames after it are declined until it is done, so they queue behind it."""

        def on_frame(text: str) -> bool:
            if self.waits:
                return False
            pending = self.frame(text)
            if pending is not None:
                self.waits += 1
                direct.hand_to_reader({"type": _HELD, "pending": pending})
            return True

        return on_frame

    async def serve(self, receive: Receive) -> int:
        """Read frames until the socket closes; a frame that waits for an asynchronous verdict is waited
        for before the next one is read, so frames are acted on in the order they were sent."""
        while True:
            msg = await receive()
            kind = msg["type"]
            if kind == "websocket.disconnect":
                return int(msg.get("code", 1006))
            if kind == _HELD:  # a frame the direct path took waits for its verdict
                try:
                    await self.verify(msg["pending"])
                finally:
                    self.waits -= 1
                continue
            pending = self.frame(msg.get("text"))
            if pending is not None:  # the direct path declines later frames meanwhile
                self.waits += 1
                try:
                    await self.verify(pending)
                finally:
                    self.waits -= 1
