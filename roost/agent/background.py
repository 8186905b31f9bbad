"""Background jobs: long work outside the agent's mailbox, with a lease, heartbeats and retries.

One :class:`JobRunner` per process runs the jobs this process claimed: it is the process's service
``agent.jobs`` (:meth:`roost.actors.extension.Process.service`, stopped with the registry), found with
:func:`job_runner`. Its worker id is written, with the process's pid, host and load, to the directory's
``workers`` table every heartbeat (``WorkerHeartbeat``).

The job's records live in the agent's file and change only in the agent's turns (the job lifecycle,
:mod:`roost.agent.jobs`); the runner only executes, each step a turn of the agent
(:meth:`~roost.actors.extension.Process.run`). It knows the lifecycle by its contract,
:class:`WorkerJobs`, which :class:`roost.agent.jobs.JobLifecycle` implements, and the agent as a
:class:`JobHost`, so it imports neither the job lifecycle nor the orchestrator (they sit above it).

1. ``begin`` (a turn, :meth:`roost.agent.jobs.JobLifecycle.begin`) checks that this worker holds
   the lease of this attempt and hands back what to run. A worker whose attempt is no longer current
   gets nothing and stops.
2. The tool (or model step) runs as a task of its own. ``ctx.progress`` is a turn that records
   progress, emits ``tool_progress`` and renews the lease; a heartbeat task renews the lease every
   ``heartbeat_interval`` even if the tool reports nothing.
3. ``finish`` (a turn) records the outcome, fenced by ``(job_id, attempt)``.

Guarantees (tests in ``tests/test_agent_jobs.py``):

- **At most one lease per job**: every write of a worker is fenced by its attempt; a claim with
  ``attempt + 1`` (after a lease expired) makes the older worker's writes no-ops, and the runner cancels
  an older task of the same job that it still runs.
- **Cancellation within one heartbeat interval**: a job cancelled by ``cancel(turn_id)`` is stopped at
  once when it runs in this process, and at its next heartbeat or progress report otherwise.
- **A stopping server does not record failures**: shutdown cancels the workers without writing; their
  leases expire and the jobs are retried by the next process.
- **No task outlives the runner**: see :class:`JobRunner`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from roost.agent.catalog import NeedInput, ToolCancelled, ToolContext
from roost.agent.models import ModelError
from roost.agent.payloads import error_line
from roost.storage import WorkerEntry

if TYPE_CHECKING:
    from roost.actors import Actor
    from roost.actors.extension import Process

__all__ = ["SERVICE", "JobRunner", "JobSpec", "Outcome", "OutcomeStatus", "job_runner"]

log = logging.getLogger("roost.agent.jobs")
SERVICE = "agent.jobs"
#: Workers stopped, or last seen, longer ago than this (seconds) are pruned from the directory.
WORKER_RETENTION = 86_400.0


@dataclass(slots=True)
class JobSpec:
    """What ``begin`` hands to the worker: the context and the coroutine function to run."""

    job_id: str
    attempt: int
    ctx: ToolContext
    execute: Callable[[ToolContext], Awaitable[Any]]
    heartbeat_interval: float


class OutcomeStatus(StrEnum):
    """How an attempt ended, as the worker saw it."""

    OK = "ok"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INPUT = "input"  # the tool raised NeedInput; ``error`` holds the prompt


@dataclass(slots=True)
class Outcome:
    status: OutcomeStatus
    result: Any = None
    error: str | None = None
    retryable: bool = False


class WorkerJobs(Protocol):
    """The side of a job's records that its worker drives (:class:`roost.agent.jobs.JobLifecycle`):
    each call runs in a turn of the agent and is fenced by ``(job_id, attempt)`` and the worker's id."""

    def begin(self, job_id: str, attempt: int, worker_id: str) -> JobSpec | None:
        """What to run, or None when this worker's attempt is no longer current."""

    def heartbeat(self, job_id: str, attempt: int, worker_id: str) -> bool:
        """Renew the lease; False when the job was cancelled or another attempt holds it."""

    async def progress(
        self,
        job_id: str,
        attempt: int,
        worker_id: str,
        done: float,
        total: float,
        message: str,
        checkpoint: Any,
    ) -> bool:
        """Record progress and renew the lease; False as for :meth:`heartbeat`."""

    async def stream(self, job_id: str, attempt: int, worker_id: str, text: str) -> bool:
        """Commit a batch of a streamed model step and renew the lease; False as for :meth:`heartbeat`."""

    async def finish(self, job_id: str, attempt: int, worker_id: str, outcome: Outcome) -> None:
        """Record the attempt's outcome (nothing when fenced) and advance its run."""


class HasJobs(Protocol):
    @property
    def jobs(self) -> WorkerJobs: ...


@runtime_checkable
class JobHost(Protocol):
    """An actor whose jobs this runner runs (an :class:`roost.agent.Agent`)."""

    @property
    def orchestrator(self) -> HasJobs: ...


def _jobs(actor: Actor) -> WorkerJobs:
    orchestrator = getattr(actor, "orchestrator", None)  # a runtime_checkable isinstance costs µs per turn
    if orchestrator is None:
        raise TypeError(f"{type(actor).__name__} is not an agent: it has no jobs")
    jobs: WorkerJobs = orchestrator.jobs
    return jobs


def job_runner(process: Process) -> JobRunner:
    """This process's runner (created on first use, stopped with the registry)."""
    return process.service(SERVICE, JobRunner)


class JobRunner:
    """Runs the jobs this process claimed, each attempt a task named ``agent.jobs:<job_id>:<attempt>``.

    **Every task it starts has an owner that awaits it** (test:
    ``test_no_task_of_the_runner_outlives_it``): an attempt's task is in :attr:`tasks` until it ends,
    or, once a newer attempt of its job took over, in a set of retired tasks that its done-callback
    empties; the attempt awaits its own tool (``…:tool``) and heartbeat (``…:heartbeat``), cancelling
    them first when it is cancelled. :meth:`stop` cancels and awaits the presence task, every attempt
    and every retired one, so when it returns none of them is left. (A tool that swallows its
    cancellation therefore holds up ``stop``.)
    """

    def __init__(self, process: Process, heartbeat_interval: float = 1.0) -> None:
        self.process = process
        self.worker_id = f"w-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.started_at = process.clock.now()
        self.heartbeat_interval = heartbeat_interval
        #: How long this worker may go without a heartbeat before ``roost workers`` calls it stale.
        self.lease_s = 5.0
        self.tasks: dict[str, tuple[int, asyncio.Task[None]]] = {}
        self._cancelled: set[tuple[str, int]] = set()
        #: Attempts another attempt of their job replaced in :attr:`tasks`, until they end.
        self._retired: set[asyncio.Task[None]] = set()
        self._presence: asyncio.Task[None] | None = None
        self.finished = 0

    # -- presence (WorkerHeartbeat) -------------------------------------------------------------------
    def ensure_started(self, heartbeat_interval: float | None = None, lease_s: float | None = None) -> None:
        """Start reporting this worker's presence (once; later calls only update the settings). At
        start, workers stopped or last seen over :data:`WORKER_RETENTION` ago are pruned."""
        if heartbeat_interval is not None:
            self.heartbeat_interval = heartbeat_interval
        if lease_s is not None:
            self.lease_s = lease_s
        if self._presence is None:
            directory = self.process.directory
            if directory is not None:
                try:
                    directory.prune_workers(self.process.clock.now() - WORKER_RETENTION)
                except Exception:
                    log.warning("old worker rows not pruned", exc_info=True)
            self.beat()
            self._presence = asyncio.get_running_loop().create_task(
                self._presence_forever(), name=f"{SERVICE}:{self.worker_id}:presence"
            )

    def beat(self) -> None:
        directory = self.process.directory
        if directory is None:
            return
        try:
            directory.worker_heartbeat(
                WorkerEntry(
                    self.worker_id,
                    os.getpid(),
                    socket.gethostname(),
                    self.started_at,
                    self.process.clock.now(),
                    len(self.tasks),
                    self.lease_s,
                )
            )
        except Exception:  # a busy directory must not stop the worker; the next beat tries again
            log.warning("worker heartbeat not written", exc_info=True)

    async def _presence_forever(self) -> None:
        while True:
            await self.process.clock.sleep(self.heartbeat_interval)
            self.beat()

    async def stop(self) -> None:
        """Cancel every worker without recording anything (their leases expire; jobs are retried), and
        await them all: the attempts, the retired ones and the presence task."""
        tasks = [t for _, t in self.tasks.values()]
        tasks.extend(self._retired)
        if self._presence is not None:
            tasks.append(self._presence)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.tasks.clear()
        self._retired.clear()
        directory = self.process.directory
        if self._presence is not None and directory is not None:  # it reported: say it stopped
            try:
                directory.worker_stopped(self.worker_id, self.process.clock.now())
            except Exception:  # the row goes stale instead
                log.warning("worker stop not recorded", exc_info=True)

    # -- jobs -------------------------------------------------------------------------------------------
    def spawn(self, kind: str, name: str, job_id: str, attempt: int) -> None:
        """Start the worker of ``(job_id, attempt)``; an older attempt's task is cancelled first. The
        task it replaces is kept (retired) until it ends, so :meth:`stop` still awaits it."""
        old = self.tasks.get(job_id)
        if old is not None:
            if old[0] < attempt:
                old[1].cancel()
            if not old[1].done():
                self._retired.add(old[1])
                old[1].add_done_callback(self._retired.discard)
        task = asyncio.get_running_loop().create_task(
            self._work(kind, name, job_id, attempt), name=f"{SERVICE}:{job_id}:{attempt}"
        )
        self.tasks[job_id] = (attempt, task)
        task.add_done_callback(lambda t: self._forget(job_id, attempt))

    def cancel(self, job_id: str) -> bool:
        """Stop a job running here at once (its record was already marked cancelled)."""
        entry = self.tasks.get(job_id)
        if entry is None:
            return False
        self._cancelled.add((job_id, entry[0]))
        entry[1].cancel()
        return True

    @property
    def leases_held(self) -> int:
        """Job attempts running in this process (each holds its job's lease): ``roost_leases_held``
        counts them (:class:`roost.actors.extension.Service`)."""
        return len(self.tasks)

    def _forget(self, job_id: str, attempt: int) -> None:
        entry = self.tasks.get(job_id)
        if entry is not None and entry[0] == attempt:
            del self.tasks[job_id]
        self._cancelled.discard((job_id, attempt))

    async def _turn(self, kind: str, name: str, fn: Callable[[Actor], Awaitable[Any]]) -> Any:
        return await self.process.run(kind, name, fn)

    async def _work(self, kind: str, name: str, job_id: str, attempt: int) -> None:
        wid = self.worker_id

        async def begin(actor: Actor) -> JobSpec | None:
            return _jobs(actor).begin(job_id, attempt, wid)

        try:
            spec: JobSpec | None = await self._turn(kind, name, begin)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job %s: could not begin; its lease will expire", job_id)
            return
        if spec is None:
            return
        lost = asyncio.Event()
        clock = self.process.clock
        fenced_at = [clock.monotonic()]  # the last turn that read the fence and renewed the lease

        async def fenced(record: Callable[[Actor], Awaitable[bool]]) -> None:
            """A turn of the worker that its attempt's fence may refuse: then the tool stops. It does
            what a heartbeat does (reads the fence, renews the lease: progress always, a streamed
            batch once an interval), so the next heartbeat is due an interval after it."""
            if not await self._turn(kind, name, record):
                lost.set()
                raise ToolCancelled(f"job {job_id} attempt {attempt} was cancelled or lost its lease")
            fenced_at[0] = clock.monotonic()

        async def progress(done: float, total: float, message: str, checkpoint: Any) -> None:
            async def record(actor: Actor) -> bool:
                return await _jobs(actor).progress(job_id, attempt, wid, done, total, message, checkpoint)

            await fenced(record)

        async def stream(text: str) -> None:
            async def record(actor: Actor) -> bool:
                return await _jobs(actor).stream(job_id, attempt, wid, text)

            await fenced(record)

        async def turn(fn: Callable[[Actor], Awaitable[Any]]) -> Any:
            return await self._turn(kind, name, fn)

        spec.ctx.bind(progress, self.process.clock.sleep, turn, stream)
        label = f"{SERVICE}:{job_id}:{attempt}"
        tool: asyncio.Future[Any] = asyncio.ensure_future(spec.execute(spec.ctx))
        if isinstance(tool, asyncio.Task):
            tool.set_name(f"{label}:tool")
        beat = asyncio.get_running_loop().create_task(
            self._heartbeat(kind, name, spec, tool, lost, fenced_at), name=f"{label}:heartbeat"
        )
        try:
            try:
                result = await asyncio.shield(tool)
                outcome = Outcome(OutcomeStatus.OK, result=result)
            except ToolCancelled as exc:
                outcome = Outcome(OutcomeStatus.CANCELLED, error=str(exc))
            except NeedInput as exc:
                outcome = Outcome(OutcomeStatus.INPUT, error=exc.prompt)
            except ModelError as exc:
                outcome = Outcome(OutcomeStatus.FAILED, error=str(exc), retryable=exc.retryable)
            except asyncio.CancelledError:
                await _cancel_and_wait(tool)
                if (job_id, attempt) not in self._cancelled and not lost.is_set():
                    raise  # shutdown (or a newer attempt took over): record nothing
                return  # cancelled by cancel(): the record already says so
            except Exception as exc:
                log.warning("job %s attempt %s failed", job_id, attempt, exc_info=True)
                retryable = getattr(exc, "retryable", True) is not False  # a tool may say it is final
                outcome = Outcome(OutcomeStatus.FAILED, error=error_line(exc)[:500], retryable=retryable)
        finally:
            await _cancel_and_wait(beat)
        if lost.is_set() and outcome.status != OutcomeStatus.OK:
            return  # the record already says why (cancelled, or another attempt owns it)

        async def finish(actor: Actor) -> None:
            await _jobs(actor).finish(job_id, attempt, wid, outcome)

        try:
            await self._turn(kind, name, finish)
            self.finished += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job %s: outcome not recorded; its lease will expire and it is retried", job_id)

    async def _heartbeat(
        self,
        kind: str,
        name: str,
        spec: JobSpec,
        tool: asyncio.Future[Any],
        lost: asyncio.Event,
        fenced_at: list[float],
    ) -> None:
        """Renew the lease every ``heartbeat_interval``, counted from the worker's last fenced turn
        (a progress report or a streamed batch does what a beat does): a tool that streams or reports
        often makes no heartbeat turns of its own."""
        wid = self.worker_id
        clock = self.process.clock
        interval = spec.heartbeat_interval

        async def renew(actor: Actor) -> bool:
            return _jobs(actor).heartbeat(spec.job_id, spec.attempt, wid)

        while not tool.done():
            await clock.sleep(max(0.0, fenced_at[0] + interval - clock.monotonic()))
            if clock.monotonic() - fenced_at[0] < interval:
                continue  # a fenced turn ran meanwhile: the next beat is due an interval after it
            fenced_at[0] = clock.monotonic()
            try:
                ok = await self._turn(kind, name, renew)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("job %s: heartbeat not recorded", spec.job_id, exc_info=True)
                continue
            if not ok:  # cancelled, or a newer attempt holds the lease: stop the tool now
                lost.set()
                tool.cancel()
                return


async def _cancel_and_wait(fut: asyncio.Future[Any]) -> None:
    """Cancel ``fut`` and wait until it has ended, even when the caller is cancelled meanwhile (that
    cancellation is raised once ``fut`` is done); its outcome is consumed."""
    fut.cancel()
    interrupted = False
    while not fut.done():
        try:
            await asyncio.wait((fut,))
        except asyncio.CancelledError:
            interrupted = True
    if not fut.cancelled():
        fut.exception()
    if interrupted:
        raise asyncio.CancelledError
