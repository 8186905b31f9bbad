"""``roost serve tests.fanout_app:app`` in a child process: the ``fan`` kind of
``tests/fanout_kinds.py`` with a short wake-up lease, for ``tests/test_workflows_parallel_crash.py``."""

from __future__ import annotations

from roost.actors.registry import RuntimeConfig
from roost.transport import create_app
from tests.fanout_kinds import Fan

__all__ = ["app"]

app = create_app([Fan], config=RuntimeConfig(poll_interval=0.2, wakeup_lease=1.0, turn_timeout=60.0))
