"""A failure fails fast with a code the client can act on, and does not spread.

- A call cycle started from ``on_message`` fails at once with ``reentrant_call``; the actor is free again.
- A commit that fails answers ``actor_unavailable``, closes the actor's sockets with 1011 before any
  frame of the failed batch leaves, and the actor reloads from its file with only committed turns.
- An actor that fails to activate (a bad migration, a constructor that raises) answers
  ``actor_unavailable`` (WebSocket close 1013, HTTP 503) and other actors are served.
- So does a new actor the directory cannot record (a full disk): nothing of it is created, and it is
  created once there is room again.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from roost.actors import Actor, Connection, RpcError, callable
from roost.examples.kinds import Counter
from roost.storage import Directory, actor_digest, actor_path
from roost.testing import ActorKit, connect
from roost.transport import create_app
from tests.support import serve_in_process


class Asker(Actor):
    """``on_message`` calls ``echoer/<via>.relay``, which calls back into this actor."""

    kind = "asker"

    async def on_message(self, conn: Connection, data: Any) -> None:
        try:
            await self.actor("echoer", data["via"]).call("relay", "asker", self.name)
        except RpcError as exc:
            conn.send({"outcome": exc.code})
        else:
            conn.send({"outcome": "ok"})

    @callable
    def hello(self) -> str:
        return "asker"


class Echoer(Actor):
    kind = "echoer"

    @callable
    async def relay(self, kind: str, name: str) -> Any:
        return await self.actor(kind, name).call("hello")


def _fail_next_commit(conn: sqlite3.Connection) -> None:
    """Installed on the actor's own connection when it starts: once ``Brittle.fail_next_commit`` is
    set, the next ``COMMIT`` on this connection is interrupted by SQLite and fails, leaving its
    transaction open, as an I/O error at commit would. Nothing else on the connection is affected, and
    a reopened file commits normally (the flag is cleared by then)."""
    current = [""]

    def trace(statement: str) -> None:
        current[0] = statement

    def progress() -> int:
        if Brittle.fail_next_commit and current[0] == "COMMIT":
            Brittle.fail_next_commit = False
            return 1
        return 0

    conn.set_trace_callback(trace)
    conn.set_progress_handler(progress, 1)


class Brittle(Actor):
    kind = "brittle"
    initial_state = {"count": 0}
    migrations = ("CREATE TABLE notes (x TEXT)",)
    fail_next_commit: ClassVar[bool] = False

    def on_start(self) -> None:
        _fail_next_commit(self.extension.connection())

    @callable
    def increment(self) -> int:
        n: int = self.state["count"] + 1
        self.set_state({"count": n})
        return n

    @callable
    def doomed(self) -> int:
        """A turn whose batch cannot commit."""
        self.set_state({"count": self.state["count"] + 100})
        self.sql.execute("INSERT INTO notes (x) VALUES ('lost')")
        Brittle.fail_next_commit = True
        n: int = self.state["count"]
        return n


class BadMigration(Actor):
    kind = "badmigration"
    migrations = ("CREATE TABLE fine (x INTEGER)", "THIS IS NOT SQL")

    @callable
    def get(self) -> Any:
        return self.state


class BadInit(Actor):
    kind = "badinit"

    def __init__(self) -> None:
        raise RuntimeError("cannot construct")

    @callable
    def get(self) -> Any:
        return self.state


async def test_a_call_cycle_started_from_on_message_fails_fast_with_reentrant_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with ActorKit([Asker, Echoer], tmp_path / "data", turn_timeout=5.0, call_timeout=5.0) as kit:
        c = kit.connect("asker", "cycle")
        await c.wait_for(lambda f: f["type"] == "welcome")
        c.message({"via": "cycle-b"})
        frame = await c.wait_for(lambda f: f["type"] == "message", timeout=2.0)
        assert frame["data"] == {"outcome": "reentrant_call"}
        assert await c.call("hello") == "asker", "A is free again"
        assert await kit.call("echoer", "cycle-b", "relay", "asker", "cycle") == "asker", "B→A is no cycle"
        await kit.settle()
    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_a_failed_commit_answers_actor_unavailable_closes_sockets_1011_and_reloads_from_disk(
    data_dir: Path,
) -> None:
    Brittle.fail_next_commit = False
    app = create_app([Brittle], data_dir=data_dir)
    base = "/agents/brittle/b1"
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        async with connect(f"ws://{addr}{base}") as ws:
            assert (await ws.recv())["type"] == "welcome"
            for expected in (1, 2):
                r = await http.post(f"{base}/rpc/increment")
                assert r.json() == {"ok": True, "result": expected}
            old_host = app.registry.hosts[("brittle", "b1")]
            async with asyncio.timeout(5):  # far below the 30 s call timeout
                r = await http.post(f"{base}/rpc/doomed")
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "actor_unavailable"
            seen, code = await ws.read_until_closed(5)
            assert code == 1011
            assert [f["seq"] for f in seen] == [1, 2], "a frame of the failed batch left the server"
        Brittle.fail_next_commit = False
        r = await http.get(base)
        assert r.json()["state"] == {"count": 2}
        assert r.json()["cursor"] == 2
        assert app.registry.hosts[("brittle", "b1")] is not old_host
        r = await http.post(f"{base}/rpc/increment")
        assert r.json() == {"ok": True, "result": 3}


@pytest.mark.parametrize("kind", ["badmigration", "badinit"])
async def test_an_actor_that_fails_to_activate_answers_actor_unavailable_and_others_are_served(
    data_dir: Path, kind: str
) -> None:
    app = create_app([BadMigration, BadInit, Counter], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/{kind}/broken") as ws:
            frame = await ws.recv()
            assert (frame["type"], frame["code"]) == ("error", "actor_unavailable")
            assert await ws.close_code() == 1013
        async with httpx.AsyncClient(base_url=f"http://{addr}") as http:
            r = await http.post(f"/agents/{kind}/broken/rpc/get")
            assert r.status_code == 503
            assert r.json()["ok"] is False
            assert r.json()["error"]["code"] == "actor_unavailable"
            r = await http.post("/agents/counter/fine/rpc/increment")
            assert r.json() == {"ok": True, "result": 1}
        async with connect(f"ws://{addr}/agents/counter/fine") as ws:
            assert (await ws.recv())["state"] == {"count": 1}


#: SQLite's own ceiling for ``max_page_count`` (2**32 - 2 pages): no limit.
_NO_PAGE_LIMIT = 4294967294


def _fill(directory: Directory, now: float) -> None:
    """Make the directory database full, for real: its connection may not grow the file past the pages
    it has now (``PRAGMA max_page_count``, a per-connection limit, so it is set on the directory's own
    connection), and actors are registered until SQLite answers "database or disk is full", with names
    of 200, then 40, then 8 characters, so that no row with a longer name fits any more."""
    conn: sqlite3.Connection = directory._conn
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert conn.execute(f"PRAGMA max_page_count = {pages}").fetchone()[0] == pages
    n, full = 0, ""
    for width in (200, 40, 8):
        while True:
            name = f"{n:0{width}d}"
            try:
                directory.register("counter", name, actor_digest("counter", name), now)
            except sqlite3.OperationalError as exc:
                full = str(exc)
                break
            n += 1
        assert full == "database or disk is full"


async def test_a_new_actor_the_full_directory_cannot_record_answers_actor_unavailable_and_others_are_served(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app([Counter], data_dir=data_dir)
    name = "created-after-the-disk-filled"  # longer than any filler row that still fitted
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        r = await http.post("/agents/counter/fine/rpc/increment")
        assert r.json() == {"ok": True, "result": 1}, "an actor created before the disk filled"
        directory, thread = app.registry.directory, app.registry.directory_thread
        assert directory is not None
        assert thread is not None
        _fill(directory, app.registry.clock.now())
        # the process's other connection to it (the directory thread's) meets the same full disk
        pages = directory._conn.execute("PRAGMA page_count").fetchone()[0]
        await thread.run(lambda d: d._conn.execute(f"PRAGMA max_page_count = {pages}").fetchone())

        r = await http.post(f"/agents/counter/{name}/rpc/increment")
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "actor_unavailable"
        assert "database or disk is full" in r.json()["error"]["message"]
        async with connect(f"ws://{addr}/agents/counter/{name}") as ws:
            frame = await ws.recv()
            assert (frame["type"], frame["code"]) == ("error", "actor_unavailable")
            assert await ws.close_code() == 1013
        assert not actor_path(data_dir, "counter", name).exists(), "no file without its directory row"
        assert directory.get("counter", name) is None
        assert ("counter", name) not in app.registry.hosts

        r = await http.post("/agents/counter/fine/rpc/increment")
        assert r.json() == {"ok": True, "result": 2}, "the server keeps serving the others"

        directory._conn.execute(f"PRAGMA max_page_count = {_NO_PAGE_LIMIT}")  # room again
        await thread.run(lambda d: d._conn.execute(f"PRAGMA max_page_count = {_NO_PAGE_LIMIT}").fetchone())
        r = await http.post(f"/agents/counter/{name}/rpc/increment")
        assert r.json() == {"ok": True, "result": 1}
        assert directory.get("counter", name) is not None
    assert any("the directory cannot record it" in r.getMessage() for r in caplog.records)
