"""No directory call on the event loop waits for a lock (issue 13, point 11).

Two processes on one data directory are a supported setup, and the directory database is shared by
them. A second real process takes the directory's write lock (``BEGIN EXCLUSIVE``) and keeps it until
the test has its answers: meanwhile the server answers calls to an actor already live and
``/healthz`` at once, while its idle sweep meets the lock again and again without waiting
(``/healthz`` counts those refusals under ``directory.busy``). A new actor's first call and a batch
that must lower the actor's alarm first wait for the lock without stalling anyone else, and once the
lock is let go, all the delayed directory work completes: the queued touches (with the live actor's
high-water seq), the new actor's row, and the earlier alarm.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.actors import RpcError
from roost.examples.kinds import KINDS
from roost.testing import ActorKit, connect, schedule_rows, until
from tests.support import ServerProcess, actor_state, directory_row

#: Holds the directory's write lock from "locked" until a line on stdin, then says "released".
LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
print("released", flush=True)
"""

#: Well under the five seconds a lock wait could stall the loop for before.
PROMPT = 3.0


def row(data_dir: Path, name: str) -> dict[str, Any]:
    return directory_row(data_dir, "counter", name) or {}


@pytest.mark.slow
async def test_a_second_process_holding_the_directory_lock_stalls_no_actor(data_dir: Path) -> None:
    server = ServerProcess(data_dir, "--idle-timeout", "1").start()  # the idle sweep every 0.5 s
    locker: asyncio.subprocess.Process | None = None
    try:
        async with (
            connect(f"{server.ws}/agents/counter/c1") as live,
            connect(f"{server.ws}/agents/counter/c3") as alarmed,
            httpx.AsyncClient(base_url=server.http, timeout=PROMPT) as http,
        ):
            await live.recv()  # welcomes: both live, kept live by their connections
            await alarmed.recv()
            assert await live.call("increment") == 1
            assert await alarmed.call("increment") == 1
            await until(lambda: row(data_dir, "c1").get("acked_seq") == 1, 30)
            locker = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                LOCKER,
                str(data_dir / "directory.sqlite"),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            assert locker.stdout is not None
            assert locker.stdin is not None
            assert await asyncio.wait_for(locker.stdout.readline(), 30) == b"locked\n"
            busy = (await http.get("/healthz")).json()["directory"]["busy"]
            # a new actor: its row is written in the directory thread, which waits for the lock
            created = asyncio.create_task(http.post("/agents/counter/c2/rpc/increment", json=[], timeout=30))
            # an earlier alarm: c3's batch waits for the directory, uncommitted, its reply held
            alarm_id = await alarmed.send_rpc("increment_later", 3600, 1, "k")
            count = 1

            async def answered_while_locked() -> bool:
                nonlocal count
                count += 1
                assert await live.call("increment", timeout=PROMPT) == count
                health = (await http.get("/healthz")).json()
                return bool(health["directory"]["busy"] >= busy + 3)  # three sweeps met the lock

            await until(answered_while_locked, 60, message="the server stopped answering")
            assert not created.done()  # its row waits for the lock, off the loop
            assert not [f for f in alarmed.frames if f.get("id") == alarm_id]  # not committed yet
            assert row(data_dir, "c1").get("acked_seq") == 1  # nothing written while locked
            assert locker.returncode is None  # the lock was held throughout
            locker.stdin.write(b"\n")
            await locker.stdin.drain()
            assert await asyncio.wait_for(locker.stdout.readline(), 30) == b"released\n"
            # the delayed directory work completes
            assert (await created).json() == {"ok": True, "result": 1}
            (answer,) = await alarmed.results([alarm_id], timeout=30)
            assert answer["ok"]
            await until(lambda: row(data_dir, "c1").get("acked_seq") == count, 30)
            assert row(data_dir, "c2")
            assert row(data_dir, "c3").get("next_alarm_at") is not None
    finally:
        if locker is not None:
            if locker.returncode is None:
                locker.kill()
            await locker.wait()
        server.kill()


async def test_a_batch_waiting_for_a_busy_directory_is_never_committed_past_its_alarm(
    data_dir: Path,
) -> None:
    """A batch that makes the actor's alarm earlier commits only after the directory took that alarm
    (a directory alarm is never later than the truth). When the directory stays locked until a
    shutdown gives up on it (``stop_timeout``), the batch is rolled back, never committed by the file's
    close, and its caller is told ``actor_unavailable``; nothing of it was shown."""
    kit = ActorKit(list(KINDS), data_dir, stop_timeout=0.2)
    await kit.__aenter__()
    stopped = False
    other = sqlite3.connect(data_dir / "directory.sqlite", isolation_level=None)
    try:
        assert await kit.call("counter", "c1", "increment") == 1
        other.execute("BEGIN EXCLUSIVE")  # another holder of the directory's write lock
        later = asyncio.create_task(kit.call("counter", "c1", "increment_later", 3600, 1, "k"))
        host = kit.registry.hosts[("counter", "c1")]
        await until(lambda: kit.registry.directory is not None and kit.registry.directory.busy >= 2)
        assert not later.done()  # held: its batch is open, uncommitted
        assert host.file.in_transaction
        stop = asyncio.create_task(kit.registry.stop())
        await until(lambda: host.file.closed, 10)
        with pytest.raises(RpcError) as refused:
            await asyncio.wait_for(later, 10)
        assert refused.value.code == "actor_unavailable"
        other.execute("ROLLBACK")
        await stop
        stopped = True
    finally:
        other.close()
        if not stopped:
            await kit.registry.stop()
    assert actor_state(data_dir, "counter", "c1") == {"count": 1}
    assert schedule_rows(data_dir, "counter", "c1") == []  # the schedule went with the batch
