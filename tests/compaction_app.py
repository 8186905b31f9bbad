"""An app for the compaction SIGKILL test with the deterministic model (``roost serve
tests.compaction_app:app``): kind ``slowsum``, a chat whose summaries are made inside the wake-up's
turn and whose first summary hangs there, after creating the marker file ``$ROOST_TEST_MARKER``, so
that the test can SIGKILL the server while the compaction's turn is open. Every summary begun is one
line of ``$ROOST_TEST_MARKER.calls`` (the effects the test counts)."""

from __future__ import annotations

import asyncio
import os

from roost.actors import RuntimeConfig
from roost.agent import ChatAgent
from roost.agent.chat import DeterministicChat
from roost.agent.models import SummaryRequest
from roost.transport import create_app

__all__ = ["SlowSummary", "app"]


class HangingFirstSummary(DeterministicChat):
    async def summarize(self, request: SummaryRequest) -> str:
        marker = os.environ["ROOST_TEST_MARKER"]
        fd = os.open(marker + ".calls", os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return await super().summarize(request)
        os.close(fd)
        await asyncio.sleep(60)  # inside the turn: killed here
        return "never"


class SlowSummary(ChatAgent):
    kind = "slowsum"
    planner = HangingFirstSummary


# a wake-up the killed process had claimed comes due again after 2 s, not the default 10 s
app = create_app([SlowSummary], config=RuntimeConfig(wakeup_lease=2.0))
