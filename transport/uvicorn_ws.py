"""uvicorn's sans-I/O WebSocket protocol, answering handshakes it cannot parse.

When the ``websockets`` parser refuses an upgrade request (request line or header over its limit), it
prepares an HTTP error response (414 or 431) but uvicorn's adapter never writes it, leaving the client
hanging with an open socket. This subclass writes that response and closes the connection.

``roost serve`` uses it; to use it under your own uvicorn, pass
``ws="transport.uvicorn_ws:RoostWebSocketProtocol"``.
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["RoostWebSocketProtocol"]


class RoostWebSocketProtocol(WebSocketsSansIOProtocol):
    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.handshake_initiated and self.conn.handshake_exc is not None:
            output = self.conn.data_to_send()
            if output:
                self.transport.write(b"".join(output))
            self.transport.close()
