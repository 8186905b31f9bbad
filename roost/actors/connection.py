"""Connections as an actor sees them: id, principal, request, their own small state, tags, subscriptions.

A :class:`Connection` is created by the transport for each WebSocket and handed to the actor's hooks. It
knows nothing of sockets: frames leave through a :class:`Sink` that the transport provides. Everything an
actor sends to a connection during a turn goes through the output gate (it leaves after the commit):
from its connect turn on, the connection is attached to its actor's host, which it sees only as a
:class:`Gate` (:class:`~roost.actors.host.ActorHost` is one), so this module imports nothing of the host.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import orjson

from roost.protocol import CloseCode, frames

__all__ = [
    "ANONYMOUS",
    "MAX_CONNECTION_STATE_BYTES",
    "MAX_REQUEST_BYTES",
    "Backpressure",
    "Connection",
    "Gate",
    "Params",
    "Principal",
    "Replay",
    "Request",
    "Sink",
    "Subscriptions",
]

MAX_CONNECTION_STATE_BYTES = 16 * 1024
#: The most a connection's :class:`Request` may hold: its query's and its headers' names and values, in
#: UTF-8 bytes, credentials left out. The transport refuses a larger handshake (``bad_address``, 4400).
MAX_REQUEST_BYTES = 16 * 1024


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


class Params(Mapping[str, str]):
    """Names and values in the order they came (a query's, or headers'), read-only.

    ``params[name]`` and ``params.get(name)`` give the last value of ``name`` (as Starlette's
    ``QueryParams`` do), :meth:`getlist` every one, :meth:`multi_items` every pair in order."""

    __slots__ = ("_items", "_last")

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items = tuple(items)
        self._last = dict(self._items)

    def __getitem__(self, name: str) -> str:
        return self._last[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._last)

    def __len__(self) -> int:
        return len(self._last)

    def getlist(self, name: str) -> list[str]:
        """Every value of ``name``, in order (``[]`` if it is absent)."""
        return [v for k, v in self._items if k == name]

    def multi_items(self) -> list[tuple[str, str]]:
        """Every ``(name, value)`` pair, in order, repeated names included."""
        return list(self._items)

    def nbytes(self) -> int:
        """What the names and values take in UTF-8 (what :data:`MAX_REQUEST_BYTES` counts)."""
        return sum(
            len(k.encode("utf-8", "replace")) + len(v.encode("utf-8", "replace")) for k, v in self._items
        )

    def __repr__(self) -> str:
        return f"Params({list(self._items)!r})"


@dataclass(frozen=True, slots=True)
class Request:
    """The WebSocket handshake a connection came with, as ``on_connect`` (and every later hook) sees it
    on ``conn.request`` — Cloudflare Agents' ``onConnect(connection, ctx)`` has it as ``ctx.request``.

    - ``path``: the request's path, percent-decoded (a mount prefix included);
    - ``query``: the query's names and values, percent-decoded as UTF-8 (``+`` is a space), without
      the ``token`` parameter (in any spelling the server reads as ``token``);
    - ``headers``: names in lower case, without the credentials: ``Authorization``,
      ``Proxy-Authorization`` and ``Cookie`` are left out, and so are the ``roost.token.…`` entries of
      ``Sec-WebSocket-Protocol`` (the header stays if anything else was offered);
    - ``client``: the peer's ``(host, port)``, or None when the server does not know it.

    Any query value or header that holds a Roost token (``roost1.…``) under another name is left out
    too, so no credential the server accepts reaches the actor. A credential a custom ``authenticate``
    hook reads from some other header or parameter is the hook's own: the request keeps it.

    The transport makes it (:func:`roost.transport.handshake.connect_request`) and bounds it at
    :data:`MAX_REQUEST_BYTES`. It lives as long as its connection: connections are not kept across
    restarts (a restart closes them and a reconnect is a new connection with its own request), so a
    request is never written to disk. Calls over HTTP have no connection and no request
    (``self.caller`` is None; ``self.principal`` says who called).
    """

    path: str = "/"
    query: Params = field(default_factory=Params)
    headers: Params = field(default_factory=Params)
    client: tuple[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON form: ``path``, ``query`` and ``headers`` as lists of pairs, ``client`` or null."""
        return {
            "path": self.path,
            "query": [list(p) for p in self.query.multi_items()],
            "headers": [list(p) for p in self.headers.multi_items()],
            "client": list(self.client) if self.client is not None else None,
        }


class Sink(Protocol):
    """Where a connection's frames go. Implemented by the transport; must not block."""

    def send_text(self, text: str) -> None: ...

    def close(self, code: int, reason: str) -> None: ...


@runtime_checkable
class Backpressure(Protocol):
    """A :class:`Sink` that bounds what waits in it (the transport's socket sink does): a replay is
    read from the log only as fast as such a sink drains (``docs/design.md``, *Resume*). A sink
    without it has its replay read page after page at once."""

    @property
    def limits(self) -> tuple[int, int]:
        """``(frames, bytes)`` the sink lets wait for a client that does not read."""

    @property
    def queued(self) -> tuple[int, int]:
        """``(frames, bytes)`` waiting in the sink now (bytes as ``sys.getsizeof`` counts them)."""

    def when_drained(self, frames: int, nbytes: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, as soon as at most ``frames`` frames and ``nbytes`` bytes wait (at
        once if that is so now; never if the sink closes first). A later call replaces an earlier
        one. ``callback`` must not raise."""

    @property
    def closing(self) -> bool:
        """The sink is closing or closed (the server closed it, the client left): what is sent to it
        now is dropped."""

    def overflow(self, reason: str) -> None:
        """The client is past the bound: close it with 1013 now, dropping what waits for it, without
        waiting for it to read."""


class Gate(Protocol):
    """Where an attached connection's frames go: its actor's output gate (the host)."""

    def gate_frame(self, conn: Connection, text: str) -> None:
        """Hold a frame for ``conn`` until the writes before it are committed."""

    def gate_close(self, conn: Connection, code: int, reason: str) -> None:
        """Hold a close of ``conn`` the same way."""

    def read_replay(self, conn: Connection) -> None:
        """Queue the turn that reads the next page of ``conn``'s replay (never raises)."""


#: A replay page is at most this share of the bound (frames and bytes), at least one row …
PAGE_SHARE = 4
#: … and the next is read once at most this share of the bound waits for the connection.
LOW_WATER_SHARE = 2
#: The bound assumed for a sink without :class:`Backpressure` (frames, bytes).
UNBOUNDED_LIMITS = (1024, 4 << 20)


class Replay:
    """A connection's replay from the log while it is delivered (``docs/design.md``, *Resume*).

    Turn side: ``after`` is the ``seq`` the reader has read up to, and while ``reading`` the
    connection's logged frames are not fanned out to it (the reader finds them in the log). Release
    side: every other frame released for the connection meanwhile is ``held`` and written after the
    page that reaches the head; a page read but not yet released is ``pending``.

    Guarantees (tests in ``tests/test_replay_pages.py``): every logged frame after the cursor exactly
    once and in ``seq`` order, then the held frames, then live ones. **One budget:** what the server
    holds for the connection — what waits in its sink, the frames held behind the replay and the page
    read but not yet written (:meth:`total`) — stays within the sink's bound (``limits``), plus at
    most one frame (a page reads at least one row, and stops after the row that reaches its share):
    a page reads no more than what the bound has left, and a held frame that would pass it closes
    the connection with 1013.
    """

    __slots__ = (
        "after",
        "flow",
        "held",
        "held_bytes",
        "limits",
        "pending_bytes",
        "pending_frames",
        "reading",
    )

    def __init__(self, after: int, flow: Backpressure | None) -> None:
        self.after = after
        self.reading = True
        self.flow = flow
        self.limits = flow.limits if flow is not None else UNBOUNDED_LIMITS
        self.held: deque[str] = deque()
        self.held_bytes = 0
        #: The page read in a turn and not yet written to the sink (its release is behind the commit).
        self.pending_frames = 0
        self.pending_bytes = 0

    def total(self) -> tuple[int, int]:
        """``(frames, bytes)`` the server holds for the connection: what waits in its sink, what is
        held behind the replay and the page read but not yet written."""
        frames_, nbytes = self.flow.queued if self.flow is not None else (0, 0)
        return (
            frames_ + len(self.held) + self.pending_frames,
            nbytes + self.held_bytes + self.pending_bytes,
        )

    @property
    def page(self) -> tuple[int, int]:
        """``(rows, bytes)`` the next page may read: a quarter of the bound, no more than what the
        bound has left (:meth:`total`), and at least one row."""
        frames_, nbytes = self.limits
        used_frames, used_bytes = self.total()
        return (
            max(1, min(frames_ // PAGE_SHARE, frames_ - used_frames)),
            max(1, min(nbytes // PAGE_SHARE, nbytes - used_bytes)),
        )

    @property
    def low_water(self) -> tuple[int, int]:
        """``(frames, bytes)`` the sink drains to before the next page is read: half the bound, less
        what is held behind the replay (so a page has room)."""
        frames_, nbytes = self.limits
        return (
            max(0, frames_ // LOW_WATER_SHARE - len(self.held) - self.pending_frames),
            max(0, nbytes // LOW_WATER_SHARE - self.held_bytes - self.pending_bytes),
        )

    def read(self, texts: list[str]) -> None:
        """A page's frames were read (in its turn): they count as ``pending`` until written."""
        self.pending_frames = len(texts)
        self.pending_bytes = sum(map(sys.getsizeof, texts))

    def written(self) -> None:
        """The pending page was handed to the sink (where the sink's own count takes it over)."""
        self.pending_frames = self.pending_bytes = 0

    def hold(self, text: str) -> bool:
        """Hold a frame behind the replay; False if the connection's total then passes the bound."""
        self.held.append(text)
        self.held_bytes += sys.getsizeof(text)
        frames_, nbytes = self.limits
        used_frames, used_bytes = self.total()
        return used_frames <= frames_ and used_bytes <= nbytes


class Connection:
    """One client connection to one actor."""

    __slots__ = (
        "_host",
        "_sink",
        "_state",
        "id",
        "in_flight",
        "principal",
        "replay",
        "request",
        "subscriptions",
        "tags",
        "trace",
    )

    def __init__(
        self,
        id: str,
        sink: Sink,
        *,
        principal: Principal = ANONYMOUS,
        subscriptions: Subscriptions | None = None,
        request: Request | None = None,
    ) -> None:
        self.id = id
        self.principal = principal
        #: The handshake it came with, credentials left out (:class:`Request`).
        self.request = request if request is not None else Request()
        self.subscriptions = subscriptions or Subscriptions()
        self.tags: set[str] = set()
        self._state: Any = None
        self.in_flight = 0  # calls and messages queued for the actor, not yet handled
        self._sink = sink
        self._host: Gate | None = None
        #: The replay being delivered, if any (from the connect turn to the page that reaches the head).
        self.replay: Replay | None = None
        #: The connection's trace context, opaque here (set by the transport when tracing is on): the
        #: parent of the spans of its turns.
        self.trace: object = None

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
        self.replay = None

    @property
    def gone(self) -> bool:
        """Its socket is closing or closed, by the server (a slow consumer past its send bound, a
        close) or by the client: nothing sent to it arrives any more, so a stream to it stops at its
        next chunk. Known through a sink with :class:`Backpressure` (the transport's); False for
        another sink."""
        sink = self._sink
        return isinstance(sink, Backpressure) and sink.closing

    def holding(self) -> tuple[int, int]:
        """``(frames, bytes)`` the server holds for this connection: what waits in its sink (if the
        sink counts it, :class:`Backpressure`) and, during a replay, the frames held behind it and the
        page read but not yet written. The sink's bound bounds it (plus at most one frame)."""
        if self.replay is not None:
            return self.replay.total()
        sink = self._sink
        return sink.queued if isinstance(sink, Backpressure) else (0, 0)

    def start_replay(self, after: int) -> Replay:
        """From the connect turn: the replay of the logged frames after ``after`` begins."""
        sink = self._sink
        self.replay = replay = Replay(after, sink if isinstance(sink, Backpressure) else None)
        return replay

    def deliver(self, text: str) -> None:
        """Hand a frame to the sink now, or behind the replay while one is delivered. Used by the
        output gate after a commit."""
        replay = self.replay
        if replay is None:
            self._sink.send_text(text)
        elif not replay.hold(text):
            self.replay = None
            reason = "slow consumer: frames held behind its replay"
            if replay.flow is not None:
                replay.flow.overflow(reason)
            else:
                self._sink.close(CloseCode.TRY_AGAIN_LATER, reason)

    def deliver_replayed(self, texts: list[str], done: bool) -> None:
        """After a page's commit: write its frames; then, if it reached the head, what was held, and
        the connection is live; else ask for the next page once the sink has drained."""
        replay = self.replay
        if replay is None:  # closed meanwhile
            return
        send = self._sink.send_text
        for text in texts:
            send(text)
        replay.written()
        if done:
            self.replay = None
            for text in replay.held:
                send(text)
            return
        flow = replay.flow
        if flow is None:
            self._next_page()
        else:
            frames_, nbytes = replay.low_water
            flow.when_drained(frames_, nbytes, self._next_page)

    def _next_page(self) -> None:
        host = self._host
        if host is not None and self.replay is not None:
            host.read_replay(self)

    def deliver_close(self, code: int, reason: str) -> None:
        self._sink.close(code, reason)

    def __repr__(self) -> str:
        return f"<Connection {self.id} principal={self.principal.id!r}>"
