"""The durable wake-up every workflow's progress rides on (``workflow_wake``, a ``@wakeup`` of
:class:`~roost.workflows.Workflows`)."""

from __future__ import annotations

from typing import Any

from roost.actors import Actor

__all__ = ["WAKE", "schedule_wake"]

#: The ``@wakeup`` method a workflow's wake-ups call.
WAKE = "workflow_wake"


async def schedule_wake(actor: Actor, at: float, payload: dict[str, Any], key: str | None = None) -> None:
    """A durable wake-up of ``actor`` at ``at`` (epoch seconds; at once if past), in this turn."""
    delay = max(0.0, at - actor.extension.now)
    await actor.schedule(delay, WAKE, payload, key=key)
