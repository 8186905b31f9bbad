"""uvicorn's sans-I/O WebSocket protocol, with a direct frame path for Roost's endpoint.

``roost serve`` uses this class; to use it under your own uvicorn, pass
``ws="roost.transport.uvicorn_ws:RoostWebSocketProtocol"``. Under any other ASGI server the endpoint works
through plain ASGI ``receive``/``send``, only slower.

Two things differ from uvicorn's own class:

- **Handshakes it cannot parse are answered.** When the ``websockets`` parser refuses an upgrade
  request (request line or header over its limit), it prepares an HTTP error response (414 or 431) but
  uvicorn's adapter never writes it, leaving the client hanging with an open socket. This class writes
  that response and closes the connection.
- **The direct frame path.** An accepted connection's scope carries the ASGI extension
  ``"roost.direct"`` (this protocol object). The endpoint may then set :attr:`frame_handler`: each
  complete data message is handed to it from ``data_received`` (text as ``str``, binary as ``None``)
  instead of being queued for ``receive()`` — no queue, no task switch, no pause and resume of reading
  per message. The handler returns ``False`` to decline a frame, which then goes the ASGI way. Frames
  keep their order: while anything is queued for ``receive()``, later frames are queued behind it.
  :meth:`write_text` writes a frame at once when the socket takes it. Disconnects, closes and
  everything else still go through ``receive()``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState
from websockets.http11 import Request
from websockets.protocol import State

__all__ = ["DIRECT", "RoostWebSocketProtocol"]

#: The ASGI scope extension naming the protocol object that offers the direct frame path.
DIRECT = "roost.direct"

_HAND_BUILT = os.environ.get("ROOST_FRAME_HEADERS", "1") != "0"
_DIRECT_ON = os.environ.get("ROOST_DIRECT_FRAMES", "1") != "0"

_HEAD16 = struct.Struct("!BBH")  # FIN + text opcode, length 126, 16-bit length
_HEAD64 = struct.Struct("!BBQ")  # FIN + text opcode, length 127, 64-bit length


class PublicWebSocketProtocol(WebSocketsSansIOProtocol):
    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.handshake_initiated and self.conn.handshake_exc is not None:
            output = self.conn.data_to_send()
            if output:
                self.transport.write(b"".join(output))
            self.transport.close()


def protocol_class() -> str:
    """The ``ws=`` class path ``roost serve`` gives uvicorn."""
    name = "RoostWebSocketProtocol" if _DIRECT_ON else "PublicWebSocketProtocol"
    return f"{__name__}:{name}"


class RoostWebSocketProtocol(PublicWebSocketProtocol):
    #: Takes a complete data message (``None`` for binary); returns False to have it queued instead.
    frame_handler: Callable[[str | None], bool] | None = None

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        if (
            _DIRECT_ON and not self.close_sent
        ):  # accepted for the app: the scope exists and its task is not yet run
            self.scope["extensions"][DIRECT] = {"protocol": self}

    def send_receive_event_to_app(self) -> None:
        handler = self.frame_handler
        if handler is None or self.close_sent or not self.queue.empty():
            super().send_receive_event_to_app()
            return
        if self.curr_msg_data_type == "text":
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            try:
                text: str | None = data.decode()
            except UnicodeDecodeError:
                super().send_receive_event_to_app()  # uvicorn closes with 1007
                return
        else:
            text = None
        if handler(text):
            self.frames = []
        else:
            super().send_receive_event_to_app()

    def write_text(self, text: str) -> bool | None:
        """Write a text frame now if the socket takes it: True when written, False when the caller
        must wait (the transport's buffer is full, or a close is under way), None when the
        connection is gone.

        The frame is built here when nothing can change its bytes (no extension negotiated, no
        fragmented message under way, the connection open): a server frame is a two- to ten-byte
        header and the payload, unmasked (RFC 6455 §5.2). That costs a fifth of building it through
        ``websockets``' frame objects, on every frame a server sends."""
        if self.disconnected:
            return None
        if self.close_sent or not self.writable.is_set():
            return False
        conn = self.conn
        data = text.encode()
        if (
            _HAND_BUILT
            and conn.state is State.OPEN
            and not conn.extensions
            and not conn.expect_continuation_frame
        ):
            size = len(data)
            if size < 126:
                head = bytes((0x81, size))
            elif size < 65536:
                head = _HEAD16.pack(0x81, 126, size)
            else:
                head = _HEAD64.pack(0x81, 127, size)
            self.transport.write(head + data)
            return True
        try:
            conn.send_text(data)
        except InvalidState:
            return None
        self.transport.write(b"".join(conn.data_to_send()))
        return True
