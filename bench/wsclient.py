"""A lean WebSocket client: an asyncio protocol with hand-rolled RFC 6455 framing.

Its cost per message is a fraction of any real server's, so on two cores the server under test (not
the client) is the bottleneck. Client frames are masked once, up front, with a fixed key (servers do not
check that keys vary); no extension (permessage-deflate) is offered; the handshake answer is only checked
for status 101.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import cast

__all__ = ["WsConn", "connect", "connect_many", "masked_frame"]

_MASK = b"\x37\xfa\x21\x3d"
_KEY = "dGhlIHNhbXBsZSBub25jZQ=="
_CLOSE_1000 = bytes([0x88, 0x82]) + _MASK + bytes([0x03 ^ _MASK[0], 0xE8 ^ _MASK[1]])


def masked_frame(payload: bytes, opcode: int = 1) -> bytes:
    """One final client frame (text by default), masked."""
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 65536:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    masked = bytes(b ^ _MASK[i & 3] for i, b in enumerate(payload))
    return head + _MASK + masked


class WsConn(asyncio.Protocol):
    """One client connection. Messages go to the pending ``recv`` waiter, else to ``inbox`` if
    ``keep`` is set; ``received`` counts every data message."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.is_open = False
        self.handshake: asyncio.Future[None] = loop.create_future()
        self.waiter: asyncio.Future[bytes] | None = None
        self.inbox: deque[bytes] = deque()
        self.keep = True
        self.received = 0
        self.closed_by_server: int | None = None
        self.lost = False

    # -- asyncio.Protocol -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        err = ConnectionError(f"connection lost ({exc})")
        if not self.handshake.done():
            self.handshake.set_exception(err)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(err)
        self.waiter = None

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.is_open:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(buf[:12])
            del buf[: end + 4]
            if status != b"HTTP/1.1 101":
                if not self.handshake.done():
                    self.handshake.set_exception(ConnectionError(f"handshake refused: {status!r}"))
                return
            self.is_open = True
            if not self.handshake.done():
                self.handshake.set_result(None)
        n = len(buf)
        pos = 0
        while n - pos >= 2:
            b1 = buf[pos + 1] & 0x7F
            if b1 < 126:
                head, length = 2, b1
            elif b1 == 126:
                if n - pos < 4:
                    break
                head, length = 4, int.from_bytes(buf[pos + 2 : pos + 4], "big")
            else:
                if n - pos < 10:
                    break
                head, length = 10, int.from_bytes(buf[pos + 2 : pos + 10], "big")
            end = pos + head + length
            if end > n:
                break
            opcode = buf[pos] & 0x0F
            if opcode in (1, 2):  # servers send small unfragmented frames
                self._on_message(buf, pos + head, end)
            elif opcode == 8:
                code = int.from_bytes(buf[pos + head : pos + head + 2], "big") if length >= 2 else 1005
                self.closed_by_server = code
            elif opcode == 9 and self.transport is not None:
                self.transport.write(masked_frame(bytes(buf[pos + head : end]), 0xA))
            pos = end
        if pos:
            del buf[:pos]

    # -- messages ---------------------------------------------------------------------------------------
    def _on_message(self, buf: bytearray, start: int, end: int) -> None:
        self.received += 1
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(bytes(buf[start:end]))
        elif self.keep:
            self.inbox.append(bytes(buf[start:end]))

    def recv(self) -> asyncio.Future[bytes]:
        """The next data message (one waiter at a time)."""
        fut: asyncio.Future[bytes] = self.loop.create_future()
        if self.inbox:
            fut.set_result(self.inbox.popleft())
        elif self.lost:
            fut.set_exception(ConnectionError("connection lost"))
        else:
            self.waiter = fut
        return fut

    def request(self, frame: bytes) -> asyncio.Future[bytes]:
        """Send a pre-masked frame; the future is the next data message."""
        fut = self.recv()
        assert self.transport is not None
        self.transport.write(frame)
        return fut

    def send(self, frame: bytes) -> None:
        assert self.transport is not None
        self.transport.write(frame)

    def close(self) -> None:
        """Send a 1000 close frame and close the socket (no wait for the server's close)."""
        t = self.transport
        if t is not None and not t.is_closing():
            t.write(_CLOSE_1000)
            t.close()


async def connect(port: int, path: str, *, welcome: bool, timeout: float = 30.0) -> WsConn:
    """Open one connection to ``ws://127.0.0.1:port{path}``; with ``welcome``, consume the first frame."""
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(lambda: WsConn(loop), "127.0.0.1", port)
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()
    proto.send(request)
    async with asyncio.timeout(timeout):
        await proto.handshake
        if welcome:
            first = await proto.recv()
            if b'"welcome"' not in first:
                raise ConnectionError(f"expected a welcome frame, got {first[:200]!r}")
    return proto


async def connect_many(port: int, paths: list[str], *, welcome: bool, batch: int = 100) -> list[WsConn]:
    """Open one connection per path, ``batch`` handshakes in flight at a time."""
    conns: list[WsConn] = []
    for i in range(0, len(paths), batch):
        chunk = paths[i : i + batch]
        conns += await asyncio.gather(*(connect(port, p, welcome=welcome) for p in chunk))
    return conns
