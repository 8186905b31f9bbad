"""An app for tests that run ``roost serve tests.apps:app`` in a child process.

Kinds besides the examples' ``counter``:

- ``slowwake``: a wake-up whose callback writes its effect (state and a row) and then, on its first
  attempt only, creates a marker file and hangs, so that a test can SIGKILL the server while the
  callback's writes are not yet committed.
- ``batch``: creates many wake-ups in one turn, all due at one absolute time; each fire counts itself
  and records which process ran it.

``roomy``: the example kinds with a 64 MiB send bound, so a client that does not read is held (not
closed for reading slowly) while megabytes wait for it.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from typing import Any

from roost.actors.actor import Actor
from roost.actors.decorators import callable, wakeup
from roost.actors.registry import RuntimeConfig
from roost.examples.kinds import KINDS, Counter
from roost.transport import create_app

__all__ = ["Batch", "SlowWake", "app", "roomy", "roomy_sockets"]


class SlowWake(Actor):
    kind = "slowwake"
    initial_state = {"count": 0}
    migrations = ("CREATE TABLE effects (id INTEGER PRIMARY KEY, note TEXT NOT NULL)",)

    @callable
    async def arm(self, seconds: float, marker: str) -> str:
        """Schedule ``work`` in ``seconds``; a generous timeout so the first attempt is not cut short."""
        schedule = await self.schedule(seconds, "work", {"marker": marker}, timeout=60.0)
        return schedule.id

    @callable
    async def effects(self) -> int:
        count: int = self.sql.scalar("SELECT count(*) FROM effects")
        return count

    @callable
    async def schedules(self) -> list[dict[str, Any]]:
        return [s.to_json() for s in await self.list_schedules(include_finished=True)]

    @wakeup
    async def work(self, payload: dict[str, str]) -> None:
        self.set_state({"count": self.state["count"] + 1})
        self.sql.execute("INSERT INTO effects (note) VALUES (?)", (f"pid {os.getpid()}",))
        try:  # the first attempt creates the marker: proof that we are inside the callback; then hang
            fd = os.open(payload["marker"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        await asyncio.sleep(30)


class Batch(Actor):
    kind = "batch"
    initial_state = {"count": 0, "by_pid": {}}

    @callable
    async def plan(self, n: int, at: float) -> int:
        """Create ``n`` wake-ups (keys ``w0`` … ``w{n-1}``), all due at the epoch time ``at``."""
        when = datetime.fromtimestamp(at, UTC)
        for i in range(n):
            await self.schedule(when, "tick", {"i": i}, key=f"w{i}")
        return n

    @wakeup
    async def tick(self, payload: dict[str, int]) -> None:
        pid = str(os.getpid())
        by_pid: dict[str, int] = dict(self.state["by_pid"])
        by_pid[pid] = by_pid.get(pid, 0) + 1
        self.set_state({"count": self.state["count"] + 1, "by_pid": by_pid})


# turn_timeout above the hang in SlowWake.work (the fire's timeout is capped at 0.9 × turn_timeout)
app = create_app([SlowWake, Batch, Counter], config=RuntimeConfig(turn_timeout=90.0, poll_interval=0.5))

#: The example counter with a descriptor reserve large enough that, under a small limit, the server
#: holds more connections than actors fit (``tests/test_descriptors.py`` reaches ``max_active``).
roomy_sockets = create_app([Counter], config=RuntimeConfig(fd_reserve=140))
roomy = create_app(KINDS, send_queue_bytes=64 << 20)
