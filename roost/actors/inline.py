"""Inline turns: running a parked actor's next turn at once, from the code that has its input.

An actor's mailbox task spends most of its life parked, waiting for input. :func:`step_as` lets the
code that *has* the input (``ActorHost.run_now``, called by the WebSocket endpoint for a call or a
message) run the turn on the parked task's behalf: in that task's context, with
:func:`asyncio.current_task` returning that task, so that timeouts and cancellations aimed at "the
current task" reach the right one. That saves the task switch to the mailbox task on every call.

Most turns finish without ever suspending (they await no real I/O). When one does suspend,
:class:`Resume` hands the half-run coroutine to the parked task, which continues it exactly where it
stopped, as if it had run it from the start.

**A measured exception to "public APIs only".** Making another task current needs asyncio's
undocumented ``asyncio.tasks._enter_task``/``_leave_task`` (the bookkeeping eager tasks use in 3.12).
Together with the direct frame path (``roost.transport.uvicorn_ws``) it is worth more than the 10 % of
durable RPC throughput such a path must earn (``bench/RESULTS.md``, "Fast paths"), so it stays, under
three conditions: it is used only on the Python versions it is tested on (:data:`TESTED_PYTHONS`), only
if both names are there, and never with ``ROOST_FAST_PATHS=0`` in the environment. Otherwise
:data:`AVAILABLE` is False and every turn runs in its mailbox task (the public path, which the whole
suite also runs on: ``make test-public``). :data:`WHY_NOT` says why it is off.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Generator, Mapping
from typing import Any, NamedTuple

__all__ = [
    "AVAILABLE",
    "INLINE_TURNS",
    "TESTED_PYTHONS",
    "WHY_NOT",
    "FastPath",
    "Resume",
    "Suspended",
    "detect",
    "fast_paths_off",
    "step_as",
]

#: The Python versions inline turns were tested on (``make test``, ``make python-3.12``/``3.13``).
TESTED_PYTHONS = ((3, 11), (3, 12), (3, 13))


_OFF = ("0", "false", "off", "no")
_ON = ("", "1", "true", "on", "yes")
_said: set[str] = set()


def fast_paths_off(environ: Mapping[str, str] | None = None) -> str | None:
    """``ROOST_FAST_PATHS`` as the switch of both fast paths: the reason they are off
    (``"ROOST_FAST_PATHS=0"``) when it is ``0``, ``false``, ``off`` or ``no`` (any case), else None.
    Another value leaves them on and says so once in the log."""
    environ = environ if environ is not None else os.environ
    raw = environ.get("ROOST_FAST_PATHS", "")
    value = raw.strip().lower()
    if value in _OFF:
        return f"ROOST_FAST_PATHS={raw}"
    if value not in _ON and raw not in _said:
        _said.add(raw)
        logging.getLogger("roost").warning(
            "ROOST_FAST_PATHS=%r is not 0/false/off/no or 1/true/on/yes: the fast paths stay on", raw
        )
    return None


def detect(
    version: tuple[int, int] | None = None,
    environ: Mapping[str, str] | None = None,
    tasks: object = asyncio.tasks,
) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None, str]:
    """``(enter, leave, why_not)``: asyncio's two functions if inline turns may run on this Python
    (``version``, default the running one) with this environment (default ``os.environ``), else
    ``None, None`` and the reason."""
    version = version if version is not None else (sys.version_info[0], sys.version_info[1])
    environ = environ if environ is not None else os.environ
    off = fast_paths_off(environ)
    if off is not None:
        return None, None, off
    if version not in TESTED_PYTHONS:
        return None, None, f"Python {version[0]}.{version[1]} is not a tested version"
    enter = getattr(tasks, "_enter_task", None)
    leave = getattr(tasks, "_leave_task", None)
    if not callable(enter) or not callable(leave):
        return None, None, "asyncio.tasks has no _enter_task/_leave_task"
    return enter, leave, ""


class FastPath(NamedTuple):
    """Whether a fast path is on in this process, and if not, why."""

    on: bool
    why_not: str


_enter_task, _leave_task, WHY_NOT = detect()
#: Whether :func:`step_as` can run here at all (callers fall back to waking the task).
AVAILABLE = _enter_task is not None
#: The same, as reported (``GET /healthz``, ``roost serve``'s start-up line).
INLINE_TURNS = FastPath(AVAILABLE, WHY_NOT)


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
    if _enter_task is None or _leave_task is None:
        raise RuntimeError(f"inline turns are off here ({WHY_NOT}); check AVAILABLE first")
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
