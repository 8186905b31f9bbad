"""Inline turns were removed; what is left are the names ``roost.actors.host`` still imports.

An inline turn ran an actor's turn inside a socket's reader on behalf of the parked mailbox task, as
that task (``asyncio.current_task()`` returning it), which needs asyncio's private
``asyncio.tasks._enter_task``/``_leave_task``. Measured against the public path it was worth under 10 %
of durable RPC throughput (``bench/RESULTS.md``, "Paths on other libraries' private internals") and was
removed: every turn runs in its actor's mailbox task.

:data:`AVAILABLE` is False, so ``ActorHost.run_now`` always queues the input (``submit``) and never
calls :func:`step_as`; :class:`Suspended` and :class:`Resume` (public coroutine API only) are never
created. The module goes once the host drops its inline branch.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["AVAILABLE", "Resume", "Suspended", "step_as"]

#: Whether turns may run inline: never (see the module docstring).
AVAILABLE = False


class Suspended:
    """What :func:`step_as` returns when the coroutine suspended: give it to :class:`Resume`."""

    __slots__ = ("coro", "yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self.coro = coro
        self.yielded = yielded


def step_as(
    task: asyncio.Task[Any], context: contextvars.Context, coro: Coroutine[Any, Any, Any]
) -> Suspended | None:
    """Removed with inline turns: raises ``RuntimeError`` (callers check :data:`AVAILABLE` first)."""
    coro.close()
    raise RuntimeError("inline turns were removed (roost.actors.inline.AVAILABLE is False)")


class Resume:
    """``await Resume(suspended)`` inside the parked task continues the coroutine where it stopped.

    The first thing it yields to the task is what the coroutine yielded (a future it waits on, or
    ``None`` for a bare yield), so the task waits on exactly that. A cancellation of the task reaches the
    coroutine at its await, as it would have if the task had run it from the start; ``cancel`` throws
    one in before anything else (the task was cancelled before it got to resume it).
    """

    __slots__ = ("_cancel", "_s")

    def __init__(self, suspended: Suspended, cancel: BaseException | None = None) -> None:
        self._s = suspended
        self._cancel = cancel

    def __await__(self) -> Generator[Any, None, Any]:
        coro = self._s.coro
        try:
            if self._cancel is not None:
                value = coro.throw(self._cancel)
            else:
                value = self._s.yielded
            while True:
                try:
                    yield value
                except BaseException as exc:
                    value = coro.throw(exc)
                else:
                    value = coro.send(None)
        except StopIteration as stop:
            return stop.value
