"""``Updates``: one subscriber's bounded queue of processed ``state``/``event``/``message`` frames."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Self

from .frames import Frame

#: Default bound of a subscriber queue.
DEFAULT_QUEUE_SIZE = 10_000


class Updates:
    """An async iterator over the frames the client processed after this subscriber was created.

    - Frames are the deduplicated ``state``/``event`` frames and every ``message`` frame, in the
      order the client processed them (so ``seq`` strictly increases across ``state``/``event``).
    - The queue holds at most ``maxsize`` frames. When a new frame arrives on a full queue the
      *oldest* is dropped and ``dropped`` is incremented: a slow consumer loses history but never
      blocks the connection or the other subscribers.
    - When the client stops (closed, or a terminal close), the iterator yields the frames still
      queued and then ends; ``Client.closed_reason`` says why. ``close()`` unsubscribes at once.
    - Frames are shared between subscribers: treat them as read-only.

    One consumer per ``Updates``; create one per consumer with ``Client.updates()``.
    """

    def __init__(
        self,
        maxsize: int = DEFAULT_QUEUE_SIZE,
        on_close: Callable[[Updates], None] | None = None,
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self.dropped = 0
        self._items: deque[Frame] = deque()
        self._ended = False
        self._wakeup = asyncio.Event()
        self._on_close = on_close

    def __len__(self) -> int:
        return len(self._items)

    @property
    def ended(self) -> bool:
        """No frame will be added any more (the remaining ones can still be read)."""
        return self._ended

    def put(self, frame: Frame) -> None:
        """Queue a frame (called by the client), dropping the oldest one if full."""
        if self._ended:
            return
        if len(self._items) >= self.maxsize:
            self._items.popleft()
            self.dropped += 1
        self._items.append(frame)
        self._wakeup.set()

    def end(self) -> None:
        """No more frames will come: iteration stops once the queue is drained."""
        self._ended = True
        self._wakeup.set()

    def get_nowait(self) -> Frame | None:
        """The next queued frame, or ``None`` if the queue is empty."""
        return self._items.popleft() if self._items else None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Frame:
        """The next frame, waiting for it (``await anext(updates)`` works too)."""
        while not self._items:
            if self._ended:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._items.popleft()

    def close(self) -> None:
        """Unsubscribe and discard queued frames (idempotent)."""
        self.end()
        self._items.clear()
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close(self)

    async def aclose(self) -> None:
        """Same as ``close`` (for ``contextlib.aclosing`` and symmetry with async generators)."""
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
