"""A small WebSocket test client over a real socket, speaking Roost's JSON frames.

::

    async with connect(f"ws://{addr}/agents/counter/c1") as ws:
        welcome = await ws.recv()
        assert await ws.call("increment", 2) == 2               # waits for its own rpc_result
        await ws.wait_for(lambda f: f["type"] == "state" and f["seq"] == 1)
        frames, code = await ws.read_until_closed()

For a client that must break the protocol (bad JSON, frames before the welcome) send raw text with
:meth:`WsClient.send` or the frame builders :func:`rpc_frame` and :func:`ping_frame`; for one that must
break WebSocket itself, use the ``websockets`` connection under :attr:`WsClient.ws`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection as SyncClientConnection

from roost.actors import RpcError

__all__ = ["WsClient", "close_code_sync", "connect", "encode", "ping_frame", "rpc_frame"]

Frame = dict[str, Any]


def encode(frame: Frame) -> str:
    """A frame as the text of one WebSocket message."""
    return orjson.dumps(frame).decode()


def rpc_frame(call_id: str, method: str, *args: Any, **kwargs: Any) -> str:
    """The text of an ``rpc`` frame (positional ``args``; ``kwargs`` only when given)."""
    frame: Frame = {"type": "rpc", "id": call_id, "method": method, "args": list(args)}
    if kwargs:
        frame["kwargs"] = kwargs
    return encode(frame)


def ping_frame(ping_id: Any) -> str:
    """The text of a ``ping`` frame."""
    return encode({"type": "ping", "id": ping_id})


class WsClient:
    """One WebSocket connection to a Roost server; every frame it receives is decoded and kept.

    Guarantees:

    - ``frames`` holds every text frame received, decoded, in the order the server sent it; no method
      discards one.
    - :meth:`recv` returns frames in that order, each once; a frame :meth:`wait_for` (or :meth:`rpc`)
      returned, and the frames before it, are not returned by :meth:`recv` again.
    - :meth:`wait_for` (and :meth:`results`) sees frames received before it was called as well as later
      ones.
    - Every wait is bounded (``timeout`` seconds, ``TimeoutError``); a close from the server ends a wait
      with ``websockets.ConnectionClosed``, whose ``rcvd`` is the close frame the server sent.
    """

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[Frame] = []
        self._next = 0  # index in ``frames`` of the next frame recv() returns
        self._ids = itertools.count(1)

    # -- sending ---------------------------------------------------------------------------------------
    async def send(self, frame: Frame | str | bytes) -> None:
        """Send a frame: a dict is encoded; a string goes as it is, valid or not, in a text message;
        bytes go as they are in a binary message."""
        await self.ws.send(frame if isinstance(frame, str | bytes) else encode(frame))

    async def send_rpc(self, method: str, *args: Any, id: str | None = None, **kwargs: Any) -> str:
        """Send an ``rpc`` frame without waiting; returns its id (``c1``, ``c2``, ... unless given)."""
        call_id = id if id is not None else f"c{next(self._ids)}"
        await self.ws.send(rpc_frame(call_id, method, *args, **kwargs))
        return call_id

    async def rpc(
        self, method: str, *args: Any, id: str | None = None, timeout: float = 10.0, **kwargs: Any
    ) -> Frame:
        """Call ``method`` and return its ``rpc_result`` frame (``ok`` true or false)."""
        start = len(self.frames)  # the reply comes after the call: no need to search what came before
        call_id = await self.send_rpc(method, *args, id=id, **kwargs)
        return await self._wait_from(
            start, lambda f: f.get("type") == "rpc_result" and f.get("id") == call_id, timeout
        )

    async def results(self, ids: Iterable[Any], timeout: float = 10.0) -> list[Frame]:
        """The ``rpc_result`` frames answering the calls ``ids`` (sent with :meth:`send_rpc`, say), in
        the order of ``ids`` whatever order they came in; one ``timeout`` for all of them."""
        wanted = list(ids)
        pending = set(wanted)
        found: dict[Any, Frame] = {}

        def answers(frame: Frame) -> bool:
            call_id = frame.get("id")
            if frame.get("type") == "rpc_result" and call_id in pending:
                found[call_id] = frame
                pending.discard(call_id)
            return not pending

        if pending:
            await self.wait_for(answers, timeout)
        return [found[call_id] for call_id in wanted]

    async def call(self, method: str, *args: Any, timeout: float = 10.0, **kwargs: Any) -> Any:
        """Call ``method`` and return its result; an ``ok: false`` answer raises ``RpcError``."""
        frame = await self.rpc(method, *args, timeout=timeout, **kwargs)
        if not frame["ok"]:
            raise RpcError(frame["error"]["code"], frame["error"]["message"])
        return frame["result"]

    # -- receiving -------------------------------------------------------------------------------------
    async def _receive(self) -> Frame:
        """Read one more text frame off the socket into ``frames``."""
        frame: Frame = orjson.loads(await self.ws.recv())
        self.frames.append(frame)
        return frame

    async def recv(self, timeout: float = 10.0) -> Frame:
        """The next frame not yet returned."""
        if self._next == len(self.frames):
            async with asyncio.timeout(timeout):
                await self._receive()
        frame = self.frames[self._next]
        self._next += 1
        return frame

    async def recv_n(self, n: int, timeout: float = 10.0) -> list[Frame]:
        """The next ``n`` frames (one ``timeout`` for all of them)."""
        async with asyncio.timeout(timeout):
            return [await self.recv(timeout) for _ in range(n)]

    async def wait_for(self, predicate: Callable[[Frame], bool], timeout: float = 10.0) -> Frame:
        """The first frame, received so far or later, for which ``predicate`` is true."""
        return await self._wait_from(0, predicate, timeout)

    async def _wait_from(self, start: int, predicate: Callable[[Frame], bool], timeout: float) -> Frame:
        for i in range(start, len(self.frames)):
            if predicate(self.frames[i]):
                self._next = max(self._next, i + 1)
                return self.frames[i]
        async with asyncio.timeout(timeout):
            while True:
                frame = await self._receive()
                if predicate(frame):
                    self._next = max(self._next, len(self.frames))
                    return frame

    async def read_until_closed(self, timeout: float = 10.0) -> tuple[list[Frame], int | None]:
        """Every frame not yet returned until the server closes, and the close code it sent (None: the
        connection ended without a close frame)."""
        frames: list[Frame] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    frames.append(await self.recv(timeout))
        except ConnectionClosed as exc:
            return frames, exc.rcvd.code if exc.rcvd is not None else None

    async def close_code(self, timeout: float = 10.0) -> int | None:
        """The code of the server's close frame, reading (and keeping) whatever comes before it."""
        return (await self.read_until_closed(timeout))[1]

    def of_type(self, kind: str) -> list[Frame]:
        """The frames received so far whose ``type`` is ``kind``."""
        return [f for f in self.frames if f.get("type") == kind]

    async def aclose(self) -> None:
        await self.ws.close()


@contextlib.asynccontextmanager
async def connect(url: str, **kwargs: Any) -> AsyncIterator[WsClient]:
    """Open a :class:`WsClient` to ``url`` (``kwargs`` go to ``websockets.connect``); closed on exit."""
    async with ws_connect(url, **kwargs) as ws:
        yield WsClient(ws)


def close_code_sync(ws: SyncClientConnection, timeout: float = 10.0) -> int | None:
    """For a blocking ``websockets.sync`` connection: read until the server closes and return the code
    of its close frame (None: no close frame). Each read waits at most ``timeout`` (``TimeoutError``)."""
    try:
        while True:
            ws.recv(timeout=timeout)
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd is not None else None
