"""uvicorn's sans-I/O WebSocket protocol, answering the handshakes it cannot parse.

``roost serve`` uses this class; to use it under your own uvicorn, pass
``ws="roost.transport.uvicorn_ws:RoostWebSocketProtocol"``. Under uvicorn's own classes, or any other
ASGI server, the endpoint works the same through plain ASGI ``receive``/``send``; only a refused
handshake goes unanswered (below).

**Handshakes it cannot parse are answered.** When the ``websockets`` parser refuses an upgrade request
(request line or header over its limit), it prepares an HTTP error response (414 or 431) but uvicorn's
adapter never writes it, leaving the client hanging with an open socket. This class writes that
response and closes the connection. It overrides only ``connection_made`` and ``data_received`` (the
``asyncio.Protocol`` interface uvicorn's class implements) and calls websockets' public
``ServerProtocol.handshake_exc`` and ``data_to_send()``. Two names are uvicorn's own and undocumented:
the module this class comes from, and ``conn``, the ``ServerProtocol`` its class drives. That is a
correctness fix, not a speed-up; the pin in ``pyproject.toml`` (``uvicorn>=0.54,<0.55``) keeps to the
version it was tested with, and ``tests/test_address_refusals.py`` checks the answer on a real server.

**No fast path on private internals.** A direct frame path used to live here (an override of
uvicorn's ``send_receive_event_to_app`` reading its ``frames``, ``queue``, ``writable`` and
``close_sent``, and RFC 6455 frame headers built by hand). Measured against the public path it was
worth under 10 % of durable RPC throughput (``bench/RESULTS.md``, "Paths on other libraries' private
internals") and was removed.
"""

from __future__ import annotations

import asyncio
from typing import cast

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["RoostWebSocketProtocol"]


class RoostWebSocketProtocol(WebSocketsSansIOProtocol):
    _socket: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._socket = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        socket, conn = self._socket, self.conn
        if conn.handshake_exc is None or socket is None or socket.is_closing():
            return
        # refused by the parser before uvicorn saw a request (uvicorn closes the socket after any
        # response it writes itself): write the response websockets prepared, and close
        output = conn.data_to_send()
        if output:
            socket.write(b"".join(output))
        socket.close()
