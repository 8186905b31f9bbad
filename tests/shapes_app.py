"""The ``shapes`` kind with a classifier a test steers (``roost serve tests.shapes_app:app`` in a
child process for ``tests/test_shapes_crash.py``, and in process for ``tests/test_shapes.py``): it
answers ``SHAPES_ROUTE`` from the environment if set, else ``FlipShapes.route``; either way a test
makes it decide differently the second time, to show that a recorded route is never asked again.

For the kills in the middle of a step: ``SHAPES_HANG_AT`` names a stage whose in-turn effect blocks
the server (after creating ``$SHAPES_MARKER.hung``, once), and ``SHAPES_HOLD_REVIEW`` a reviewer of
``parallel`` that waits until ``$SHAPES_MARKER.go`` exists; every review begun is a line of
``$SHAPES_MARKER.reviews`` (its angle and idempotency key: the effects a test counts)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, ClassVar

from roost.actors.registry import RuntimeConfig
from roost.examples.shapes import Shapes
from roost.examples.team import Team, TeamWorker
from roost.transport import create_app
from roost.workflows import StepAttempt

__all__ = ["FlipShapes", "app"]


class FlipShapes(Shapes):
    route: ClassVar[str] = "billing"
    #: How many times the classifier was asked (in this process).
    asked: ClassVar[int] = 0

    def classify(self, text: str) -> str:
        FlipShapes.asked += 1
        return os.environ.get("SHAPES_ROUTE") or FlipShapes.route

    def effect(self, step: str, note: str | None = None) -> str | None:
        written = super().effect(step, note)
        if step == os.environ.get("SHAPES_HANG_AT") and _first(".hung"):
            time.sleep(120)  # the whole server stops inside this turn: killed here
        return written

    async def review(self, angle: str, text: str, attempt: StepAttempt) -> dict[str, Any]:
        _line(".reviews", f"{angle} {attempt.idempotency_key}")
        while angle == os.environ.get("SHAPES_HOLD_REVIEW") and not _exists(".go"):  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # another process makes the go file: no event to wait on
        return await super().review(angle, text, attempt)


def _marker(suffix: str) -> str:
    return os.environ["SHAPES_MARKER"] + suffix


def _exists(suffix: str) -> bool:
    return os.path.exists(_marker(suffix))


def _first(suffix: str) -> bool:
    """Create the marker file; whether it was not there yet."""
    try:
        os.close(os.open(_marker(suffix), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _line(suffix: str, text: str) -> None:
    if "SHAPES_MARKER" in os.environ:
        fd = os.open(_marker(suffix), os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        os.write(fd, f"{text}\n".encode())
        os.close(fd)


app = create_app(
    [FlipShapes, Team, TeamWorker],
    config=RuntimeConfig(poll_interval=0.2, wakeup_lease=1.0, turn_timeout=60.0),
)
