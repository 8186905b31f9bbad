"""uvicorn's httptools protocol with a handshake timeout.

uvicorn waits for a request's headers for as long as the client likes: a client that opens a
connection and sends nothing, or half a request line, holds a socket and a descriptor for ever
(slowloris). This subclass closes a connection whose request headers are not complete within
``HANDSHAKE_TIMEOUT`` seconds of its opening (or of the previous response, on a kept-alive
connection). WebSocket handshakes are HTTP requests: they are covered too.

``roost serve --handshake-timeout`` sets it; under your own uvicorn pass
``http="roost.transport.uvicorn_http:RoostHttpToolsProtocol"``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HANDSHAKE_TIMEOUT", "RoostHttpToolsProtocol"]

#: Seconds a client has to send a complete request line and headers.
HANDSHAKE_TIMEOUT = 10.0


class RoostHttpToolsProtocol(HttpToolsProtocol):
    _handshake_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

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
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # a kept-alive connection has the same time for its next request

    def connection_lost(self, exc: Any) -> None:
        self._disarm()
        super().connection_lost(exc)
