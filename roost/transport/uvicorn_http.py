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

__all__ = ["CEILING", "HANDSHAKE_TIMEOUT", "Refusals", "RoostHttpToolsProtocol", "quiet_uvicorn_refusals"]

log = logging.getLogger("roost.serve")

#: Seconds a client has to send a complete request line and headers.
HANDSHAKE_TIMEOUT = 10.0
#: Open connections past which a new one is closed at once (None: no ceiling).
CEILING: int | None = None

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


class RoostHttpToolsProtocol(HttpToolsProtocol):
    _handshake_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if CEILING is not None and len(self.connections) > CEILING:
            REFUSALS.note("connections", len(self.connections))
            transport.close()  # no descriptor for it: dropped before anything is read
            return
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
        super().connection_lost(exc)
