"""The job lifecycle, whole: a background step's records from its start to its end, on the workflow core.

A job is a one-step workflow of its agent (:data:`JOB_WORKFLOW`, id = the job's id): its one outside
step runs the tool (or model step) in the workflow core's runner, with the core's lease, retries
(``RetryPolicy``, full jitter), fences and idempotency key (docs/design.md, *Background job*). The
job's row is the agent's record of it, written only in the agent's turns: by the attempt's own turns
(:meth:`JobLifecycle.begin`, :meth:`~JobLifecycle.progress`, :meth:`~JobLifecycle.stream`,
:meth:`~JobLifecycle.keep_result`, fenced by the core), by the lines of the workflow's history as the
core writes them (:meth:`~JobLifecycle.heard`) and by the workflow's end (:meth:`~JobLifecycle.ended`)::

    start ──▶ running(attempt n) ──outcome ok / input / final failure──▶ completed | failed (and the step)
                │  ▲  ╲──raised, attempts left──▶ retry_wait ──the core's backoff──▶ running (n + 1)
                │  └── lost with its process: the next run of the attempt, same key ──┘
                ├──raised, attempts spent──▶ failed
                └──cancel(turn_id)──▶ cancelled (the workflow cancelled, its task stopped at once)

Guarantees (tests in ``tests/test_agent_jobs.py``):

- **At most one current attempt per job**: every write of an attempt is fenced by the core's
  ``(attempt, run)``; an older one's ``progress`` and ``stream`` raise :class:`ToolCancelled` and
  its outcome is not recorded.
- **One retry policy, shared with wake-ups**: a failed attempt is retried after
  :meth:`roost.actors.RetryPolicy.delay` (full jitter: uniform in ``[0, min(cap, base·2^(n-1))]``,
  ``base`` = ``job_backoff``, ``cap`` = ``job_backoff_cap``), drawn from the process's ``rng``, the
  one wake-ups draw from (``actor.extension.process.rng``).
- **A lost worker is noticed at its lease's end**: the core's lease wake-up finds no live task and
  runs the attempt again (its next run, the same idempotency key); the job's row counts each try in
  ``attempt``, so a tool's ``ctx.attempt`` and the events' ``attempt`` are one number per try.
- **Once text was shown, nothing redoes it silently**: a streamed model step that had committed text
  is not run again after a failure or a lost process; its message is ``interrupted`` and its run
  fails, ``continue_run`` taking it up by ``stream_resume``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from roost.actors import RetryPolicy
from roost.agent.background import JobSpec, WorkerJobs, job_runner
from roost.agent.catalog import ToolContext
from roost.agent.context import Part
from roost.agent.models import ModelStep, is_streaming
from roost.agent.payloads import PayloadError
from roost.agent.records import Records
from roost.agent.status import ACTIVE_JOB, EventStatus, JobStatus
from roost.agent.store import Row, new_id
from roost.agent.stream_buffer import stream_step
from roost.workflows.engine import Engine, engine_of

if TYPE_CHECKING:
    from roost.actors import Actor
    from roost.agent.interfaces import OrchestratorApi

__all__ = ["JOB_WORKFLOW", "LEASE_LOST", "JobLifecycle"]

shown = Records.shown

LEASE_LOST = "lease expired (worker lost)"
#: The workflow each job is (``Agent``'s ``roost.job`` body): one outside step, ``attempt``.
JOB_WORKFLOW = "roost.job"
#: The history lines of a job's workflow that change its row or make an event (:meth:`JobLifecycle.heard`).
_HEARD = frozenset({"attempt_failed", "attempt_lost", "attempt_started"})
#: Attempts whose streamed batches this agent keeps the run and message of (:attr:`JobLifecycle.streaming`).
_STREAMING_KEPT = 256


class JobLifecycle(Part, WorkerJobs):
    def __init__(self, orchestrator: OrchestratorApi) -> None:
        super().__init__(orchestrator)
        #: Per streaming try ``(job_id, attempt)``: the run's event columns and the step's hop, read
        #: by its first batch. Neither ever changes (a run's ids are written once, a job's arguments
        #: too), so later batches read nothing of the job. At most :data:`_STREAMING_KEPT` (the oldest
        #: goes first).
        self.streaming: dict[tuple[str, int], tuple[Row, int]] = {}

    def _engine(self) -> Engine:
        """The workflow core of this agent (its jobs' workflows)."""
        return engine_of(cast("Actor", self.agent))

    def retry_policy(self, job: Row) -> RetryPolicy:
        """The retry policy of ``job``: its own attempts, the agent's backoff settings."""
        cfg = self.agent.settings()
        return RetryPolicy(job["max_attempts"], cfg.job_backoff, cfg.job_backoff_cap)

    # -- start ------------------------------------------------------------------------------------------
    async def start(self, run: Row, item: Row | None, tool_name: str, args: dict[str, Any]) -> Row:
        """A new job for a step (``item``) or a model step (``item`` None): its row and its workflow,
        whose first attempt starts in this turn's process once the turn commits."""
        now = self.now
        job: Row = {
            "job_id": new_id("job"),
            "run_id": run["run_id"],
            "turn_id": run["turn_id"],
            "item_id": item["item_id"] if item else None,
            "job_kind": "tool" if item else "model",
            "tool_name": tool_name,
            "args": args,
            "status": JobStatus.RUNNING,
            "attempt": 0,
            "max_attempts": self.agent.settings().job_max_attempts,
            "progress": {},
            "created_at": now,
            "updated_at": now,
        }
        self.store.insert("jobs", job)
        await self._engine().start(JOB_WORKFLOW, {"job_id": job["job_id"]}, job["job_id"])
        return job

    # -- the attempt's turns ----------------------------------------------------------------------------
    def begin(self, job_id: str, attempt: int, run: int, key: str) -> JobSpec:
        """What try ``(attempt, run)`` of the job runs (in its own turn, fenced by the core): the
        job's row counts the try and shows it running; its context carries the try's number, the
        step's idempotency key and the checkpoint of the job's last report. A streamed model step
        that had shown text is not run again (``refused``: its message is interrupted)."""
        job = self.store.get("jobs", job_id)
        assert job is not None
        agent = self.agent
        cfg = agent.settings()
        tries = job["attempt"] + 1
        now = self.now
        self.store.update(
            "jobs",
            job_id,
            status=JobStatus.RUNNING,
            attempt=tries,
            lease_owner=job_runner(agent.extension.process).worker_id,
            lease_expires_at=now + cfg.lease_ttl,
            heartbeat_at=now,
            error=None,
            updated_at=now,
        )
        job = {**job, "attempt": tries}
        run_row = self.run(job["run_id"])
        sleep = agent.extension.process.clock.sleep
        model = job["job_kind"] == "model"
        nothing = ToolContext("", "", "", None, "", agent.extension.process.data_dir)
        if tries > job["max_attempts"]:  # lost with its process on every try: its attempts are spent
            error = f"{LEASE_LOST} (attempt {tries - 1} of {job['max_attempts']})"
            return JobSpec(nothing, _never, sleep, model, self.note_failure(job_id, error, retryable=True))
        if model and tries > 1 and self.orchestrator.streams.committed(job):
            error = job["error"] or LEASE_LOST
            refused = self.note_failure(job_id, error, retryable=True, interrupted=True)
            return JobSpec(nothing, _never, sleep, True, refused)
        ctx = self.orchestrator.execution.context(run_row, job["item_id"], job["tool_name"], tries)
        ctx.checkpoint = self.records.original(job["progress"].get("checkpoint"))
        ctx.idempotency_key = key
        execute = self._executor(job, run_row)
        tracer = agent.extension.process.tracer
        if tracer is not None:  # the attempt in a span of its run's trace (roost.agent.tracing)
            from roost.agent.tracing import run_spans

            spans = run_spans(tracer)
            assert spans is not None
            execute = spans.job(run_row, job, tries, execute)
        return JobSpec(ctx, execute, sleep, model, last=tries >= job["max_attempts"])

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

    async def progress(self, job_id: str, done: float, total: float, message: str, checkpoint: Any) -> None:
        """Record progress (and a kept checkpoint) and emit ``tool_progress``."""
        kept = self.records.keep(checkpoint) if checkpoint is not None else None
        job = self.store.get("jobs", job_id)
        assert job is not None
        percent = round(100 * done / total, 1) if total > 0 else None
        progress = {**job["progress"], "done": done, "total": total, "percent": percent, "message": message}
        if kept is not None:
            progress["checkpoint"] = kept
        now = self.now
        self.store.update(
            "jobs",
            job_id,
            progress=progress,
            heartbeat_at=now,
            lease_expires_at=now + self.agent.settings().lease_ttl,
            updated_at=now,
        )
        self.event(
            "tool_progress",
            self.run(job["run_id"]),
            item_id=job["item_id"],
            status=EventStatus.RUNNING,
            payload={
                "tool": job["tool_name"],
                "job_id": job_id,
                "attempt": job["attempt"],
                **{k: v for k, v in progress.items() if k != "checkpoint"},
            },
        )

    async def stream(self, job_id: str, tries: int, text: str) -> None:
        """A batch of a streamed model step, committed to its message with one ``model_delta`` (the
        core fenced this turn: only the current try's batches are recorded)."""
        key = (job_id, tries)
        kept = self.streaming.get(key)
        if kept is None:  # the try's first batch
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

    def keep_result(self, job_id: str, result: Any) -> dict[str, Any]:
        """Keep the attempt's ``result`` with the job: shown form in ``result`` (the payload policy
        applied, heavy values in the blob store; the item will hold it), and for a model step its
        decision in ``outcome`` (tool calls' arguments kept: intact, secrets in the vault). The
        outcome the workflow core records is a flag: nothing of the result reaches its tables, and
        no size of result is refused there. A result that cannot be stored is a failure of the step
        (retrying would not help)."""
        job = self.store.get("jobs", job_id)
        assert job is not None
        records = self.records
        try:
            clean = records.clean(result)
            kept = None
            if job["job_kind"] == "model":
                step = ModelStep.model_validate(result)
                kept = records.keep({**step.model_dump(mode="json"), "text": None, "ask": None})
                kept["text"] = records.clean_text(step.text) if step.text else step.text
                kept["ask"] = records.clean_text(step.ask) if step.ask else step.ask
        except (PayloadError, TypeError, ValueError) as exc:
            return self.note_failure(job_id, f"result not storable: {exc}", retryable=False)
        self.store.update("jobs", job_id, result=clean, outcome=kept, updated_at=self.now)
        return {"ok": True}

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
        """Keep why the attempt ends the job (its error, or the question of a tool that needs input)
        with the job, cleaned as every free text is; the outcome the core records is its flags."""
        if needs_input:
            self.store.update("jobs", job_id, outcome={"input": self.err(error, 1000)}, updated_at=self.now)
            return {"input": True}
        self.store.update("jobs", job_id, error=self.err(error, 500), updated_at=self.now)
        flags: dict[str, Any] = {"failed": True, "retryable": retryable, "interrupted": interrupted}
        if attempts is not None:  # its last try failed: the job's attempts are spent
            flags["attempts"] = attempts
        return flags

    def committed(self, job_id: str) -> bool:
        """Whether the job's streamed model step has shown text already."""
        job = self.store.get("jobs", job_id)
        return job is not None and self.orchestrator.streams.committed(job) > 0

    def clean_error(self, workflow_id: str, text: str) -> str:
        """An error of a job's attempt, or of a run's workflow, as the core is to record it: the
        payload policy applied, the run's secrets scrubbed."""
        job = self.store.fields("jobs", workflow_id, ("run_id",))
        if job is not None:
            self.records.concern(job["run_id"])
        elif self.store.fields("runs", workflow_id, ("run_id",)) is not None:
            self.records.concern(workflow_id)
        return self.err(text, 1000) or text

    # -- what the core records ----------------------------------------------------------------------------
    def heard(self, job_id: str, entry: dict[str, Any]) -> None:
        """A line of the job's workflow history, in the turn that writes it: a failed attempt that
        will be retried (``retry_wait``, an event with ``retry_in_s``), a run lost with its process
        (its capability sessions ``resumable``, a ``tool_failed`` event), a later try started
        (``tool_started``)."""
        event, detail = entry["event"], entry["detail"] or {}
        if event not in _HEARD:
            return
        job = self.store.get("jobs", job_id)
        if job is None or job["status"] not in ACTIVE_JOB:
            return
        run = self.run(job["run_id"])
        if event == "attempt_failed":
            error = self.err(detail.get("error") or "failed", 500)
            delay = float(detail.get("delay", 0.0))
            self.store.update(
                "jobs",
                job_id,
                status=JobStatus.RETRY_WAIT,
                error=error,
                lease_owner=None,
                updated_at=self.now,
            )
            if job["job_kind"] == "model":
                self.orchestrator.steps.model_failed(
                    run, error or "", True, will_retry=True, attempt=job["attempt"], retry_in_s=delay
                )
            else:
                self._tool_retrying(run, job, error, delay)
        elif event == "attempt_lost":
            self.orchestrator.capabilities.lease_lost(job)
            self.store.update("jobs", job_id, error=LEASE_LOST, lease_owner=None, updated_at=self.now)
            if job["job_kind"] == "tool" and job["attempt"] < job["max_attempts"]:
                self._tool_retrying(run, job, LEASE_LOST, 0)
        elif (
            event == "attempt_started"
            and 1 <= job["attempt"] < job["max_attempts"]
            and job["job_kind"] == "tool"
        ):
            self.event(
                "tool_started",
                run,
                item_id=job["item_id"],
                status=EventStatus.RUNNING,
                payload={
                    "tool": job["tool_name"],
                    "args": shown(job["args"]),
                    "job_id": job_id,
                    "attempt": job["attempt"] + 1,
                },
            )

    async def ended(self, workflow: dict[str, Any]) -> None:
        """The job's workflow ended (in the turn that records it): the job's outcome recorded, its
        run advanced. A cancelled one was recorded by the cancel already."""
        job_id = str(workflow["id"])
        job = self.store.get("jobs", job_id)
        if job is None or job["status"] not in ACTIVE_JOB:
            return
        self.streaming.pop((job_id, job["attempt"]), None)
        run = self.run(job["run_id"])
        steps = self.orchestrator.steps
        outcome = workflow["result"] if workflow["status"] == "completed" else None
        if isinstance(outcome, dict) and outcome.get("ok"):
            self._completed(run, job)
            if job["item_id"]:
                await self.orchestrator.delegations.step_done(run)
        elif isinstance(outcome, dict) and outcome.get("input"):
            question = (job["outcome"] or {}).get("input") or "input needed"
            self.store.update(
                "jobs",
                job_id,
                status=JobStatus.FAILED,
                error="needs input",
                lease_owner=None,
                updated_at=self.now,
            )
            item = self.store.get("items", job["item_id"]) if job["item_id"] else None
            steps.ask(run, str(question), item)
        elif isinstance(outcome, dict) and outcome.get("failed"):
            tries = outcome.get("attempts")
            self._failed(run, job, job["error"] or "failed", bool(outcome.get("retryable")), attempts=tries)
        else:  # attempts spent (the step failed), or the body failed
            error, attempts, retryable = self._step_failure(job_id, workflow)
            self._failed(run, job, error, retryable, attempts=attempts)
        await self._done(run, job)

    async def _done(self, run: Row, job: Row) -> None:
        """The job's end is recorded: its run's body hears it (``job:{job_id}``, what comes next)."""
        loop = self.orchestrator.loop
        run_id, item_id = run["run_id"], job["item_id"]
        answer = loop.after_item(run_id, item_id) if item_id else loop.after_model(run_id)
        await loop.notify(run_id, f"job:{job['job_id']}", answer)
        await self.orchestrator.steps.drain_released()

    def _step_failure(self, job_id: str, workflow: dict[str, Any]) -> tuple[str, int | None, bool]:
        """Why the job's step failed for good, its last attempt (None: the body failed) and whether
        asking again may help (``continue_run``): not after its process was lost too often."""
        status = self._engine().status(job_id)
        for step in status.get("steps", []):
            if step.get("error"):
                error = str(step["error"])
                return error, int(step.get("attempt") or 0), not error.startswith("lost with its process")
        return str(workflow.get("error") or "failed"), None, False

    def _completed(self, run: Row, job: Row) -> None:
        store = self.store
        job_id = job["job_id"]
        store.update("jobs", job_id, status=JobStatus.COMPLETED, lease_owner=None, updated_at=self.now)
        steps = self.orchestrator.steps
        if job["job_kind"] == "model":
            step = ModelStep.model_validate(self.records.original(job["outcome"]))
            streamed = self.orchestrator.streams.finish(job)
            if streamed is not None and not step.tool_calls and not step.ask:
                step = step.model_copy(update={"text": streamed})  # what was shown, cleaned
            steps.record_model_step(run, step)
            return
        item = store.get("items", job["item_id"])
        assert item is not None
        steps.item_completed(run, item, self.agent.catalog().get(job["tool_name"]), job["result"])

    def _failed(self, run: Row, job: Row, error: str, retryable: bool, *, attempts: int | None) -> None:
        """The job failed for good (its step is not retried any more): the job, then its step and run;
        a streamed model step that had shown text leaves its message interrupted."""
        error = self.err(error or "failed", 500) or "failed"
        store = self.store
        steps = self.orchestrator.steps
        store.update(
            "jobs",
            job["job_id"],
            status=JobStatus.FAILED,
            error=error,
            retryable=int(retryable),
            lease_owner=None,
            updated_at=self.now,
        )
        if job["job_kind"] == "model":
            if self.orchestrator.streams.committed(job):
                chars = self.orchestrator.streams.interrupt(run, job, error)
                resume = "; continue_run resumes it" if retryable else ""
                self.orchestrator.runs.fail(
                    run,
                    f"model stream interrupted after {chars} characters ({error}){resume}",
                    retryable=retryable,
                )
                return
            self.orchestrator.streams.interrupt(run, job, error)  # if it began streaming
            steps.model_failed(run, error, retryable, will_retry=False, attempt=job["attempt"])
            return
        item = store.get("items", job["item_id"])
        assert item is not None
        tool = self.agent.catalog().get(job["tool_name"])
        if tool.heavy:
            self.orchestrator.project.release_heavy(run["run_id"])
        told = f" (attempt {attempts} of {job['max_attempts']})" if attempts is not None else ""
        steps.item_failed(run, item, tool, f"{error}{told}", retryable=retryable)

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

    # -- cancel, and the jobs of an earlier release ---------------------------------------------------
    async def cancel_run(self, run: Row) -> None:
        """The run is being cancelled: each of its active jobs is ``cancelled`` and its workflow too
        (its attempt's task, in this process, is stopped at once)."""
        store = self.store
        now = self.now
        engine = self._engine()
        for job in store.select("jobs", "run_id = ? AND status IN (?, ?, ?)", (run["run_id"], *ACTIVE_JOB)):
            store.update(
                "jobs",
                job["job_id"],
                status=JobStatus.CANCELLED,
                cancel_requested=1,
                lease_owner=None,
                updated_at=now,
            )
            if engine.store.get(job["job_id"]) is not None:
                await engine.cancel(job["job_id"])
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

    async def adopt(self, job_id: str) -> None:
        """A lease or retry wake-up of a job begun before jobs ran on the workflow core (a file of an
        earlier release): if the job is still active and has no workflow, it gets one now, and its
        next try runs on the core."""
        job = self.store.get("jobs", job_id)
        engine = self._engine()
        if job is None or job["status"] not in ACTIVE_JOB or engine.store.get(job_id) is not None:
            return
        self.orchestrator.capabilities.lease_lost(job)
        if job["attempt"] >= job["max_attempts"]:  # as that release would have: its attempts are spent
            run = self.run(job["run_id"])
            self._failed(run, job, LEASE_LOST, True, attempts=job["attempt"])
            await self._done(run, job)
            return
        await engine.start(JOB_WORKFLOW, {"job_id": job_id}, job_id)


async def _never(ctx: ToolContext) -> Any:
    raise AssertionError("a refused try runs nothing")
