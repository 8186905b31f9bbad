"""``Client``: one actor, one WebSocket at a time, reconnected and resumed in the background.

Guarantees (each relies on the server keeping protocol.md's promises):

1. **Dedup by seq.** A ``state``/``event`` frame is processed (``state``/``cursor`` updated,
   subscribers and callbacks fed) only if its ``seq`` is greater than the last processed one.
   Processed seqs strictly increase across reconnects, unless the server says its history went
   back in time (a ``snapshot`` welcome with ``reason: cursor_ahead``).
2. **Reconnect never loses a processed seq.** Every reconnect sends ``cursor=<last processed seq>``
   and applies the *Resume* rules (``ResumeState``): after a ``replay`` welcome the frames after
   the cursor are processed; after ``snapshot``/``fresh`` the welcome's state and cursor are taken
   as is (the server says nothing between is available, or the data went back in time).
3. **Calls are answered at most once, never silently dropped.** A call ends with its result,
   ``RpcError``, ``CallNotSent``/``SendTimeout`` (never sent: no effect), ``ConnectionLost``/
   ``ReplyTimeout`` (sent, the outcome unknown: ``OutcomeUnknown``), ``TerminalClose`` or
   ``ClientClosed``.
4. **Every task has an owner.** The connection task (and the chaos task) belong to the client;
   ``close()`` cancels and awaits them. ``close()`` is idempotent and safe to call concurrently.
5. **Terminal closes stop the client** (codes in ``errors.TERMINAL_CLOSE_CODES``): pending and
   later calls and ``wait_connected`` raise ``TerminalClose``; ``closed_reason`` holds it.
6. **Deterministic with a seeded ``rng``:** backoff delays and chaos drops each draw from their own
   generator seeded from ``rng`` at construction; call ids are ``"1"``, ``"2"``, ... Idempotency
   keys are not drawn from ``rng``: two clients seeded alike must never share a key.
7. **A call with an idempotency key runs at most once, across reconnects.** ``call`` gives every
   call a fresh key (a random uuid) unless ``call_with(..., idempotency_key=False)``; the server
   records its outcome under the key (``docs/protocol.md``, *Idempotency keys*). A call made while
   no connection is open waits for one (at most ``max_queued`` such calls; past it ``CallNotSent``
   at once) and is sent when it comes; a keyed call whose connection dropped after it was sent is
   sent again on the next connection with the same key, up to ``resends`` times within its
   timeout, and gets the first outcome. Without a key, a dropped call raises ``ConnectionLost``.

All frames are processed synchronously, in arrival order, by the connection task: callbacks
(``on_state``, ``on_event``, ``on_welcome``, ``on_error``) run there and must not block; an
exception they raise is logged and ignored.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from websockets.exceptions import ConnectionClosed
from websockets.uri import parse_uri

from .backoff import Backoff
from .calls import CallStream, PendingCall
from .connection import Connection, Connector, WelcomeCallback
from .dispatch import Dispatcher, FrameCallback, PayloadCallback
from .errors import (
    CallNotSent,
    CallTimeout,
    ClientError,
    ConnectionLost,
    OutcomeUnknown,
    ReplyTimeout,
    SendTimeout,
)
from .frames import JSON, Frame, encode_frame
from .resume import ResumeState
from .updates import DEFAULT_QUEUE_SIZE, Updates
from .urls import SUBSCRIPTION_KINDS, format_subscribe, parse_subscribe, with_token

#: Largest frame accepted from the server.
MAX_FRAME_SIZE = 8 * 1024 * 1024
#: How many calls may wait for a connection at once, by default (``Client(max_queued=...)``).
MAX_QUEUED = 1000
#: How many times a keyed call is sent again after its connection dropped, by default.
RESENDS = 3


class Client:
    """A reconnecting client of one actor: ``async with Client(actor_url(...)) as c: ...``.

    ``url`` is the full actor URL ``ws://host:port/agents/{kind}/{name}`` (see ``actor_url``).
    ``cursor`` resumes from a seq already processed elsewhere (first connect only; afterwards the
    client's own last processed seq is used). ``subscribe`` is protocol.md's list
    (``"state,events"``, ``"none"``...; default: the server's, all three). ``reconnect=False``
    stops the client (``ConnectionLost``) at the first transient close instead of reconnecting.
    ``chaos`` > 0 drops the connection at random moments, ``chaos`` seconds apart on average.
    ``open_timeout`` bounds the TCP + WebSocket handshake and the wait for the welcome.
    Callbacks: ``on_state(state, seq)`` and ``on_event(event, seq)`` for each processed frame,
    ``on_welcome(welcome)`` for each welcome, ``on_error(frame)`` for each ``error`` frame.
    ``max_queued``: how many calls may wait for a connection at once (past it a call raises
    ``CallNotSent`` at once); ``resends``: how many times a keyed call whose connection dropped
    is sent again (guarantee 7).
    """

    def __init__(
        self,
        url: str,
        *,
        cursor: int | None = None,
        subscribe: str | None = None,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        reconnect: bool = True,
        open_timeout: float = 5.0,
        chaos: float = 0.0,
        on_state: PayloadCallback | None = None,
        on_event: PayloadCallback | None = None,
        on_welcome: WelcomeCallback | None = None,
        on_error: FrameCallback | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        max_size: int = MAX_FRAME_SIZE,
        max_queued: int = MAX_QUEUED,
        resends: int = RESENDS,
    ) -> None:
        parse_uri(url)  # raises websockets.exceptions.InvalidURI early
        if max_queued < 0 or resends < 0:
            raise ValueError(f"max_queued and resends must be >= 0, got {max_queued!r}, {resends!r}")
        self._max_queued = max_queued
        self._resends = resends
        self._queued = 0  # calls waiting for a connection
        if not chaos >= 0:
            raise ValueError(f"chaos must be >= 0, got {chaos!r}")
        if not open_timeout > 0:
            raise ValueError(f"open_timeout must be > 0, got {open_timeout!r}")
        self._resume = ResumeState(cursor)
        self._dispatcher = Dispatcher(
            self._resume,
            on_state=on_state,
            on_event=on_event,
            on_error=on_error,
            queue_size=queue_size,
            label=url,
        )
        self._connector = Connector(
            url,
            resume=self._resume,
            dispatcher=self._dispatcher,
            subscribe=parse_subscribe(subscribe) if subscribe is not None else None,
            backoff=backoff if backoff is not None else Backoff(),
            rng=rng if rng is not None else random.Random(),
            reconnect=reconnect,
            open_timeout=open_timeout,
            max_size=max_size,
            chaos=chaos,
            on_welcome=on_welcome,
        )
        self._ids = itertools.count(1)

    # -- observable state ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The actor URL, without the client's query parameters."""
        return self._connector.url

    @property
    def state(self) -> JSON:
        """The newest known actor state (``None`` before the first welcome)."""
        return self._resume.state

    @property
    def cursor(self) -> int | None:
        """The last processed seq: sent as ``cursor`` on the next (re)connect."""
        return self._resume.last_seq

    @property
    def connected(self) -> bool:
        """Whether a welcomed connection is open."""
        return self._connector.conn is not None

    @property
    def connection_id(self) -> str | None:
        """``connection_id`` of the last welcome (kept while reconnecting)."""
        welcome = self._resume.welcome
        return welcome.connection_id if welcome is not None else None

    @property
    def last_welcome(self) -> Frame | None:
        """The last welcome frame, as received."""
        welcome = self._resume.welcome
        return welcome.raw if welcome is not None else None

    @property
    def reconnects(self) -> int:
        """How many welcomes came after the first one."""
        return max(0, self._connector.welcomes - 1)

    @property
    def replaying(self) -> bool:
        """Whether frames logged before the current welcome may still be replayed."""
        return self._resume.replaying

    @property
    def duplicates(self) -> int:
        """How many ``state``/``event`` frames arrived again after being processed (and were dropped)."""
        return self._resume.duplicates

    @property
    def queued(self) -> int:
        """How many calls wait for a connection (at most ``max_queued`` new ones)."""
        return self._queued

    @property
    def drops(self) -> int:
        """How many times ``drop()`` aborted a socket (by hand or by chaos)."""
        return self._connector.drops

    @property
    def subscription(self) -> str | None:
        """The ``subscribe`` value sent on (re)connect (``None``: the server's default)."""
        kinds = self._connector.subscribe
        return format_subscribe(kinds) if kinds is not None else None

    @property
    def closed_reason(self) -> ClientError | None:
        """Why the client stopped (``TerminalClose``, ``ClientClosed``...), ``None`` if running."""
        return self._connector.closed_reason

    @property
    def errors(self) -> list[Frame]:
        """The last 100 ``error`` frames (``dispatch.ERRORS_KEPT``), oldest first."""
        return list(self._dispatcher.errors)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the connection task (``async with`` does it). Needs a running event loop."""
        self._connector.start()

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the client: fail pending calls (``ClientClosed``), close the socket cleanly (code
        1000), end every ``updates()`` iterator, and await the client's tasks. Idempotent."""
        await self._connector.close()

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until a welcomed connection is open (at once if it is).

        Raises ``TimeoutError``, or the client's ``closed_reason`` if it stopped.
        """
        async with asyncio.timeout(timeout):
            await self._connector.connection()

    def drop(self, away: float = 0.0) -> bool:
        """Abort the current socket without a close handshake, as a network failure would (the
        server sees 1006). The client then reconnects by itself, no sooner than ``away`` seconds
        from now. False if no socket was open."""
        return self._connector.drop(away)

    # -- calls --------------------------------------------------------------------------------

    async def call(self, method: str, /, *args: JSON, timeout: float = 10.0, **kwargs: JSON) -> JSON:
        """Call ``method`` on the actor and return its result, with a fresh idempotency key.

        Waits for a connection if there is none (within ``timeout``; at most ``max_queued`` calls
        wait at once). Raises ``RpcError`` if the actor answered ``ok: false``; ``CallNotSent``
        (``SendTimeout`` for the timeout) if it was never sent; ``ReplyTimeout`` if it was sent and
        no reply came within ``timeout`` seconds; ``ConnectionLost`` if every connection it was
        sent on dropped before the reply (it is sent again with its key up to ``resends`` times):
        for these two (``OutcomeUnknown``) **the outcome is unknown**, and the error's
        ``idempotency_key`` lets you call again safely (``call_with``). A method with keyword
        arguments named ``method`` or ``timeout`` can be called with ``call_with``. Chunks of a
        streaming method are ignored (call one with ``stream``: a stream takes no key).
        """
        return await self.call_with(method, args, kwargs, timeout=timeout)

    async def call_with(
        self,
        method: str,
        args: Sequence[JSON] = (),
        kwargs: Mapping[str, JSON] | None = None,
        *,
        timeout: float = 10.0,
        idempotency_key: str | bool = True,
    ) -> JSON:
        """``call`` with explicit ``args`` and ``kwargs``. ``idempotency_key``: ``True`` (a fresh
        random key), ``False`` (none: the call is never sent again), or the key to use, 1 to 128
        characters (the same key again to retry a call whose outcome is unknown). The server
        ignores the key of a read-only method."""
        key = _key(idempotency_key)
        frame = _rpc_frame(method, args, kwargs, key)
        attempt = _Attempt()
        try:
            async with asyncio.timeout(timeout):
                return await self._deliver(frame, attempt, resend=key is not None)
        except TimeoutError:
            if attempt.sent:
                raise _unknown(ReplyTimeout(f"{method}: no reply within {timeout} s"), key) from None
            raise SendTimeout(f"{method}: not sent within {timeout} s (no connection)") from None
        except ConnectionLost as exc:
            if not attempt.sent:
                raise CallNotSent(f"{method}: not sent: {exc}") from exc
            raise _unknown(ConnectionLost(str(exc)), key) from exc

    async def _deliver(self, frame: Frame, attempt: _Attempt, *, resend: bool) -> JSON:
        """Send ``frame`` and wait for its result; sent again (with its key) on the next connection
        after a drop, up to ``resends`` times, if ``resend``."""
        resends = 0
        while True:
            pending = await self._send_request(frame, want_chunks=False, bounded=not attempt.sent)
            attempt.sent = True
            try:
                return await pending.result()
            except ConnectionLost:
                if not resend or resends >= self._resends:
                    raise
                resends += 1
            finally:
                pending.release()

    def stream(self, method: str, /, *args: JSON, timeout: float = 10.0, **kwargs: JSON) -> CallStream:
        """Call a streaming method: ``async for chunk in c.stream(...)`` yields its chunks.

        The final result is in ``stream.result`` once the loop ends. Errors as for ``call``;
        ``timeout`` bounds the wait for each chunk and for the result (see ``CallStream``).
        """
        frame = _rpc_frame(method, args, kwargs)
        return CallStream(lambda: self._send_request(frame, want_chunks=True), timeout=timeout)

    async def ping(self, timeout: float = 10.0) -> float:
        """Round trip of an application-level ``ping``, in seconds.

        Frames arrive in order, so once it returns every frame the server sent on this connection
        before the ``pong`` has been processed: a barrier for tests.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        pending: PendingCall | None = None
        try:
            async with asyncio.timeout(timeout):
                pending = await self._send_request({"type": "ping"}, want_chunks=False)
                await pending.result()
        except TimeoutError:
            raise CallTimeout(f"ping: no pong within {timeout} s") from None
        finally:
            if pending is not None:
                pending.release()
        return loop.time() - start

    async def renew(self, token: str, *, timeout: float = 10.0) -> JSON:
        """Go on with a new token on the open connection (an ``auth`` frame), before the old one
        expires (the server closes the connection with 4401 then); returns the new token's ``exp``.

        Raises ``RpcError`` (``unauthenticated``) when the server refuses the token: the connection
        goes on with the one it had. A token of another principal, or one that does not allow this
        actor, closes the connection (4403: ``TerminalClose``). When the client's URL carries a
        ``token`` query parameter, later reconnects present the new token.
        """
        pending: PendingCall | None = None
        try:
            async with asyncio.timeout(timeout):
                pending = await self._send_request({"type": "auth", "token": token}, want_chunks=False)
                exp = await pending.result()
        except TimeoutError:
            raise CallTimeout(f"auth: no answer within {timeout} s") from None
        finally:
            if pending is not None:
                pending.release()
        self._connector.url = with_token(self._connector.url, token)
        return exp

    async def send_message(self, data: JSON, *, timeout: float = 10.0) -> None:
        """Send a ``message`` frame (the actor's ``on_message``); no reply, no delivery guarantee.

        Waits for a connection within ``timeout``; ``ConnectionLost`` if the socket is closing.
        """
        text = encode_frame({"type": "message", "data": data})
        try:
            async with asyncio.timeout(timeout):
                conn = await self._connector.connection()
                await conn.ws.send(text, text=True)
        except TimeoutError:
            raise CallTimeout(f"message: not connected within {timeout} s") from None
        except ConnectionClosed as exc:
            raise ConnectionLost("connection lost while sending a message") from exc

    async def set_subscription(
        self,
        *,
        state: bool | None = None,
        events: bool | None = None,
        messages: bool | None = None,
    ) -> None:
        """Change which broadcast frames are received (``None`` keeps a kind as is).

        Sent as a ``subscribe`` frame on the current connection, and used as the ``subscribe``
        query parameter of every later reconnect.
        """
        current = self._connector.subscribe
        kinds = set(current if current is not None else SUBSCRIPTION_KINDS)
        changes = {"state": state, "events": events, "messages": messages}
        for kind, flag in changes.items():
            if flag is True:
                kinds.add(kind)
            elif flag is False:
                kinds.discard(kind)
        self._connector.subscribe = frozenset(kinds)
        conn = self._connector.conn
        if conn is None:
            return
        frame = {"type": "subscribe", **{k: v for k, v in changes.items() if v is not None}}
        try:
            await conn.ws.send(encode_frame(frame), text=True)
        except ConnectionClosed:
            pass  # the next connection gets the new subscription in its query

    def updates(self, maxsize: int | None = None) -> Updates:
        """A new, independent subscriber of processed ``state``/``event``/``message`` frames.

        It receives the frames processed from now on (see ``Updates``); ended at once if the
        client has stopped.
        """
        if self._connector.closed_reason is not None:
            self._dispatcher.end()
        return self._dispatcher.subscribe(maxsize)

    # -- internals ------------------------------------------------------------------------

    async def _send_request(self, frame: Frame, *, want_chunks: bool, bounded: bool = True) -> PendingCall:
        """Send a request on the connection (waiting for one, as one of at most ``max_queued``
        calls if ``bounded``) and return its registered pending call. A socket found closed sends
        nothing: the request waits for the next connection."""
        closed: Connection | None = None
        while True:
            conn = self._connector.conn
            if conn is None or conn is closed:
                if bounded and self._queued >= self._max_queued:
                    raise CallNotSent(f"{self._queued} calls already wait for a connection (max_queued)")
                self._queued += 1
                try:
                    conn = await self._connector.connection(after=closed)
                finally:
                    self._queued -= 1
            call_id = str(next(self._ids))
            text = encode_frame({**frame, "id": call_id})
            pending = PendingCall(call_id, conn.pending, want_chunks=want_chunks)
            try:
                await conn.ws.send(text, text=True)
            except ConnectionClosed:
                pending.release()  # not sent: the reader is about to see the close
                closed = conn
                continue
            except BaseException:
                pending.release()
                raise
            return pending


@dataclass(slots=True)
class _Attempt:
    """Whether a call was handed to a socket (at least once)."""

    sent: bool = False


def _key(choice: str | bool) -> str | None:
    if choice is True:
        return uuid.uuid4().hex
    if choice is False:
        return None
    if not isinstance(choice, str) or not 0 < len(choice) <= 128:
        raise ValueError("idempotency_key must be True, False or a string of 1 to 128 characters")
    return choice


def _unknown(error: OutcomeUnknown, key: str | None) -> OutcomeUnknown:
    error.idempotency_key = key
    return error


def _rpc_frame(
    method: str, args: Sequence[JSON], kwargs: Mapping[str, JSON] | None, key: str | None = None
) -> Frame:
    frame: Frame = {"type": "rpc", "method": method, "args": list(args), "kwargs": dict(kwargs or {})}
    if key is not None:
        frame["idempotency_key"] = key
    return frame
