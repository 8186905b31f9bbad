"""The ``shapes`` kind with a classifier a test steers (``roost serve tests.shapes_app:app`` in a
child process for ``tests/test_shapes_crash.py``, and in process for ``tests/test_shapes.py``): it
answers ``SHAPES_ROUTE`` from the environment if set, else ``FlipShapes.route``; either way a test
makes it decide differently the second time, to show that a recorded route is never asked again."""

from __future__ import annotations

import os
from typing import ClassVar

from roost.actors.registry import RuntimeConfig
from roost.examples.shapes import Shapes
from roost.examples.team import Team, TeamWorker
from roost.transport import create_app

__all__ = ["FlipShapes", "app"]


class FlipShapes(Shapes):
    route: ClassVar[str] = "billing"
    #: How many times the classifier was asked (in this process).
    asked: ClassVar[int] = 0

    def classify(self, text: str) -> str:
        FlipShapes.asked += 1
        return os.environ.get("SHAPES_ROUTE") or FlipShapes.route


app = create_app(
    [FlipShapes, Team, TeamWorker],
    config=RuntimeConfig(poll_interval=0.2, wakeup_lease=1.0, turn_timeout=60.0),
)
