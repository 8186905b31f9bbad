"""uvicorn's httptools protocol with a handshake timeout and a connection cap that covers WebSockets.

uvicorn waits for a request's headers for as long as the client likes: a client that opens a
connection and sends nothing, or half a request line, holds a socket and a descriptor for ever
(slowloris). This subclass closes a connection whose request headers are not complete within
``HANDSHAKE_TIMEOUT`` seconds of its opening (or of the previous response, on a kept-alive
connection). WebSocket handshakes are HTTP requests: they are covered too.

``roost serve --handshake-timeout`` sets it; under your own uvicorn pass
``http="roost.transport.uvicorn_http:RoostHttpToolsProtocol"``.

**The connection cap.** uvicorn's ``limit_concurrency`` answers a plain HTTP request 503 when the
server holds that many connections (or tasks), but lets every WebSocket upgrade through: one client's
WebSockets then take every descriptor, and the next ``accept`` fails with ``EMFILE``, leaving everyone
else's handshake without an answer. This class applies the same test to upgrades, which are answered
HTTP 503 too (``Service Unavailable``, ``Connection: close``) instead of reaching the app; and a
connection opened when :data:`CEILING` connections are already open is closed at once, before it
can be read (the descriptors left are kept for the answers under way and the process's own files).
**One peer's share.** Sockets that never finish a request count towards the cap but towards no
client's WebSocket share: one address could hold every one of them, reconnecting each the handshake
timeout drops, and leave others nothing. So a peer address (keyed as the per-address limits key it,
:func:`roost.transport.access.address_key`) holds at most :data:`PEER_SHARE` open sockets: the next is
answered HTTP 503 and closed at once. The trusted proxies (:data:`EXEMPT`, ``--forwarded-allow-ips``)
are not held to it: the clients behind a proxy are told apart by the address it forwards.
The refusals are logged once per burst (:class:`Refusals`: the first, then a count at most every 10
seconds), not once each. ``roost serve`` sizes both from the descriptor budget
(:meth:`roost.actors.DescriptorBudget.connections`, :meth:`~roost.actors.DescriptorBudget.ceiling`);
under your own uvicorn pass ``limit_concurrency=`` and set :data:`CEILING` if you want it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from roost.transport.access import address_key

__all__ = [
    "CEILING",
    "EXEMPT",
    "HANDSHAKE_TIMEOUT",
    "PEER_SHARE",
    "Refusals",
    "RoostHttpToolsProtocol",
    "quiet_uvicorn_refusals",
]

log = logging.getLogger("roost.serve")

#: Seconds a client has to send a complete request line and headers.
HANDSHAKE_TIMEOUT = 10.0
#: Open connections past which a new one is closed at once (None: no ceiling).
CEILING: int | None = None
#: Open sockets one peer address may hold (None: no share).
PEER_SHARE: int | None = None
#: Peers not held to :data:`PEER_SHARE`: the trusted proxies (``"*"``: every peer).
EXEMPT: frozenset[str] = frozenset()
#: Open sockets per peer address key, of this process.
_OPEN: dict[object, int] = {}

_SERVICE_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: 19\r\n"
    b"connection: close\r\n"
    b"\r\n"
    b"Service Unavailable"
)
_UVICORN_REFUSAL = "Exceeded concurrency limit."


class Refusals:
    """Connections refused at the cap, logged once per burst: a warning at the first refusal, then
    at most one every ``every`` seconds with how many there were since."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self.count = 0  # refused since the last line
        self.last: float | None = None  # when the last line was written

    def note(self, what: str, open_connections: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.count += 1
        if self.last is not None and now - self.last < self.every:
            return
        log.warning(
            "at the connection cap (%d open): %d %s refused (HTTP 503 or closed) since the last report",
            open_connections,
            self.count,
            what,
        )
        self.count, self.last = 0, now


#: The refusals of this process.
REFUSALS = Refusals()


class _DropUvicornRefusals(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _UVICORN_REFUSAL


def quiet_uvicorn_refusals() -> None:
    """Drop uvicorn's own warning per refused request ("Exceeded concurrency limit."): this class
    logs them once per burst instead."""
    logging.getLogger("uvicorn.error").addFilter(_DropUvicornRefusals())


def _peer_key(transport: asyncio.Transport) -> object | None:
    """The share key of the transport's peer, or None if it is not held to :data:`PEER_SHARE`."""
    if PEER_SHARE is None or "*" in EXEMPT:
        return None
    peer = transport.get_extra_info("peername")
    host = peer[0] if isinstance(peer, tuple) and peer else None
    if not isinstance(host, str) or host in EXEMPT:
        return None
    return address_key(host)


class RoostHttpToolsProtocol(HttpToolsProtocol):
    _handshake_timer: asyncio.TimerHandle | None = None
    _counted: object | None = None  # the peer key this socket is counted under

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if CEILING is not None and len(self.connections) > CEILING:
            REFUSALS.note("connections", len(self.connections))
            transport.close()  # no descriptor for it: dropped before anything is read
            return
        key = _peer_key(transport)
        if key is not None:
            if _OPEN.get(key, 0) >= (PEER_SHARE or 0):
                REFUSALS.note("connections from one address past its share", len(self.connections))
                transport.write(_SERVICE_UNAVAILABLE)
                transport.close()
                return
            _OPEN[key] = _OPEN.get(key, 0) + 1
            self._counted = key
        self._arm()

    def _at_cap(self) -> bool:
        """uvicorn's own test for a 503 (``limit_concurrency``), this connection counted."""
        limit = self.limit_concurrency
        return limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit)

    def _arm(self) -> None:
        self._disarm()
        self._handshake_timer = self.loop.call_later(HANDSHAKE_TIMEOUT, self._expire)

    def _disarm(self) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None

    def _expire(self) -> None:
        self._handshake_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._disarm()
        if self._at_cap():  # answered 503: by uvicorn for a request, by handle_websocket_upgrade
            REFUSALS.note("requests and handshakes", len(self.connections))
        super().on_headers_complete()

    def handle_websocket_upgrade(self) -> None:
        if self._at_cap():
            self.transport.write(_SERVICE_UNAVAILABLE)
            self.transport.close()
            return
        super().handle_websocket_upgrade()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # a kept-alive connection has the same time for its next request

    def connection_lost(self, exc: Any) -> None:
        self._disarm()
        key, self._counted = self._counted, None
        if key is not None:
            left = _OPEN.get(key, 1) - 1
            if left > 0:
                _OPEN[key] = left
            else:
                _OPEN.pop(key, None)
        super().connection_lost(exc)
