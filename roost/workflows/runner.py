"""The process's runner of outside steps: one task per attempt run, outside every turn.

A task's life: (1) a turn of its actor checks that the attempt it was spawned for is recorded
(the turn that spawned it may have rolled back: then it stops, having run nothing); (2) it runs the
step's function under the step's timeout, on the runtime's clock; (3) a turn records the outcome,
fenced by ``(generation, position, attempt, run)`` (a cancelled, restarted or taken-over attempt
records nothing). Nothing here is durable: after a SIGKILL the lease wake-up of the attempt finds no
live task and runs the attempt again under the same key (:mod:`roost.workflows.engine`).

Guarantees (tests in ``tests/test_workflows_external.py``):

- **An attempt whose start rolled back never runs.**
- **A live run is never taken over**: :meth:`Runner.alive` is what a lease wake-up asks before it
  declares an attempt lost, and while a run of an actor lives the registry keeps that actor live
  here (:meth:`Runner.holds_actor`), so no other process can open it and find the run missing.
- **Stopped with the registry**: every task is cancelled before the actors drain.
- **A progress report is checked before its turn**: :func:`reporter` refuses bad numbers, text or a
  checkpoint that is not JSON or too large in the attempt's task, so a bad report fails the
  attempt's own call and never a turn of its actor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from roost.actors import Actor
from roost.actors.extension import Process
from roost.workflows.model import (
    KEEP,
    AttemptSuperseded,
    Fenced,
    NonRetryable,
    Reporter,
    error_text,
    progress_record,
)
from roost.workflows.store import encode

__all__ = ["Outcome", "RunKey", "Runner", "Write", "fenced", "reporter", "runner"]

log = logging.getLogger("roost.workflows")

#: ``(kind, actor name, workflow id, generation, position, attempt, run, branch)`` (branch ``""``: a
#: plain outside step; else a branch of a ``parallel`` join)
RunKey = tuple[str, str, str, int, int, int, int, str]
_SERVICE = "roost.workflows.runner"


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    result: Any = None
    error: str | None = None
    retryable: bool = True


class Runner:
    """Per process (``actor.extension.process.service``): the tasks of outside attempts."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.tasks: dict[RunKey, asyncio.Task[None]] = {}
        #: Live tasks per actor ``(kind, name)``: while it has one, the actor is kept live
        #: (:meth:`holds_actor`).
        self._per_actor: dict[tuple[str, str], int] = {}

    def alive(self, key: RunKey) -> bool:
        task = self.tasks.get(key)
        return task is not None and not task.done()

    @property
    def leases_held(self) -> int:
        """Outside attempts running in this process, each holding its step's lease (the metrics'
        ``roost_leases_held`` counts them: :class:`roost.actors.extension.Service`)."""
        return sum(1 for task in self.tasks.values() if not task.done())

    def spawn(
        self,
        key: RunKey,
        fn: Callable[[], Awaitable[Any]],
        timeout: float | None,
        claimed: Callable[[Actor], Awaitable[bool]],
        finish: Callable[[Outcome], Callable[[Actor], Awaitable[None]]],
    ) -> None:
        """Start the task of ``key``: ``claimed`` (a turn) says whether to run; ``finish(outcome)`` (a
        turn) records the outcome."""
        task = asyncio.get_running_loop().create_task(self._run(key, fn, timeout, claimed, finish))
        self.tasks[key] = task
        owner = (key[0], key[1])
        self._per_actor[owner] = self._per_actor.get(owner, 0) + 1
        task.add_done_callback(lambda t: self._ended(key, owner, t))

    def _ended(self, key: RunKey, owner: tuple[str, str], task: asyncio.Task[None]) -> None:
        if self.tasks.get(key) is task:
            del self.tasks[key]
        left = self._per_actor.get(owner, 1) - 1
        if left > 0:
            self._per_actor[owner] = left
        else:
            self._per_actor.pop(owner, None)

    def holds_actor(self, kind: str, name: str) -> bool:
        """Whether an outside attempt of ``kind/name`` runs in this process: the registry keeps such
        an actor live (no idle sweep or eviction deactivates it), so its attempt's turns, and its
        lease wake-up, which asks this runner, stay in this process."""
        return (kind, name) in self._per_actor

    def cancel(self, kind: str, name: str, wid: str, position: int | None = None) -> None:
        """Stop every task of workflow ``wid`` of ``kind/name`` in this process (cancel, restart), or
        only those of ``position`` (the branches of a failed join)."""
        for key, task in list(self.tasks.items()):
            if key[:3] == (kind, name, wid) and (position is None or key[4] == position):
                task.cancel()

    async def _run(
        self,
        key: RunKey,
        fn: Callable[[], Awaitable[Any]],
        timeout: float | None,
        claimed: Callable[[Actor], Awaitable[bool]],
        finish: Callable[[Outcome], Callable[[Actor], Awaitable[None]]],
    ) -> None:
        kind, name = key[0], key[1]
        process = self.process
        try:  # an actor deleted under its attempt is not made again to record it
            if not process.exists(kind, name) or not await process.run(kind, name, claimed):
                return
            outcome = await self._attempt(fn, timeout)
            if process.exists(kind, name):
                await process.run(kind, name, finish(outcome))
        except asyncio.CancelledError:
            raise
        except Exception:  # the actor is stopping or failed: the lease wake-up takes it from here
            log.warning("outside step %s of %s/%r not recorded", key[2:], kind, name, exc_info=True)

    async def _attempt(self, fn: Callable[[], Awaitable[Any]], timeout: float | None) -> Outcome:
        clock = self.process.clock
        try:
            if timeout is None:
                result = await fn()
            else:
                async with clock.timeout(timeout):
                    result = await fn()
        except TimeoutError:
            return Outcome(False, error=f"timeout after {timeout} s")
        except NonRetryable as exc:
            return Outcome(False, error=error_text(exc), retryable=False)
        except Exception as exc:
            return Outcome(False, error=error_text(exc))
        return Outcome(True, result)

    async def stop(self) -> None:
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


#: Writes a progress report in a turn of the step's actor: ``(actor, report, checkpoint)``;
#: ``report(now)`` is the report as recorded (JSON text), ``checkpoint`` the checkpoint's JSON text
#: (None: kept as it is).
Write = Callable[[Actor, Callable[[float], str], "str | None"], None]


def reporter(turn_of: Fenced, write: Write) -> Reporter:
    """What ``StepAttempt.progress`` calls: the report checked here, then written by ``write`` in one
    of the attempt's fenced turns (``turn_of``, what ``StepAttempt.turn`` uses): False if the
    attempt is no longer current."""

    async def report(done: float, total: float | None, message: str, checkpoint: Any) -> bool:
        # refused here, before any turn: the numbers, the text, and what JSON cannot encode (an
        # integer past 64 bits, a checkpoint too large or not JSON)
        record_ = progress_record(done, total, message, 0.0)
        encode(record_, "a progress report")
        kept = None if checkpoint is KEEP else encode(checkpoint, "a step's checkpoint")

        def made(now: float) -> str:
            return encode({**record_, "at": now}, "a progress report")

        async def turn(actor: Actor) -> None:
            write(actor, made, kept)

        try:
            await turn_of(turn)
        except AttemptSuperseded:
            return False
        return True

    return report


_SUPERSEDED: Any = object()


def fenced(process: Process, kind: str, name: str, holds: Callable[[Actor], bool], what: str) -> Fenced:
    """What ``StepAttempt.turn`` calls: ``fn(actor)`` in a turn of ``kind/name`` when ``holds(actor)``
    (the attempt's fence, read in that turn), else AttemptSuperseded naming ``what``."""

    async def run(fn: Callable[[Actor], Awaitable[Any]]) -> Any:
        async def turn(actor: Actor) -> Any:
            if not holds(actor):
                return _SUPERSEDED
            return await fn(actor)

        if not process.exists(kind, name):  # deleted under the attempt: never made again by it
            raise AttemptSuperseded(f"{what} is no longer current: its actor was deleted")
        result = await process.run(kind, name, turn)
        if result is _SUPERSEDED:
            raise AttemptSuperseded(f"{what} is no longer current")
        return result

    return run


def runner(process: Process) -> Runner:
    """This process's runner."""
    return process.service(_SERVICE, Runner)
