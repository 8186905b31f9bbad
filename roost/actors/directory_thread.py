"""The directory work that may wait for another process's lock: on one thread of its own.

The registry's directory (``Directory(..., waits=False)``) is used on the event loop and never waits
for a lock another process on the data directory holds (``docs/design.md``, *The directory and its
lock*). What must wait — writing a new actor's row before its file exists, removing a deleted actor's
row, the last flush at shutdown — runs here instead: one thread, and one connection of its own that
waits up to five seconds, as SQLite's busy timeout does. None of it is per message: activation of a
new actor, a delete, a shutdown.

Guarantee: **a call here never blocks the event loop**; its caller awaits the thread's answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from roost.storage import Directory

__all__ = ["DirectoryThread"]

T = TypeVar("T")


class DirectoryThread:
    """One worker thread with a waiting :class:`~roost.storage.Directory` of its own (opened there on
    first use)."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="roost-directory")
        self._directory: Directory | None = None

    def _own(self) -> Directory:  # in the thread only
        if self._directory is None:
            self._directory = Directory(self._data_dir)
        return self._directory

    async def run(self, fn: Callable[[Directory], T]) -> T:
        """``fn(directory)`` in the thread, on its waiting directory; its result or its exception."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: fn(self._own()))

    async def close(self, loop_directory: Directory | None) -> None:
        """Close ``loop_directory`` (its last flush waits for a lock here, not on the loop) and this
        thread's own directory, then end the thread."""

        def close_both() -> None:
            try:
                if loop_directory is not None:
                    loop_directory.close()
            finally:
                if self._directory is not None:
                    self._directory.close()
                    self._directory = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, close_both)
        finally:
            self._pool.shutdown(wait=False)
