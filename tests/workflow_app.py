"""An app for tests that run ``roost serve tests.workflow_app:app`` in a child process: the kinds of
``tests/workflow_kinds.py``, with a short wake-up lease so that a killed process's claimed wake-ups
come due again soon after a restart."""

from __future__ import annotations

from roost.actors.registry import RuntimeConfig
from roost.transport import create_app
from tests.workflow_kinds import Relay, Shop

__all__ = ["app"]

app = create_app([Shop, Relay], config=RuntimeConfig(poll_interval=0.2, wakeup_lease=1.0, turn_timeout=60.0))
