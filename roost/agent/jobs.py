"""The job lifecycle, whole: a background step's records from its start to its end.

A job's row lives in the agent's file and changes only in the agent's turns; the worker that runs it
(:mod:`roost.agent.background`) asks for each change through :meth:`JobLifecycle.begin`,
:meth:`~JobLifecycle.heartbeat`, :meth:`~JobLifecycle.progress` and :meth:`~JobLifecycle.finish`,
each fenced by ``(job_id, attempt)`` and the worker's id::

    queued ──claim──▶ running ──finish(ok)──▶ completed
                       │  ▲  ╲──finish(failed, retryable, attempts left)──▶ retry_wait ──wake-up──┐
                       │  └──────────────────────── claim (attempt + 1) ◀──────────────────────────┘
                       │  lease expired, attempts left: claim (attempt + 1) at once
                       ├──finish(failed) / attempts spent──▶ failed
                       └──cancel(turn_id)──▶ cancelled

Guarantees (tests in ``tests/test_agent_jobs.py``):

- **At most one lease per job**: a claim takes the next attempt; every write of an older attempt's
  worker is refused (``progress`` and ``heartbeat`` answer False, ``finish`` records nothing).
- **One retry policy, shared with wake-ups**: a failed attempt is retried after
  :meth:`roost.actors.RetryPolicy.delay` (full jitter: uniform in ``[0, min(cap, base·2^(n-1))]``,
  ``base`` = ``job_backoff``, ``cap`` = ``job_backoff_cap``), drawn from the process's ``rng``, the
  one wake-ups draw from (``actor.extension.process.rng``).
- **A lost worker is noticed at its lease's end**: a wake-up at the lease's end claims the next
  attempt at once (or fails the job when its attempts are spent).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from roost.actors import RetryPolicy
from roost.agent.background import JobSpec, Outcome, OutcomeStatus, WorkerJobs, job_runner
from roost.agent.catalog import ToolContext
from roost.agent.context import Part
from roost.agent.models import ModelStep, is_streaming
from roost.agent.payloads import PayloadError
from roost.agent.records import Records
from roost.agent.status import ACTIVE_JOB, EventStatus, JobStatus, RunStatus
from roost.agent.store import Row, new_id
from roost.agent.stream_buffer import stream_step

if TYPE_CHECKING:
    from roost.agent.interfaces import OrchestratorApi

__all__ = ["JobLifecycle"]

shown = Records.shown

LEASE_LOST = "lease expired (worker lost)"
#: The columns of a job's fence (:meth:`JobLifecycle._current`).
_FENCE = ("status", "attempt", "lease_owner")
#: What a streamed batch's turn reads of its job besides the fence: the lease's end. A batch every few
#: milliseconds reads no whole row, and nothing it need not read again (:meth:`JobLifecycle.stream`).
_STREAM_JOB = ("lease_expires_at",)
#: Attempts whose streamed batches this agent keeps the run and message of (:attr:`JobLifecycle.streaming`).
_STREAMING_KEPT = 256


class JobLifecycle(Part, WorkerJobs):
    def __init__(self, orchestrator: OrchestratorApi) -> None:
        super().__init__(orchestrator)
        #: Per streaming attempt ``(job_id, attempt)``: the run's event columns and the step's hop, read
        #: by its first batch. Neither ever changes (a run's ids are written once, a job's arguments
        #: too), so later batches read only the fence. Forgotten when the attempt finishes or is
        #: fenced; at most :data:`_STREAMING_KEPT` (the oldest goes first).
        self.streaming: dict[tuple[str, int], tuple[Row, int]] = {}

    def retry_policy(self, job: Row) -> RetryPolicy:
        """The retry policy of ``job``: its own attempts, the agent's backoff settings."""
        cfg = self.agent.settings()
        return RetryPolicy(job["max_attempts"], cfg.job_backoff, cfg.job_backoff_cap)

    # -- start and claim ------------------------------------------------------------------------------
    async def start(self, run: Row, item: Row | None, tool_name: str, args: dict[str, Any]) -> Row:
        """A new job for a step (``item``) or a model step (``item`` None), claimed by this process."""
        now = self.now
        job: Row = {
            "job_id": new_id("job"),
            "run_id": run["run_id"],
            "turn_id": run["turn_id"],
            "item_id": item["item_id"] if item else None,
            "job_kind": "tool" if item else "model",
            "tool_name": tool_name,
            "args": args,
            "status": JobStatus.QUEUED,
            "attempt": 0,
            "max_attempts": self.agent.settings().job_max_attempts,
            "progress": {},
            "created_at": now,
            "updated_at": now,
        }
        self.store.insert("jobs", job)
        return await self.claim(job)

    async def claim(self, job: Row) -> Row:
        """Take the next attempt of ``job`` for this process: lease, wake-up at its end, worker."""
        agent = self.agent
        cfg = agent.settings()
        runner = job_runner(agent.extension.process)
        attempt = job["attempt"] + 1
        now = self.now
        lease = now + cfg.lease_ttl
        self.store.update(
            "jobs",
            job["job_id"],
            status=JobStatus.RUNNING,
            attempt=attempt,
            lease_owner=runner.worker_id,
            lease_expires_at=lease,
            heartbeat_at=now,
            error=None,
            updated_at=now,
        )
        await agent.schedule(cfg.lease_ttl, "agent_lease", {"job_id": job["job_id"], "attempt": attempt})
        runner.spawn(agent.kind, agent.name, job["job_id"], attempt)  # it starts by checking this claim
        return {**job, "status": JobStatus.RUNNING, "attempt": attempt, "lease_expires_at": lease}

    def _current(self, job_id: str, attempt: int, worker_id: str, cols: Sequence[str] = ()) -> Row | None:
        """The job if ``(attempt, worker_id)`` holds its lease, else None (the fence). ``cols``: only
        those columns besides the fence's (the whole row if none are named)."""
        store = self.store
        job = store.fields("jobs", job_id, (*_FENCE, *cols)) if cols else store.get("jobs", job_id)
        if job is None or job["status"] != JobStatus.RUNNING or job["attempt"] != attempt:
            return None
        if job["lease_owner"] != worker_id:
            return None
        return job

    # -- the worker's turns -----------------------------------------------------------------------------
    def begin(self, job_id: str, attempt: int, worker_id: str) -> JobSpec | None:
        """What the worker of ``(job_id, attempt)`` should run, or None if that attempt is not current."""
        job = self._current(job_id, attempt, worker_id)
        if job is None:
            return None
        run = self.store.get("runs", job["run_id"])
        assert run is not None
        ctx = self.orchestrator.execution.context(run, job["item_id"], job["tool_name"], attempt)
        ctx.checkpoint = self.records.original(job["progress"].get("checkpoint"))
        execute = self._executor(job, run)
        tracer = self.agent.extension.process.tracer
        if tracer is not None:  # the attempt in a span of its run's trace (roost.agent.tracing)
            from roost.agent.tracing import run_spans

            spans = run_spans(tracer)
            assert spans is not None
            execute = spans.job(run, job, attempt, execute)
        return JobSpec(job_id, attempt, ctx, execute, self.agent.settings().heartbeat_interval)

    def _executor(self, job: Row, run: Row) -> Callable[[ToolContext], Awaitable[Any]]:
        if job["job_kind"] == "model":
            model = self.agent.model()
            request = self.orchestrator.steps.model_request(run)
            if self.agent.streams and is_streaming(model):
                request = request.model_copy(update={"partial": self.orchestrator.streams.open(run, job)})
                cfg = self.agent.settings()
                clock = self.agent.extension.process.clock
                vault, run_id = self.records.vault, run["run_id"]

                def secrets() -> Sequence[str]:  # the run's, as known when a batch goes
                    return vault.known(run_id)

                async def model_stream(ctx: ToolContext) -> Any:
                    step = await stream_step(model, request, ctx.stream, clock, cfg, secrets)
                    return step.model_dump(mode="json")

                return model_stream

            async def model_step(ctx: ToolContext) -> Any:
                step = await model.step(request)
                return step.model_dump(mode="json")

            return model_step
        tool = self.agent.catalog().get(job["tool_name"])
        args = tool.validate(self.records.original(job["args"]))

        async def tool_step(ctx: ToolContext) -> Any:
            return await tool.fn(ctx, args)

        return tool_step

    def _renew(self, job_id: str, **values: Any) -> None:
        now = self.now
        self.store.update(
            "jobs",
            job_id,
            lease_expires_at=now + self.agent.settings().lease_ttl,
            heartbeat_at=now,
            updated_at=now,
            **values,
        )

    def heartbeat(self, job_id: str, attempt: int, worker_id: str) -> bool:
        """Renew the lease; False when the attempt is no longer current (cancelled, or taken over)."""
        if self._current(job_id, attempt, worker_id) is None:
            return False
        self._renew(job_id)
        return True

    async def progress(
        self,
        job_id: str,
        attempt: int,
        worker_id: str,
        done: float,
        total: float,
        message: str,
        checkpoint: Any = None,
    ) -> bool:
        """Record progress (and a kept checkpoint), renew the lease, emit ``tool_progress``; False
        when the attempt is not current."""
        kept = self.records.keep(checkpoint) if checkpoint is not None else None
        job = self._current(job_id, attempt, worker_id)
        if job is None:
            return False
        percent = round(100 * done / total, 1) if total > 0 else None
        progress = {**job["progress"], "done": done, "total": total, "percent": percent, "message": message}
        if kept is not None:
            progress["checkpoint"] = kept
        self._renew(job_id, progress=progress)
        run = self.run(job["run_id"])
        self.event(
            "tool_progress",
            run,
            item_id=job["item_id"],
            status=EventStatus.RUNNING,
            payload={
                "tool": job["tool_name"],
                "job_id": job_id,
                "attempt": attempt,
                **{k: v for k, v in progress.items() if k != "checkpoint"},
            },
        )
        return True

    async def stream(self, job_id: str, attempt: int, worker_id: str, text: str) -> bool:
        """A batch of a streamed model step: committed to its message with one ``model_delta``, the
        lease renewed as a heartbeat would renew it, once a ``heartbeat_interval`` has passed since it
        was (a batch every few milliseconds need not write the job's row each time, and the worker
        skips its heartbeats while batches come); False when the attempt is no longer current (the
        batch is not recorded)."""
        key = (job_id, attempt)
        job = self._current(job_id, attempt, worker_id, _STREAM_JOB)
        if job is None:
            self.streaming.pop(key, None)
            return False
        cfg = self.agent.settings()
        if job["lease_expires_at"] - self.now <= cfg.lease_ttl - cfg.heartbeat_interval:
            self._renew(job_id)
        kept = self.streaming.get(key)
        if kept is None:  # the attempt's first batch
            ids = self.store.fields("jobs", job_id, ("run_id", "args"))
            assert ids is not None
            run = self.run(ids["run_id"], self.telemetry.RUN_COLUMNS)
            kept = (run, int(ids["args"].get("hop", 0)))
            if len(self.streaming) >= _STREAMING_KEPT:
                del self.streaming[next(iter(self.streaming))]
            self.streaming[key] = kept
        else:
            self.records.concern(kept[0]["run_id"])  # as reading the run would: its secrets are scrubbed
        self.orchestrator.streams.append(kept[0], kept[1], text)
        return True

    async def finish(self, job_id: str, attempt: int, worker_id: str, outcome: Outcome) -> None:
        """Record the attempt's outcome (fenced) and advance its run."""
        self.streaming.pop((job_id, attempt), None)
        job = self._current(job_id, attempt, worker_id)
        if job is None:
            return  # fenced: cancelled, or another attempt holds the lease
        run = self.run(job["run_id"])
        now = self.now
        store = self.store
        steps = self.orchestrator.steps
        if outcome.status == OutcomeStatus.OK:
            try:
                clean = self.records.clean(outcome.result)
                step = ModelStep.model_validate(outcome.result) if job["job_kind"] == "model" else None
            except (PayloadError, TypeError, ValueError) as exc:
                # not storable: a failure of the step, not of the worker (retrying would not help)
                outcome = Outcome(OutcomeStatus.FAILED, error=f"result not storable: {exc}", retryable=False)
                await self._failed(run, job, outcome)
                await steps.advance(run["run_id"])
                return
            store.update(
                "jobs", job_id, status=JobStatus.COMPLETED, result=clean, lease_owner=None, updated_at=now
            )
            if step is not None:
                streamed = self.orchestrator.streams.finish(job)
                if streamed is not None and not step.tool_calls and not step.ask:
                    step = step.model_copy(update={"text": streamed})  # what was shown, cleaned
                steps.record_model_step(run, step)
            else:
                item = store.get("items", job["item_id"])
                assert item is not None
                steps.item_completed(run, item, self.agent.catalog().get(job["tool_name"]), outcome.result)
        elif outcome.status == OutcomeStatus.INPUT:
            store.update(
                "jobs", job_id, status=JobStatus.FAILED, error="needs input", lease_owner=None, updated_at=now
            )
            item = store.get("items", job["item_id"]) if job["item_id"] else None
            steps.ask(run, outcome.error or "input needed", item)
        else:
            await self._failed(run, job, outcome)
        await steps.advance(run["run_id"])

    # -- failure, retry, lease --------------------------------------------------------------------------
    async def _failed(self, run: Row, job: Row, outcome: Outcome) -> None:
        """A failed attempt: retried after the policy's delay if retryable and attempts are left;
        otherwise the job fails, and with it the step (and the run)."""
        attempt = job["attempt"]
        error = self.err(outcome.error or outcome.status, 500)
        store = self.store
        steps = self.orchestrator.steps
        policy = self.retry_policy(job)
        if job["job_kind"] == "model" and self.orchestrator.streams.committed(job):
            # text was shown: not redone behind the reader's back (continue_run takes it up)
            chars = self.orchestrator.streams.interrupt(run, job, error or "failed")
            store.update(
                "jobs",
                job["job_id"],
                status=JobStatus.FAILED,
                error=error,
                retryable=int(outcome.retryable),
                lease_owner=None,
                updated_at=self.now,
            )
            resume = "; continue_run resumes it" if outcome.retryable else ""
            self.orchestrator.runs.fail(
                run,
                f"model stream interrupted after {chars} characters ({error}){resume}",
                retryable=outcome.retryable,
            )
            return
        if outcome.retryable and attempt < policy.max_attempts:
            delay = policy.delay(attempt, self.agent.extension.process.rng)
            store.update(
                "jobs",
                job["job_id"],
                status=JobStatus.RETRY_WAIT,
                error=error,
                lease_owner=None,
                updated_at=self.now,
            )
            await self.agent.schedule(delay, "agent_retry", {"job_id": job["job_id"], "attempt": attempt})
            if job["job_kind"] == "model":
                steps.model_failed(run, error or "", True, will_retry=True, attempt=attempt, retry_in_s=delay)
            else:
                self._tool_retrying(run, job, error, delay)
            return
        store.update(
            "jobs",
            job["job_id"],
            status=JobStatus.FAILED,
            error=error,
            retryable=int(outcome.retryable),
            lease_owner=None,
            updated_at=self.now,
        )
        if job["job_kind"] == "model":
            self.orchestrator.streams.interrupt(run, job, error or "failed")  # if it began streaming
            steps.model_failed(run, error or "", outcome.retryable, will_retry=False, attempt=attempt)
            return
        item = store.get("items", job["item_id"])
        assert item is not None
        tool = self.agent.catalog().get(job["tool_name"])
        if tool.heavy:
            self.orchestrator.project.release_heavy(run["run_id"])
        steps.item_failed(
            run,
            item,
            tool,
            f"{error} (attempt {attempt} of {job['max_attempts']})",
            retryable=outcome.retryable,
        )

    def _tool_retrying(self, run: Row, job: Row, error: str | None, delay: float) -> None:
        self.event(
            "tool_failed",
            run,
            item_id=job["item_id"],
            status=EventStatus.RETRYING,
            payload={
                "tool": job["tool_name"],
                "error": error,
                "attempt": job["attempt"],
                "retryable": True,
                "will_retry": True,
                "retry_in_s": delay,
            },
        )

    async def lease_check(self, job_id: str, attempt: int) -> None:
        """The wake-up at a lease's end: renewed → wait for the new end; expired → retry or fail."""
        job = self.store.get("jobs", job_id)
        if job is None or job["status"] != JobStatus.RUNNING or job["attempt"] != attempt:
            return
        now = self.now
        if job["lease_expires_at"] > now:
            await self.agent.schedule(
                job["lease_expires_at"] - now, "agent_lease", {"job_id": job_id, "attempt": attempt}
            )
            return
        run = self.run(job["run_id"])
        self.orchestrator.capabilities.lease_lost(job)
        if attempt < job["max_attempts"] and not (
            job["job_kind"] == "model" and self.orchestrator.streams.committed(job)
        ):
            if job["job_kind"] == "tool":
                self._tool_retrying(run, job, LEASE_LOST, 0)
            claimed = await self.claim(job)
            self._restarted(run, claimed)
            return
        await self._failed(run, job, Outcome(OutcomeStatus.FAILED, error=LEASE_LOST, retryable=True))
        await self.orchestrator.steps.advance(run["run_id"])

    async def retry(self, job_id: str, attempt: int) -> None:
        """The wake-up after a failed attempt's backoff: claim the next attempt."""
        job = self.store.get("jobs", job_id)
        if job is None or job["status"] != JobStatus.RETRY_WAIT or job["attempt"] != attempt:
            return
        run = self.run(job["run_id"])
        if run["status"] != RunStatus.IN_PROGRESS:
            self.store.update("jobs", job_id, status=JobStatus.CANCELLED, updated_at=self.now)
            return
        claimed = await self.claim(job)
        self._restarted(run, claimed)

    def _restarted(self, run: Row, job: Row) -> None:
        if job["job_kind"] == "tool":
            self.event(
                "tool_started",
                run,
                item_id=job["item_id"],
                status=EventStatus.RUNNING,
                payload={
                    "tool": job["tool_name"],
                    "args": shown(job["args"]),
                    "job_id": job["job_id"],
                    "attempt": job["attempt"],
                },
            )

    # -- cancel ---------------------------------------------------------------------------------------
    def cancel_run(self, run: Row) -> None:
        """The run is being cancelled: each of its active jobs is ``cancelled`` and its worker here
        stopped at once (a worker elsewhere stops at its next heartbeat or progress report)."""
        store = self.store
        now = self.now
        runner = job_runner(self.agent.extension.process)
        for job in store.select("jobs", "run_id = ? AND status IN (?, ?, ?)", (run["run_id"], *ACTIVE_JOB)):
            store.update(
                "jobs",
                job["job_id"],
                status=JobStatus.CANCELLED,
                cancel_requested=1,
                lease_owner=None,
                updated_at=now,
            )
            runner.cancel(job["job_id"])
            if job["job_kind"] == "tool":
                self.event(
                    "tool_cancelled",
                    run,
                    item_id=job["item_id"],
                    status=EventStatus.CANCELLED,
                    payload={
                        "tool": job["tool_name"],
                        "job_id": job["job_id"],
                        "attempt": job["attempt"],
                        "progress": job["progress"],
                    },
                )
