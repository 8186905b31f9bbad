"""The data tools on a running server: ``roost inspect | export --server URL`` read a live actor inside one
of its turns (``GET /admin/actors/{kind}/{name}[/export]``), ``roost delete --server URL`` deletes it
there (``DELETE /admin/actors/{kind}/{name}``), as an admin only; the hints name only options that
exist; and the export's one format (objects and ISO 8601 times in Roost's own tables), offline and
live."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from roost.actors import Actor, callable
from roost.actors.decorators import wakeup
from roost.actors.schedules import RetryPolicy
from roost.agent.payloads import BlobStore
from roost.cli import main
from roost.examples.kinds import KINDS, Counter, DocsAgent, Room
from roost.scheduler import SystemClock
from roost.storage import Directory, actor_path
from roost.testing import ActorKit, connect, serve, until
from roost.transport import create_app
from roost.transport.security import token_authenticate
from roost.transport.tokens import TokenSigner
from tests.kinds import Holder

#: What a live read and an offline read of the same committed actor both report (``bytes`` and
#: ``path`` aside: a live file's WAL is not yet checkpointed into it).
SAME = ("kind", "name", "meta", "schema_versions", "seq", "logged_frames", "state", "active_schedules")


async def cli(*argv: str) -> int:
    """``roost ARGV`` in a thread (it makes blocking HTTP requests to the server on this loop)."""
    return await asyncio.to_thread(main, list(argv))


async def make_counter(data_dir: Path) -> None:
    async with ActorKit(list(KINDS), data_dir) as kit:
        for _ in range(3):
            await kit.call("counter", "c1", "increment")


async def test_a_live_actor_is_inspected_and_exported_through_the_server_as_offline(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While the actor is live (its file locked) the offline tools refuse and name ``--server``; with
    ``--server`` they report what the offline path reports once the server is stopped, with the state
    as of the last commit."""
    await make_counter(data_dir)
    app = create_app(KINDS, data_dir=data_dir)
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        r = await http.post("/agents/counter/c1/rpc/increment", json=[])  # live now, count 4 committed
        assert r.json() == {"ok": True, "result": 4}
        r = await http.post("/agents/counter/c1/rpc/increment_later", json=[3600, 1, "later"])
        assert r.json()["ok"]
        assert await cli("inspect", "counter", "c1", "--data", str(data_dir)) == 1
        assert "a running server holds it (use --server URL to read it while serving)" in (
            capsys.readouterr().err
        )
        assert await cli("inspect", "counter", "c1", "--server", f"http://{addr}") == 0
        live = orjson.loads(capsys.readouterr().out)
        out = tmp_path / "live.json"
        assert await cli("export", "counter", "c1", "--server", f"http://{addr}", "--out", str(out)) == 0
        assert "while serving" in capsys.readouterr().out
        exported_live = orjson.loads(out.read_bytes())
        assert await cli("export", "counter", "c1", "--server", f"http://{addr}") == 0
        assert orjson.loads(capsys.readouterr().out)["state"] == {"count": 4}
        assert ("counter", "c1") in app.registry.hosts  # read in place: still live
    assert live["state"] == {"count": 4}
    assert live["seq"] == 4
    assert live["active_schedules"] == 1
    assert live["integrity_check"] == "ok"
    assert await cli("inspect", "counter", "c1", "--data", str(data_dir)) == 0
    offline = orjson.loads(capsys.readouterr().out)
    assert {k: live[k] for k in SAME} == {k: offline[k] for k in SAME}
    assert live["rows"] == offline["rows"]
    assert await cli("export", "counter", "c1", "--data", str(data_dir)) == 0
    exported = orjson.loads(capsys.readouterr().out)
    for key in ("kind", "name", "state", "log", "schedules"):
        assert exported_live[key] == exported[key], key
    del exported_live["tables"]["roost_state"], exported["tables"]["roost_state"]  # rewritten on close
    assert exported_live["tables"] == exported["tables"]


async def test_a_live_tenant_actor_is_read_through_the_server(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with ActorKit(list(KINDS), data_dir) as kit:
        await kit.call("counter", "acme\x00c", "increment")
    app = create_app(KINDS, data_dir=data_dir)
    async with serve(app) as addr:
        assert await cli("inspect", "counter", "c", "--tenant", "acme", "--server", f"http://{addr}") == 0
        assert orjson.loads(capsys.readouterr().out)["state"] == {"count": 1}
        assert await cli("inspect", "counter", "c", "--server", f"http://{addr}") == 1  # another actor
        assert "does not exist" in capsys.readouterr().err
        assert await cli("inspect", "--server", f"http://{addr}") == 2  # a directory is inspected offline
        assert capsys.readouterr().err == (
            "roost: inspect --server takes KIND and NAME (a whole data directory is inspected offline)\n"
        )
    assert not actor_path(data_dir, "counter", "c").exists()


async def test_live_reads_are_for_admins_only(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``POST /admin/backup``: an admin token without a tenant; anyone else gets exit 1 and one line."""
    await make_counter(data_dir)
    signer = TokenSigner("b" * 40)
    app = create_app(KINDS, data_dir=data_dir, authenticate=token_authenticate(signer))
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        for path in ("/admin/actors/counter/c1", "/admin/actors/counter/c1/export"):
            assert (await http.get(path)).status_code == 401
            for token in (signer.issue("op", ttl=60), signer.issue("op", ttl=60, tenant="t1", admin=True)):
                r = await http.get(path, headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 403, (path, r.text)
        for command in ("inspect", "export"):
            monkeypatch.delenv("ROOST_TOKEN", raising=False)
            assert await cli(command, "counter", "c1", "--server", f"http://{addr}") == 1
            err = capsys.readouterr().err
            assert err == f"roost: {command} failed (HTTP 401): not authenticated\n"
            monkeypatch.setenv("ROOST_TOKEN", signer.issue("op", ttl=60))
            assert await cli(command, "counter", "c1", "--server", f"http://{addr}") == 1
            captured = capsys.readouterr()
            assert captured.out == ""
            assert captured.err == (
                f"roost: {command} failed (HTTP 403): admin only (an admin token without a tenant)\n"
            )
            monkeypatch.setenv("ROOST_TOKEN", signer.issue("op", ttl=60, admin=True))
            assert await cli(command, "counter", "c1", "--server", f"http://{addr}") == 0
            assert orjson.loads(capsys.readouterr().out)["state"] == {"count": 3}


PROXIED = [
    ("Forwarded", "for=203.0.113.9"),
    ("X-Forwarded-For", "203.0.113.9"),
    ("X-Forwarded-Host", "roost.example"),
    ("X-Forwarded-Proto", "https"),
    ("X-Real-IP", "203.0.113.9"),
    ("Via", "1.1 nginx"),
]


async def test_without_authentication_admin_is_for_this_hosts_command_line_never_through_a_proxy(
    data_dir: Path,
) -> None:
    """docs/security.md: without authentication, ``/admin/*`` answers a client on the loopback interface
    that is not a browser (no ``Origin``) and came through no proxy: behind a reverse proxy on the same
    host every remote client connects from 127.0.0.1, so a request carrying any proxy header is refused
    ``forbidden`` (inspect, export, delete, backup and gc alike) and nothing is read, deleted, copied
    or collected."""
    await make_counter(data_dir)
    nobodys = old_garbage(data_dir)
    app = create_app(KINDS, data_dir=data_dir)
    requests: list[tuple[str, str, Any]] = [
        ("GET", "/admin/actors/counter/c1", None),
        ("GET", "/admin/actors/counter/c1/export", None),
        ("DELETE", "/admin/actors/counter/c1", {"reason": "proxied"}),
        ("POST", "/admin/backup", {"name": "proxied"}),
        ("POST", "/admin/gc", {"grace": 0}),
    ]
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        for header, value in [("Origin", "http://localhost:8000"), *PROXIED]:
            for method, path, body in requests:
                r = await http.request(method, path, json=body, headers={header: value})
                assert r.status_code == 403, (header, method, path, r.text)
                assert r.json()["error"]["code"] == "forbidden"
        inspected = await http.get("/admin/actors/counter/c1")  # the operator's own command line
        assert inspected.status_code == 200, inspected.text
        assert inspected.json()["result"]["state"] == {"count": 3}
    assert not (data_dir.parent / "backups").exists()
    assert nobodys.exists()


def old_garbage(data_dir: Path) -> Path:
    """A blob nobody references, stored two hours ago: the next collection removes it."""
    store = BlobStore(data_dir / "blobs")
    path = store.path(store.put(b"nobody's")[7:])
    old = time.time() - 7200
    os.utime(path, (old, old))
    return path


async def test_a_collection_while_serving_is_for_admins_only(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``POST /admin/backup``: an admin token without a tenant; anyone else gets exit 1 and one
    line, and nothing is removed; a body that is not ``{"grace": n, "dry_run": b}`` is refused."""
    await make_counter(data_dir)
    nobodys = old_garbage(data_dir)
    signer = TokenSigner("b" * 40)
    app = create_app(KINDS, data_dir=data_dir, authenticate=token_authenticate(signer))
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        assert (await http.post("/admin/gc")).status_code == 401
        admin = {"Authorization": f"Bearer {signer.issue('op', ttl=60, admin=True)}"}
        for token in (signer.issue("op", ttl=60), signer.issue("op", ttl=60, tenant="t1", admin=True)):
            r = await http.post("/admin/gc", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 403, r.text
        for body in ({"grace": -1}, {"grace": "soon"}, {"dry_run": "yes"}, [1], {"grace": True}):
            r = await http.post("/admin/gc", json=body, headers=admin)
            assert r.json()["error"]["code"] == "bad_frame", (body, r.text)
        monkeypatch.setenv("ROOST_TOKEN", signer.issue("op", ttl=60))
        assert await cli("gc", "--server", f"http://{addr}") == 1
        assert (
            capsys.readouterr().err
            == "roost: gc failed (HTTP 403): admin only (an admin token without a tenant)\n"
        )
        assert nobodys.exists()
        monkeypatch.setenv("ROOST_TOKEN", signer.issue("op", ttl=60, admin=True))
        assert await cli("gc", "--server", f"http://{addr}", "--dry-run") == 0
        assert nobodys.exists()
        assert await cli("gc", "--server", f"http://{addr}") == 0
        assert "removed 1 blob(s)" in capsys.readouterr().out
    assert not nobodys.exists()


async def test_a_never_created_actor_is_not_found_and_not_created(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await make_counter(data_dir)
    app = create_app(KINDS, data_dir=data_dir)
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        for path in ("/admin/actors/counter/ghost", "/admin/actors/counter/ghost/export"):
            r = await http.get(path)
            assert r.status_code == 404
            assert r.json()["error"]["code"] == "not_found"
        assert (await http.get("/admin/actors/nokind/ghost")).json()["error"]["code"] == "unknown_kind"
        assert await cli("export", "counter", "ghost", "--server", f"http://{addr}") == 1
        assert capsys.readouterr().err == (
            "roost: export failed (HTTP 404): actor counter/'ghost' does not exist\n"
        )
        assert ("counter", "ghost") not in app.registry.hosts
    assert not actor_path(data_dir, "counter", "ghost").exists()
    directory = Directory(data_dir)
    try:
        assert directory.get("counter", "ghost") is None
    finally:
        directory.close()


async def test_delete_through_the_server_never_lets_a_racing_call_bring_the_old_data_back(
    data_dir: Path, holder: type[Holder], capsys: pytest.CaptureFixture[str]
) -> None:
    """``roost delete --server URL KIND NAME --yes``: the live actor's connections are closed (1000),
    the turn under way ends first, a call that arrives meanwhile is refused ``actor_unavailable``
    ("being deleted") instead of reaching the old data, the file and the directory row go, the audit
    record names the principal; the next call makes a new actor at 0."""
    app = create_app([holder], data_dir=data_dir)
    path = actor_path(data_dir, "holder", "s1")
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}", timeout=30) as http:
        for n in (1, 2, 3):
            assert (await http.post("/agents/holder/s1/rpc/add", json=[])).json()["result"] == n
        assert await cli("delete", "holder", "s1", "--server", f"http://{addr}") == 2  # no --yes
        assert "cannot be undone; add --yes" in capsys.readouterr().err
        async with connect(f"ws://{addr}/agents/holder/s1") as ws:
            await ws.recv()  # the welcome
            held = asyncio.create_task(http.post("/agents/holder/s1/rpc/hold", json=[]))
            await until(lambda: app.registry.hosts[("holder", "s1")].in_turn)
            delete = asyncio.create_task(
                cli("delete", "holder", "s1", "--yes", "--server", f"http://{addr}", "--reason", "gdpr")
            )
            await until(lambda: ("holder", "s1") in app.registry.deleting)
            racing = await http.post("/agents/holder/s1/rpc/add", json=[])
            assert racing.status_code == 503
            assert racing.json()["error"] == {
                "code": "actor_unavailable",
                "message": "actor holder/'s1' is being deleted",
            }
            assert await ws.close_code() == 1000
            assert holder.release is not None
            holder.release.set()
            assert (await held).json() == {"ok": True, "result": ""}  # the turn under way ran to its end
            assert await delete == 0
        out = capsys.readouterr().out
        assert out.startswith("deleted holder/'s1' through the server")
        record = orjson.loads(out[out.index("{") :])
        assert (record["last_seq"], record["reason"], record["by"]) == (3, "gdpr", "anonymous")
        assert not path.exists()
        directory = Directory(data_dir)
        try:
            assert directory.get("holder", "s1") is None
        finally:
            directory.close()
        assert orjson.loads((data_dir / "audit.log").read_bytes().splitlines()[-1]) == record
        assert (await http.post("/agents/holder/s1/rpc/add", json=[])).json()["result"] == 1
        r = await http.request("DELETE", "/admin/actors/holder/ghost")
        assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
    app = create_app([holder], data_dir=data_dir)  # the new actor is not damaged: its row starts at 0
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        assert (await http.post("/agents/holder/s1/rpc/add", json=[])).json()["result"] == 2


async def test_delete_through_the_server_is_for_admins_only(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    await make_counter(data_dir)
    signer = TokenSigner("b" * 40)
    app = create_app(KINDS, data_dir=data_dir, authenticate=token_authenticate(signer))
    async with serve(app) as addr:
        monkeypatch.setenv("ROOST_TOKEN", signer.issue("op", ttl=60))
        assert await cli("delete", "counter", "c1", "--yes", "--server", f"http://{addr}") == 1
        assert capsys.readouterr().err == (
            "roost: delete failed (HTTP 403): admin only (an admin token without a tenant)\n"
        )
        assert actor_path(data_dir, "counter", "c1").exists()
        monkeypatch.setenv("ROOST_TOKEN", signer.issue("op", ttl=60, admin=True))
        assert await cli("delete", "counter", "c1", "--yes", "--server", f"http://{addr}") == 0
        assert orjson.loads(capsys.readouterr().out.split("\n", 1)[1])["by"] == "op"
    assert not actor_path(data_dir, "counter", "c1").exists()


def test_every_hint_names_only_options_the_command_has() -> None:
    """A refusal's hint (a server holds the actor) names options of the same command."""
    from roost.cli.data import _LOCKED_HINTS, add_parsers

    sub = argparse.ArgumentParser().add_subparsers()
    add_parsers(sub)
    for command, hint in _LOCKED_HINTS.items():
        options = set(sub.choices[command]._option_string_actions)
        named = set(re.findall(r"--[a-z][a-z-]*", hint))
        assert named, (command, hint)
        assert named <= options, (command, hint)


class Notes(Actor):
    """A schedule, a dead letter, and a user table holding epoch times and JSON text of its own."""

    kind = "notes"
    initial_state = {"n": 0}
    migrations = ("CREATE TABLE notes (text TEXT NOT NULL, at REAL NOT NULL, meta TEXT NOT NULL)",)

    @callable
    async def setup(self) -> None:
        self.sql.execute("INSERT INTO notes VALUES ('hi', 1764590000.5, '{\"a\": 1}')")
        self.set_state({"n": 1})
        await self.schedule(3600, "boom", {"later": True}, key="later")
        await self.schedule(0, "boom", {"now": [1, 2]}, retry=RetryPolicy(max_attempts=1))

    @wakeup
    async def boom(self, payload: Any) -> None:
        raise RuntimeError("always")


def is_iso_utc(value: Any) -> bool:
    return isinstance(value, str) and datetime.fromisoformat(value).utcoffset() == UTC.utcoffset(None)


def assert_one_format(exported: dict[str, Any]) -> None:
    """Objects, not JSON in strings; ISO 8601 UTC, not epoch floats, in Roost's own tables; user
    tables as stored."""
    tables = exported["tables"]
    assert is_iso_utc(exported["exported_at"])
    later = next(s for s in exported["schedules"] if s["key"] == "later")
    assert later["payload"] == {"later": True}
    assert isinstance(later["trigger"], dict)
    assert is_iso_utc(later["next_fire"])
    assert is_iso_utc(later["created_at"])
    assert exported["schedules"] == tables["roost_schedules"]
    (letter,) = tables["roost_dead_letters"]
    assert letter["payload"] == {"now": [1, 2]}
    assert is_iso_utc(letter["nominal"])
    assert is_iso_utc(letter["at"])
    assert all(isinstance(r["frame"], dict) and is_iso_utc(r["created_at"]) for r in tables["roost_log"])
    assert all(isinstance(r["state"], dict) and is_iso_utc(r["updated_at"]) for r in tables["roost_state"])
    assert all(is_iso_utc(r["applied_at"]) for r in tables["roost_migrations"])
    assert isinstance(later["misfire_grace"], float)  # a duration stays seconds
    assert tables["notes"] == [{"text": "hi", "at": 1764590000.5, "meta": '{"a": 1}'}]
    assert exported["state"] == {"n": 1}


async def test_the_export_is_one_format_offline_and_live(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with ActorKit([Notes], data_dir, clock=SystemClock()) as kit:  # the server's clock
        await kit.call("notes", "x", "setup")
        assert await kit.fire_due("notes", "x") == 1
    assert await cli("export", "notes", "x", "--data", str(data_dir)) == 0
    assert_one_format(orjson.loads(capsys.readouterr().out))
    app = create_app([Notes], data_dir=data_dir)
    async with serve(app) as addr:
        assert await cli("export", "notes", "x", "--server", f"http://{addr}") == 0
        assert_one_format(orjson.loads(capsys.readouterr().out))


async def test_an_online_backup_copies_the_actors_of_kinds_the_server_does_not_serve(
    data_dir: Path, tmp_path: Path
) -> None:
    """Two apps share a data directory; the one serving only ``counter`` backs up the ``room`` actor
    too (its file is free: copied under its own lock), instead of failing with ``UnknownKind``."""
    await make_counter(data_dir)
    async with ActorKit(list(KINDS), data_dir) as kit:
        await kit.call("room", "r1", "say", "hello")
    counter_only = [k for k in KINDS if k.kind == "counter"]
    app = create_app(counter_only, data_dir=data_dir)
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        r = await http.post("/admin/backup", json={"name": "both"}, timeout=60)
    assert r.status_code == 200, r.text
    manifest = r.json()["result"]
    copied = {(e["kind"], e["name"]): e["integrity_check"] for e in manifest["files"] if "kind" in e}
    assert copied == {("counter", "c1"): "ok", ("room", "r1"): "ok"}


class TimedCounter(Counter):
    @wakeup
    async def tick(self, payload: Any) -> None:
        pass


class TimedRoom(Room):
    @wakeup
    async def tick(self, payload: Any) -> None:
        pass


class TimedDocs(DocsAgent):
    @wakeup
    async def tick(self, payload: Any) -> None:
        pass


#: Every example kind, each able to hold a schedule of every trigger type.
TIMED = (TimedCounter, TimedRoom, TimedDocs)
#: Keys that hold a time, besides ``*_at`` (schedules, dead letters, triggers, agent rows).
TIME_KEYS = frozenset({"at", "start", "next_fire", "retry_at", "last_fire", "nominal", "heavy_since"})


def epoch_like(value: Any) -> bool:
    """Epoch seconds of this century, as a number or as text."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return False
    return isinstance(value, int | float) and not isinstance(value, bool) and 1e9 <= value <= 5e9


def raw_times(value: Any, where: str = "") -> list[str]:
    """Where in ``value`` a time is not ISO 8601 UTC: a time-like key with anything else, or an
    epoch-looking value under any key."""
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            here = f"{where}.{k}"
            timed = k.endswith("_at") or k in TIME_KEYS
            if timed and v is not None and not isinstance(v, dict | list) and not is_iso_utc(v):
                found.append(f"{here}={v!r}")
            else:
                found += raw_times(v, here)
        key = value.get("key")
        if isinstance(key, str) and key.endswith("_at") and not is_iso_utc(value.get("value")):  # roost_meta
            found.append(f"{where}.value={value.get('value')!r}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += raw_times(v, f"{where}[{i}]")
    elif epoch_like(value):
        found.append(f"{where}={value!r}")
    return found


async def schedule_every_trigger(actor: Actor) -> None:
    await actor.schedule(3600, "tick", {"n": 1}, key="date")
    await actor.schedule_every(60, "tick", {"n": 2}, key="interval")
    await actor.schedule("*/5 * * * *", "tick", {"n": 3}, key="cron")


async def test_every_time_in_inspect_and_export_is_iso_8601_utc_offline_and_live(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``roost inspect`` and ``roost export``, offline and ``--server``, of every example kind with a
    date, an interval and a cron schedule (and, for the agent, a turn's events and rows): no time is
    an epoch number or epoch text, inside triggers, ``meta`` and logged agent events too."""
    actors = [("counter", "c1"), ("room", "r1"), ("docs", "d1")]
    async with ActorKit(TIMED, data_dir) as kit:
        await kit.call("counter", "c1", "increment")
        await kit.call("room", "r1", "say", "hello", "ann")
        await kit.call("docs", "d1", "turn", "analyze the documents")
        for kind, name in actors:
            await kit.registry.run(kind, name, schedule_every_trigger)

    async def outputs(*where: str) -> list[Any]:
        got = []
        for kind, name in actors:
            for command in ("inspect", "export"):
                assert await cli(command, kind, name, *where) == 0
                got.append(orjson.loads(capsys.readouterr().out))
        return got

    offline = await outputs("--data", str(data_dir))
    assert main(["inspect", "--data", str(data_dir)]) == 0
    offline.append(orjson.loads(capsys.readouterr().out))
    triggers = {s["trigger"]["type"] for o in offline if "schedules" in o for s in o["schedules"]}
    assert triggers == {"date", "interval", "cron"}
    assert any(e.get("event", {}).get("event_type") for o in offline for e in o.get("log", []))
    assert raw_times(offline) == []
    async with serve(create_app(TIMED, data_dir=data_dir)) as addr:
        live = await outputs("--server", f"http://{addr}")
    assert raw_times(live) == []
