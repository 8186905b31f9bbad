"""A kind with a ``parallel`` join, for ``tests/test_workflows_parallel*.py``: each branch appends a
line naming its idempotency key to a ledger file (the path in the workflow's input), so a test counts
every branch's effects; the in-turn step after the join writes a row of the actor's own table."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from roost.actors import RetryPolicy, callable
from roost.workflows import NonRetryable, Step, StepAttempt, StepFailed, Workflows, workflow

__all__ = ["Fan"]


class Fan(Workflows):
    kind = "fan"
    migrations = ("CREATE TABLE effects (id INTEGER PRIMARY KEY, step TEXT NOT NULL)",)
    workflow_lease = 0.5

    #: The branch names of ``fanout`` (a test changes them to make a divergent replay).
    names = ("a", "b", "c")

    @callable(readonly=True)
    async def effects(self) -> dict[str, int]:
        rows = self.sql.execute("SELECT step, count(*) FROM effects GROUP BY step")
        return {str(r[0]): int(r[1]) for r in rows}

    @workflow
    async def fanout(self, step: Step, spec: dict[str, Any]) -> Any:
        """``a``, ``b``, ``c`` at once (outside), then ``merge`` (in turn). ``spec``: ``ledger`` (a
        path), ``hold`` (branches whose first attempt's first run never ends), ``fail`` (branch →
        attempts that raise), ``fatal`` (branches that raise ``NonRetryable``)."""
        ledger = Path(spec["ledger"])
        branches = {b: _branch(ledger, b, spec) for b in Fan.names}
        try:
            results = await step.parallel(
                "fanout", branches, retry=RetryPolicy(max_attempts=3, base=1.0, cap=4.0)
            )
        except StepFailed as exc:
            await step.do("give-up", lambda: self._effect("give-up"))
            return {"failed": exc.error}
        await step.do("merge", lambda: self._effect("merge"))
        return results

    def _effect(self, step: str) -> int:
        self.sql.execute("INSERT INTO effects (step) VALUES (?)", (step,))
        count: int = self.sql.scalar("SELECT count(*) FROM effects WHERE step = ?", (step,))
        return count


def _branch(ledger: Path, name: str, spec: dict[str, Any]) -> Any:
    async def go(attempt: StepAttempt) -> dict[str, Any]:
        with ledger.open("a") as f:
            f.write(f"{attempt.idempotency_key} run={attempt.run} pid={os.getpid()}\n")
        if name in spec.get("fatal", ()):
            raise NonRetryable(f"{name} refused")
        if attempt.attempt <= int(spec.get("fail", {}).get(name, 0)):
            raise ConnectionError(f"{name} is down")
        if name in spec.get("hold", ()) and attempt.run == 1 and attempt.attempt == 1:
            await asyncio.Event().wait()
        return {"branch": name, "key": attempt.idempotency_key, "run": attempt.run}

    return go
