"""Running a parked task's next step at once, from elsewhere, without a task switch.

An actor's mailbox task spends most of its life parked, waiting for input. :func:`step_as` lets the
code that *has* the input (``ActorHost.run_now``, called from a socket's ``data_received``) run the turn
on the parked task's behalf: in that task's context, with :func:`asyncio.current_task` returning that
task, so that timeouts and cancellations aimed at "the current task" reach the right one.

Most turns finish without ever suspending (they await no real I/O). When one does suspend,
:class:`Resume` hands the half-run coroutine to the parked task, which continues it exactly where it
stopped, as if it had run it from the start.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["Resume", "Suspended", "step_as"]

try:  # private, but present from 3.7 to 3.13; without them, nothing is run inline
    from asyncio.tasks import _enter_task, _leave_task

    #: Whether :func:`step_as` can run here at all (callers fall back to waking the task).
    AVAILABLE = os.environ.get("ROOST_INLINE_TURNS", "1") != "0"
except ImportError:  # pragma: no cover - a future Python without them
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
    """Run ``coro`` until it returns or first suspends, as ``task`` would run it: in ``context``,
    the context ``task`` was created with (``create_task(..., context=context)``).

    ``task`` must be parked (awaiting a future no one else will resolve meanwhile). Returns ``None``
    when the coroutine finished (its result is discarded; it raises what it raised), or a
    :class:`Suspended` that the caller must hand to ``task`` (see :class:`Resume`) at once.
    """
    loop = task.get_loop()
    caller = asyncio.current_task(loop)
    if caller is not None:
        _leave_task(loop, caller)
    _enter_task(loop, task)
    try:
        yielded = context.run(coro.send, None)
    except StopIteration:
        return None
    finally:
        _leave_task(loop, task)
        if caller is not None:
            _enter_task(loop, caller)
    return Suspended(coro, yielded)


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
