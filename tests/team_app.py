"""The team kinds with a worker whose final report, on its first run, reaches the team and then
hangs (``roost serve tests.team_app:app`` for ``tests/test_team_crash.py``): a test kills the server
after the report's effect and before its record, so the rerun repeats the report under the same key."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from roost.actors.registry import RuntimeConfig
from roost.examples.team import Team, TeamWorker
from roost.transport import create_app
from roost.workflows import StepAttempt

__all__ = ["HangingWorker", "app"]


class HangingWorker(TeamWorker):
    workflow_lease = 0.5

    def _report(
        self, job: dict[str, Any], status: str, progress: int, result: Any = None
    ) -> Callable[[StepAttempt], Awaitable[bool]]:
        report = super()._report(job, status, progress, result)

        async def go(attempt: StepAttempt) -> bool:
            news = await report(attempt)
            if status == "completed" and job["worker"] == "w3" and attempt.run == 1:
                await asyncio.Event().wait()
            return news

        return go


app = create_app(
    [Team, HangingWorker], config=RuntimeConfig(poll_interval=0.2, wakeup_lease=1.0, turn_timeout=60.0)
)
