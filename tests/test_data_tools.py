"""Data you can see and take away: roost inspect, export, delete (audited) and backup (offline and
while serving)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from roost.actors import Actor, callable
from roost.actors.registry import RuntimeConfig
from roost.cli import main
from roost.examples.kinds import KINDS
from roost.storage import Directory, actor_path
from roost.testing import ActorKit, connect, until
from roost.transport import backup, create_app
from roost.transport.security import token_authenticate
from roost.transport.tokens import TokenSigner
from tests.support import ServerProcess, serve_in_process


async def make_actors(data_dir: Path) -> None:
    async with ActorKit(list(KINDS), data_dir) as kit:
        c = kit.connect("counter", "c1")
        for _ in range(3):
            await c.call("increment")
        await c.call("increment_later", 3600, 1, "later")
        r = kit.connect("room", "r1")
        await r.call("say", "hello", "ann")


async def test_inspect_and_export_show_state_tables_events_and_schedules(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await make_actors(data_dir)
    assert main(["inspect", "--data", str(data_dir)]) == 0
    summary = orjson.loads(capsys.readouterr().out)
    assert summary["actors"] == 2
    assert summary["by_kind"] == {"counter": 1, "room": 1}
    assert summary["pending_wakeups"] == 1
    assert main(["inspect", "counter", "c1", "--data", str(data_dir)]) == 0
    info = orjson.loads(capsys.readouterr().out)
    assert info["state"] == {"count": 3}
    assert info["active_schedules"] == 1
    assert info["integrity_check"] == "ok"
    assert info["seq"] == 3
    out = tmp_path / "room.json"
    assert main(["export", "room", "r1", "--data", str(data_dir), "--out", str(out)]) == 0
    assert "exported" in capsys.readouterr().out
    exported = orjson.loads(out.read_bytes())
    assert exported["tables"]["messages"] == [{"id": 1, "author": "ann", "text": "hello"}]
    assert [e["event"]["text"] for e in exported["log"] if e["type"] == "event"] == ["hello"]
    assert main(["export", "counter", "c1", "--data", str(data_dir)]) == 0
    counter = orjson.loads(capsys.readouterr().out)
    assert [s["callback"] for s in counter["schedules"]] == ["add"]
    assert main(["inspect", "counter", "nobody", "--data", str(data_dir)]) == 1
    assert "no actor" in capsys.readouterr().err


async def test_delete_needs_yes_removes_everything_and_leaves_an_audit_record(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await make_actors(data_dir)
    path = actor_path(data_dir, "counter", "c1")
    assert main(["delete", "counter", "c1", "--data", str(data_dir)]) == 2
    assert path.exists()
    assert (
        main(["delete", "counter", "c1", "--data", str(data_dir), "--yes", "--reason", "gdpr request"]) == 0
    )
    assert not path.exists()
    assert not path.with_name(path.name + "-wal").exists()
    directory = Directory(data_dir)
    try:
        assert directory.get("counter", "c1") is None
        assert directory.get("room", "r1") is not None
    finally:
        directory.close()
    lines = (data_dir / "audit.log").read_bytes().splitlines()
    record = orjson.loads(lines[-1])
    assert record["action"] == "delete"
    assert (record["kind"], record["name"], record["last_seq"], record["reason"]) == (
        "counter",
        "c1",
        3,
        "gdpr request",
    )
    assert '"count":' not in lines[-1].decode()  # a digest of the state, never the state
    async with ActorKit(list(KINDS), data_dir) as kit:  # the name starts afresh
        assert await kit.call("counter", "c1", "increment") == 1


@pytest.mark.slow
async def test_tools_refuse_an_actor_a_running_server_holds(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await make_actors(data_dir)
    server = ServerProcess(data_dir).start()
    try:
        async with connect(f"{server.ws}/agents/counter/c1") as ws:  # live now
            await ws.recv()
            for argv in (
                ["inspect", "counter", "c1"],
                ["export", "counter", "c1"],
                ["delete", "counter", "c1", "--yes"],
            ):
                assert main([*argv, "--data", str(data_dir)]) == 1
                assert "a running server holds it" in capsys.readouterr().err
        assert actor_path(data_dir, "counter", "c1").exists()
    finally:
        server.kill()


async def test_offline_backup_is_complete_and_serves(data_dir: Path, tmp_path: Path) -> None:
    await make_actors(data_dir)
    out = tmp_path / "bak"
    assert main(["backup", "--data", str(data_dir), "--out", str(out)]) == 0
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["actors"] == 2
    assert manifest["integrity_failures"] == 0
    assert main(["backup", "--data", str(data_dir), "--out", str(out)]) == 1  # never over a backup
    async with ActorKit(list(KINDS), out) as kit:
        assert await kit.call("counter", "c1", "get") == 3
        assert [m["text"] for m in await kit.call("room", "r1", "history")] == ["hello"]


def counts_in(root: Path, names: list[str]) -> dict[str, int]:
    out = {}
    for name in names:
        conn = sqlite3.connect(actor_path(root, "counter", name))
        try:
            frame = conn.execute(
                "SELECT frame FROM roost_log WHERE kind = 'state' ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            out[name] = orjson.loads(frame[0])["state"]["count"] if frame else 0
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()
    return out


@pytest.mark.slow
async def test_backup_while_serving_is_consistent(data_dir: Path, tmp_path: Path) -> None:
    """Writers keep incrementing during the backup: every copied counter holds a committed value
    between what was acknowledged before the backup began and after it ended."""
    names = [f"b{i}" for i in range(20)]
    server = ServerProcess(data_dir, "--rate-limit", "0", "--principal-rate-limit", "0").start()
    acked: dict[str, int] = dict.fromkeys(names, 0)
    stop = asyncio.Event()

    async def writer(name: str) -> None:
        async with connect(f"{server.ws}/agents/counter/{name}") as ws:
            await ws.recv()
            while not stop.is_set():
                acked[name] = await ws.call("increment")

    try:
        tasks = [asyncio.create_task(writer(n)) for n in names]
        # every writer had some calls acknowledged
        await until(lambda: min(acked.values()) >= 5, timeout=10, interval=0.01)
        before = dict(acked)
        out = data_dir.parent / "backups" / "live-bak"  # the server's backup root, by default
        code = await asyncio.to_thread(
            main, ["backup", "--data", str(data_dir), "--out", "live-bak", "--server", server.http]
        )
        after = dict(acked)
        stop.set()
        await asyncio.gather(*tasks)
    finally:
        server.kill()
    assert code == 0
    copied = counts_in(out, names)
    for name in names:
        assert before[name] <= copied[name] <= after[name] + 1, (
            name,
            before[name],
            copied[name],
            after[name],
        )
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["actors"] == len(names)


class Bulk(Actor):
    """An actor whose file is large enough that copying it takes many backup steps."""

    kind = "bulk"
    initial_state = {"n": 0}
    migrations = ("CREATE TABLE blobs (b BLOB NOT NULL)",)

    @callable
    async def fill(self, megabytes: int) -> None:
        self.sql.executemany("INSERT INTO blobs VALUES (zeroblob(1048576))", [()] * megabytes)

    @callable
    async def bump(self) -> int:
        self.set_state({"n": self.state["n"] + 1})
        return int(self.state["n"])


async def test_a_backup_cut_short_by_the_turn_timeout_lets_go_of_the_file_before_the_turn_ends(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The online backup copies an actor inside one of its turns, in a thread. When that turn times
    out mid-copy, the copy is stopped between two steps and waited for: the rollback and the next
    turn never use the connection while the thread still has it. ``POST /admin/backup`` answers 504
    naming the actor (``roost backup --server`` says so and exits 1), the actor goes on serving, and
    its file is intact."""
    async with ActorKit([Bulk], data_dir) as kit:
        await kit.call("bulk", "big", "fill", 40)
    released: list[bool] = []  # one entry per copy, appended when its thread lets go of the file
    copy = backup.copy_database

    def spy(*args: Any) -> str:
        try:
            return copy(*args)
        finally:
            released.append(True)

    monkeypatch.setattr(backup, "copy_database", spy)
    app = create_app([Bulk], config=RuntimeConfig(data_dir=data_dir, turn_timeout=0.002))
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        r = await http.post("/agents/bulk/big/rpc/bump", json=[])  # active: the timeout is all the copy's
        assert r.json() == {"ok": True, "result": 1}
        r = await http.post("/admin/backup", json={"name": "cut"})
        assert r.status_code == 504, r.text
        assert r.json()["error"]["message"].startswith(
            "backup incomplete at bulk/'big': turn exceeded 0.002 s"
        )
        code = await asyncio.to_thread(
            main, ["backup", "--data", str(data_dir), "--out", "cut-cli", "--server", f"http://{addr}"]
        )
        assert code == 1
        assert "roost: backup failed (HTTP 504): backup incomplete at bulk/'big'" in capsys.readouterr().err
        seen_by_next_turn = await app.registry.run(
            "bulk", "big", lambda actor: asyncio.sleep(0, list(released))
        )
        assert seen_by_next_turn == [True, True]  # both copies (HTTP, CLI) had let go
        r = await http.post("/agents/bulk/big/rpc/bump", json=[])
        assert r.json() == {"ok": True, "result": 2}
    partial = data_dir.parent / "backups" / "cut"
    assert not (partial / "manifest.json").exists()
    copied = partial / actor_path(data_dir, "bulk", "big").relative_to(data_dir)
    assert copied.stat().st_size < 40 * 1024 * 1024  # stopped early, not copied whole meanwhile
    conn = sqlite3.connect(actor_path(data_dir, "bulk", "big"))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 40
    finally:
        conn.close()


async def test_tenant_actors_are_reachable_from_the_cli(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with ActorKit(list(KINDS), data_dir) as kit:
        await kit.call("counter", "acme\x00c", "increment")
    assert main(["inspect", "counter", "c", "--tenant", "acme", "--data", str(data_dir)]) == 0
    assert orjson.loads(capsys.readouterr().out)["state"] == {"count": 1}
    assert main(["delete", "counter", "c", "--tenant", "acme", "--data", str(data_dir), "--yes"]) == 0
    assert not actor_path(data_dir, "counter", "acme\x00c").exists()


async def test_admin_backup_is_for_admins_from_the_right_place(data_dir: Path, tmp_path: Path) -> None:
    signer = TokenSigner("b" * 40)
    expected = os.path.join(os.path.dirname(os.path.abspath(data_dir)), "backups", "b1")  # noqa: ASYNC240
    app = create_app(
        KINDS, data_dir=data_dir, authenticate=token_authenticate(signer), origins=["https://ops.example"]
    )

    def bearer(**kw: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {signer.issue('op', ttl=60, **kw)}"}

    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        cases = [
            ({}, {"name": "b1"}, 401),
            (bearer(), {"name": "b1"}, 403),  # not an admin
            (bearer(admin=True, tenant="t1"), {"name": "b1"}, 403),  # a tenant's admin
            ({**bearer(admin=True), "Origin": "https://evil.example"}, {"name": "b1"}, 403),
            (bearer(admin=True), {"name": "../escape"}, 400),
            (bearer(admin=True), {"out": "/etc"}, 400),
        ]
        for headers, body, status in cases:
            r = await http.post("/admin/backup", json=body, headers=headers)
            assert r.status_code == status, (headers, body, r.text)
        r = await http.post("/admin/backup", json={"name": "b1"}, headers=bearer(admin=True))
        assert r.status_code == 200
        assert r.json()["result"]["path"] == expected
        assert (
            await http.post("/admin/backup", json={"name": "b1"}, headers=bearer(admin=True))
        ).status_code == 400
    assert not (tmp_path / "escape").exists()
