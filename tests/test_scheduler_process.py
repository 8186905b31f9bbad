"""Durable wake-ups against real ``roost serve`` processes, killed with SIGKILL (docs/design.md, *Wake-ups*).

Every due time here is a real wall-clock time in a child process: waiting for one is a bounded sleep;
waiting for a server-side effect is a bounded poll of a positive condition (``roost.testing.until``).
"Fired once" is read from the completion rows (``roost_fires``) in the actor files once the server is
gone, after the server said every wake-up was finished: never from a sleep that hopes nothing happens.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.testing import fires, schedule_rows, until
from tests.support import ServerProcess, pending_alarms, roost_command, server_process

pytestmark = pytest.mark.slow

APP = "tests.apps:app"


# -- helpers ------------------------------------------------------------------------------------------
async def rpc(client: httpx.AsyncClient, kind: str, name: str, method: str, body: Any) -> Any:
    response = await client.post(f"/agents/{kind}/{name}/rpc/{method}", json=body)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["ok"] is True, payload
    return payload["result"]


async def state_of(client: httpx.AsyncClient, kind: str, name: str) -> Any:
    """The committed state, or None while the actor cannot be read (e.g. live in another process)."""
    response = await client.get(f"/agents/{kind}/{name}")
    if response.status_code != 200:
        return None
    return response.json()["state"]


async def counts(client: httpx.AsyncClient, kind: str, names: list[str]) -> dict[str, int | None]:
    states = await asyncio.gather(*(state_of(client, kind, n) for n in names))
    return {n: (None if s is None else int(s["count"])) for n, s in zip(names, states, strict=True)}


def fired_once(data_dir: Path, kind: str, name: str, schedule_id: str) -> bool:
    """The actor's file (no process has it open) records exactly one completed fire, of ``schedule_id``,
    and that schedule is done after one run."""
    fired = [f.schedule_id for f in fires(data_dir, kind, name)]
    rows = [(r.id, r.status, r.runs) for r in schedule_rows(data_dir, kind, name)]
    return fired == [schedule_id] and rows == [(schedule_id, "done", 1)]


async def sleep_until(t: float) -> None:
    """Sleep until the wall-clock time ``t`` (a real due time in a child process); bounded."""
    delay = t - time.time()
    assert delay < 30, "due time too far ahead"
    if delay > 0:
        await asyncio.sleep(delay)


SCHEDULES_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) +(\S+) +(.+)$")


# -- 1. restart -----------------------------------------------------------------------------------------
async def test_wakeups_survive_sigkill_and_fire_once_after_restart(data_dir: Path) -> None:
    """50 counters each schedule ``add(1)`` in 2 s; the server is SIGKILLed before the due time. The CLI
    lists the 50 pending alarms; after the due time a new process on the same data directory fires each
    exactly once: once the server has no pending alarm left, each actor's file holds one completed fire."""
    names = [f"c{i:02d}" for i in range(50)]
    server = ServerProcess(data_dir).start()
    try:
        async with httpx.AsyncClient(base_url=server.http, timeout=10) as client:
            ids = await asyncio.gather(*(rpc(client, "counter", n, "increment_later", [2]) for n in names))
        due = time.time() + 2.0  # no later than any of them
        server.kill()
    finally:
        server.kill()
    assert len(set(ids)) == 50

    code, out, err = await roost_command("schedules", "--data", str(data_dir))
    assert code == 0, err
    assert out.splitlines()[-1] == "50 of 50 actor(s) with pending wake-ups"
    listed = {m.group(3) for line in out.splitlines()[1:-1] if (m := SCHEDULES_LINE.match(line))}
    assert listed == set(names)  # as clients sent them, no quotes
    code, out, err = await roost_command("ls", "--data", str(data_dir))
    assert code == 0, err
    assert out.splitlines()[-1] == "50 of 50 actor(s)"
    assert sum(1 for line in out.splitlines() if line.startswith("counter ")) == 50

    await sleep_until(due + 0.3)
    with server_process(data_dir) as restarted:
        async with httpx.AsyncClient(base_url=restarted.http, timeout=10) as client:

            async def all_fired() -> bool:
                return all(c == 1 for c in (await counts(client, "counter", names)).values())

            await until(all_fired, timeout=15, interval=0.25, message="not every counter fired")
            # finished: no alarm is left in the directory, so nothing is left to fire a second time
            await until(lambda: pending_alarms(data_dir) == 0, timeout=15, interval=0.25)
            assert await counts(client, "counter", names) == dict.fromkeys(names, 1)
            pending = await asyncio.gather(*(rpc(client, "counter", n, "schedules", []) for n in names))
            assert pending == [[] for _ in names]
        code, out, _ = await roost_command("schedules", "--data", str(data_dir))
        assert code == 0
        assert out.splitlines()[-1] == "0 of 0 actor(s) with pending wake-ups"
    for name, sid in zip(names, ids, strict=True):
        assert fired_once(data_dir, "counter", name, sid), name


# -- 2. kill inside the callback --------------------------------------------------------------------------
async def test_sigkill_inside_the_callback_redelivers_and_the_effect_happens_once(
    data_dir: Path, tmp_path: Path
) -> None:
    """The callback writes its effect, then (first attempt only) hangs; the server is SIGKILLed while it
    hangs, so nothing of the attempt is committed. After a restart the wake-up is delivered again (once
    the crashed dispatcher's claim lease has ended) and the effect is there exactly once."""
    marker = tmp_path / "marker"
    server = ServerProcess(data_dir, app=APP).start()
    try:
        async with httpx.AsyncClient(base_url=server.http, timeout=10) as client:
            sid = await rpc(client, "slowwake", "s1", "arm", [0.3, str(marker)])
        # a real callback in a real child process: poll the file system, bounded
        await until(marker.exists, timeout=10, interval=0.1, message="the callback never ran")
        killed_at = time.monotonic()
        server.kill()
    finally:
        server.kill()

    with server_process(data_dir, app=APP) as restarted:
        async with httpx.AsyncClient(base_url=restarted.http, timeout=10) as client:
            state = await state_of(client, "slowwake", "s1")
            assert state == {"count": 0}, "the killed attempt's write was committed"
            assert await rpc(client, "slowwake", "s1", "effects", []) == 0

            async def fired() -> bool:
                s = await state_of(client, "slowwake", "s1")
                return s is not None and s["count"] >= 1

            # a claim moves the alarm to the end of a 10 s lease (RuntimeConfig.wakeup_lease);
            # the restarted process gets it then
            await until(fired, timeout=80, interval=0.5, message="the wake-up was never delivered again")
            redelivered_after = time.monotonic() - killed_at
            print(f"\nslowwake: re-delivered {redelivered_after:.1f} s after the SIGKILL")
            assert await state_of(client, "slowwake", "s1") == {"count": 1}
            assert await rpc(client, "slowwake", "s1", "effects", []) == 1
            (schedule,) = await rpc(client, "slowwake", "s1", "schedules", [])
            assert schedule["id"] == sid
            assert schedule["status"] == "done"
            assert schedule["runs"] == 1
            assert schedule["last_error"] is None
            await until(lambda: pending_alarms(data_dir) == 0, timeout=15, interval=0.25)
    assert fired_once(data_dir, "slowwake", "s1", sid), "the killed attempt and the redelivery both counted"


# -- 3. idempotency ----------------------------------------------------------------------------------------
async def test_same_key_over_http_gives_one_schedule_and_one_increment(data_dir: Path) -> None:
    with server_process(data_dir) as server:
        async with httpx.AsyncClient(base_url=server.http, timeout=10) as client:
            first = await rpc(client, "counter", "idem", "increment_later", [1, 1, "k"])
            second = await rpc(client, "counter", "idem", "increment_later", {"seconds": 1, "key": "k"})
            assert first == second
            (listed,) = await rpc(client, "counter", "idem", "schedules", [])
            assert listed["id"] == first
            assert listed["key"] == "k"

            async def fired() -> bool:
                s = await state_of(client, "counter", "idem")
                return s is not None and s["count"] >= 1

            await until(fired, timeout=10, interval=0.25)
            await until(lambda: pending_alarms(data_dir) == 0, timeout=15, interval=0.25)
            assert await state_of(client, "counter", "idem") == {"count": 1}
            assert await rpc(client, "counter", "idem", "schedules", []) == []
            # the key is spent: the same key again returns the finished schedule, adds nothing
            assert await rpc(client, "counter", "idem", "increment_later", [0.2, 1, "k"]) == first
            assert await rpc(client, "counter", "idem", "schedules", []) == [], "a new wake-up is pending"
            assert pending_alarms(data_dir) == 0, "a new alarm is set"
            assert await state_of(client, "counter", "idem") == {"count": 1}
    assert fired_once(data_dir, "counter", "idem", first), "the key gave a second schedule or fire"


# -- 4. two processes, one data directory -------------------------------------------------------------------
async def test_two_processes_fire_a_thousand_wakeups_exactly_once(data_dir: Path) -> None:
    """Processes A and B run dispatchers on one data directory; 1,000 wake-ups (100 actors × 10) come
    due at one time. Each is applied exactly once, whichever process fires it."""
    actors, per_actor = 100, 10
    names = [f"b{i:03d}" for i in range(actors)]
    a = ServerProcess(data_dir, "--idle-timeout", "0.5", app=APP).start()
    b = ServerProcess(data_dir, "--idle-timeout", "0.5", app=APP).start()
    try:
        due = time.time() + 12.0  # room for creating 100 actors on a loaded machine, then dormancy
        async with httpx.AsyncClient(base_url=a.http, timeout=20) as client:
            planned = await asyncio.gather(
                *(rpc(client, "batch", n, "plan", [per_actor, due]) for n in names)
            )
        assert sum(planned) == actors * per_actor
        assert time.time() < due - 1.0, "setup too slow: the actors were not dormant before the due time"
        code, out, err = await roost_command("schedules", "--data", str(data_dir), "--limit", "1000")
        assert code == 0, err
        assert out.splitlines()[-1] == f"{actors} of {actors} actor(s) with pending wake-ups"

        await sleep_until(due)
        # every fire commits before its actor's alarm is cleared: wait for the directory to be empty
        await until(lambda: pending_alarms(data_dir) == 0, timeout=30, interval=0.25)
        a.kill()  # nothing of A's is live any more; B can open every actor
        assert a.proc is not None
        assert b.proc is not None
        pids = {str(a.proc.pid), str(b.proc.pid)}
        async with httpx.AsyncClient(base_url=b.http, timeout=20) as client:
            states: dict[str, Any] = {}

            async def read_all() -> bool:
                for n in names:
                    if n not in states and (s := await state_of(client, "batch", n)) is not None:
                        states[n] = s
                return len(states) == actors

            await until(read_all, timeout=10, interval=0.5)
    finally:
        a.kill()
        b.kill()
    assert {n: s["count"] for n, s in states.items()} == dict.fromkeys(names, per_actor)
    assert sum(s["count"] for s in states.values()) == actors * per_actor
    by_pid: dict[str, int] = {}
    for s in states.values():
        assert sum(s["by_pid"].values()) == s["count"]
        for pid, k in s["by_pid"].items():
            by_pid[pid] = by_pid.get(pid, 0) + k
    assert set(by_pid) <= pids
    for n in names:  # one completed fire per wake-up, whichever process ran it
        fired = [f.schedule_id for f in fires(data_dir, "batch", n)]
        assert len(fired) == len(set(fired)) == per_actor, n
        assert all(r.status == "done" and r.runs == 1 for r in schedule_rows(data_dir, "batch", n)), n
    print(f"\ntwo processes: fired by A={by_pid.get(str(a.proc.pid), 0)} B={by_pid.get(str(b.proc.pid), 0)}")


# -- 5. the `roost schedules` command --------------------------------------------------------------------
async def test_roost_schedules_output_format(data_dir: Path) -> None:
    """A header, one line per actor with a pending alarm (soonest first, UTC with milliseconds, the name
    as a repr), and a count line. Actors without wake-ups are not listed."""
    delays = {"b": 30.0, "a": 10.0, "c b": 20.0}
    with server_process(data_dir) as server:
        async with httpx.AsyncClient(base_url=server.http, timeout=10) as client:
            before = time.time()
            for name, seconds in delays.items():
                await rpc(client, "counter", name, "increment_later", [seconds])
            after = time.time()
            await rpc(client, "counter", "plain", "increment", [])
        code, out, err = await roost_command("schedules", "--data", str(data_dir))
    assert code == 0, err
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"{'NEXT ALARM (UTC)':<24} {'KIND':<12} NAME"
    assert lines[-1] == "3 of 3 actor(s) with pending wake-ups"
    rows = []
    for line in lines[1:-1]:
        m = SCHEDULES_LINE.match(line)
        assert m is not None, line
        assert line.index(m.group(2)) == 25  # columns: 24 wide, a space
        assert line.index(m.group(3)) == 38
        rows.append((m.group(1), m.group(2), m.group(3)))
    assert [(kind, name) for _, kind, name in rows] == [
        ("counter", "a"),
        ("counter", "'c b'"),  # a space: quoted, so the column stays readable
        ("counter", "b"),
    ]
    for when, _, name in rows:
        t = datetime.strptime(when, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
        seconds = delays[name.strip("'")]
        assert before + seconds - 0.01 <= t <= after + seconds + 0.01

    code, out, err = await roost_command("schedules", "--data", str(data_dir / "missing"))
    assert code == 1
    assert out == ""
    assert "no data directory" in err
