"""The sans-I/O wire protocol, version 1: frames in, actions out; no asyncio, no sockets.

Two parts, both tested without an event loop (``tests/test_protocol.py``,
``tests/test_connection_protocol.py``):

- the codec (:mod:`roost.transport.codec`): :func:`parse_client_frame`, :func:`parse_actor_path`,
  :func:`parse_connect_query`, pure functions of their input;
- the connection's rules: :class:`ConnectionProtocol`, one per admitted WebSocket (admission is
  :class:`roost.transport.admission.Admission`, built the same way), a state machine fed events (a
  frame arrived, the welcome went out, the server closed, the socket is gone) that returns the action
  to take (:data:`Action`). The endpoint in :mod:`roost.transport.endpoint` owns the socket and
  executes the actions; it decides nothing about frames.

Server frames are built by :mod:`roost.protocol.frames`, close codes come from the failure table
(:mod:`roost.protocol.failures`). The protocol itself is written down in ``docs/protocol.md``.

Guarantees:

- the codec's guarantees are in :mod:`roost.transport.codec` (its names are re-exported here);
- :meth:`ConnectionProtocol.receive_text` never raises for any input (unless an ``authorize`` hook
  does), and acts on nothing once the server closed the connection.
- A connection whose principal's token has expired acts on nothing: the first frame at or after the
  deadline, or :meth:`ConnectionProtocol.tick` at it, closes the connection with 4401; before the
  deadline neither does. An accepted renewal (an ``auth`` frame) moves the deadline and puts the new
  token's claims in force for every later frame.
"""

from __future__ import annotations

from collections.abc import Awaitable
from enum import Enum
from typing import NamedTuple

from roost.actors import Call, Connect, Connection, Deliver, Disconnect, Message, Principal
from roost.protocol import frames
from roost.protocol.codes import CloseCode
from roost.protocol.failures import close_code
from roost.protocol.frames import PROTOCOL_VERSION
from roost.transport.access import FrameGate, Refused
from roost.transport.codec import (
    AuthFrame,
    ClientFrame,
    ConnectParams,
    MessageFrame,
    PingFrame,
    ProtocolError,
    RpcFrame,
    SubscribeFrame,
    actor_address,
    encode,
    error_frame,
    parse_actor_path,
    parse_client_frame,
    parse_connect_query,
)

__all__ = [
    "HOLD",
    "PROTOCOL_VERSION",
    "Action",
    "AuthFrame",
    "ClientFrame",
    "Close",
    "ConnectParams",
    "ConnectionProtocol",
    "ConnectionState",
    "Hold",
    "MessageFrame",
    "PingFrame",
    "ProtocolError",
    "Renew",
    "Reply",
    "RpcFrame",
    "SubscribeFrame",
    "Verify",
    "actor_address",
    "encode",
    "error_frame",
    "parse_actor_path",
    "parse_client_frame",
    "parse_connect_query",
    "refusal",
    "token_deadline",
]


# -- the connection's rules ------------------------------------------------------------------------------


class ConnectionState(Enum):
    """Where a connection is; it only moves forward (``HANDSHAKE`` → … → ``CLOSED``)."""

    #: Admitted by the access gate; the actor has not been asked to take the connection yet.
    HANDSHAKE = 0
    #: The actor has the connection; its welcome has not gone out yet.
    AWAITING_WELCOME = 1
    #: Welcomed: answers of the transport's own go out at once.
    OPEN = 2
    #: The server closed (or is closing) the connection: nothing the client sends is acted on.
    CLOSING = 3
    #: The socket is gone.
    CLOSED = 4


class Reply(NamedTuple):
    """Send this frame now (through the connection's sink, without waiting on the actor)."""

    text: str


class Close(NamedTuple):
    """Send ``frame`` first when there is one (an ``error`` frame telling why), then close."""

    code: int
    reason: str
    frame: str | None = None


class Verify(NamedTuple):
    """Wait for an asynchronous ``authorize`` verdict on a call or message, then hand the verdict to
    :meth:`ConnectionProtocol.verdict`. Until then the protocol holds every later frame (:data:`HOLD`)."""

    pending: Awaitable[Refused | None]
    frame: RpcFrame | MessageFrame


class Hold:
    """Not now: keep this frame, and every later one, until a pending verdict is in (then hand it to
    :meth:`ConnectionProtocol.receive_text` again, in order)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HOLD"


HOLD = Hold()


class Renew(NamedTuple):
    """Verify ``frame.token`` as a handshake's token is verified
    (:meth:`roost.transport.access.Access.renew`), then hand the principal or the refusal to
    :meth:`ConnectionProtocol.renewed`. Until then the protocol holds every later frame (:data:`HOLD`),
    so the frames sent after a renewal are judged by the new token."""

    frame: AuthFrame


#: What the endpoint does for an event. ``Call`` and ``Message``: run at the actor
#: (``Mailbox.submit``); ``Deliver``: queue at the actor, behind every earlier input (a pong, or an
#: answer of the transport's own before the welcome). Each of these three was counted against the
#: connection's in-flight bound; if the actor refuses it, tell :meth:`ConnectionProtocol.refused`.
#: ``None``: nothing to do.
Action = Call | Message | Deliver | Reply | Close | Verify | Renew | Hold | None


def _exp(principal: Principal) -> float | None:
    exp = principal.claims.get("exp")
    return None if isinstance(exp, bool) or not isinstance(exp, int | float) else exp


def token_deadline(principal: Principal, wall: float, now: float) -> float | None:
    """When ``principal``'s token expires, on the clock ``now`` is read from: its ``exp`` claim is in
    seconds since the epoch, as ``wall`` (read at the same moment as ``now``), so the deadline is
    ``exp - wall`` seconds after ``now``. None when the principal has no numeric ``exp`` (one that an
    ``authenticate`` hook made without it never expires)."""
    exp = _exp(principal)
    return None if exp is None else now + (exp - wall)


def refusal(code: str, message: str) -> Close:
    """How the transport refuses a connection before the actor has it (a bad address, an unknown kind,
    the access gate, too many connections): accept the socket, send one ``error`` frame with the
    failure's code, then close with the failure's close code (:mod:`roost.protocol.failures`)."""
    return Close(close_code(code), message[:120], frames.error(code, message))


_CLOSING = ConnectionState.CLOSING
_OPEN = ConnectionState.OPEN


class ConnectionProtocol:
    """The rules of one WebSocket connection, as a state machine without I/O.

    Fed events, it returns :data:`Action` values for the endpoint to carry out:

    - :meth:`accept` → the ``Connect`` input; :meth:`connect_failed` when the actor cannot take it;
    - :meth:`receive_text` for every data frame (text, or ``None`` for binary), with the time;
    - :meth:`verdict` once a :class:`Verify` is decided; :meth:`refused` when the actor refuses an input;
    - :meth:`renewed` once a :class:`Renew` is decided; :meth:`tick` at the :attr:`deadline` (the
      principal's token expires then: ``expires``, on the clock of ``now``; None: never);
    - :meth:`welcomed` when the first frame (always the welcome) goes out, :meth:`closing` when the
      server closes, :meth:`disconnected` when the socket is gone (→ the ``Disconnect`` input, if any).

    Per frame, in this order (``docs/protocol.md``, *Connection rules*):

    1. after the server closed the connection, nothing is acted on;
    2. at or after the deadline (the token expired) the connection closes with 4401;
    3. a frame over ``max_frame_bytes`` (UTF-8) closes with 1009;
    4. every frame, good or bad, takes a token from the rate limits; without one it is answered
       ``rate_limited`` (a failed ``rpc_result`` for a call, a failed ``auth_result`` for an
       ``auth``, an ``error`` frame otherwise) and dropped;
    5. a frame that does not parse is answered with an ``error`` frame (``bad_frame``/``unknown_type``;
       an ``rpc`` frame whose id is good carries it as ``id``);
    6. a call, a message or a ping while ``max_in_flight`` inputs of this connection are queued or
       running at the actor is answered ``overloaded``; a call or message refused by the gate
       (read-only, ``authorize``) is answered ``forbidden``; otherwise it goes to the actor;
    7. a ping is answered by a ``pong`` queued at the actor, after every reply to an earlier frame;
    8. a ``subscribe`` frame changes the connection's subscriptions at once;
    9. an ``auth`` frame's token is verified (:class:`Renew`, later frames held meanwhile), and
       :meth:`renewed` decides.

    Answers of the transport's own go out at once once the connection is welcomed (a refusal does not
    wait behind the backlog it refuses). Before the welcome they queue at the actor behind it, counted
    against the in-flight bound; one over the bound closes with 1013.

    Guarantees: :meth:`receive_text` never raises (unless an ``authorize`` hook does) and, per rpc
    frame, allocates nothing beyond parsing but the frame's ``Call`` (the action is the input itself);
    while a :class:`Verify` or a :class:`Renew` is pending every frame gets :data:`HOLD`, so frames
    are acted on in the order they arrived; the connection's in-flight count is raised for every input
    handed to the actor and lowered again by :meth:`refused`; nothing is acted on at or after the
    :attr:`deadline`.
    """

    __slots__ = (
        "_expires",
        "_gate",
        "_joined",
        "_max_bytes",
        "_max_in_flight",
        "_max_text",
        "connection",
        "cursor",
        "state",
        "waiting",
    )

    def __init__(
        self,
        connection: Connection,
        gate: FrameGate,
        cursor: int | None = None,
        *,
        max_frame_bytes: int,
        max_in_flight: int,
        expires: float | None = None,
    ) -> None:
        self.connection = connection
        self.cursor = cursor
        self.state = ConnectionState.HANDSHAKE
        #: A :class:`Verify` or a :class:`Renew` is pending: later frames are held.
        self.waiting = False
        self._joined = False  # the actor was handed the connection
        self._gate = gate
        self._max_bytes = max_frame_bytes
        self._max_text = max_frame_bytes // 4  # up to this many characters no text can be too big
        self._max_in_flight = max_in_flight
        self._expires = expires

    @property
    def deadline(self) -> float | None:
        """When the principal's token expires, on the clock of ``now`` (None: never). The endpoint
        calls :meth:`tick` then, and again after a :meth:`renewed` that moved it."""
        return self._expires

    # -- the connection's life -------------------------------------------------------------------------
    def accept(self) -> Connect:
        """The socket was accepted: the input that asks the actor for the connection (and resumes it
        from ``cursor``; the actor decides how, :func:`roost.protocol.resume.decide_resume`)."""
        if self.state is ConnectionState.HANDSHAKE:
            self.state = ConnectionState.AWAITING_WELCOME
            self._joined = True
        return Connect(self.connection, self.cursor)

    def connect_failed(self, code: str, message: str, reason: str | None = None) -> Close:
        """The actor could not take the connection (``overloaded``, ``actor_unavailable``,
        ``bad_address``): an ``error`` frame, then the failure's close code (``reason``: the close
        reason, by default the message)."""
        self._joined = False
        return self._close(close_code(code), reason or message[:120], frames.error(code, message))

    def welcomed(self) -> None:
        """The first frame of the connection (the welcome) went out."""
        if self.state is ConnectionState.AWAITING_WELCOME:
            self.state = _OPEN

    def closing(self) -> None:
        """The server closes the connection (the actor, a slow consumer, shutdown, or an action)."""
        if self.state.value < _CLOSING.value:
            self.state = _CLOSING

    def tick(self, now: float) -> Close | None:
        """The time is ``now``: at or past the deadline, the connection closes with 4401 (an ``error``
        frame ``unauthenticated`` first); before it, or without one, nothing happens."""
        expires = self._expires
        if expires is None or now < expires or self.state.value >= 3:
            return None
        return self._expired()

    def disconnected(self, code: int) -> Disconnect | None:
        """The socket is gone (``code`` as the client closed it, 1006 without a close): the input that
        tells the actor, or None if the actor never had the connection."""
        self.state = ConnectionState.CLOSED
        return Disconnect(self.connection, code) if self._joined else None

    # -- frames ----------------------------------------------------------------------------------------
    def receive_text(self, text: str | None, now: float) -> Action:
        """One data frame (``None`` for a binary one) received at ``now`` (the clock of the rate
        limits, in seconds)."""
        if self.waiting:
            return HOLD
        if self.state.value >= 3:  # CLOSING, CLOSED
            return None
        expires = self._expires
        if expires is not None and now >= expires:
            return self._expired()
        if text is not None and len(text) > self._max_text:
            max_bytes = self._max_bytes
            if len(text) > max_bytes or len(text.encode()) > max_bytes:
                return self._close(CloseCode.MESSAGE_TOO_BIG, f"frame larger than {max_bytes} bytes")
        frame: ClientFrame | None = None
        bad: ProtocolError | None = None
        if text is None:
            bad = _BINARY
        else:
            try:
                frame = parse_client_frame(text)
            except ProtocolError as exc:
                bad = exc
        gate = self._gate
        limited = gate.rate(now)
        if limited is not None:
            return self._refuse(frame, limited.code, limited.message)
        if frame is None:
            assert bad is not None
            return self._answer(frames.error(bad.code, bad.message, bad.call_id))
        conn = self.connection
        if type(frame) is RpcFrame:
            if conn.in_flight >= self._max_in_flight:
                return self._refuse(frame, "overloaded", self._too_many_calls())
            check = gate.call(frame.method)
            if check is None:
                conn.in_flight += 1  # counted here, counted down by the actor when the turn ends
                return _call(frame, conn)
        elif isinstance(frame, MessageFrame):
            if conn.in_flight >= self._max_in_flight:
                return self._refuse(frame, "overloaded", self._too_many_calls())
            check = gate.message()
            if check is None:
                conn.in_flight += 1
                return Message(conn, frame.data)
        elif isinstance(frame, PingFrame):  # a pong keeps its place behind earlier replies: a Deliver
            if conn.in_flight >= self._max_in_flight:
                return self._answer(
                    frames.error("overloaded", f"more than {self._max_in_flight} frames in flight")
                )
            conn.in_flight += 1
            return Deliver(conn, frames.pong(frame.id))
        elif isinstance(frame, AuthFrame):
            self.waiting = True
            return Renew(frame)
        else:
            assert isinstance(frame, SubscribeFrame)
            subs = conn.subscriptions
            if frame.state is not None:
                subs.state = frame.state
            if frame.events is not None:
                subs.events = frame.events
            if frame.messages is not None:
                subs.messages = frame.messages
            return None
        if isinstance(check, Refused):
            return self._refuse(frame, check.code, check.message)
        self.waiting = True
        return Verify(check, frame)

    def verdict(self, pending: Verify, refused: Refused | None) -> Action:
        """The verdict of a :class:`Verify` is in: the call or message goes to the actor, or is answered
        with the refusal. Held frames may come again after this."""
        self.waiting = False
        if self.state.value >= 3:
            return None
        frame = pending.frame
        if refused is not None:
            return self._refuse(frame, refused.code, refused.message)
        conn = self.connection
        conn.in_flight += 1
        if isinstance(frame, RpcFrame):
            return _call(frame, conn)
        return Message(conn, frame.data)

    def renewed(self, pending: Renew, verdict: Principal | Refused, expires: float | None = None) -> Action:
        """The verdict on a :class:`Renew`'s token is in (``expires``: the new token's deadline, as
        :func:`token_deadline` gives it). Held frames may come again after this.

        - refused as ``unauthenticated`` (expired, forged, malformed): answered with a failed
          ``auth_result``; the connection goes on with the token it had, and its deadline;
        - refused otherwise (``forbidden``: ``authorize`` does not allow this connection with the new
          token): closed with that failure's close code (4403);
        - a principal of another subject or tenant: closed with 4403 (a connection never changes hands);
        - else the new principal replaces the connection's (the actor sees it from its next turn; the
          gate judges every later frame by its claims), the deadline moves to ``expires``, and the
          answer is an ``auth_result`` with the new ``exp``.
        """
        self.waiting = False
        if self.state.value >= 3:
            return None
        frame = pending.frame
        if isinstance(verdict, Refused):
            if verdict.code == "unauthenticated":
                return self._answer(frames.auth_error(frame.id, verdict.code, verdict.message))
            return self._close(
                close_code(verdict.code), verdict.message[:120], frames.error(verdict.code, verdict.message)
            )
        conn = self.connection
        if verdict.id != conn.principal.id or verdict.tenant != conn.principal.tenant:
            message = "a renewal must be for the connection's own subject and tenant"
            return self._close(CloseCode.FORBIDDEN, message, frames.error("forbidden", message))
        conn.principal = verdict
        self._gate.use(verdict)
        self._expires = expires
        return self._answer(frames.auth_ok(frame.id, _exp(verdict)))

    def refused(self, item: Call | Message | Deliver, code: str, message: str) -> Action:
        """The actor refused an input this protocol handed it: ``overloaded`` (its mailbox is full) is
        answered and the connection goes on; ``actor_unavailable`` (it is stopping) closes with 1013."""
        self.connection.in_flight -= 1
        if code == "overloaded":
            if isinstance(item, Call):
                return self._answer(frames.rpc_error(item.id, code, message))
            return self._answer(frames.error(code, message))
        return self._close(close_code(code), "actor restarting", frames.error(code, message))

    # -- answers ---------------------------------------------------------------------------------------
    def _too_many_calls(self) -> str:
        return f"more than {self._max_in_flight} calls and messages in flight on this connection"

    def _refuse(self, frame: ClientFrame | None, code: str, message: str) -> Action:
        """A refused frame's answer: a failed ``rpc_result`` for a call, an ``error`` frame otherwise."""
        if isinstance(frame, RpcFrame):
            return self._answer(frames.rpc_error(frame.id, code, message))
        if isinstance(frame, AuthFrame):
            return self._answer(frames.auth_error(frame.id, code, message))
        return self._answer(frames.error(code, message))

    def _expired(self) -> Close:
        return self._close(
            CloseCode.UNAUTHENTICATED, "token expired", frames.error("unauthenticated", "token expired")
        )

    def _answer(self, text: str) -> Action:
        """An answer of the transport's own: at once when welcomed, else queued behind the welcome."""
        if self.state is _OPEN:
            return Reply(text)
        conn = self.connection
        if conn.in_flight >= self._max_in_flight:
            return self._close(CloseCode.TRY_AGAIN_LATER, "too many frames before the welcome")
        conn.in_flight += 1
        return Deliver(conn, text)

    def _close(self, code: int, reason: str, frame: str | None = None) -> Close:
        self.state = _CLOSING
        return Close(code, reason, frame)


def _call(frame: RpcFrame, conn: Connection) -> Call:
    return Call(frame.method, frame.args, frame.kwargs, conn=conn, id=frame.id, key=frame.idempotency_key)


_BINARY = ProtocolError("bad_frame", "binary frames are not accepted; send text")
