"""Pending calls: the client side of ``rpc`` / ``rpc_chunk`` / ``rpc_result`` (and ``ping``).

A ``PendingCall`` is registered under its id in the registry of the connection it was sent on,
before the request is sent, so no reply can arrive unmatched. The connection's reader feeds it
(``chunk``, ``resolve``, ``fail``) synchronously; the calling task consumes the items in order.
When the connection ends, every call still registered is failed with ``ConnectionLost`` (or the
error that stopped the client). A call that gives up (timeout, cancellation) unregisters itself;
a reply arriving later is then ignored.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from .errors import CallTimeout, ClientError
from .frames import JSON


@dataclass(frozen=True, slots=True)
class Chunk:
    """One ``rpc_chunk`` of a streaming call."""

    value: JSON


@dataclass(frozen=True, slots=True)
class Result:
    """The successful ``rpc_result`` (or ``pong``) that ends a call."""

    value: JSON


@dataclass(frozen=True, slots=True)
class Failure:
    """The end of a call without a result: ``RpcError``, ``ConnectionLost``, ``TerminalClose``..."""

    error: ClientError


Item = Chunk | Result | Failure
#: call id -> pending call, one registry per connection.
Registry = dict[str, "PendingCall"]


def fresh_copy(error: ClientError) -> ClientError:
    """A fresh copy of a shared error, so each waiting task raises its own traceback."""
    fresh = copy.copy(error)
    fresh.__cause__ = error.__cause__
    return fresh


class PendingCall:
    """A request waiting for its reply. Feeding methods never block; ``next`` is the consumer."""

    __slots__ = ("_queue", "_registry", "call_id", "finished", "want_chunks")

    def __init__(self, call_id: str, registry: Registry, *, want_chunks: bool) -> None:
        self.call_id = call_id
        self.want_chunks = want_chunks
        self.finished = False
        self._registry = registry
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        registry[call_id] = self

    def chunk(self, value: JSON) -> None:
        """An ``rpc_chunk`` arrived (dropped unless this is a stream)."""
        if self.want_chunks and not self.finished:
            self._queue.put_nowait(Chunk(value))

    def resolve(self, value: JSON) -> None:
        """The call succeeded; unregisters it."""
        self._finish(Result(value))

    def fail(self, error: ClientError) -> None:
        """The call failed or its connection ended; unregisters it."""
        self._finish(Failure(error))

    def release(self) -> None:
        """Unregister without an outcome (the caller gave up); later replies are ignored."""
        self.finished = True
        if self._registry.get(self.call_id) is self:
            del self._registry[self.call_id]

    async def next(self) -> Item:
        """The next chunk, or the final result or failure."""
        return await self._queue.get()

    async def result(self) -> JSON:
        """Wait for the final result, skipping chunks; raises the failure."""
        while True:
            item = await self.next()
            if isinstance(item, Result):
                return item.value
            if isinstance(item, Failure):
                raise fresh_copy(item.error)

    def _finish(self, item: Result | Failure) -> None:
        if not self.finished:
            self._queue.put_nowait(item)
        self.release()


#: Sends a request and returns its registered pending call (given by the client).
Opener = Callable[[], Awaitable[PendingCall]]


class CallStream:
    """The chunks of one streaming call, as an async iterator.

    ``async for chunk in client.stream("method", ...)`` yields every ``rpc_chunk`` in order and
    stops when the ``rpc_result`` arrives; the final value is then in ``result`` (and ``done`` is
    true). A failed call raises ``RpcError`` / ``ConnectionLost`` / ``TerminalClose`` from the
    iteration. ``timeout`` bounds the wait for *each* item (the request being sent, every chunk,
    the result), not the whole stream: a stream may run long as long as it makes progress.
    The request is sent on the first iteration. Leaving the loop early abandons the call (the
    server still runs it); use ``async with`` or ``aclose()`` to unregister it at once.
    """

    def __init__(self, opener: Opener, *, timeout: float) -> None:
        self._opener = opener
        self._timeout = timeout
        self._pending: PendingCall | None = None
        self.done = False
        self.result: JSON = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> JSON:
        if self.done:
            raise StopAsyncIteration
        try:
            async with asyncio.timeout(self._timeout):
                if self._pending is None:
                    self._pending = await self._opener()
                item = await self._pending.next()
        except TimeoutError:
            self._close()
            raise CallTimeout(f"no stream item within {self._timeout} s") from None
        except BaseException:
            self._close()
            raise
        if isinstance(item, Chunk):
            return item.value
        self._close()
        if isinstance(item, Result):
            self.result = item.value
            raise StopAsyncIteration
        raise fresh_copy(item.error)

    def _close(self) -> None:
        self.done = True
        if self._pending is not None:
            self._pending.release()

    async def aclose(self) -> None:
        """Stop iterating and unregister the call (idempotent)."""
        self._close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close()
