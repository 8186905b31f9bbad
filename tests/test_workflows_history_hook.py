"""``Workflows.on_workflow_history``: every line of a workflow's history heard in the turn that writes
it, exactly once and in order, with what it says (an attempt's retry time); a hook that raises fails
that turn, which then records nothing.

Real SQLite files, a ``FakeClock`` for the retry's delay; every wait is on a condition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from roost.actors import RetryPolicy, RpcError
from roost.scheduler.clock import FakeClock
from roost.testing import ActorKit, until
from roost.workflows import Step, StepAttempt, Workflows, workflow


class Heard(Workflows):
    """``flaky``: one outside step whose first attempt fails; every history line is sent to the
    actor's subscribers as it is written."""

    kind = "heard"
    #: the history event on which the hook raises (None: never)
    raise_on: ClassVar[str | None] = None

    def on_workflow_history(self, workflow_id: str, entry: dict[str, Any]) -> None:
        if entry["event"] == Heard.raise_on:
            raise RuntimeError("the hook failed")
        detail = entry["detail"] or {}
        self.emit(
            {
                "heard": entry["event"],
                "id": workflow_id,
                "seq": entry["seq"],
                "retry_at": detail.get("retry_at"),
            }
        )

    @workflow
    async def broken(self, step: Step, spec: Any) -> Any:
        return await step.external("call", _broken, retry=RetryPolicy(max_attempts=1))

    @workflow
    async def flaky(self, step: Step, spec: Any) -> Any:
        return await step.external("call", _call, retry=RetryPolicy(max_attempts=2, base=1.0, cap=1.0))


async def _broken(attempt: StepAttempt) -> str:
    raise RuntimeError("it broke\nTraceback (most recent call last):\n  File internals.py, line 1")


async def _call(attempt: StepAttempt) -> str:
    if attempt.attempt == 1:
        raise ConnectionError("the far side went away")
    return "done"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    Heard.raise_on = None


def _heard(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["event"] for f in frames if f.get("type") == "event" and "heard" in (f.get("event") or {})]


async def test_every_history_line_is_heard_once_in_order_when_it_is_written(data_dir: Path) -> None:
    clock = FakeClock()
    async with ActorKit([Heard], data_dir, clock=clock) as kit:
        watcher = kit.connect("heard", "h1")
        await kit.call("heard", "h1", "start_workflow", "flaky", None, "w1")
        failed = await watcher.wait_for(lambda f: (f.get("event") or {}).get("heard") == "attempt_failed")
        status = await kit.call("heard", "h1", "workflow_status", "w1")
        assert failed["event"]["retry_at"] == status["waiting"]["until"], "heard with its retry time"
        page = await kit.call("heard", "h1", "workflow_history", "w1")
        heard = _heard(watcher.frames)
        assert [(h["seq"], h["heard"]) for h in heard] == [(e["seq"], e["event"]) for e in page["entries"]]
        clock.advance(status["waiting"]["until"] - clock.now())
        await kit.fire_due("heard", "h1")

        async def completed() -> bool:
            status = await kit.call("heard", "h1", "workflow_status", "w1")
            return bool(status["status"] == "completed")

        await until(completed)
        await watcher.wait_for(lambda f: (f.get("event") or {}).get("heard") == "completed")
        page = await kit.call("heard", "h1", "workflow_history", "w1")
        heard = _heard(watcher.frames)
        assert [(h["seq"], h["heard"]) for h in heard] == [(e["seq"], e["event"]) for e in page["entries"]]
        events = [h["heard"] for h in heard]
        assert events.count("attempt_started") == 2
        assert events.count("attempt_failed") == 1
        assert {h["id"] for h in heard} == {"w1"}


async def test_a_hook_that_raises_fails_its_turn_and_nothing_of_it_is_recorded(data_dir: Path) -> None:
    async with ActorKit([Heard], data_dir, clock=FakeClock()) as kit:
        Heard.raise_on = "started"
        watcher = kit.connect("heard", "h1")
        with pytest.raises(RpcError):
            await kit.call("heard", "h1", "start_workflow", "flaky", None, "w1")
        assert await kit.call("heard", "h1", "list_workflows") == []
        assert not _heard(watcher.frames), "nothing of the failed turn was sent"


async def test_an_error_is_recorded_as_its_type_and_first_line(data_dir: Path) -> None:
    """What the core records of an exception is its type and first line: never a traceback pasted
    into its text, in the step, the workflow or the history."""
    async with ActorKit([Heard], data_dir, clock=FakeClock()) as kit:
        await kit.call("heard", "h1", "start_workflow", "broken", None, "w1")

        async def failed() -> dict[str, Any] | None:
            status: dict[str, Any] = await kit.call("heard", "h1", "workflow_status", "w1")
            return status if status["status"] == "failed" else None

        status = await until(failed)
        assert status["steps"][0]["error"] == "RuntimeError: it broke"
        page = await kit.call("heard", "h1", "workflow_history", "w1")
        assert "internals" not in repr(page) + repr(status)
