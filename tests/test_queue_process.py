"""The durable queue against real ``roost serve`` processes, killed with SIGKILL (docs/design.md,
*Durable queue*).

The app is ``tests.queue_app:app``. Waiting for a server-side condition is a bounded poll of a
positive condition (``roost.testing.until``), never a sleep that hopes. "Ran once" is read from the
actors' own files once no process holds them: the effect rows (committed with each item's completion)
and the queue's rows (``roost.testing.queue_rows``).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from roost.storage import actor_path
from roost.testing import queue_rows, until
from tests.support import ServerProcess, pending_alarms, roost_command

pytestmark = pytest.mark.slow

APP = "tests.queue_app:app"
INTERRUPTED = "interrupted: the attempt did not finish (the process stopped, or its turn was aborted)"


async def rpc(client: httpx.AsyncClient, name: str, method: str, body: Any) -> Any:
    response = await client.post(f"/agents/qjob/{name}/rpc/{method}", json=body)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["ok"] is True, payload
    return payload["result"]


def effects(data_dir: Path, name: str) -> list[tuple[str, str, int]]:
    """The effect rows of the actor (tag, item id, attempt), in the order committed."""
    with closing(sqlite3.connect(actor_path(data_dir, "qjob", name), timeout=0)) as db:
        rows = db.execute("SELECT tag, item, attempt FROM effects ORDER BY id").fetchall()
    return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]


async def test_queue_survives_sigkill_and_drains_in_order_once_after_restart(data_dir: Path) -> None:
    """Three actors are killed while their head item's callback runs (its writes not yet committed),
    three while their head waits for a retry. A new process on the same data directory, asked for
    nothing, drains every queue by the actors' alarms alone: in order, each item's effect in the
    actor's file exactly once. The files and ``roost inspect`` show what was retried (the interrupted
    attempt, the failed ones) and that everything completed."""
    hung = [f"hang{i}" for i in range(3)]
    waiting = [f"retry{i}" for i in range(3)]
    markers = {n: str(data_dir.parent / f"marker-{n}") for n in hung}
    server = ServerProcess(data_dir, app=APP).start()
    try:
        async with httpx.AsyncClient(base_url=server.http, timeout=10) as client:
            ids: dict[str, list[str]] = {}
            for n in hung:  # the head hangs on its first attempt; retries 50 ms apart at most
                items: list[dict[str, Any]] = [{"tag": "h", "hang": markers[n]}, {"tag": "x"}, {"tag": "y"}]
                ids[n] = await rpc(client, n, "add", {"items": items, "base": 0.05, "cap": 0.05})
            for n in waiting:  # the head fails 3 times; each retry is up to 1.5 s away (full jitter)
                items = [{"tag": "f", "fail_until": 4}, {"tag": "p"}, {"tag": "q"}]
                ids[n] = await rpc(client, n, "add", {"items": items, "base": 1.5, "cap": 1.5})

            async def heads_wait_for_retries() -> bool:
                for n in waiting:
                    head = (await rpc(client, n, "queue", {}))[0]
                    if head["id"] != ids[n][0] or head["status"] != "pending" or head["attempts"] < 1:
                        return False
                return True

            await until(lambda: all(Path(m).exists() for m in markers.values()), timeout=15, interval=0.05)
            await until(heads_wait_for_retries, timeout=15, interval=0.05)
        server.kill()  # inside the hung callbacks, and while the failed heads wait for their retry
    finally:
        server.kill()
    for n in hung + waiting:  # nothing past the heads ran, and no uncommitted effect survived
        assert effects(data_dir, n) == []
        head, *behind = [r.status for r in queue_rows(data_dir, "qjob", n)]
        # a waiting head's retry may have begun in the moment between the last look and the kill
        assert head == "running" if n in hung else head in ("pending", "running")
        assert behind == ["pending", "pending"]

    restarted = ServerProcess(data_dir, app=APP).start()  # no request is sent to it
    try:
        await until(lambda: pending_alarms(data_dir) == 0, timeout=40, interval=0.1, message="not drained")
    finally:
        restarted.kill()

    for n in hung:
        h, x, y = ids[n]
        assert effects(data_dir, n) == [("h", h, 2), ("x", x, 1), ("y", y, 1)]
        rows = queue_rows(data_dir, "qjob", n)
        done = [(r.id, r.status, r.attempts) for r in rows]
        assert done == [(h, "done", 2), (x, "done", 1), (y, "done", 1)]
        assert rows[0].last_error == INTERRUPTED  # the attempt the killed process did not finish
    for n in waiting:
        f, p, q = ids[n]
        rows = queue_rows(data_dir, "qjob", n)
        passed = rows[0].attempts  # 4: attempts 1 to 3 fail; 5 if the kill cut the 4th short
        assert passed in (4, 5)
        assert effects(data_dir, n) == [("f", f, passed), ("p", p, 1), ("q", q, 1)]
        done = [(r.id, r.status, r.attempts) for r in rows]
        assert done == [(f, "done", passed), (p, "done", 1), (q, "done", 1)]
        assert rows[0].last_error in ("RuntimeError: attempt 3 of f fails", INTERRUPTED)

    code, out, err = await roost_command("inspect", "qjob", hung[0], "--data", str(data_dir))
    assert code == 0, err
    queue = orjson.loads(out)["queue"]
    assert queue["counts"] == {"pending": 0, "running": 0, "done": 3, "dead": 0, "cancelled": 0}
    assert [(i["status"], i["attempts"], i["last_error"]) for i in queue["finished"]] == [
        ("done", 2, INTERRUPTED),
        ("done", 1, None),
        ("done", 1, None),
    ]
