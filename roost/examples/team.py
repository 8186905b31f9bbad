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
   workflow ``work`` on ``team_worker/{team}.{worker}`` under the workflow id ``{run}:{worker}``
   (idempotent: a rerun of the branch after a crash answers the workflow it started);
3. ``done:{worker}`` (an event wait per worker): the worker's last step calls the team's
   ``worker_report``, which records the worker's status in the team's table ``team_workers`` and, when
   the worker is done, sends this event to the run (kept if it comes before the wait);
4. ``merge`` (in turn): the answer from the workers' results.

The worker's ``work``: for each part, a durable ``sleep`` (its delay), the part's answer written to
its table ``work`` (in turn: exactly once), a progress report to the team (outside: at least once,
``worker_report`` is idempotent); then the final report.

Guarantees (tests in ``tests/test_team.py`` and ``tests/test_team_crash.py``):

- **One control surface**: the workers' status and progress reach the team's ``get_run`` and its
  event log (``team_progress`` events), with the dispatch's attempts and runs per worker.
- **Partial completion survives a crash** of either side: what a worker recorded is kept, a worker
  done is not dispatched again, and no worker's part is written twice.
- **Cancelling the team's run cancels its workers** (``cancel_workflow`` / ``cancel_run``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import orjson

from roost.actors import RetryPolicy, RpcError, callable
from roost.workflows import Step, StepAttempt, Workflows, workflow

__all__ = ["Team", "TeamWorker"]

#: Workers of one run at most, and parts of one worker's share (more are cut, not refused).
MAX_WORKERS = 8
MAX_PARTS = 16
_RETRY = RetryPolicy(max_attempts=5, base=0.5, cap=4.0)


def answer(part: str, index: int) -> str:
    """The deterministic model's answer to one part of a worker's share."""
    return f"{part} [{index + 1}: {' '.join(reversed(part.split()))}]"


class Team(Workflows):
    """The orchestrator: its run dispatches workers and merges their results."""

    kind = "team"
    workflow_lease = 5.0
    migrations = (
        """CREATE TABLE team_workers (
            run_id TEXT NOT NULL, worker TEXT NOT NULL, status TEXT NOT NULL, progress INTEGER NOT NULL,
            parts INTEGER NOT NULL, result TEXT, updated_at REAL NOT NULL, PRIMARY KEY (run_id, worker))""",
    )

    @workflow
    async def team(self, step: Step, spec: dict[str, Any]) -> dict[str, Any]:
        workers = [str(w) for w in spec.get("workers", ["w1", "w2", "w3"])][:MAX_WORKERS]
        task, run = str(spec.get("task", "")), step.workflow_id
        plan: dict[str, str] = await step.do("plan", lambda: _plan(task, workers))
        delays = {str(k): float(v) for k, v in dict(spec.get("delays", {})).items()}

        def dispatch(worker: str) -> Callable[[StepAttempt], Awaitable[Any]]:
            job: dict[str, Any] = {"team": self.name, "run": run, "worker": worker, "part": plan[worker]}
            parts = max(1, min(MAX_PARTS, int(spec.get("parts", 2))))
            job |= {"parts": parts, "delay": delays.get(worker, 0.0)}

            async def go(_: StepAttempt) -> str:
                ref = self.actor(TeamWorker.kind, f"{self.name}.{worker}")
                status = await ref.call("start_workflow", "work", job, f"{run}:{worker}")
                return str(status["status"])

            return go

        await step.parallel("dispatch", {w: dispatch(w) for w in workers}, retry=_RETRY)
        results = {w: await step.wait_for_event(f"done:{w}") for w in workers}
        merged: dict[str, Any] = await step.do("merge", lambda: {"task": task, "answers": results})
        return merged

    @callable
    async def worker_report(
        self, run_id: str, worker: str, status: str, progress: int, parts: int, result: Any = None
    ) -> bool:
        """A worker's report (idempotent: a repeat changes nothing). The first ``completed`` report
        of a worker sends ``done:{worker}`` to the run. Whether it was news."""
        row = self.sql.one(
            "SELECT status, progress FROM team_workers WHERE run_id = ? AND worker = ?", (run_id, worker)
        )
        if row is not None and (row[0] == "completed" or (row[0], row[1]) == (status, progress)):
            return False
        self.sql.execute(
            "INSERT INTO team_workers (run_id, worker, status, progress, parts, result, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, worker) DO UPDATE SET status ="
            " excluded.status, progress = excluded.progress, result = excluded.result,"
            " updated_at = excluded.updated_at",
            (run_id, worker, status, progress, parts, orjson.dumps(result).decode(), self.extension.now),
        )
        self.emit({"type": "team_progress", "run_id": run_id, "worker": worker, "status": status,
                   "progress": progress, "parts": parts})  # fmt: skip
        if status == "completed":
            try:
                await self.send_event(run_id, f"done:{worker}", result)
            except RpcError as exc:  # the run is over (cancelled): the report is kept, not delivered
                if exc.code != "workflow_state":
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
                "SELECT worker, status, progress, parts FROM team_workers WHERE run_id = ?", (run_id,)
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
        keep = ("id", "status", "result", "error", "reason", "waiting", "created_at", "updated_at")
        return {"run_id": run_id, **{k: status[k] for k in keep}, "branches": branches}

    @callable
    async def cancel_workflow(self, workflow_id: str) -> dict[str, Any]:
        """Cancel the run and every worker it dispatched (each worker's workflow ``{run}:{worker}``)."""
        before = await self.workflow_status(workflow_id)
        status = await super().cancel_workflow(workflow_id)
        dispatch: dict[str, Any] = next((s for s in before["steps"] if s["name"] == "dispatch"), {})
        for worker in [b["branch"] for b in dispatch.get("branches", [])]:
            try:
                await self.actor(TeamWorker.kind, f"{self.name}.{worker}").call(
                    "cancel_workflow", f"{workflow_id}:{worker}"
                )
            except RpcError as exc:  # not started yet, or finished already
                if exc.code not in ("workflow_not_found", "workflow_state"):
                    raise
        return status

    @callable
    async def cancel_run(self, run_id: str) -> dict[str, Any]:
        """``cancel_workflow(run_id)``: the run and its workers."""
        return await self.cancel_workflow(run_id)


def _plan(task: str, workers: list[str]) -> dict[str, str]:
    words = task.split() or ["(nothing)"]
    size = max(1, -(-len(words) // len(workers)))
    return {w: " ".join(words[i * size : (i + 1) * size]) or words[-1] for i, w in enumerate(workers)}


class TeamWorker(Workflows):
    """A worker: its workflow ``work`` answers its share part by part and reports to its team."""

    kind = "team_worker"
    workflow_lease = 5.0
    migrations = (
        "CREATE TABLE work (workflow_id TEXT NOT NULL, part INTEGER NOT NULL, text TEXT NOT NULL,"
        " PRIMARY KEY (workflow_id, part))",
    )

    @workflow
    async def work(self, step: Step, job: dict[str, Any]) -> list[str]:
        parts, delay, wid = int(job["parts"]), float(job["delay"]), step.workflow_id
        answers: list[str] = []
        for i in range(parts):
            await step.sleep(f"think {i}", delay)
            answers.append(await step.do(f"part {i}", partial(self._write, wid, i, answer(job["part"], i))))
            await step.external(f"progress {i}", self._report(job, "running", i + 1), retry=_RETRY)
        await step.external("report", self._report(job, "completed", parts, answers), retry=_RETRY)
        return answers

    def _write(self, wid: str, part: int, text: str) -> str:
        self.sql.execute("INSERT INTO work (workflow_id, part, text) VALUES (?, ?, ?)", (wid, part, text))
        return text

    def _report(
        self, job: dict[str, Any], status: str, progress: int, result: Any = None
    ) -> Callable[[StepAttempt], Awaitable[bool]]:
        async def go(_: StepAttempt) -> bool:
            ref = self.actor(Team.kind, str(job["team"]))
            args = (job["run"], job["worker"], status, progress, int(job["parts"]), result)
            news: bool = await ref.call("worker_report", *args)
            return news

        return go

    @callable(readonly=True)
    async def effects(self) -> dict[str, int]:
        """Parts written, by workflow id (each part once)."""
        rows = self.sql.execute("SELECT workflow_id, count(*) FROM work GROUP BY workflow_id")
        return {str(r[0]): int(r[1]) for r in rows}
