"""Background jobs on the workflow core: the worker side of an attempt, and the process's presence.

A job is a one-step workflow of its agent (``roost.job``, id = the job's id; docs/design.md,
*Background job*): the workflow core owns its attempts, their lease, retries (full jitter) and
fences, and runs each attempt's function, :func:`run_attempt`, as a task of its runner
(:mod:`roost.workflows.runner`). The job's records live in the agent's file and change only in the
agent's turns (the job lifecycle, :mod:`roost.agent.jobs`), which this module knows by its contract,
:class:`WorkerJobs`, and reaches through the agent's ``orchestrator``, so it imports neither the job
lifecycle nor the orchestrator (they sit above it).

1. ``begin`` (a turn of the attempt, :meth:`roost.agent.jobs.JobLifecycle.begin`) hands back what to
   run: the tool's context (the checkpoint of the job's last report in it) and the executor.
2. The tool (or model step) runs in the attempt's task. ``ctx.progress``, ``ctx.stream`` and
   ``ctx.turn`` are turns of the attempt (``StepAttempt.turn``): each runs only while this attempt and
   run are the job's current ones, else the tool gets :class:`ToolCancelled`.
3. Its result, or why it ends the job (an error, a question), is kept with the job in a turn of the
   attempt (the payload policy and the blob store apply there), and what the workflow core records
   is flags only: ``{"ok": true}``, ``{"input": true}`` (the tool raised :class:`NeedInput`),
   ``{"failed": true, "retryable": r}`` (a failure that is not retried: the tool said so, or a
   streamed model step had shown text). A failure to retry raises :class:`AttemptFailed` with the
   error's first line: the core backs off and runs the next attempt.

Guarantees (tests in ``tests/test_agent_jobs.py``):

- **At most one current attempt per job**: every write of an attempt is fenced by the core's
  ``(attempt, run)``; an attempt no longer current writes nothing and its tool is stopped at its next
  report.
- **Cancellation at once**: a job cancelled by ``cancel(turn_id)`` runs in this process (an actor's
  file is held by one process, and its jobs' tasks run there), and its task is cancelled in the
  cancel's turn.
- **A stopping server does not record failures**: shutdown cancels the attempts without writing;
  their lease wake-ups find them lost and run them again (the same attempt, the next run).
- **The process reports its presence**: :class:`JobRunner` writes the process's worker row
  (``WorkerHeartbeat``: pid, host, start, last beat, attempts running) to the directory every
  ``heartbeat_interval``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from roost.agent.catalog import NeedInput, ToolCancelled, ToolContext
from roost.agent.models import ModelError
from roost.agent.payloads import error_line
from roost.storage import WorkerEntry
from roost.workflows import AttemptError, AttemptSuperseded, StepAttempt
from roost.workflows.runner import runner

if TYPE_CHECKING:
    from roost.actors import Actor
    from roost.actors.extension import Process

__all__ = ["SERVICE", "AttemptFailed", "JobRunner", "JobSpec", "WorkerJobs", "job_runner", "run_attempt"]

log = logging.getLogger("roost.agent.jobs")
SERVICE = "agent.jobs"
#: Workers stopped, or last seen, longer ago than this (seconds) are pruned from the directory.
WORKER_RETENTION = 86_400.0


@dataclass(slots=True)
class JobSpec:
    """What ``begin`` hands to the attempt: the context and the coroutine function to run, and
    whether it may run at all (``refused``: the outcome to record without running anything, as for a
    streamed model step that had shown text before its process was lost)."""

    ctx: ToolContext
    execute: Callable[[ToolContext], Awaitable[Any]]
    #: The runtime's clock's sleep (a fake clock in tests): ``ctx.sleep``.
    sleep: Callable[[float], Awaitable[None]]
    model: bool = False
    refused: dict[str, Any] | None = None
    #: The job's last try (its attempts spent after it): a failure ends the job, not retried.
    last: bool = False


class WorkerJobs(Protocol):
    """The side of a job's records that its attempt drives (:class:`roost.agent.jobs.JobLifecycle`):
    each call runs in a turn of the attempt (fenced by the workflow core)."""

    def begin(self, job_id: str, attempt: int, run: int, key: str) -> JobSpec:
        """What to run (the job's row marks the attempt running)."""

    async def progress(self, job_id: str, done: float, total: float, message: str, checkpoint: Any) -> None:
        """Record progress (and a checkpoint kept for later attempts) with a ``tool_progress`` event."""

    async def stream(self, job_id: str, tries: int, text: str) -> None:
        """Commit a batch of a streamed model step (a ``model_delta``)."""

    def keep_result(self, job_id: str, result: Any) -> dict[str, Any]:
        """Keep the tool's result with the job (the payload policy applied); the outcome to record."""

    def committed(self, job_id: str) -> bool:
        """Whether a streamed model step of the job has shown text already."""

    def note_failure(
        self,
        job_id: str,
        error: str,
        *,
        retryable: bool,
        interrupted: bool = False,
        needs_input: bool = False,
        attempts: int | None = None,
    ) -> dict[str, Any]:
        """Keep why the attempt ends the job with it (cleaned); the flags the core records."""


def _jobs(actor: Actor) -> WorkerJobs:
    orchestrator = getattr(actor, "orchestrator", None)  # a runtime_checkable isinstance costs µs per turn
    if orchestrator is None:
        raise TypeError(f"{type(actor).__name__} is not an agent: it has no jobs")
    jobs: WorkerJobs = orchestrator.jobs
    return jobs


def job_runner(process: Process) -> JobRunner:
    """This process's worker presence (created on first use, stopped with the registry)."""
    return process.service(SERVICE, JobRunner)


async def run_attempt(attempt: StepAttempt, job_id: str) -> dict[str, Any]:
    """The function of a job's outside step: one attempt (or rerun) of the job, in the runner's task
    (see the module doc). Returns the outcome to record; raises a failure the core is to retry."""

    async def fenced(fn: Callable[[Actor], Awaitable[Any]]) -> Any:
        try:
            return await attempt.turn(fn)
        except AttemptSuperseded as exc:  # cancelled, or another attempt or run is current
            raise _Superseded(f"job {job_id}: {exc}") from None

    async def call(fn: Callable[[WorkerJobs], Any]) -> Any:
        """``fn(jobs)`` (plain or a coroutine) in a fenced turn of the attempt: its result."""

        async def turn(actor: Actor) -> Any:
            out = fn(_jobs(actor))
            return await out if inspect.isawaitable(out) else out

        return await fenced(turn)

    spec: JobSpec = await call(
        lambda jobs: jobs.begin(job_id, attempt.attempt, attempt.run, attempt.idempotency_key)
    )
    if spec.refused is not None:
        return spec.refused
    tries = spec.ctx.attempt  # the job's count of its tries: what its streamed batches are kept by

    async def progress(done: float, total: float, message: str, checkpoint: Any) -> None:
        await call(lambda jobs: jobs.progress(job_id, done, total, message, checkpoint))

    async def stream(text: str) -> None:
        await call(lambda jobs: jobs.stream(job_id, tries, text))

    spec.ctx.bind(progress, spec.sleep, fenced, stream)
    try:
        result = await spec.execute(spec.ctx)
    except _Superseded:
        raise  # nothing of this attempt is recorded any more
    except NeedInput as need:
        prompt = need.prompt
        return dict(
            await call(lambda jobs: jobs.note_failure(job_id, prompt, retryable=False, needs_input=True))
        )
    except Exception as exc:
        error = str(exc) if isinstance(exc, ModelError) else error_line(exc)
        # a tool may say it is final (an MCP server's error answer; a ToolCancelled of its own)
        retryable = getattr(exc, "retryable", True) is not False and not isinstance(exc, ToolCancelled)
        if spec.model and await call(lambda jobs: jobs.committed(job_id)):
            # text was shown: not redone behind the reader's back (continue_run takes it up)
            return dict(
                await call(
                    lambda jobs: jobs.note_failure(job_id, error, retryable=retryable, interrupted=True)
                )
            )
        if not retryable or spec.last:
            spent = tries if retryable else None
            return dict(
                await call(lambda jobs: jobs.note_failure(job_id, error, retryable=retryable, attempts=spent))
            )
        log.warning("job %s attempt %s failed", job_id, attempt.attempt, exc_info=True)
        raise AttemptFailed(error) from exc
    return dict(await call(lambda jobs: jobs.keep_result(job_id, result)))


class _Superseded(ToolCancelled):
    """The attempt's fence refused a turn: the attempt is no longer current (not a failure of it)."""


class AttemptFailed(AttemptError):
    """A failed attempt to retry, carrying its error as the job records it (the type and first
    line of what the tool raised, never a traceback): the workflow core records ``str(self)``."""


class JobRunner:
    """This process's presence in the directory's ``workers`` table (``roost workers``): one worker id,
    a heartbeat every ``heartbeat_interval`` with the attempts running (the workflow core's runner
    runs them). :meth:`stop` cancels and awaits its presence task and records the stop."""

    def __init__(self, process: Process, heartbeat_interval: float = 1.0) -> None:
        self.process = process
        self.worker_id = f"w-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.started_at = process.clock.now()
        self.heartbeat_interval = heartbeat_interval
        #: How long this worker may go without a heartbeat before ``roost workers`` calls it stale.
        self.lease_s = 5.0
        self._presence: asyncio.Task[None] | None = None

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
                    self.running,
                    self.lease_s,
                )
            )
        except Exception:  # a busy directory must not stop the worker; the next beat tries again
            log.warning("worker heartbeat not written", exc_info=True)

    @property
    def running(self) -> int:
        """Outside attempts running in this process (jobs' among them): the workflow core's runner's."""
        return runner(self.process).leases_held

    async def _presence_forever(self) -> None:
        while True:
            await self.process.clock.sleep(self.heartbeat_interval)
            self.beat()

    async def stop(self) -> None:
        """Cancel and await the presence task, and record the stop (the attempts are the workflow
        core's runner's, stopped with it: their lease wake-ups run them again)."""
        if self._presence is not None:
            self._presence.cancel()
            await asyncio.gather(self._presence, return_exceptions=True)
        directory = self.process.directory
        if self._presence is not None and directory is not None:  # it reported: say it stopped
            try:
                directory.worker_stopped(self.worker_id, self.process.clock.now())
            except Exception:  # the row goes stale instead
                log.warning("worker stop not recorded", exc_info=True)
