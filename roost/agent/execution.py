"""Execution: running a step — a tool inline in the current turn, or a background job's records.

Inline tools run inside the agent's turn: their result and the item's ``completed`` status commit
together, so a completed step is never run again. Background steps become jobs (see
:mod:`roost.agent.background`); this module owns the job rows: claim (lease and the wake-up at its
end), begin, heartbeat, progress, each fenced by ``(job_id, attempt)`` and the worker's id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roost.agent.background import JobSpec, runner_for
from roost.agent.catalog import Tool, ToolContext
from roost.agent.store import Row, Store, new_id

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from roost.agent.agent import Agent

__all__ = ["ACTIVE_JOB", "Execution"]

#: Job statuses in which a job still owns its run's next step.
ACTIVE_JOB = ("queued", "running", "retry_wait")


class Execution:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    @property
    def store(self) -> Store:
        return self.agent.telemetry.store()

    @property
    def now(self) -> float:
        return self.agent._host._now

    def context(self, run: Row, item_id: str | None, tool_name: str, attempt: int = 1) -> ToolContext:
        agent = self.agent
        done = self.store.select(
            "items", "run_id = ? AND status = 'completed'", (run["run_id"],), order="step_index"
        )
        return ToolContext(
            agent=agent.name,
            run_id=run["run_id"],
            turn_id=run["turn_id"],
            item_id=item_id,
            trace_id=run["trace_id"],
            data_dir=agent._host.registry.config.data_dir,
            settings=agent.settings().tool_settings(tool_name),
            inputs=list(self.agent.telemetry.original(run["inputs"])),
            results={i["tool_name"]: i["result"] for i in done},
            attempt=attempt,
        )

    async def run_inline(self, run: Row, item: Row, tool: Tool) -> Any:
        """Run ``tool`` inside this turn (it must be quick). Exceptions go to the caller."""
        ctx = self.context(run, item["item_id"], tool.name)
        return await tool.fn(ctx, tool.validate(self.agent.telemetry.original(item["args"])))

    # -- jobs ------------------------------------------------------------------------------------------
    async def start_job(self, run: Row, item: Row | None, tool_name: str, args: dict[str, Any]) -> Row:
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
            "status": "queued",
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
        runner = runner_for(agent._host.registry)
        attempt = job["attempt"] + 1
        lease = self.now + cfg.lease_ttl
        self.store.update(
            "jobs",
            job["job_id"],
            status="running",
            attempt=attempt,
            lease_owner=runner.worker_id,
            lease_expires_at=lease,
            heartbeat_at=self.now,
            error=None,
            updated_at=self.now,
        )
        await agent.schedule(cfg.lease_ttl, "agent_lease", {"job_id": job["job_id"], "attempt": attempt})
        runner.spawn(agent.kind, agent.name, job["job_id"], attempt)  # it starts by checking this claim
        return {**job, "status": "running", "attempt": attempt, "lease_expires_at": lease}

    def _current(self, job_id: str, attempt: int, worker_id: str) -> Row | None:
        job = self.store.get("jobs", job_id)
        if job is None or job["status"] != "running" or job["attempt"] != attempt:
            return None
        if job["lease_owner"] != worker_id:
            return None
        return job

    def begin(
        self,
        job_id: str,
        attempt: int,
        worker_id: str,
        execute: Callable[[Row, Row], Callable[[ToolContext], Awaitable[Any]]],
    ) -> JobSpec | None:
        """What the worker of ``(job_id, attempt)`` should run, or None if that attempt is not current."""
        job = self._current(job_id, attempt, worker_id)
        if job is None:
            return None
        run = self.store.get("runs", job["run_id"])
        assert run is not None
        ctx = self.context(run, job["item_id"], job["tool_name"], attempt)
        ctx.checkpoint = self.agent.telemetry.original(job["progress"].get("checkpoint"))
        return JobSpec(job_id, attempt, ctx, execute(job, run), self.agent.settings().heartbeat_interval)

    def heartbeat(self, job_id: str, attempt: int, worker_id: str) -> bool:
        """Renew the lease; False when the attempt is no longer current (cancelled, or taken over)."""
        if self._current(job_id, attempt, worker_id) is None:
            return False
        now = self.now
        self.store.update(
            "jobs",
            job_id,
            lease_expires_at=now + self.agent.settings().lease_ttl,
            heartbeat_at=now,
            updated_at=now,
        )
        return True

    def progress(
        self,
        job_id: str,
        attempt: int,
        worker_id: str,
        done: int,
        total: int,
        message: str,
        checkpoint: Any = None,
    ) -> Row | None:
        """Record progress (and a kept checkpoint) and renew the lease; the job, or None when the
        attempt is not current."""
        job = self._current(job_id, attempt, worker_id)
        if job is None:
            return None
        percent = round(100 * done / total, 1) if total > 0 else None
        progress = {**job["progress"], "done": done, "total": total, "percent": percent, "message": message}
        if checkpoint is not None:
            progress["checkpoint"] = checkpoint
        now = self.now
        self.store.update(
            "jobs",
            job_id,
            progress=progress,
            lease_expires_at=now + self.agent.settings().lease_ttl,
            heartbeat_at=now,
            updated_at=now,
        )
        return {**job, "progress": progress}
