"""uvicorn's sans-I/O WebSocket protocol, with a direct frame path for Roost's endpoint.

``roost serve`` uses this class; to use it under your own uvicorn, pass
``ws="roost.transport.uvicorn_ws:RoostWebSocketProtocol"``. Under uvicorn's own classes, or any other
ASGI server, the endpoint works the same through plain ASGI ``receive``/``send``, only slower.

Three things differ from uvicorn's own class:

- **Handshakes it cannot parse are answered.** When the ``websockets`` parser refuses an upgrade
  request (request line or header over its limit), it prepares an HTTP error response (414 or 431)
  but uvicorn's adapter never writes it, leaving the client hanging with an open socket. This class
  writes that response (websockets' public ``ServerProtocol.handshake_exc`` and ``data_to_send()``)
  and closes the connection. That is a correctness fix, not a speed-up.
- **A close does not wait for a client that does not read**, and such a client is dropped. uvicorn's
  ``send`` waits until the socket takes more before it writes anything, a close frame included, and
  it ends a connection with ``transport.close()``, which waits for the unsent bytes to go out: a
  client that never reads kept its connection, its descriptor and (its reader never seeing the
  disconnect) its place at its actor for ever. Here a ``websocket.close`` is written at once, behind
  what the socket holds, and the reader is told of the disconnect as uvicorn does; if the client has
  not answered it within :func:`close_timeout` (the handshake timeout: a closing handshake has as
  long as an opening one), the connection is reset when bytes are still unsent (linger 0, then
  ``abort()``: the descriptor is freed at once), else closed as uvicorn would; a keepalive ping not
  answered in time resets it the same way when bytes are still unsent. These are correctness fixes,
  on both sides of ``ROOST_FAST_PATHS`` (tests in ``tests/test_slow_consumers.py``).
- **The direct frame path.** An accepted connection's scope carries the ASGI extension
  ``"roost.direct"`` (this protocol object). The endpoint may then set :attr:`frame_handler`: each
  complete text message is handed to it from ``data_received`` instead of being queued for
  ``receive()``: no queue, no task switch per message (with an inline turn, a call's turn, its commit
  and its reply all run in the same callback). The handler returns ``False`` to decline a frame,
  which then goes the ASGI way. Frames keep their order: while anything is queued for ``receive()``,
  later frames are queued behind it. :meth:`write_text` writes a frame at once when the socket takes
  it, with the two- to ten-byte RFC 6455 header built here when nothing can change the frame's bytes.
  Binary frames, disconnects, closes and everything else still go through ``receive()``.

**A measured exception to "public APIs only".** The direct path overrides uvicorn's undocumented
``handle_connect`` and ``send_receive_event_to_app`` and reads its ``frames``, ``curr_msg_data_type``,
``queue``, ``writable``, ``close_sent``, ``disconnected`` and ``conn``. With inline turns
(``roost.actors.inline``) it is worth more than the 10 % of durable RPC throughput such a path must
earn (``bench/RESULTS.md``, "Fast paths"). So: uvicorn is pinned to the versions it was tested with
(``uvicorn>=0.54,<0.55``); :func:`roost.transport.uvicorn_protocols.choose` picks this class only on
such a version with those methods, else uvicorn's own; the attributes are checked on the first
connection (:func:`direct_available`), before any frame takes the path; ``ROOST_FAST_PATHS=0`` turns
the path off (the connection is then served the ASGI way). The whole suite runs both ways
(``make test``, ``make test-public``). The close fix reads ``handshake_complete``,
``initial_response``, ``close_sent``, ``disconnected``, ``queue``, ``read_paused``, ``close_timer``,
``conn`` and ``transport`` the way uvicorn's own ``send`` does, and overrides ``send`` and
``keepalive_timeout`` (:func:`~roost.transport.uvicorn_protocols.choose` checks for both).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState
from websockets.http11 import Request
from websockets.protocol import State

from roost.actors import fast_paths_off
from roost.transport import uvicorn_http
from roost.transport.direct import DIRECT

if TYPE_CHECKING:
    from uvicorn._types import ASGISendEvent

__all__ = ["RoostWebSocketProtocol", "close_timeout", "direct_available", "missing_attributes"]

log = logging.getLogger("roost.ws")

#: What the direct path reads of uvicorn's protocol object (checked on the first connection).
_ATTRIBUTES = (
    "frames",
    "curr_msg_data_type",
    "queue",
    "writable",
    "close_sent",
    "disconnected",
    "conn",
    "scope",
    "transport",
)
_HEAD16 = struct.Struct("!BBH")  # FIN + text opcode, length 126, 16-bit length
_HEAD64 = struct.Struct("!BBQ")  # FIN + text opcode, length 127, 64-bit length
_LINGER_ZERO = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection

_checked: bool | None = None  # the attributes were found on the first connection (None: not yet)


def close_timeout() -> float:
    """Seconds a client has to answer the server's close frame before the connection is dropped:
    the handshake timeout (``roost serve --handshake-timeout``, 10 s by default)."""
    return uvicorn_http.HANDSHAKE_TIMEOUT


def _reset(transport: asyncio.Transport) -> None:
    """Drop a connection whose peer takes nothing: linger 0, so the kernel resets the TCP connection
    and discards what it still holds (a plain close would queue a FIN behind bytes that never go
    out), then abort the transport, which frees the descriptor at once."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
    transport.abort()


def missing_attributes(protocol: object) -> list[str]:
    """What the direct path reads that ``protocol`` (uvicorn's protocol object) does not have."""
    return [a for a in _ATTRIBUTES if not hasattr(protocol, a)]


def direct_available(protocol: object | None = None) -> bool:
    """Whether connections are offered the direct path: not when the switch is off
    (:func:`roost.actors.fast_paths_off`), and only if
    uvicorn's protocol object has every attribute the path reads (checked once, on ``protocol``, the
    first connection's; logged once when one is missing)."""
    global _checked
    if fast_paths_off() is not None:
        return False
    if _checked is None and protocol is not None:
        missing = missing_attributes(protocol)
        _checked = not missing
        if missing:
            log.warning("the direct frame path is off: uvicorn's protocol has no %s", ", ".join(missing))
    return bool(_checked)


class RoostWebSocketProtocol(WebSocketsSansIOProtocol):
    #: Takes a complete text message; returns False to have it queued for ``receive()`` instead.
    frame_handler: Callable[[str], bool] | None = None
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

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        # accepted for the app: the scope exists and the app's task has not run yet
        if not self.close_sent and direct_available(self):
            self.scope["extensions"][DIRECT] = {"protocol": self}

    def send_receive_event_to_app(self) -> None:
        handler = self.frame_handler
        if handler is None or self.close_sent or self.curr_msg_data_type != "text" or not self.queue.empty():
            super().send_receive_event_to_app()
            return
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        try:
            text = data.decode()
        except UnicodeDecodeError:
            super().send_receive_event_to_app()  # uvicorn closes with 1007
            return
        if handler(text):
            self.frames = []
        else:
            super().send_receive_event_to_app()

    async def send(self, message: ASGISendEvent) -> None:
        if (
            message["type"] == "websocket.close"
            and self.handshake_complete
            and self.initial_response is None
            and not self.close_sent
            and not self.disconnected
        ):
            self._close_now(int(message.get("code", 1000)), message.get("reason") or "")
            return
        await super().send(message)

    def _close_now(self, code: int, reason: str) -> None:
        """uvicorn's close of an accepted connection, without waiting for the socket to take more: the
        frame is written behind what the socket holds, the reader is told of the disconnect, and the
        close timer drops a client that does not answer (:meth:`_close_timed_out`)."""
        transport = self.transport
        if transport.is_closing():
            return
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        try:
            self.conn.send_close(code, reason)
        except InvalidState:
            raise ClientDisconnected() from None
        transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        if self.read_paused:  # read on, to see the client's answer
            self.read_paused = False
            transport.resume_reading()
        self.close_timer = self.loop.call_later(close_timeout(), self._close_timed_out)

    def _close_timed_out(self) -> None:
        """The client did not answer the close in time: abort if bytes are still unsent (the TCP
        connection is reset at once, where ``close()`` would wait for them for ever), else close."""
        self.close_timer = None
        transport = self.transport
        if transport.get_write_buffer_size():
            _reset(transport)
        else:
            transport.close()

    def keepalive_timeout(self) -> None:
        transport = self.transport
        if transport.get_write_buffer_size() and not transport.is_closing():
            # the ping waited behind bytes the peer does not take, and so would a close frame
            self.pong_timer = None
            _reset(transport)
            return
        super().keepalive_timeout()

    def hand_to_reader(self, message: dict[str, object]) -> None:
        """Queue a message of the endpoint's own for its reader's ``receive()``, behind the frames
        already queued (a frame taken directly that must wait for an asynchronous verdict)."""
        self.queue.put_nowait(message)  # type: ignore[arg-type]

    def write_text(self, text: str) -> bool | None:
        """Write a text frame now if the socket takes it: True when written, False when the caller
        must wait (the transport's buffer is full, or a close is under way), None when the
        connection is gone.

        The frame is built here when nothing can change its bytes (no extension negotiated, no
        fragmented message under way, the connection open): a server frame is a two- to ten-byte
        header and the payload, unmasked (RFC 6455 §5.2)."""
        if self.disconnected:
            return None
        if self.close_sent or not self.writable.is_set():
            return False
        conn = self.conn
        data = text.encode()
        if conn.state is State.OPEN and not conn.extensions and not conn.expect_continuation_frame:
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
