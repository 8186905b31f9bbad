"""A TCP proxy on 127.0.0.1 for tests of lost replies: it forwards bytes both ways between a client
and a real server, and on demand drops what the server sends (``mute``), cuts every open pair
(``sever``) or refuses new connections (``down``). Each accepted connection opens its own upstream
connection, so a server restarted on the same port is reached by the next one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class TcpProxy:
    """``await TcpProxy("127.0.0.1:8123").start()``; clients connect to :attr:`addr`."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.muted = False  # server → client bytes are dropped
        self.down = False  # new connections are closed at once
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.addr = ""

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.addr = f"127.0.0.1:{port}"
        return self

    def mute(self, muted: bool = True) -> None:
        """Drop (or, with ``False``, forward again) every byte the server sends."""
        self.muted = muted

    def sever(self) -> None:
        """Abort every open pair of connections, as a network failure would."""
        for client, upstream in list(self._pairs):
            client.transport.abort()
            upstream.transport.abort()
        self._pairs.clear()

    async def close(self) -> None:
        self.sever()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:  # the server is down: as if the connection were refused
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer, lambda: False)),
            asyncio.create_task(self._pump(up_reader, writer, lambda: self.muted)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._tasks.discard(task)
            self._pairs.discard(pair)
            writer.transport.abort()
            up_writer.transport.abort()

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dropping: Callable[[], bool]
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                if not dropping():
                    writer.write(data)
                    await writer.drain()
