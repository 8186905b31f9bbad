"""``roost workers`` tells alive, stale and stopped workers apart, and old rows are pruned.

Guarantees (``roost.agent.background``, ``roost.storage.directory``):

- **Status.** A worker is *alive* while its last heartbeat is within its lease, *stale* past it (it
  was killed or hung: its jobs are retried elsewhere), *stopped* once it stopped cleanly and said so;
  ``roost workers`` prints the status and the age of the last heartbeat.
- **Pruning.** When a worker starts, rows of workers stopped or last seen over a day ago are deleted.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from roost.agent.background import WORKER_RETENTION, job_runner
from roost.cli import main
from roost.scheduler import FakeClock
from roost.storage import Directory, WorkerEntry, WorkerStatus
from roost.testing import ActorKit
from tests.agent_support import Docs


def _row(worker_id: str, seen: float, *, stopped: float | None = None) -> WorkerEntry:
    return WorkerEntry(worker_id, 4242, "elsewhere", seen - 60, seen, 2, 5.0, stopped)


async def test_roost_workers_says_alive_stale_or_stopped_and_old_rows_are_pruned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    now = time.time()
    directory = Directory(data)
    directory.worker_heartbeat(_row("w-killed", now - 600))  # a SIGKILLed worker: no heartbeat since
    directory.worker_heartbeat(_row("w-ancient", now - WORKER_RETENTION - 60))
    directory.worker_heartbeat(_row("w-long-gone", now - WORKER_RETENTION - 90))
    directory.worker_stopped("w-long-gone", now - WORKER_RETENTION - 60)
    directory.close()

    async with ActorKit([Docs], data, clock=FakeClock(start=now)) as kit:
        runner = job_runner(kit.registry.process)
        runner.ensure_started(1.0, 5.0)
        assert kit.registry.directory is not None
        rows = {w.worker_id: w for w in kit.registry.directory.workers()}
        assert set(rows) == {runner.worker_id, "w-killed"}  # the two day-old rows were pruned
        assert rows[runner.worker_id].status(now) is WorkerStatus.ALIVE
        assert rows["w-killed"].status(now) is WorkerStatus.STALE
        assert rows[runner.worker_id].status(now + 5.1) is WorkerStatus.STALE  # past its lease

    directory = Directory(data)
    rows = {w.worker_id: w for w in directory.workers()}
    directory.close()
    assert rows[runner.worker_id].status(now) is WorkerStatus.STOPPED  # it said so when it stopped
    assert rows[runner.worker_id].running_jobs == 0

    assert main(["workers", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines()[1:-1]}
    assert lines[runner.worker_id][1] == "stopped"
    assert lines["w-killed"][1:4] == ["stale", "10m", "ago"]
    assert out.splitlines()[-1] == "2 worker(s): 1 stale, 1 stopped"
