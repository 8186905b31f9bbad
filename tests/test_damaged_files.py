"""Damaged actor files are refused, never re-created or served older (issue 13, point 10).

The directory keeps each actor's high-water seq (the highest seq it is known to have committed). An
actor it lists above seq 0 whose file is missing, empty, or holds an older seq is refused
``actor_damaged`` (HTTP 503, close 1011), with a log line naming the path and the reason; ``roost
inspect`` shows why, ``roost delete`` clears it, and the name then starts afresh. Each damage is made
for real: a truncated file, a file deleted beside its WAL after a SIGKILL, an older copy put back, and
bytes of the WAL overwritten after a SIGKILL.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import shutil
import sqlite3
from pathlib import Path

import httpx
import orjson
import pytest

from roost.actors import ActorDamaged
from roost.cli import main
from roost.examples.kinds import KINDS
from roost.scheduler import FakeClock
from roost.storage import ActorFile, Directory, actor_digest, actor_path
from roost.testing import ActorKit, connect, serve, until
from roost.transport import create_app
from tests.support import ServerProcess, directory_row

KIND, NAME = "counter", "c1"


async def count_to(data_dir: Path, n: int) -> None:
    """``n`` increments of counter c1, committed, the process then stopped cleanly."""
    async with ActorKit(list(KINDS), data_dir) as kit:
        for _ in range(n):
            await kit.call(KIND, NAME, "increment")


async def count_in_a_server_then_kill(data_dir: Path, n: int) -> None:
    """``n`` increments in a real server process over a WebSocket, each answered, then SIGKILL right
    after the last answer, leaving the actor's WAL behind: the directory's batched high-water seq
    has not caught up (it is written at the idle sweep), only the witness has."""
    server = ServerProcess(data_dir).start()
    try:
        async with connect(f"{server.ws}/agents/{KIND}/{NAME}") as ws:
            await ws.recv()  # the welcome
            for i in range(1, n + 1):
                assert await ws.call("increment") == i
            server.kill()
    finally:
        server.kill()
    assert (directory_row(data_dir, KIND, NAME) or {}).get("acked_seq", 0) < n  # behind, as in a crash


def wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


async def assert_refused_as_damaged(
    data_dir: Path, reason: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> dict[str, object]:
    """Over HTTP, a WebSocket and the admin read, the actor is refused as damaged with ``reason``
    (a regular expression), logged once with its path; the file is not re-created. Offline ``roost
    inspect`` (beside the server: nobody holds a refused actor) says the same; its report is returned."""
    path = actor_path(data_dir, KIND, NAME)
    existed, size = path.exists(), path.stat().st_size if path.exists() else None
    app = create_app(KINDS, data_dir=data_dir)
    with caplog.at_level(logging.ERROR, logger="roost.registry"):
        async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
            for _ in range(2):
                r = await http.post(f"/agents/{KIND}/{NAME}/rpc/increment", json=[])
                assert r.status_code == 503, r.text
                error = r.json()["error"]
                assert error["code"] == "actor_damaged"
                assert re.search(reason, error["message"]), error["message"]
            r = await http.get(f"/agents/{KIND}/{NAME}")
            assert (r.status_code, r.json()["error"]["code"]) == (503, "actor_damaged")
            async with connect(f"ws://{addr}/agents/{KIND}/{NAME}") as ws:
                frame = await ws.recv()
                assert (frame["type"], frame["code"]) == ("error", "actor_damaged")
                assert await ws.close_code() == 1011
            assert (KIND, NAME) not in app.registry.hosts
            assert main(["inspect", KIND, NAME, "--data", str(data_dir)]) == 0
            report: dict[str, object] = orjson.loads(capsys.readouterr().out)
    assert path.exists() == existed  # not re-created …
    if size in (None, 0):  # … and a missing or empty one not even opened
        assert (path.stat().st_size if path.exists() else None) == size
    logged = [r.getMessage() for r in caplog.records if "refused as damaged" in r.getMessage()]
    assert len(logged) == 1, logged  # one line per process, with the path and the reason
    assert str(path) in logged[0]
    assert re.search(reason, logged[0])
    assert isinstance(report["damaged"], str)
    assert re.search(reason, report["damaged"])
    return report


async def assert_delete_clears_it(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """``roost delete`` removes what is left and the row; the name then starts at 0."""
    assert main(["delete", KIND, NAME, "--data", str(data_dir), "--yes", "--reason", "damaged"]) == 0
    out = capsys.readouterr().out
    record: dict[str, object] = orjson.loads(out[out.index("{") :])
    assert directory_row(data_dir, KIND, NAME) is None
    async with ActorKit(list(KINDS), data_dir) as kit:
        assert await kit.call(KIND, NAME, "increment") == 1
    return record


async def test_an_empty_file_is_refused_as_damaged_not_recreated(
    data_dir: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    await count_to(data_dir, 300)
    assert directory_row(data_dir, KIND, NAME)["acked_seq"] == 300  # type: ignore[index]
    path = actor_path(data_dir, KIND, NAME)
    assert not wal(path).exists()
    path.write_bytes(b"")
    report = await assert_refused_as_damaged(
        data_dir, r"its file is empty \(0 bytes\); it had committed seq 300", caplog, capsys
    )
    assert (report["acked_seq"], report["bytes"]) == (300, 0)
    assert main(["inspect", "--data", str(data_dir)]) == 0
    assert orjson.loads(capsys.readouterr().out)["damaged"] == [
        {"kind": KIND, "name": NAME, "damaged": "its file is empty (0 bytes); it had committed seq 300"}
    ]
    record = await assert_delete_clears_it(data_dir, capsys)
    assert (record["last_seq"], record["acked_seq"]) == (None, 300)
    assert record["damaged"] == "its file is empty (0 bytes); it had committed seq 300"


@pytest.mark.slow
async def test_a_file_deleted_beside_its_wal_is_refused_as_damaged(
    data_dir: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    await count_in_a_server_then_kill(data_dir, 40)
    path = actor_path(data_dir, KIND, NAME)
    assert wal(path).exists()
    path.unlink()
    await assert_refused_as_damaged(
        data_dir, r"its file is missing \(its -wal file remains\); it had committed seq 40", caplog, capsys
    )
    assert wal(path).exists()
    await assert_delete_clears_it(data_dir, capsys)


async def test_an_older_copy_put_back_is_refused_as_damaged(
    data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    path = actor_path(data_dir, KIND, NAME)
    await count_to(data_dir, 305)
    shutil.copy(path, tmp_path / "older.sqlite")
    await count_to(data_dir, 95)
    assert directory_row(data_dir, KIND, NAME)["acked_seq"] == 400  # type: ignore[index]
    shutil.copy(tmp_path / "older.sqlite", path)
    report = await assert_refused_as_damaged(
        data_dir, r"its file is at seq 305, older than the seq 400 it had committed", caplog, capsys
    )
    assert (report["seq"], report["state"], report["acked_seq"]) == (305, {"count": 305}, 400)
    record = await assert_delete_clears_it(data_dir, capsys)
    assert (record["last_seq"], record["acked_seq"]) == (305, 400)


@pytest.mark.slow
async def test_a_wal_damaged_after_a_kill_rolls_nothing_back_silently(
    data_dir: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes overwritten in the middle of the WAL: SQLite stops reading at the first frame whose
    checksum fails, so the file comes back at an older seq; it is refused, not served."""
    await count_in_a_server_then_kill(data_dir, 120)
    log = wal(actor_path(data_dir, KIND, NAME))
    data = bytearray(log.read_bytes())
    page_size = int.from_bytes(data[8:12], "big")
    frames = (len(data) - 32) // (24 + page_size)
    assert frames > 10
    middle = 32 + (frames // 2) * (24 + page_size) + 24  # the page of the middle frame
    data[middle : middle + 64] = bytes(range(64))
    log.write_bytes(bytes(data))
    kept = log.with_name(log.name + ".damaged")
    report = await assert_refused_as_damaged(
        data_dir, r"its file is at seq \d+, older than the seq 120 it had committed", caplog, capsys
    )
    assert isinstance(report["seq"], int)
    assert 0 <= report["seq"] < 120
    assert kept.read_bytes() == bytes(data)  # the WAL as it was found, for whoever looks into it
    await assert_delete_clears_it(data_dir, capsys)
    assert not kept.exists()


@pytest.mark.slow
async def test_a_wal_damaged_near_its_end_after_a_kill_is_refused_not_served_older(
    data_dir: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """400 answered increments, SIGKILL at once, then the WAL's last frames overwritten: the file
    comes back a few commits short of 400, which only the witness written after every commit knows
    (the directory's batched seq is behind)."""
    await count_in_a_server_then_kill(data_dir, 400)
    log = wal(actor_path(data_dir, KIND, NAME))
    data = bytearray(log.read_bytes())
    page_size = int.from_bytes(data[8:12], "big")
    frames = (len(data) - 32) // (24 + page_size)
    near_end = 32 + (frames - 4) * (24 + page_size) + 24  # the page of the fourth frame from the end
    data[near_end : near_end + 64] = bytes(range(64))
    log.write_bytes(bytes(data))
    report = await assert_refused_as_damaged(
        data_dir, r"its file is at seq 39\d, older than the seq 400 it had committed", caplog, capsys
    )
    assert report["acked_seq"] == 400
    await assert_delete_clears_it(data_dir, capsys)


@pytest.mark.slow
async def test_a_new_actor_with_one_acknowledged_write_is_refused_when_its_files_are_deleted(
    data_dir: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """One answered write, SIGKILL, then every file of the actor gone (its file, its WAL, its
    witness): the directory lists it, and its row is written only after its file existed, so the
    name is refused as damaged, not served as a new actor at 0."""
    await count_in_a_server_then_kill(data_dir, 1)
    path = actor_path(data_dir, KIND, NAME)
    for suffix in ("", "-wal", "-seq"):
        path.with_name(path.name + suffix).unlink()
    await assert_refused_as_damaged(data_dir, r"its file is missing; the directory lists it", caplog, capsys)
    await assert_delete_clears_it(data_dir, capsys)


@pytest.mark.slow
@pytest.mark.timeout(300)  # twenty server processes started one after the other: minutes on a busy machine
async def test_a_kill_at_any_moment_of_a_write_loop_never_refuses_the_actor_nor_rolls_it_back(
    data_dir: Path,
) -> None:
    """Twenty rounds of: a real server, a burst of pipelined increments, SIGKILL once a random number
    of them is answered (the others in flight, committing or not). Every restart serves the actor
    (no false refusal: the witness is never ahead of the file) at a count no lower than the highest
    answer seen before the kill."""
    rng = random.Random(13)
    answered = 0
    for _ in range(20):
        server = ServerProcess(data_dir).start()
        try:
            async with connect(f"{server.ws}/agents/{KIND}/{NAME}") as ws:
                welcome = await ws.recv()
                assert welcome["type"] == "welcome", welcome
                assert await ws.call("get") >= answered
                ids = [await ws.send_rpc("increment") for _ in range(rng.randint(1, 60))]
                for frame in await ws.results(ids[: rng.randint(0, len(ids))]):
                    answered = max(answered, frame["result"])
                server.kill()
        finally:
            server.kill()
    async with ActorKit(list(KINDS), data_dir) as kit:
        assert await kit.call(KIND, NAME, "get") >= answered > 0


async def commit_then_corrupt(data_dir: Path, how: str) -> bytes:
    """300 commits, a clean stop, then the file overwritten with random bytes or truncated to half;
    returns what the file holds then."""
    await count_to(data_dir, 300)
    path = actor_path(data_dir, KIND, NAME)
    data = path.read_bytes()
    damaged = random.Random(7).randbytes(len(data)) if how == "overwritten" else data[: len(data) // 2]
    path.write_bytes(damaged)
    return damaged


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("overwritten", r"its file cannot be read: file is not a database"),
        ("truncated", r"its file cannot be read: truncated to \d+ of its \d+ bytes"),
    ],
)
async def test_a_corrupt_file_is_refused_as_damaged_listed_and_cleared_by_delete(
    data_dir: Path,
    how: str,
    reason: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    damaged = await commit_then_corrupt(data_dir, how)
    report = await assert_refused_as_damaged(data_dir, reason, caplog, capsys)
    assert report["acked_seq"] == 300
    assert actor_path(data_dir, KIND, NAME).read_bytes() == damaged  # left as found, for whoever looks
    assert main(["inspect", "--data", str(data_dir)]) == 0
    [listed] = orjson.loads(capsys.readouterr().out)["damaged"]
    assert (listed["kind"], listed["name"]) == (KIND, NAME)
    assert re.search(reason, listed["damaged"])
    assert main(["export", KIND, NAME, "--data", str(data_dir)]) == 1  # one line, no traceback
    assert "roost: an actor file is damaged: " in capsys.readouterr().err
    record = await assert_delete_clears_it(data_dir, capsys)
    assert (record["last_seq"], record["acked_seq"]) == (None, 300)
    assert re.search(reason, str(record["damaged"]))


async def test_a_file_sqlite_finds_malformed_is_refused_with_sqlites_reason(
    data_dir: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """A whole header over pages of garbage: only SQLite's reading tells (``malformed``); the refusal
    carries its words, logged once, with no traceback on each request."""
    await count_to(data_dir, 300)
    path = actor_path(data_dir, KIND, NAME)
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    data[page_size:] = random.Random(7).randbytes(len(data) - page_size)  # every page but the first
    path.write_bytes(bytes(data))
    await assert_refused_as_damaged(data_dir, r"its file cannot be read: .*malformed", caplog, capsys)
    assert not any(r.exc_info for r in caplog.records)
    await assert_delete_clears_it(data_dir, capsys)


async def test_a_damaged_actor_is_inspected_and_deleted_through_the_server(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``roost inspect --server`` answers the damage report (not a 503), ``roost delete --server``
    clears it (not an HTTP 500), and the name then starts afresh."""
    await commit_then_corrupt(data_dir, "overwritten")
    app = create_app(KINDS, data_dir=data_dir)
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        server = f"http://{addr}"
        assert await asyncio.to_thread(main, ["inspect", KIND, NAME, "--server", server]) == 0
        report = orjson.loads(capsys.readouterr().out)
        assert report["damaged"] == "its file cannot be read: file is not a database"
        assert report["acked_seq"] == 300
        argv = ["delete", KIND, NAME, "--server", server, "--yes", "--reason", "damaged"]
        assert await asyncio.to_thread(main, argv) == 0
        out = capsys.readouterr().out
        record = orjson.loads(out[out.index("{") :])
        assert (record["last_seq"], record["acked_seq"]) == (None, 300)
        assert record["damaged"] == "its file cannot be read: file is not a database"
        r = await http.post(f"/agents/{KIND}/{NAME}/rpc/increment", json=[])
        assert r.json() == {"ok": True, "result": 1}


async def test_the_alarm_of_a_damaged_actor_is_parked_not_retried_every_second(
    data_dir: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pending wake-up of an actor refused as damaged: the dispatcher gives it back an hour later,
    logs it once, and does not try again meanwhile; ``roost delete`` clears it with the actor."""
    clock = FakeClock()
    async with ActorKit(list(KINDS), data_dir, clock=clock) as kit:
        await kit.call(KIND, NAME, "increment_later", 2, 1, "k")
    actor_path(data_dir, KIND, NAME).write_bytes(b"")
    caplog.set_level(logging.INFO, logger="roost.dispatcher")
    async with ActorKit(list(KINDS), data_dir, clock=clock) as kit:
        dispatcher = kit.registry.dispatcher
        assert dispatcher is not None
        clock.advance(3)
        await until(lambda: dispatcher.failures == 1)
        row = directory_row(data_dir, KIND, NAME)
        assert row is not None
        assert row["next_alarm_at"] == pytest.approx(clock.now() + 3600, abs=1)
        for _ in range(10):  # ten seconds: no retry
            clock.advance(1)
            await kit.settle()
        assert dispatcher.failures == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "roost.dispatcher"]
    assert len(lines) == 1, lines
    assert "parked" in lines[0]
    assert "actor_damaged" in lines[0] or "damaged" in lines[0]
    assert main(["inspect", "--data", str(data_dir)]) == 0
    assert orjson.loads(capsys.readouterr().out)["pending_wakeups"] == 1
    await assert_delete_clears_it(data_dir, capsys)
    assert main(["inspect", "--data", str(data_dir)]) == 0
    assert orjson.loads(capsys.readouterr().out)["pending_wakeups"] == 0


@pytest.mark.slow
def test_a_last_flush_that_gives_up_on_a_held_lock_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holds the directory's lock past the last flush's five seconds: the high-water
    seq and last activity it drops are named in a warning, not lost in silence."""
    directory = Directory(tmp_path)
    directory.register(KIND, NAME, actor_digest(KIND, NAME), 1.0)
    directory.touch(KIND, NAME, 2.0, 20)
    other = sqlite3.connect(tmp_path / "directory.sqlite", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with caplog.at_level(logging.WARNING, logger="roost.storage"):
            directory.close()
    finally:
        other.execute("ROLLBACK")
        other.close()
    [line] = [r.getMessage() for r in caplog.records if r.name == "roost.storage"]
    assert "high-water seq of 1 actors were not written" in line
    assert directory_row(tmp_path, KIND, NAME)["acked_seq"] == 0  # type: ignore[index]


async def test_a_file_left_without_its_row_by_a_crash_is_adopted_not_refused(data_dir: Path) -> None:
    """The file is created before its row: a crash between the two leaves a file the directory does
    not list. The next call serves it as the new actor it is, and writes its row."""
    async with ActorKit(list(KINDS), data_dir):
        pass  # the directory exists
    path = actor_path(data_dir, KIND, NAME)
    ActorFile.open(path, KIND, NAME, initial_state='{"count": 0}').close()
    assert directory_row(data_dir, KIND, NAME) is None
    async with ActorKit(list(KINDS), data_dir) as kit:
        assert await kit.call(KIND, NAME, "increment") == 1
    row = directory_row(data_dir, KIND, NAME)
    assert row is not None
    assert row["acked_seq"] == 1


async def test_a_backup_holds_no_witness_and_is_served_as_a_data_directory_of_its_own(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A backup copies the files and the directory, not the witnesses: used as a data directory it
    falls back to the directory's high-water seq, which its copies satisfy, and is served, not
    refused. Copied back over the newer actor's witness, the older copy is refused, as any is."""
    await count_to(data_dir, 5)
    out = tmp_path / "bak"
    assert main(["backup", "--data", str(data_dir), "--out", str(out)]) == 0
    capsys.readouterr()
    copy = actor_path(out, KIND, NAME)
    assert copy.exists()
    assert not copy.with_name(copy.name + "-seq").exists()
    await count_to(data_dir, 3)
    async with ActorKit(list(KINDS), out) as kit:
        assert await kit.call(KIND, NAME, "get") == 5
    shutil.copy(copy, actor_path(data_dir, KIND, NAME))
    async with ActorKit(list(KINDS), data_dir) as kit:
        with pytest.raises(ActorDamaged, match="older than the seq 8 it had committed"):
            await kit.call(KIND, NAME, "get")


async def test_a_file_prepared_for_an_input_that_never_came_is_released_by_the_sweep(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``Registry.prepare`` leaves the new file open for the input that follows; when none does (a
    handshake that failed after it), the idle sweep closes it, and its lock goes with it."""
    clock = FakeClock()
    async with ActorKit(list(KINDS), data_dir, clock=clock, idle_timeout=10) as kit:
        await kit.registry.prepare(KIND, NAME)
        assert directory_row(data_dir, KIND, NAME) is not None
        assert main(["inspect", KIND, NAME, "--data", str(data_dir)]) == 1  # held
        assert "a running server holds it" in capsys.readouterr().err
        clock.advance(11)
        kit.registry.sweep()
        await kit.registry.released()
        assert main(["inspect", KIND, NAME, "--data", str(data_dir)]) == 0
        assert orjson.loads(capsys.readouterr().out)["seq"] == 0
        assert await kit.call(KIND, NAME, "increment") == 1
