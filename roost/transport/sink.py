"""The outbound side of one WebSocket: :class:`SocketSink`, a queue drained by its own writer task.

``send_text`` never blocks the actor that sends: frames wait in the sink's queue and a writer task
writes them to the socket in order, through ASGI ``send``. Under ``roost serve``'s protocol class
(the direct frame path, :mod:`roost.transport.uvicorn_ws`) a frame is written at once instead when
the writer has nothing queued and the socket takes it, so order is the same either way.

Guarantee (test in ``tests/test_input_bounds.py``):

- A client that does not read is closed with 1013 once more than ``max_queue`` frames, or more than
  ``max_bytes`` bytes of frames, wait while the socket does not take them (a burst the socket drains
  is not a reason to close); it can reconnect and resume by replay. The bytes are the queued strings'
  own size in memory (``sys.getsizeof``), so the bound holds for wide (non-Latin) text too.
- **Past the bound the close does not wait for the client** (:meth:`overflow`, tests in
  ``tests/test_slow_consumers.py``): what waits is dropped, the frame the writer is blocked on is
  cut (not half written: uvicorn's ``send`` waits for the socket before it writes anything), and the
  close goes out at once. Under ``roost serve``'s protocol class that close does not wait for the
  socket either (:mod:`roost.transport.uvicorn_ws`): it is written behind what the socket holds, the
  reader sees the disconnect and the actor loses the connection (its ``on_close`` runs, its slot is
  freed), and a client that has not answered it within the close timeout is reset. Under another
  server, the disconnect comes when that server's ``send`` of the close returns.
- A replay is paced by the sink (it is a :class:`roost.actors.Backpressure`): :meth:`when_drained`
  calls back once the queue has drained to a mark, and the actor reads the next page only then, no
  larger than the bound has left once :attr:`queued` and the frames held behind the replay are
  counted, so a long replay never holds more than the bound for one connection
  (``tests/test_replay_pages.py``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from roost.protocol.codes import CloseCode

if TYPE_CHECKING:
    from starlette.types import Send

    from roost.transport.direct import DirectPath
    from roost.transport.protocol import ConnectionProtocol

__all__ = ["SocketSink"]

log = logging.getLogger("roost.ws")


class SocketSink:
    """Outbound queue of one socket, drained by its own writer task. ``send_text`` never blocks."""

    __slots__ = (
        "_blocked",
        "_closing",
        "_cut",
        "_drained",
        "_queue",
        "_queued_bytes",
        "_send",
        "_wake",
        "closed",
        "direct",
        "max_bytes",
        "max_queue",
        "protocol",
        "task",
        "tracks",
        "welcomed",
    )

    def __init__(self, send: Send, max_queue: int, max_bytes: int = 4 << 20) -> None:
        self._send = send
        self._queue: deque[str] = deque()
        self._queued_bytes = 0  # sys.getsizeof of every queued frame
        self._wake: asyncio.Future[None] | None = None
        self._closing: tuple[int, str] | None = None
        #: (frames, bytes, callback): call back once at most that much waits (:meth:`when_drained`).
        self._drained: tuple[int, int, Callable[[], None]] | None = None
        self.closed = False
        self.welcomed = False  # the actor's first frame (always the welcome) was queued
        self._blocked = False  # the writer waits on the socket: the client is not reading
        self._cut = False  # overflow() cancelled the writer's blocked send: it sends the close next
        self.max_queue = max_queue
        self.max_bytes = max_bytes
        self.task: asyncio.Task[None] | None = None
        #: The connection's rules, told when the welcome goes out and when the server closes.
        self.protocol: ConnectionProtocol | None = None
        #: The server protocol's direct path, when it offers one: a frame is written at once when the
        #: writer has nothing queued and the socket takes it.
        self.direct: DirectPath | None = None
        #: Tell :meth:`written` of every frame the socket took (a subclass that needs to know).
        self.tracks = False

    @property
    def queued_bytes(self) -> int:
        """The size in memory of the frames waiting in the queue (what ``max_bytes`` bounds)."""
        return self._queued_bytes

    @property
    def queued(self) -> tuple[int, int]:
        """``(frames, bytes)`` waiting in the queue now (a replay counts them in its budget)."""
        return len(self._queue), self._queued_bytes

    @property
    def limits(self) -> tuple[int, int]:
        """``(max_queue, max_bytes)``: what may wait for a client that does not read."""
        return self.max_queue, self.max_bytes

    @property
    def awaiting_drain(self) -> bool:
        """A :meth:`when_drained` callback waits (a replay is paused until this client reads)."""
        return self._drained is not None

    def when_drained(self, frames: int, nbytes: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, as soon as at most ``frames`` frames and ``nbytes`` bytes wait: at
        once if so now, else from the writer when it has taken enough; never once closing."""
        if self._closing is not None or self.closed:
            return
        if len(self._queue) <= frames and self._queued_bytes <= nbytes:
            self._drained = None
            callback()
        else:
            self._drained = (frames, nbytes, callback)

    @property
    def closing(self) -> bool:
        """A close was asked for (by us): the connection is ending."""
        return self._closing is not None or self.closed

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="roost:ws-writer")

    def send_text(self, text: str) -> None:
        """Queue a frame. A client is a slow consumer, and is closed with 1013, only when more than
        ``max_queue`` frames or ``max_bytes`` bytes wait *while the socket does not take them*: a
        burst that the socket drains is not a reason to close (a replay never is one: it is read as
        the queue drains, :meth:`when_drained`)."""
        if self._closing is not None or self.closed:
            return
        if not self.welcomed:
            self.welcomed = True
            if self.protocol is not None:
                self.protocol.welcomed()
        direct = self.direct
        if direct is not None and not self._queue:
            wake = self._wake
            if wake is not None and not wake.done():  # the writer is parked: nothing is in flight
                written = direct.write_text(text)
                if written:
                    if self.tracks:
                        self.written(text)
                    return
                if written is None:  # the client is gone; the reader sees the disconnect
                    self._gone()
                    self._poke()
                    return
        self._queue.append(text)
        self._queued_bytes += sys.getsizeof(text)
        if self._blocked and (len(self._queue) > self.max_queue or self._queued_bytes > self.max_bytes):
            self.overflow("slow consumer: send queue full")
            return
        self._poke()

    def written(self, text: str) -> None:
        """The socket took ``text`` (called only when :attr:`tracks` is set)."""

    def overflow(self, reason: str) -> None:
        """The client is past the bound: close it with 1013 now, not behind what waits for it. The
        queued frames are dropped, the send the writer is blocked on is cut, and the writer sends the
        close next; nothing more is queued. Idempotent (a close already asked for wins)."""
        if self._closing is not None or self.closed:
            return
        self._queue.clear()
        self._queued_bytes = 0
        self._drained = None
        self.close(CloseCode.TRY_AGAIN_LATER, reason)
        task = self.task
        if self._blocked and task is not None:
            self._cut = True
            task.cancel()

    def close(self, code: int, reason: str) -> None:
        """Close after the frames already queued; idempotent (the first close wins)."""
        if self._closing is None and not self.closed:
            self._closing = (code, reason[:120])
            if self.protocol is not None:
                self.protocol.closing()
            self._poke()

    def _gone(self) -> None:
        self.closed = True
        if self.protocol is not None:
            self.protocol.closing()

    def _poke(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        send = self._send
        queue = self._queue
        try:
            while True:
                try:
                    while queue:
                        self._blocked = True  # stays True only while send() is suspended on the socket
                        text = queue.popleft()
                        self._queued_bytes -= sys.getsizeof(text)
                        drained = self._drained
                        if (
                            drained is not None
                            and len(queue) <= drained[0]
                            and self._queued_bytes <= drained[1]
                        ):
                            self._drained = None
                            drained[2]()  # the next replay page is read (in a turn, later)
                        await send({"type": "websocket.send", "text": text})
                        self._blocked = False
                        if self.tracks:
                            self.written(text)
                except asyncio.CancelledError:
                    if not self._cut or self.closed:  # finish(), or the server's own cancel
                        raise
                    # overflow() cut the blocked send: the frame is dropped and the close goes out now
                    self._cut = self._blocked = False
                    task = asyncio.current_task()
                    if task is not None:
                        task.uncancel()
                if self._closing is not None:
                    code, reason = self._closing
                    await send({"type": "websocket.close", "code": code, "reason": reason})
                    return
                if self.closed:  # finish() was called, or a direct write found the client gone
                    return
                self._wake = loop.create_future()
                await self._wake
                self._wake = None
        except (OSError, RuntimeError):
            pass  # the client is gone; the reader sees the disconnect
        except Exception:
            log.exception("websocket writer failed")
        finally:
            self._gone()
            queue.clear()
            self._queued_bytes = 0
            self._drained = None

    async def finish(self) -> None:
        """Stop the writer (used when the socket is already gone).

        **An ended connection is freed when it ends**, not by a collection later: once the writer has
        ended, the sink drops its task (whose cancellation holds the writer's frame, which holds the
        sink), its wake-up, the connection's rules (which hold the sink as it holds them) and the
        direct path; a closed sink sends nothing, so it needs none of them."""
        self._gone()
        self._poke()
        task = self.task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.task = self._wake = None
        self.protocol = self.direct = None
