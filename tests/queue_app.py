"""An app for the queue's process tests (``roost serve tests.queue_app:app`` in a child process).

``qjob``: each item's callback writes one effect row (tag, item id, attempt, pid) and then obeys its
payload: ``hang`` creates a marker file on its first attempt only and then hangs (so that a test can
SIGKILL the server while the callback's writes are not yet committed); ``fail`` raises until the
attempt of that number, after its write (rolled back with the attempt).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from roost.actors import Actor, QueueItem, RetryPolicy, RuntimeConfig, callable, wakeup
from roost.transport import create_app

__all__ = ["QueueJob", "app"]


class QueueJob(Actor):
    kind = "qjob"
    initial_state = {"done": 0}
    migrations = (
        "CREATE TABLE effects (id INTEGER PRIMARY KEY, tag TEXT, item TEXT, attempt INTEGER, pid INTEGER)",
    )

    @callable
    async def add(self, items: list[dict[str, Any]], base: float, cap: float) -> list[str]:
        """Enqueue one item per payload, in order, each retried up to 5 times."""
        retry = RetryPolicy(max_attempts=5, base=base, cap=cap)
        return [await self.enqueue("work", payload, retry=retry, timeout=60.0) for payload in items]

    @callable
    async def queue(self) -> list[dict[str, Any]]:
        return [i.to_json() for i in await self.list_queue()]

    @wakeup
    async def work(self, payload: dict[str, Any], item: QueueItem) -> None:
        self.sql.execute(
            "INSERT INTO effects (tag, item, attempt, pid) VALUES (?, ?, ?, ?)",
            (payload["tag"], item.id, item.attempt, os.getpid()),
        )
        self.set_state({"done": self.state["done"] + 1})
        marker = payload.get("hang")
        if marker is not None:
            try:  # the first attempt makes the marker: proof that it is inside the callback; then hang
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            await asyncio.sleep(60)
        if item.attempt < int(payload.get("fail_until", 0)):
            raise RuntimeError(f"attempt {item.attempt} of {payload['tag']} fails")


# a short wake-up lease: a claim of the killed process is due again within 2 s; the turn timeout above
# the hang (an attempt's timeout is capped at 0.9 x turn_timeout)
app = create_app([QueueJob], config=RuntimeConfig(turn_timeout=90.0, poll_interval=0.25, wakeup_lease=2.0))
