"""The orchestrator-workers shape, in the default app: a ``team`` (the orchestrator) splits a task
between ``team_worker`` actors (other actors, by name), whose progress and results come back through
the team's mailbox. Both are :class:`~roost.workflows.Workflows` kinds; the "model" is deterministic
(no network).

A run of the team is its workflow ``team`` (the run id is the workflow id)::

    start_workflow("team", {"task": "...", "workers": ["w1", "w2", "w3"], "delays": {"w3": 5}}, run_id)
    get_run(run_id)     # status, result, and per worker: status, progress, dispatch attempts and runs

The team's run, step by step:

1. ``plan`` (in turn): one part of the task per worker, recorded (never re-planned on replay);
2. ``dispatch`` (a ``parallel`` join, one branch per worker): each branch starts the worker's
   workflow ``work`` on ``team_worker/{team}.{worker}`` under the workflow id
   ``{run}:{generation}:{worker}`` (idempotent: a rerun of the branch after a crash answers the
   workflow it started; a ``restart_workflow`` of the run, a new generation, starts new ones);
3. ``done:{worker}`` (an event wait per worker): the worker's last step calls the team's
   ``worker_report``, which records the worker's status in the team's table ``team_workers`` and, when
   the worker has ended (``completed``, ``failed`` or ``cancelled``), sends this event to the run
   (kept if it comes before the wait);
4. ``merge`` (in turn): the answer from the workers' results; if a worker did not complete, the run
   fails instead, naming it (once every worker has ended).

The worker's ``work``: for each part, a durable ``sleep`` (its delay), the part's answer written to
its table ``work`` (in turn: exactly once), a progress report to the team (outside: at least once,
``worker_report`` is idempotent); then the final report. A ``work`` that ends any other way (a step
failed for good, the body's own error, ``nondeterministic``, a ``cancel_workflow``) reports
``failed`` or ``cancelled`` from a durable wake-up scheduled by ``on_workflow_end`` in the turn that
records the end (not from inside it: the team may be the caller).

A cancel of the run (``cancel_workflow`` / ``cancel_run``) is one turn of the team: the run's end and
the workflow ``cancel_workers`` (``{run}:{generation}:cancel``) that carries it to the workers commit
together; that workflow's join has one outside branch per worker dispatched and not ended, calling
the worker's ``cancel_workflow``, retried (and after a crash run again by its lease) until the worker
confirms. A ``restart_workflow`` of the run does the same for the generation it leaves. A worker
starts a team's job only if the team's ``dispatch_open(run, generation)`` says so, asked in the
turn that would start it: nothing starts after the run's cancel or restart is recorded.

Guarantees (tests in ``tests/test_team.py`` and ``tests/test_team_crash.py``):

- **One control surface**: the workers' status and progress reach the team's ``get_run`` and its
  event log (``team_progress`` events), with the dispatch's attempts and runs per worker, and a
  cancel's progress per worker (``cancel``).
- **Partial completion survives a crash** of either side: what a worker recorded is kept, a worker
  done is not dispatched again, and no worker's part is written twice (killed mid-part, killed
  mid-dispatch, the team and the workers in one process or in two).
- **A cancel is one turn and is retried until each worker confirms**: after a SIGKILL at any point
  after the cancel was acknowledged, every worker not ended ends cancelled.
- **No worker starts after the cancel is recorded**: a start sent before and delivered after is
  refused and starts nothing; a worker already started is cancelled.
- **A run that fails cancels the workers it dispatched**: a dispatch failed for good fails the
  run, and the workers already at work are cancelled as a cancel of the run would (a wake-up
  scheduled with the failure); nobody is left to cancel them by hand.
- **A restart cancels the old generation's workers**: and their late reports (of the old generation)
  change nothing in the new one.
- **A worker failing in any way reports it**: a failed step, the body's own error,
  ``nondeterministic``, a cancel; ``get_run`` shows it, and the run fails (reason ``error``) naming
  it instead of waiting for ever.
- **A restarted run dispatches its workers again**: their workflow ids carry the generation, and a
  report of an older generation changes nothing.
- **A bad spec fails the run at once**: ``workers`` must be a list of 1 to ``MAX_WORKERS`` distinct
  names (more are cut); otherwise the run fails before its first step, without retries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, ClassVar

import orjson

from roost.actors import RetryPolicy, RpcError, callable, wakeup
from roost.workflows import Step, StepAttempt, Workflows, workflow

__all__ = ["Team", "TeamWorker", "WorkersDidNotComplete"]

#: Workers of one run at most, and parts of one worker's share (more are cut, not refused).
MAX_WORKERS = 8
MAX_PARTS = 16
_RETRY = RetryPolicy(max_attempts=5, base=0.5, cap=4.0)
#: A worker's cancel is tried again until the worker confirms (an hour and more of attempts).
_CONFIRM = RetryPolicy(max_attempts=200, base=0.5, cap=30.0)
#: What a worker reports last: it has ended.
ENDED = ("completed", "failed", "cancelled")


class WorkersDidNotComplete(Exception):
    """A team run's worker failed or was cancelled: the run fails, naming it."""


def _workers(spec: Any) -> list[str]:
    """The spec's workers: a list of 1 to :data:`MAX_WORKERS` distinct names (more are cut)."""
    workers = spec.get("workers", ["w1", "w2", "w3"]) if isinstance(spec, dict) else None
    if not isinstance(workers, list) or not workers:
        raise ValueError(f"a team run needs a list of 1 to {MAX_WORKERS} workers, got {workers!r}")
    names = [str(w) for w in workers][:MAX_WORKERS]
    if len(set(names)) != len(names) or not all(names):
        raise ValueError(f"a team run's workers are distinct non-empty names, got {names!r}")
    return names


def answer(part: str, index: int) -> str:
    """The deterministic model's answer to one part of a worker's share."""
    return f"{part} [{index + 1}: {' '.join(reversed(part.split()))}]"


class Team(Workflows):
    """The orchestrator: its run dispatches workers and merges their results."""

    kind = "team"
    workflow_lease = 5.0
    #: The retries of a worker's dispatch (a worker served far away may want more).
    dispatch_retry: ClassVar[RetryPolicy] = _RETRY
    #: The retries of a worker's cancel; spent (or a run lost ``MAX_LOST_RUNS`` times), the join of
    #: ``cancel_workers`` fails and the whole of it is restarted ``cancel_pause`` seconds later, a
    #: pause that doubles with each generation that failed, up to ``cancel_pause_cap``.
    cancel_retry: ClassVar[RetryPolicy] = _CONFIRM
    cancel_pause: ClassVar[float] = 60.0
    cancel_pause_cap: ClassVar[float] = 3600.0
    migrations = (
        """CREATE TABLE team_workers (
            run_id TEXT NOT NULL, worker TEXT NOT NULL, status TEXT NOT NULL, progress INTEGER NOT NULL,
            parts INTEGER NOT NULL, result TEXT, updated_at REAL NOT NULL, PRIMARY KEY (run_id, worker))""",
        # the run's generation a row reports on (a restarted run's workers report anew)
        "ALTER TABLE team_workers ADD COLUMN generation INTEGER NOT NULL DEFAULT 1",
    )

    @workflow
    async def team(self, step: Step, spec: dict[str, Any]) -> dict[str, Any]:
        workers = _workers(spec)  # a bad spec fails the run here, before any step (no retries)
        task, run, gen = str(spec.get("task", "")), step.workflow_id, step.generation
        plan: dict[str, str] = await step.do("plan", lambda: _plan(task, workers))
        delays = {str(k): float(v) for k, v in dict(spec.get("delays", {})).items()}

        def dispatch(worker: str) -> Callable[[StepAttempt], Awaitable[Any]]:
            job: dict[str, Any] = {"team": self.name, "run": run, "worker": worker, "part": plan[worker]}
            job["gen"] = gen
            parts = max(1, min(MAX_PARTS, int(spec.get("parts", 2))))
            job |= {"parts": parts, "delay": delays.get(worker, 0.0)}

            async def go(_: StepAttempt) -> str:
                ref = self.actor(TeamWorker.kind, f"{self.name}.{worker}")
                status = await ref.call("start_workflow", "work", job, worker_workflow(run, gen, worker))
                return str(status["status"])

            return go

        await step.parallel("dispatch", {w: dispatch(w) for w in workers}, retry=self.dispatch_retry)
        ends = {w: await step.wait_for_event(f"done:{w}") for w in workers}
        failed = {w: end["status"] for w, end in ends.items() if end["status"] != "completed"}
        if failed:
            raise WorkersDidNotComplete(f"workers did not complete: {failed}")
        results = {w: end["result"] for w, end in ends.items()}
        merged: dict[str, Any] = await step.do("merge", lambda: {"task": task, "answers": results})
        return merged

    @callable
    async def worker_report(
        self,
        run_id: str,
        worker: str,
        status: str,
        progress: int,
        parts: int,
        result: Any = None,
        generation: int = 1,
    ) -> bool:
        """A worker's report for generation ``generation`` of the run (idempotent: a repeat, a
        report after the worker's last one, or one of an older generation changes nothing). The
        worker's last report (``completed``, ``failed`` or ``cancelled``) sends ``done:{worker}``
        (``{"status", "result"}``) to the run. Whether it was news."""
        row = self.sql.one(
            "SELECT status, progress, generation FROM team_workers WHERE run_id = ? AND worker = ?",
            (run_id, worker),
        )
        if row is not None and (
            int(row[2]) > generation
            or (int(row[2]) == generation and (row[0] in ENDED or (row[0], row[1]) == (status, progress)))
        ):
            return False
        self.sql.execute(
            "INSERT INTO team_workers (run_id, worker, status, progress, parts, result, updated_at,"
            " generation) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, worker) DO UPDATE SET"
            " status = excluded.status, progress = excluded.progress, parts = excluded.parts,"
            " result = excluded.result, updated_at = excluded.updated_at, generation = excluded.generation",
            (run_id, worker, status, progress, parts, orjson.dumps(result).decode(), self.extension.now,
             generation),
        )  # fmt: skip
        self.emit({"type": "team_progress", "run_id": run_id, "worker": worker, "status": status,
                   "progress": progress, "parts": parts})  # fmt: skip
        if status in ENDED:
            try:
                run = await self.workflow_status(run_id)
                if run["generation"] == generation:  # an older generation's worker: not this run's
                    await self.send_event(run_id, f"done:{worker}", {"status": status, "result": result})
            except RpcError as exc:  # the run is over (cancelled) or gone: the report is kept
                if exc.code not in ("workflow_state", "workflow_not_found"):
                    raise
        return True

    @callable(readonly=True)
    async def get_run(self, run_id: str) -> dict[str, Any]:
        """The run (``workflow_status`` of its workflow) and its workers: per worker the status and
        progress it reported and the dispatch's ``attempt`` and ``run`` (the join state)."""
        status = await self.workflow_status(run_id)
        dispatch = next((s for s in status["steps"] if s["name"] == "dispatch"), None)
        joined = {b["branch"]: b for b in (dispatch or {}).get("branches", [])}
        reports = {
            str(r[0]): (str(r[1]), int(r[2]), int(r[3]))
            for r in self.sql.execute(
                "SELECT worker, status, progress, parts FROM team_workers"
                " WHERE run_id = ? AND generation = ?",
                (run_id, status["generation"]),
            )
        }
        branches = []
        for worker, branch in joined.items():
            reported, progress, parts = reports.get(worker, ("dispatched", 0, 0))
            if branch["status"] != "completed":
                reported = (
                    "dispatching" if branch["status"] in ("running", "lost", "retry_wait") else "failed"
                )
            if status["status"] == "cancelled" and reported != "completed":
                reported = "cancelled"
            branches.append({"worker": worker, "status": reported, "progress": progress, "parts": parts,
                             "attempt": branch["attempt"], "runs": branch["run"]})  # fmt: skip
        keep: tuple[str, ...] = ("id", "status", "generation", "result", "error", "reason", "waiting")
        keep = (*keep, "created_at", "updated_at")
        out = {"run_id": run_id, **{k: status[k] for k in keep}, "branches": branches}
        return out | {"cancel": await self._cancel_state(run_id, int(status["generation"]))}

    async def _cancel_state(self, run: str, gen: int) -> dict[str, Any] | None:
        """The ``cancel_workers`` of generation ``gen`` of the run, if any: its status and per worker
        its branch's status and runs (``completed``: the worker confirmed)."""
        wid = cancel_workflow_id(run, gen)
        if not await _exists(self, wid):
            return None
        status = await self.workflow_status(wid)
        join: dict[str, Any] = next((s for s in status["steps"] if s["name"] == "cancel"), {})
        workers = {b["branch"]: {"status": b["status"], "runs": b["run"]} for b in join.get("branches", [])}
        return {"id": wid, "status": status["status"], "workers": workers}

    @callable(readonly=True)
    async def dispatch_open(self, run_id: str, generation: int) -> bool:
        """Whether generation ``generation`` of run ``run_id`` may still start workers: it is the run's
        current generation and the run has not ended. A worker asks this in the turn that would start
        its workflow, so a start that comes after the run's cancel or restart was recorded starts
        nothing."""
        try:
            run = await self.workflow_status(run_id)
        except RpcError as exc:
            if exc.code == "workflow_not_found":
                return False
            raise
        return run["generation"] == generation and run["status"] not in ENDED

    @callable
    async def cancel_workflow(self, workflow_id: str) -> dict[str, Any]:
        """Cancel the run, and in the same turn start its workflow ``cancel_workers``, which cancels
        each worker it dispatched (``{run}:{generation}:{worker}``) from outside the team's turns,
        retried until the worker confirms; the intent and its propagation commit with the cancel,
        so a crash after it cannot leave a worker running."""
        before = await self.workflow_status(workflow_id)
        status = await super().cancel_workflow(workflow_id)
        if before["name"] == "team":
            await self._cancel_workers(workflow_id, before)
        return status

    @callable
    async def cancel_run(self, run_id: str) -> dict[str, Any]:
        """``cancel_workflow(run_id)``: the run and its workers."""
        return await self.cancel_workflow(run_id)

    @callable
    async def restart_workflow(self, workflow_id: str) -> dict[str, Any]:
        """Restart the run (a new generation, which dispatches workers of its own) and cancel the
        workers of the generation it leaves, as a cancel does; their late reports are of the old
        generation and change nothing."""
        before = await self.workflow_status(workflow_id)
        status = await super().restart_workflow(workflow_id)
        if before["name"] == "team":
            await self._cancel_workers(workflow_id, before)
        return status

    async def _cancel_workers(self, run: str, before: dict[str, Any]) -> None:
        """Start ``cancel_workers`` for the workers of ``before`` (the run's status before its cancel or
        restart) that have not reported their end."""
        gen = int(before["generation"])
        dispatch: dict[str, Any] = next((s for s in before["steps"] if s["name"] == "dispatch"), {})
        ended = {
            str(r[0])
            for r in self.sql.execute(
                "SELECT worker, status FROM team_workers WHERE run_id = ? AND generation = ?", (run, gen)
            )
            if r[1] in ENDED
        }
        workers = [b["branch"] for b in dispatch.get("branches", []) if b["branch"] not in ended]
        wid = cancel_workflow_id(run, gen)
        if workers and not await _exists(self, wid):
            await self.start_workflow(
                "cancel_workers", {"run": run, "generation": gen, "workers": workers}, wid
            )

    @callable
    async def start_workflow(
        self, name: str, input: Any = None, workflow_id: str | None = None
    ) -> dict[str, Any]:
        """Start a workflow. **A team run's id holds no colon**: the team's own workflows and its
        workers' are named ``{run}:{generation}:…`` (:func:`cancel_workflow_id`), so a run named
        ``x:1:cancel`` would take the id of run ``x``'s cancel and make that cancel fail."""
        if name == "team" and workflow_id is not None and ":" in workflow_id:
            raise RpcError("invalid_arguments", f"a team run's id holds no ':' (got {workflow_id!r})")
        return await super().start_workflow(name, input, workflow_id)

    @workflow
    async def cancel_workers(self, step: Step, spec: dict[str, Any]) -> dict[str, str]:
        """Cancel each worker of generation ``spec["generation"]`` of run ``spec["run"]``: one branch
        per worker, each an outside call of the worker's ``cancel_workflow`` (at least once, retried
        under ``cancel_retry``; a run lost with its process runs again; a join that fails anyway is
        restarted, see :meth:`on_workflow_end`). A worker confirms with its
        status: ``cancelled``, ``ended`` (it had ended already) or ``not started`` (it never will:
        ``dispatch_open`` is false)."""
        run, gen = str(spec["run"]), int(spec["generation"])
        branches = {str(w): self._confirm_cancel(run, gen, str(w)) for w in spec["workers"]}
        confirmed: dict[str, str] = await step.parallel("cancel", branches, retry=self.cancel_retry)
        return confirmed

    async def on_workflow_end(self, workflow: dict[str, Any]) -> None:
        """**A run that fails cancels the workers it dispatched**: a ``team`` run that ends failed
        (a dispatch failed for good, a worker failed, the body's own error) starts
        ``cancel_workers`` for its workers not ended, from a wake-up scheduled in this turn (the
        failure and the intent to cancel commit together); no worker is left working for a run
        nobody can cancel any more.

        A ``cancel_workers`` that failed (a worker did not confirm within its retries) is
        restarted later, from a wake-up scheduled in this turn: a cancel is carried to its workers
        until each one confirms. The pause after generation ``g`` failed is
        ``cancel_pause * 2**(g-1)``, capped at ``cancel_pause_cap``: a worker that stays
        unreachable is asked less and less often, but never given up on."""
        if workflow["name"] == "team" and workflow["status"] == "failed":
            run, gen = str(workflow["id"]), int(workflow["generation"])
            payload = {"run": run, "gen": gen}
            await self.schedule(0, "cancel_after_failure", payload, key=f"team-failed:{run}:{gen}")
        if workflow["name"] == "cancel_workers" and workflow["status"] == "failed":
            wid, gen = str(workflow["id"]), int(workflow["generation"])
            key = f"team-cancel-again:{wid}:{gen}"
            pause = min(self.cancel_pause * 2.0 ** min(gen - 1, 62), self.cancel_pause_cap)
            await self.schedule(pause, "cancel_again", {"id": wid, "gen": gen}, key=key)

    @wakeup
    async def cancel_after_failure(self, payload: dict[str, Any]) -> None:
        """The workers of a failed run's generation cancelled (see :meth:`on_workflow_end`); a run
        restarted since cancelled them already."""
        status = await self.workflow_status(str(payload["run"]))
        if status["status"] == "failed" and status["generation"] == int(payload["gen"]):
            await self._cancel_workers(str(payload["run"]), status)

    @wakeup
    async def cancel_again(self, payload: dict[str, Any]) -> None:
        status = await self.workflow_status(str(payload["id"]))
        if status["status"] == "failed" and status["generation"] == int(payload["gen"]):
            await self.restart_workflow(str(payload["id"]))

    def _confirm_cancel(self, run: str, gen: int, worker: str) -> Callable[[StepAttempt], Awaitable[str]]:
        async def go(_: StepAttempt) -> str:
            ref = self.actor(TeamWorker.kind, f"{self.name}.{worker}")
            try:
                status = await ref.call("cancel_workflow", worker_workflow(run, gen, worker))
            except RpcError as exc:
                if exc.code == "workflow_state":
                    return "ended"
                if exc.code == "workflow_not_found":
                    return "not started"
                raise
            return str(status["status"])

        return go


async def _exists(actor: Workflows, workflow_id: str) -> bool:
    try:
        await actor.workflow_status(workflow_id)
    except RpcError as exc:
        if exc.code == "workflow_not_found":
            return False
        raise
    return True


def cancel_workflow_id(run: str, generation: int) -> str:
    """The id of the team's ``cancel_workers`` workflow for generation ``generation`` of run ``run``."""
    return f"{run}:{generation}:cancel"


def worker_workflow(run: str, generation: int, worker: str) -> str:
    """The id of ``worker``'s workflow for generation ``generation`` of run ``run``."""
    return f"{run}:{generation}:{worker}"


def _plan(task: str, workers: list[str]) -> dict[str, str]:
    words = task.split() or ["(nothing)"]
    size = max(1, -(-len(words) // len(workers)))
    return {w: " ".join(words[i * size : (i + 1) * size]) or words[-1] for i, w in enumerate(workers)}


class TeamWorker(Workflows):
    """A worker: its workflow ``work`` answers its share part by part and reports to its team."""

    kind = "team_worker"
    workflow_lease = 5.0
    #: The retries of a report to the team (a team served far away may want more).
    report_retry: ClassVar[RetryPolicy] = _RETRY
    migrations = (
        "CREATE TABLE work (workflow_id TEXT NOT NULL, part INTEGER NOT NULL, text TEXT NOT NULL,"
        " PRIMARY KEY (workflow_id, part))",
        # each workflow's job (written by its first step), for the report of a cancel
        "CREATE TABLE jobs (workflow_id TEXT PRIMARY KEY, job TEXT NOT NULL) WITHOUT ROWID",
    )

    @workflow
    async def work(self, step: Step, job: dict[str, Any]) -> list[str]:
        parts, delay, wid = int(job["parts"]), float(job["delay"]), step.workflow_id
        await step.do("job", partial(self._keep_job, wid, job))
        answers: list[str] = []
        for i in range(parts):
            await step.sleep(f"think {i}", delay)
            text = answer(job["part"], i)
            answers.append(await step.do(f"part {i}", partial(self._write, wid, i, text)))
            await step.external(f"progress {i}", self._report(job, "running", i + 1), retry=self.report_retry)
        report = self._report(job, "completed", parts, answers)
        await step.external("report", report, retry=self.report_retry)
        return answers

    @callable
    async def start_workflow(
        self, name: str, input: Any = None, workflow_id: str | None = None
    ) -> dict[str, Any]:
        """Start a workflow; a team's job (``work`` with a ``team`` and a ``run``) not started yet is
        started only if its team's ``dispatch_open`` says its run's generation may still start
        workers (asked in this turn: a start that comes after the run's cancel or restart was
        recorded is refused, ``workflow_state``, and starts nothing)."""
        job = input if isinstance(input, dict) else {}
        if (
            name == "work"
            and workflow_id is not None
            and "team" in job
            and not await _exists(self, workflow_id)
        ):
            team = self.actor(Team.kind, str(job["team"]))
            if not await team.call("dispatch_open", job["run"], int(job.get("gen", 1))):
                raise RpcError(
                    "workflow_state",
                    f"run {job['run']!r} of team {job['team']!r} is over or restarted:"
                    f" {workflow_id!r} not started",
                )
        return await super().start_workflow(name, input, workflow_id)

    async def on_workflow_end(self, workflow: dict[str, Any]) -> None:
        """A ``work`` workflow that ended without completing (failed for any reason: a step, the
        body's code, ``nondeterministic``; or cancelled) reports it to its team from a wake-up
        scheduled in this turn (durable; not from inside the turn: the team may be the caller)."""
        if workflow["name"] != "work" or workflow["status"] == "completed":
            return
        wid = str(workflow["id"])
        row = self.sql.one("SELECT job FROM jobs WHERE workflow_id = ?", (wid,))
        if row is None:  # ended before its first step: no team to tell
            return
        progress = self.sql.one("SELECT count(*) FROM work WHERE workflow_id = ?", (wid,))
        report = {"job": orjson.loads(row[0]), "progress": int(progress[0]) if progress else 0}
        report |= {"status": workflow["status"], "error": workflow["error"]}
        key = f"team-end:{wid}:{workflow['generation']}"
        await self.schedule(0, "report_end", report, key=key, retry=self.report_retry)

    @wakeup
    async def report_end(self, payload: dict[str, Any]) -> None:
        status = str(payload["status"])
        await self._send(payload["job"], status, int(payload["progress"]), payload.get("error"))

    @wakeup
    async def report_cancelled(self, payload: dict[str, Any]) -> None:
        """(Wake-ups scheduled before ``report_end`` took their place.)"""
        await self._send(payload["job"], "cancelled", int(payload["progress"]))

    async def _send(self, job: dict[str, Any], status: str, progress: int, result: Any = None) -> bool:
        """The report to the team's ``worker_report``; whether it was news."""
        ref = self.actor(Team.kind, str(job["team"]))
        args = (job["run"], job["worker"], status, progress, int(job["parts"]), result)
        news: bool = await ref.call("worker_report", *args, int(job.get("gen", 1)))
        return news

    def _keep_job(self, wid: str, job: dict[str, Any]) -> None:
        self.sql.execute(
            "INSERT INTO jobs (workflow_id, job) VALUES (?, ?)", (wid, orjson.dumps(job).decode())
        )

    def _write(self, wid: str, part: int, text: str) -> str:
        self.sql.execute("INSERT INTO work (workflow_id, part, text) VALUES (?, ?, ?)", (wid, part, text))
        return text

    def _report(
        self, job: dict[str, Any], status: str, progress: int, result: Any = None
    ) -> Callable[[StepAttempt], Awaitable[bool]]:
        async def go(_: StepAttempt) -> bool:
            return await self._send(job, status, progress, result)

        return go

    @callable(readonly=True)
    async def effects(self) -> dict[str, int]:
        """Parts written, by workflow id (each part once)."""
        rows = self.sql.execute("SELECT workflow_id, count(*) FROM work GROUP BY workflow_id")
        return {str(r[0]): int(r[1]) for r in rows}
