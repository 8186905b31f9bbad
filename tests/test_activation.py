"""Activation and dormancy (``roost.actors.registry``): idle actors are deactivated and their files
released off the loop, a reactivation never opens a file before its release, single-flight
activation under concurrent first calls, the bound on live actors, ``on_start`` failures, snapshots
of actors that do not exist, and stop draining every actor.

Real SQLite files under ``tmp_path``, a ``FakeClock`` for idle time and timeouts, no sleeps: every wait
is on a condition (``wait_for``, ``settle``, an ``asyncio.Event``) or on the fake clock.
Each test talks to its own actor name.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
import websockets

from roost.actors import (
    Actor,
    ActorNotFound,
    ActorUnavailable,
    callable,
)
from roost.actors.errors import Overloaded
from roost.actors.host import HostState
from roost.examples.kinds import Counter
from roost.storage import ActorFile, Directory, actor_path
from roost.testing import ActorKit
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.runtime_support import (
    Fragile,
    Napper,
    Sleepy,
    make_dormant,
    make_kit,
    of_type,
)
from tests.support import serve_in_process


# -- 12. dormancy -------------------------------------------------------------------------------------
async def test_last_activity_reaches_the_directory_within_a_sweep_and_is_the_last_turns_time(
    tmp_path: Path,
) -> None:
    """``roost ls`` LAST ACTIVE: while the actor is live, each idle sweep writes the time of its last
    turn to the directory; when it goes dormant, or the registry stops, that time is kept, not the
    time of the sweep or of the stop."""
    kit, clock = make_kit(tmp_path, Napper, idle_timeout=10)

    def last_active() -> float:
        assert kit.registry.directory is not None
        entry = kit.registry.directory.get("napper", "seen")
        assert entry is not None
        return entry.last_active_at

    async with kit:
        assert await kit.call("napper", "seen", "increment") == 1
        clock.advance(4)
        called = clock.now()
        assert await kit.call("napper", "seen", "increment") == 2
        clock.advance(3)
        assert kit.registry.sweep() == 0  # live: its last turn reaches the directory
        assert last_active() == pytest.approx(called, abs=1e-3)
        clock.advance(20)
        assert kit.registry.sweep() == 1  # dormant now: still the time of its last turn
        assert last_active() == pytest.approx(called, abs=1e-3)
        assert await kit.call("napper", "seen", "increment") == 3
        called = clock.now()
        clock.advance(5)
    directory = Directory(tmp_path / "data")  # stopped 5 s after its last turn: that turn's time is kept
    try:
        entry = directory.get("napper", "seen")
        assert entry is not None
        assert entry.last_active_at == pytest.approx(called, abs=1e-3)
    finally:
        directory.close()


async def test_idle_actor_is_deactivated_and_released_then_reactivated_with_its_state(
    tmp_path: Path,
) -> None:
    kit, clock = make_kit(tmp_path, Napper, idle_timeout=10)
    async with kit:
        key = ("napper", "nap-1")
        c = kit.connect("napper", "nap-1")
        assert await c.call("increment") == 1
        clock.advance(8)  # connected: not idle however long it lasts
        assert kit.registry.sweep() == 0
        c.disconnect()
        await kit.settle()
        del c  # the transport drops a closed connection

        file = kit.registry.hosts[key].file
        task = kit.registry.hosts[key].task
        ref = Napper.instances["nap-1"][0]
        assert ref() is not None

        clock.advance(5)  # idle for 5 s of 10
        assert kit.registry.sweep() == 0
        assert key in kit.registry.hosts
        assert not file.closed

        clock.advance(6)  # idle for 11 s
        assert kit.registry.sweep() == 1
        assert key not in kit.registry.hosts
        assert file.closed
        await asyncio.wait([task])
        del task
        await kit.registry.released()  # the file's close runs in a thread: let it finish
        gc.collect()
        assert ref() is None

        activations = kit.registry.activations
        assert await kit.call("napper", "nap-1", "get") == 1
        assert await kit.call("napper", "nap-1", "increment") == 2
        assert kit.registry.activations == activations + 1
        assert len(Napper.instances["nap-1"]) == 2


async def test_actor_with_an_open_connection_is_never_deactivated(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Napper, idle_timeout=10)
    async with kit:
        key = ("napper", "nap-2")
        c = kit.connect("napper", "nap-2")
        assert await c.call("increment") == 1
        await kit.settle()
        file = kit.registry.hosts[key].file
        clock.advance(1000)
        assert kit.registry.sweep() == 0
        assert key in kit.registry.hosts
        assert not file.closed
        assert await c.call("increment") == 2
        assert len(Napper.instances["nap-2"]) == 1


@contextlib.contextmanager
def release_threads_busy(kit: ActorKit) -> Iterator[None]:
    """Every release thread waits until the block ends: releases handed over meanwhile stay queued."""
    gate = threading.Event()
    busy = [kit.registry.releases().submit(gate.wait, 10) for _ in range(4)]
    try:
        yield
    finally:
        gate.set()
    assert all(f.result() for f in busy)


async def test_a_deactivated_file_is_released_off_the_loop_and_never_opened_before_its_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's close (a WAL checkpoint and fsyncs) runs in a worker thread, so an idle sweep does
    not stall every other actor. An actor called again before its file is released opens only after
    the release: one still queued (the threads are busy) is run right there, one under way is waited
    for. ``stop`` returns only once every file is released."""
    kit, clock = make_kit(tmp_path, Napper, idle_timeout=10)
    key = ("napper", "nap-3")
    async with kit:
        assert await kit.call("napper", "nap-3", "increment") == 1
        await kit.settle()
        path = kit.registry.hosts[key].file.path

        # 1. queued: every release thread is busy, so the release has not started
        with release_threads_busy(kit):
            clock.advance(11)
            assert kit.registry.sweep() == 1
            assert key in kit.registry.file_releases.pending
            assert await kit.call("napper", "nap-3", "increment") == 2  # without it: ActorLocked

        # 2. under way: the release runs in its thread and takes a while
        started, finish = threading.Event(), threading.Event()
        release = ActorFile._release

        def slow_release(file: ActorFile, *args: Any) -> None:
            started.set()
            finish.wait(10)
            release(file, *args)

        monkeypatch.setattr(ActorFile, "_release", slow_release)
        clock.advance(11)
        await kit.settle()
        assert kit.registry.sweep() == 1
        assert await asyncio.to_thread(started.wait, 10)
        timer = threading.Timer(0.2, finish.set)  # lets the release finish while get() waits for it
        timer.start()
        try:
            assert await kit.call("napper", "nap-3", "increment") == 3  # without it: ActorLocked
        finally:
            finish.set()
            timer.cancel()
        monkeypatch.undo()
        clock.advance(11)
        await kit.settle()
        assert kit.registry.sweep() == 1
    assert not os.path.exists(f"{path}-wal")  # noqa: ASYNC240 (stop waited for the release)
    conn = sqlite3.connect(path, timeout=0)
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN IMMEDIATE")  # the lock is free
        assert orjson.loads(conn.execute("SELECT state FROM roost_state").fetchone()[0]) == {"count": 3}
    finally:
        conn.close()


async def test_an_actor_called_while_someone_awaits_released_still_waits_for_its_release(
    tmp_path: Path,
) -> None:
    """``Registry.released()`` leaves the pending releases where ``get`` finds them."""
    kit, clock = make_kit(tmp_path, Napper, idle_timeout=10)
    async with kit:
        assert await kit.call("napper", "w1", "increment") == 1
        await kit.settle()
        with release_threads_busy(kit):
            clock.advance(11)
            assert kit.registry.sweep() == 1
            waiting = asyncio.create_task(kit.registry.released())
            await asyncio.sleep(0)
            assert not waiting.done()
            assert await kit.call("napper", "w1", "increment") == 2  # before: ActorLocked
        await waiting


async def test_the_backlog_of_files_being_released_is_bounded(tmp_path: Path) -> None:
    """Each file waiting for its release still holds a connection: when the release threads fall
    behind, past ``max(16, max_active // 10)`` pending releases a file is closed on the loop."""
    kit, clock = make_kit(tmp_path, Napper, idle_timeout=10, max_active=50)
    async with kit:
        for i in range(40):
            assert await kit.call("napper", f"b{i}", "increment") == 1
        await kit.settle()
        with release_threads_busy(kit):
            clock.advance(11)
            assert kit.registry.sweep() == 40
            assert len(kit.registry.file_releases.pending) == 16  # 24 were closed here, on the loop
        await kit.registry.released()
        for i in range(40):
            assert await kit.call("napper", f"b{i}", "get") == 1


class Relay(Actor):
    """A turn that waits, then calls an actor that is dormant by then."""

    kind = "relay"
    initial_state = {"n": 0}
    go: ClassVar[asyncio.Event]

    @callable
    async def relay(self, target: str) -> int:
        await self.go.wait()
        result: int = await self.actor("napper", target).call("increment")
        return result


async def test_stop_also_stops_an_actor_that_a_draining_turn_activates(tmp_path: Path) -> None:
    """``Registry.stop`` drains every live actor; a turn finishing during that drain may wake a
    dormant one. That one is stopped too: when ``stop`` returns, every file is closed."""
    Relay.go = asyncio.Event()
    kit, _ = make_kit(tmp_path, Relay, Napper)
    async with kit:
        c = kit.connect("relay", "r1")
        call_id = c.send_call("relay", "woken")
        relay = kit.registry.hosts[("relay", "r1")]
        stopping = asyncio.create_task(kit.registry.stop())
        for _ in range(10_000):  # until the drain has begun
            if relay.lifecycle is HostState.DRAINING:
                break
            await asyncio.sleep(0)
        assert relay.lifecycle is HostState.DRAINING
        assert ("napper", "woken") not in kit.registry.hosts
        Relay.go.set()
        await stopping
        woken = Napper.instances["woken"][-1]()  # held: closing its file is stop's job, not the GC's
        assert woken is not None
        assert not [t for t in asyncio.all_tasks() if t.get_name() == "actor:napper/woken"]
        ActorFile.open(actor_path(kit.registry.config.data_dir, "napper", "woken"), "napper", "woken").close()
        reply = next(f for f in c.frames if f.get("type") == "rpc_result" and f["id"] == call_id)
        assert reply["ok"]
        assert reply["result"] == 1
    # (the kit's own stop on exit finds nothing left to do)
    path = actor_path(tmp_path / "data", "napper", "woken")
    assert not os.path.exists(f"{path}-wal")  # noqa: ASYNC240 (closed: its WAL removed)
    conn = sqlite3.connect(path, timeout=0)
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN IMMEDIATE")  # the lock is free
    finally:
        conn.close()


# -- 13. single-flight activation ---------------------------------------------------------------------
class Throng(Actor):
    """Its ``on_start`` waits for a gate, so that every other first input arrives while it starts."""

    kind = "throng"
    initial_state = {"count": 0}
    starts: ClassVar[int] = 0
    gate: ClassVar[asyncio.Event]

    async def on_start(self) -> None:
        type(self).starts += 1
        await self.gate.wait()

    @callable
    async def increment(self) -> int:
        self.set_state({"count": self.state["count"] + 1})
        return int(self.state["count"])


async def test_concurrent_first_inputs_activate_an_actor_exactly_once(data_dir: Path) -> None:
    """Single-flight activation: many clients, each in its own task and on its own socket, plus many
    in-process callers, send their first input to one dormant name at once, while its ``on_start``
    is still running. One activation serves every one of them; no input is lost or run twice."""
    Throng.gate, Throng.starts = asyncio.Event(), 0
    sockets, callers = 30, 30
    app = create_app([Throng], data_dir=data_dir, limits=NO_RATE_LIMITS)
    key = ("throng", "flight")
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/throng/flight?subscribe=none"

        async def client(i: int) -> tuple[str, Any]:
            async with websockets.connect(url) as ws:
                welcome = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                await ws.send(orjson.dumps({"type": "rpc", "id": str(i), "method": "increment"}).decode())
                reply = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                return welcome["type"], reply["result"]

        before = app.registry.activations
        clients = [asyncio.create_task(client(i)) for i in range(sockets)]
        calls = [
            asyncio.create_task(app.registry.call("throng", "flight", "increment", [], {}))
            for _ in range(callers)
        ]
        for _ in range(10_000):  # every first input has reached the actor, still in on_start
            host = app.registry.hosts.get(key)
            if host is not None and host.queued == sockets + callers:
                break
            await asyncio.sleep(0.001)
        assert host is not None
        assert host.queued == sockets + callers
        assert Throng.starts == 1
        Throng.gate.set()
        answers = await asyncio.gather(*clients)
        results = [r for r, _ in await asyncio.gather(*calls)]
        assert app.registry.hosts[key] is host
    assert app.registry.activations - before == 1
    assert Throng.starts == 1
    assert {kind for kind, _ in answers} == {"welcome"}
    assert sorted([n for _, n in answers] + results) == list(range(1, sockets + callers + 1))


# -- 14. bounded number of live actors -----------------------------------------------------------------
async def test_activation_beyond_max_active_deactivates_the_least_recently_active_idle_actor(
    tmp_path: Path,
) -> None:
    kit, clock = make_kit(tmp_path, Counter, max_active=3)
    async with kit:
        for name in ("lru-a", "lru-b", "lru-c", "lru-a"):  # lru-b is now the least recently active
            await kit.call("counter", name, "increment")
            await kit.settle()
            clock.advance(1)

        assert await kit.call("counter", "lru-d", "increment") == 1
        assert set(kit.registry.hosts) == {("counter", n) for n in ("lru-a", "lru-c", "lru-d")}

        assert await kit.call("counter", "lru-b", "get") == 1  # reloaded; lru-c makes room now
        assert set(kit.registry.hosts) == {("counter", n) for n in ("lru-a", "lru-b", "lru-d")}
        assert await kit.call("counter", "lru-a", "get") == 2


async def test_activation_when_every_live_actor_is_busy_raises_overloaded(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Counter, max_active=3)
    async with kit:
        conns = [kit.connect("counter", f"busy-{i}") for i in range(3)]
        await kit.settle()

        with pytest.raises(Overloaded) as info:
            await kit.call("counter", "busy-3", "increment")
        assert info.value.code == "overloaded"
        with pytest.raises(Overloaded):
            kit.connect("counter", "busy-3")
        assert len(kit.registry.hosts) == 3
        assert not actor_path(kit.registry.config.data_dir, "counter", "busy-3").exists()
        assert all(c.sink.closed is None for c in conns)

        conns[0].disconnect()  # one actor becomes idle: it makes room
        await kit.settle()
        assert await kit.call("counter", "busy-3", "increment") == 1
        assert ("counter", "busy-0") not in kit.registry.hosts


# -- 15. on_start failure -----------------------------------------------------------------------------
async def test_on_start_failure_fails_the_call_leaves_nothing_live_and_recovers(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Fragile)
    async with kit:
        Fragile.broken.add("start-1")
        with pytest.raises(ActorUnavailable) as info:
            await kit.call("fragile", "start-1", "increment")
        assert info.value.code == "actor_unavailable"
        assert ("fragile", "start-1") not in kit.registry.hosts
        errors = Fragile.errors["start-1"]
        assert len(errors) == 1
        assert isinstance(errors[0], RuntimeError)

        Fragile.broken.discard("start-1")
        # the file was released and on_start's write rolled back
        assert await kit.call("fragile", "start-1", "increment") == 1
        assert ("fragile", "start-1") in kit.registry.hosts


async def test_on_start_failure_closes_a_waiting_connection(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Fragile)
    async with kit:
        Fragile.broken.add("start-2")
        c = kit.connect("fragile", "start-2")
        code, _ = await c.sink.wait_closed(timeout=1.0)  # not left waiting for a welcome forever
        assert code in (1011, 1013)
        assert of_type(c, "welcome") == []
        assert ("fragile", "start-2") not in kit.registry.hosts

        Fragile.broken.discard("start-2")
        again = kit.connect("fragile", "start-2")
        await again.wait_for(lambda f: f["type"] == "welcome")
        assert await again.call("increment") == 1


# -- 16. snapshot (the HTTP GET) ----------------------------------------------------------------------
async def test_snapshot_of_never_created_actor_raises_not_found_and_creates_nothing(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Counter)
    async with kit:
        path = actor_path(kit.registry.config.data_dir, "counter", "snap-1")
        with pytest.raises(ActorNotFound):
            await kit.registry.snapshot("counter", "snap-1")
        assert not path.exists()
        assert ("counter", "snap-1") not in kit.registry.hosts
        assert not kit.registry.exists("counter", "snap-1")

        assert await kit.call("counter", "snap-1", "increment", 4) == 4
        assert await kit.registry.snapshot("counter", "snap-1") == ({"count": 4}, 1)
        assert path.exists()

        await make_dormant(kit, clock, "counter", "snap-1")
        assert await kit.registry.snapshot("counter", "snap-1") == ({"count": 4}, 1)


async def test_every_task_the_runtime_made_has_ended_when_the_registry_stops(tmp_path: Path) -> None:
    """Every task has an owner: when ``Registry.stop`` returns, the mailbox tasks (of live, deactivated
    and stuck actors), the sweeper, the checkpointer, the dispatcher and its waiters have all ended."""
    kit, clock = make_kit(tmp_path, Napper, Sleepy, idle_timeout=10, stop_timeout=0.1)
    async with kit:
        assert await kit.call("napper", "owned-1", "increment") == 1
        assert await kit.call("napper", "owned-2", "increment") == 1
        await make_dormant(kit, clock, "napper", "owned-1")
        stuck = kit.connect("sleepy", "owned-3")
        stuck.send_call("hang")  # a turn that never ends: stop cancels it after stop_timeout
        ours = [t for t in asyncio.all_tasks() if t.get_name().startswith(("roost:", "actor:"))]
        assert {"roost:sweeper", "roost:checkpoint", "roost:dispatcher"} <= {t.get_name() for t in ours}
    left = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith(("roost:", "actor:"))]
    assert left == []
    assert all(t.done() for t in ours)


async def test_a_kinds_setup_at_registry_start_runs_off_the_loop_before_any_activation(
    data_dir: Path,
) -> None:
    """``Actor.on_registry_start``: once per registry start, in a worker thread (so it may wait on
    I/O), before an actor of the kind is activated."""
    seen: list[bool] = []

    class Setup(Actor):
        kind = "setup"

        @classmethod
        def on_registry_start(cls) -> None:
            seen.append(threading.current_thread() is threading.main_thread())

        @callable
        def started(self) -> int:
            return len(seen)

    async with ActorKit([Setup], data_dir) as kit:
        assert await kit.call("setup", "a", "started") == 1
    assert seen == [False]
