"""The actor runtime's guarantees (``roost.actors.host``, ``roost.actors.registry``), in process with
``ActorKit``.

Real SQLite files under ``tmp_path``, a ``FakeClock`` for idle time, no sleeps: every wait is on a
condition (``wait_for``, ``settle``, an ``asyncio.Event``) or on the fake clock plus ``registry.sweep()``.
Each test talks to its own actor name.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sqlite3
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from roost.actors import (
    Actor,
    ActorNotFound,
    ActorUnavailable,
    Connection,
    Principal,
    Reject,
    RpcError,
    callable,
)
from roost.actors.connection import MAX_CONNECTION_STATE_BYTES
from roost.actors.errors import CallTimeout, NotInTurn, Overloaded
from roost.actors.host import HostState
from roost.examples.kinds import Counter
from roost.scheduler import FakeClock
from roost.storage import ActorFile, actor_path
from roost.testing import ActorKit, KitConnection, RecordingSink

Frame = dict[str, Any]


# -- helpers ------------------------------------------------------------------------------------------
def make_kit(tmp_path: Path, *kinds: type[Actor], **config: Any) -> tuple[ActorKit, FakeClock]:
    clock = FakeClock()
    return ActorKit(kinds, tmp_path / "data", clock=clock, **config), clock


def of_type(conn: KitConnection, *types: str) -> list[Frame]:
    return [f for f in conn.frames if f["type"] in types]


def seqs(conn: KitConnection) -> list[int]:
    """The ``seq`` of every logged frame (state, event) the connection received, in order."""
    return [f["seq"] for f in of_type(conn, "state", "event")]


async def call_error(conn: KitConnection, method: str, *args: Any, **kwargs: Any) -> RpcError:
    with pytest.raises(RpcError) as info:
        await conn.call(method, *args, **kwargs)
    return info.value


async def make_dormant(kit: ActorKit, clock: FakeClock, kind: str, name: str) -> None:
    """Let the actor go idle and deactivate it, so that the next input reloads it from its file."""
    await kit.settle()
    clock.advance(kit.registry.config.idle_timeout + 1)
    kit.registry.sweep()
    assert (kind, name) not in kit.registry.hosts


# -- test actor kinds ---------------------------------------------------------------------------------
class Guarded(Actor):
    """Refuses negative counts; its ``on_state_changed`` broadcasts, and raises at 13."""

    kind = "guarded"
    initial_state = {"count": 0}
    seen_by_validate: ClassVar[dict[str, list[tuple[int, int]]]] = {}
    seen_by_hook: ClassVar[dict[str, list[tuple[int, int]]]] = {}
    errors: ClassVar[dict[str, list[BaseException]]] = {}

    def _seqs(self) -> tuple[int, int]:
        """(seq in memory, seq persisted in the turn's transaction)."""
        return self.seq, int(
            self.sql.scalar("SELECT coalesce(max(seq), 0) FROM roost_log WHERE kind = 'state'")
        )

    def validate_state(self, state: Any) -> None:
        self.seen_by_validate.setdefault(self.name, []).append(self._seqs())
        if state["count"] < 0:
            raise ValueError("count must not be negative")

    def on_state_changed(self, state: Any, source: Connection | None) -> None:
        self.seen_by_hook.setdefault(self.name, []).append(self._seqs())
        self.broadcast({"changed": state["count"]})
        if state["count"] == 13:
            raise RuntimeError("unlucky")

    def on_error(self, error: BaseException, conn: Connection | None) -> None:
        self.errors.setdefault(self.name, []).append(error)

    @callable
    async def add(self, n: int) -> int:
        self.set_state({"count": self.state["count"] + n})
        return int(self.state["count"])

    @callable
    async def get(self) -> list[Any]:
        return [self.state, self.seq]


class Ledger(Actor):
    """Writes a row, a state and an event in one turn, then optionally raises."""

    kind = "ledger"
    initial_state = {"count": 0}
    migrations = ("CREATE TABLE entries (id INTEGER PRIMARY KEY, note TEXT NOT NULL)",)

    @callable
    async def write(self, note: str, fail: bool = False) -> int:
        self.sql.execute("INSERT INTO entries (note) VALUES (?)", (note,))
        self.set_state({"count": self.state["count"] + 1})
        self.emit({"wrote": note})
        if fail:
            raise RuntimeError("changed my mind")
        return self.seq

    @callable
    async def snapshot(self) -> dict[str, Any]:
        notes = [row[0] for row in self.sql.execute("SELECT note FROM entries ORDER BY id")]
        return {"state": self.state, "seq": self.seq, "notes": notes}


class Gated(Actor):
    """A call that sets the state and then waits for the test to let it finish."""

    kind = "gated"
    initial_state = {"n": 0}
    gates: ClassVar[dict[str, tuple[asyncio.Event, asyncio.Event]]] = {}

    @callable
    async def set_and_hold(self, n: int) -> int:
        reached, release = self.gates[self.name]
        self.set_state({"n": n})
        reached.set()
        await release.wait()
        return n


class Streamer(Actor):
    """A streaming call that writes and yields ``ok`` times, writes once more, then raises."""

    kind = "streamer"
    initial_state = {"count": 0}
    migrations = ("CREATE TABLE ticks (n INTEGER NOT NULL)",)

    @callable
    async def tick_then_fail(self, ok: int) -> AsyncIterator[int]:
        for _ in range(ok):
            n = self.state["count"] + 1
            self.sql.execute("INSERT INTO ticks (n) VALUES (?)", (n,))
            self.set_state({"count": n})
            yield n
        self.sql.execute("INSERT INTO ticks (n) VALUES (-1)")
        self.set_state({"count": -1})
        raise RuntimeError("stream broke")

    @callable
    async def increment(self) -> int:
        self.set_state({"count": self.state["count"] + 1})
        return int(self.state["count"])

    @callable
    async def snapshot(self) -> dict[str, Any]:
        ticks = [row[0] for row in self.sql.execute("SELECT n FROM ticks ORDER BY rowid")]
        return {"state": self.state, "seq": self.seq, "ticks": ticks}


class Chatty(Actor):
    """One call produces a state frame, an event and a message."""

    kind = "chatty"
    initial_state = {"n": 0}

    @callable
    async def everything(self, n: int) -> int:
        self.set_state({"n": n})
        self.emit({"n": n})
        self.broadcast({"n": n})
        return n


class Lobby(Actor):
    """Tags connections by role (principal) or by a ``join`` message; broadcasts with filters."""

    kind = "lobby"
    initial_state = {"rounds": 0}

    def on_connect(self, conn: Connection) -> None:
        role = conn.principal.claims.get("role")
        if role is not None:
            conn.tags.add(f"role:{role}")

    def on_message(self, conn: Connection, data: Any) -> None:
        if "join" in data:
            conn.tags.add(data["join"])
        if "say" in data:
            self.broadcast({"from": conn.principal.id, "say": data["say"]}, exclude=[conn])

    @callable
    async def announce(
        self, data: Any, tags: list[str] | None = None, exclude: list[str] | None = None
    ) -> int:
        return self.broadcast(data, exclude=exclude or (), tags=tags)

    @callable
    async def record(self, n: int) -> list[int]:
        self.set_state({"rounds": n})
        event_seq = self.emit({"round": n})
        self.set_state({"rounds": n + 1})
        return [event_seq, self.seq]


class Badge(Actor):
    """Keeps per-connection state set by messages and echoes it back."""

    kind = "badge"
    errors: ClassVar[dict[str, list[BaseException]]] = {}

    def on_message(self, conn: Connection, data: Any) -> None:
        if "set" in data:
            conn.set_state(data["set"])
        conn.send({"state": conn.state})

    def on_error(self, error: BaseException, conn: Connection | None) -> None:
        self.errors.setdefault(self.name, []).append(error)


class Doorman(Actor):
    """Counts admissions in ``on_connect`` and then rejects mallory (so her write is rolled back)."""

    kind = "doorman"
    initial_state = {"admitted": 0}

    def on_connect(self, conn: Connection) -> None:
        self.set_state({"admitted": self.state["admitted"] + 1})
        if conn.principal.id == "mallory":
            raise Reject("nope", 4403)

    @callable
    async def who(self) -> list[str]:
        return sorted(c.principal.id for c in self.connections)


class Caller(Actor):
    """Calls other actors; has private and non-callable methods that must stay unreachable."""

    kind = "caller"

    @callable
    async def bump(self, target: str, by: int) -> int:
        result: int = await self.actor("counter", target).call("increment", by)
        return result

    @callable
    async def ping(self, partner: str) -> Any:
        return await self.actor("partner", partner).call("back", self.name)

    @callable
    async def me(self) -> str:
        return "caller"

    @callable
    async def add(self, a: int, b: int) -> int:
        return a + b

    def helper(self) -> str:
        return "not callable"

    def _secret(self) -> str:
        return "hidden"


class Partner(Actor):
    """Calls back the actor that called it: A → B → A."""

    kind = "partner"

    @callable
    async def back(self, caller: str) -> Any:
        return await self.actor("caller", caller).call("me")


class Sleepy(Actor):
    """A call that writes and then never finishes."""

    kind = "sleepy"
    initial_state = {"count": 0}
    migrations = ("CREATE TABLE marks (n INTEGER NOT NULL)",)

    @callable
    async def hang(self) -> None:
        self.sql.execute("INSERT INTO marks (n) VALUES (1)")
        self.set_state({"count": self.state["count"] + 100})
        await asyncio.Event().wait()

    @callable
    async def increment(self) -> int:
        self.set_state({"count": self.state["count"] + 1})
        return int(self.state["count"])

    @callable
    async def snapshot(self) -> dict[str, Any]:
        marks = self.sql.scalar("SELECT count(*) FROM marks")
        return {"state": self.state, "seq": self.seq, "marks": marks}


class Napper(Actor):
    """Records a weak reference to every instance it starts."""

    kind = "napper"
    initial_state = {"count": 0}
    instances: ClassVar[dict[str, list[weakref.ref[Actor]]]] = {}

    def on_start(self) -> None:
        self.instances.setdefault(self.name, []).append(weakref.ref(self))

    @callable
    async def increment(self) -> int:
        self.set_state({"count": self.state["count"] + 1})
        return int(self.state["count"])

    @callable
    async def get(self) -> int:
        return int(self.state["count"])


class Crowd(Actor):
    """Counts its activations (``on_start`` runs once per activation)."""

    kind = "crowd"
    initial_state = {"count": 0}
    starts: ClassVar[dict[str, int]] = {}

    def on_start(self) -> None:
        self.starts[self.name] = self.starts.get(self.name, 0) + 1

    @callable
    async def increment(self) -> int:
        self.set_state({"count": self.state["count"] + 1})
        return int(self.state["count"])

    @callable
    async def get(self) -> int:
        return int(self.state["count"])


class Fragile(Actor):
    """``on_start`` writes and then fails while the actor's name is in ``broken``."""

    kind = "fragile"
    initial_state = {"count": 0}
    broken: ClassVar[set[str]] = set()
    errors: ClassVar[dict[str, list[BaseException]]] = {}

    def on_start(self) -> None:
        if self.name in self.broken:
            self.set_state({"count": 999})
            raise RuntimeError("disk not ready")

    def on_error(self, error: BaseException, conn: Connection | None) -> None:
        self.errors.setdefault(self.name, []).append(error)

    @callable
    async def increment(self) -> int:
        self.set_state({"count": self.state["count"] + 1})
        return int(self.state["count"])


class Worker(Actor):
    """Leaves a background task behind that tries to use the turn-only API after the turn ended."""

    kind = "worker"
    initial_state = {"count": 0}
    migrations = ("CREATE TABLE jobs (n INTEGER NOT NULL)",)
    plans: ClassVar[dict[str, tuple[asyncio.Event, asyncio.Future[list[BaseException]]]]] = {}
    tasks: ClassVar[set[asyncio.Task[None]]] = set()

    @callable
    async def defer(self) -> str:
        go, outcome = self.plans[self.name]

        async def later() -> None:
            await go.wait()
            failures: list[BaseException] = []
            attempts = (
                lambda: self.sql.execute("INSERT INTO jobs (n) VALUES (1)"),
                lambda: self.sql.scalar("SELECT count(*) FROM jobs"),
                lambda: self.set_state({"count": 1}),
                lambda: self.emit({"late": True}),
            )
            for attempt in attempts:
                try:
                    attempt()
                except Exception as exc:
                    failures.append(exc)
            outcome.set_result(failures)

        task = asyncio.get_running_loop().create_task(later())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return "deferred"

    @callable
    async def snapshot(self) -> dict[str, Any]:
        jobs = self.sql.scalar("SELECT count(*) FROM jobs")
        return {"state": self.state, "seq": self.seq, "jobs": jobs}


# -- 1. set_state: validate → persist → broadcast → on_state_changed ---------------------------------
async def test_set_state_refused_by_validate_state_writes_and_sends_nothing(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Guarded)
    async with kit:
        c = kit.connect("guarded", "validate-1")
        assert await c.call("add", 5) == 5

        err = await call_error(c, "add", -10)
        assert err.code == "handler_error"
        assert err.message == "ValueError: count must not be negative"

        # validate ran before anything was persisted: it saw the old seq in memory and in the file
        assert Guarded.seen_by_validate["validate-1"] == [(0, 0), (1, 1)]
        assert await c.call("get") == [{"count": 5}, 1]
        await kit.settle()
        assert seqs(c) == [1]  # no state frame for the refused state
        assert [f["data"] for f in of_type(c, "message")] == [{"changed": 5}]  # hook not run
        assert Guarded.seen_by_hook["validate-1"] == [(1, 1)]

        c.disconnect()
        await make_dormant(kit, clock, "guarded", "validate-1")
        assert await kit.call("guarded", "validate-1", "get") == [{"count": 5}, 1]
        assert await kit.call("guarded", "validate-1", "add", 1) == 6
        assert await kit.call("guarded", "validate-1", "get") == [{"count": 6}, 2]  # no seq was used


async def test_set_state_persists_and_broadcasts_before_on_state_changed_whose_error_keeps_the_write(
    tmp_path: Path,
) -> None:
    kit, clock = make_kit(tmp_path, Guarded)
    async with kit:
        c = kit.connect("guarded", "hook-1")
        assert await c.call("add", 13) == 13  # the hook raised; the call still succeeds
        await kit.settle()

        # the state frame goes out before what the hook broadcasts, and both before the reply
        assert [f["type"] for f in c.frames] == ["welcome", "state", "message", "rpc_result"]
        assert c.frames[1] == {"type": "state", "seq": 1, "state": {"count": 13}}
        assert c.frames[2]["data"] == {"changed": 13}
        # the hook ran after the write was persisted (in memory and in the file)
        assert Guarded.seen_by_hook["hook-1"] == [(1, 1)]
        errors = Guarded.errors["hook-1"]
        assert len(errors) == 1
        assert isinstance(errors[0], RuntimeError)
        assert str(errors[0]) == "unlucky"

        c.disconnect()
        await make_dormant(kit, clock, "guarded", "hook-1")
        assert await kit.call("guarded", "hook-1", "get") == [{"count": 13}, 1]


# -- 2. atomic turns ----------------------------------------------------------------------------------
async def test_failed_turn_rolls_back_sql_state_seq_and_outputs(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Ledger)
    async with kit:
        c = kit.connect("ledger", "atomic-1")
        assert await c.call("write", "first") == 2  # state seq 1, event seq 2
        before = {"state": {"count": 1}, "seq": 2, "notes": ["first"]}

        err = await call_error(c, "write", "second", fail=True)
        assert err.code == "handler_error"
        assert err.message == "RuntimeError: changed my mind"
        assert await c.call("snapshot") == before
        await kit.settle()
        assert seqs(c) == [1, 2]  # nothing of the failed turn was sent

        c.disconnect()
        await make_dormant(kit, clock, "ledger", "atomic-1")
        assert await kit.call("ledger", "atomic-1", "snapshot") == before

        # the next successful turn takes the next seqs: no gap where the failed turn was
        assert await kit.call("ledger", "atomic-1", "write", "third") == 4
        replayed = kit.connect("ledger", "atomic-1", cursor=0)
        await kit.settle()
        assert seqs(replayed) == [1, 2, 3, 4]
        assert [f["event"] for f in of_type(replayed, "event")] == [{"wrote": "first"}, {"wrote": "third"}]
        assert await replayed.call("snapshot") == {
            "state": {"count": 2},
            "seq": 4,
            "notes": ["first", "third"],
        }


# -- 3. output gate -----------------------------------------------------------------------------------
async def test_output_gate_holds_frames_until_the_turn_commits_then_state_before_result(
    tmp_path: Path,
) -> None:
    reached, release = asyncio.Event(), asyncio.Event()
    Gated.gates["gate-1"] = (reached, release)
    kit, _ = make_kit(tmp_path, Gated)
    async with kit:
        c = kit.connect("gated", "gate-1")
        watcher = kit.connect("gated", "gate-1")
        await kit.settle()

        call_id = c.send_call("set_and_hold", 7)
        async with asyncio.timeout(5):
            await reached.wait()
        # the state is set, but the turn has not committed: nothing may have left
        assert [f["type"] for f in c.frames] == ["welcome"]
        assert [f["type"] for f in watcher.frames] == ["welcome"]

        release.set()
        result = await c.wait_for(lambda f: f["type"] == "rpc_result")
        assert c.frames[1:] == [
            {"type": "state", "seq": 1, "state": {"n": 7}},
            {"type": "rpc_result", "id": call_id, "ok": True, "result": 7},
        ]
        assert result["id"] == call_id
        await watcher.wait_for(lambda f: f["type"] == "state")
        assert watcher.frames[1:] == [{"type": "state", "seq": 1, "state": {"n": 7}}]


async def test_output_gate_batch_of_calls_gets_every_reply_in_order_with_gap_free_seqs(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Counter)
    async with kit:
        c = kit.connect("counter", "batch-1")
        ids = [c.send_call("increment") for _ in range(20)]
        await kit.settle()

        assert c.frames[0]["type"] == "welcome"
        expected: list[Frame] = []
        for i, call_id in enumerate(ids, start=1):
            expected.append({"type": "state", "seq": i, "state": {"count": i}})
            expected.append({"type": "rpc_result", "id": call_id, "ok": True, "result": i})
        assert c.frames[1:] == expected


# -- 4. streaming callables ---------------------------------------------------------------------------
async def test_streaming_call_sends_chunks_then_result_and_each_chunk_is_durable(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Counter)
    async with kit:
        c = kit.connect("counter", "stream-1")
        call_id = c.send_call("count_to", 3)
        await c.wait_for(lambda f: f["type"] == "rpc_result")
        expected: list[Frame] = []
        for i in range(1, 4):
            expected.append({"type": "state", "seq": i, "state": {"count": i}})
            expected.append({"type": "rpc_chunk", "id": call_id, "chunk": i})
        expected.append({"type": "rpc_result", "id": call_id, "ok": True, "result": None})
        assert c.frames[1:] == expected

        # in process, the chunks come back with the result
        assert await kit.registry.call("counter", "stream-1", "count_to", [2], {}) == (None, [4, 5])

        c.disconnect()
        await make_dormant(kit, clock, "counter", "stream-1")
        assert await kit.call("counter", "stream-1", "get") == 5


async def test_streaming_call_that_raises_keeps_the_writes_of_sent_chunks_on_disk(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Streamer)
    async with kit:
        c = kit.connect("streamer", "stream-fail-1")
        err = await call_error(c, "tick_then_fail", 2)
        assert err.code == "handler_error"
        assert err.message == "RuntimeError: stream broke"
        assert [f["chunk"] for f in of_type(c, "rpc_chunk")] == [1, 2]
        assert seqs(c) == [1, 2]

        c.disconnect()
        await make_dormant(kit, clock, "streamer", "stream-fail-1")
        # the writes made before each sent chunk are kept; the write after the last chunk is not
        assert await kit.call("streamer", "stream-fail-1", "snapshot") == {
            "state": {"count": 2},
            "seq": 2,
            "ticks": [1, 2],
        }
        assert await kit.call("streamer", "stream-fail-1", "increment") == 3


async def test_streaming_call_that_raises_leaves_the_live_actor_consistent_with_its_file(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Streamer)
    async with kit:
        c = kit.connect("streamer", "stream-fail-2")
        err = await call_error(c, "tick_then_fail", 2)
        assert err.code == "handler_error"

        # without a reactivation, the live actor must agree with what was committed and sent
        assert await c.call("snapshot") == {"state": {"count": 2}, "seq": 2, "ticks": [1, 2]}
        assert await c.call("increment") == 3
        await kit.settle()
        assert seqs(c) == [1, 2, 3]


# -- 5. resume ----------------------------------------------------------------------------------------
async def test_resume_with_cursor_replays_exactly_the_frames_after_it_then_live_frames(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Counter)
    async with kit:
        for _ in range(6):
            await kit.call("counter", "resume-1", "increment")
        c = kit.connect("counter", "resume-1", cursor=2)
        await kit.settle()

        welcome = c.frames[0]
        assert welcome["type"] == "welcome"
        assert welcome["resume"] == "replay"
        assert "reason" not in welcome
        assert (welcome["cursor"], welcome["state"], welcome["oldest"]) == (6, {"count": 6}, 1)
        assert c.frames[1:] == [{"type": "state", "seq": s, "state": {"count": s}} for s in range(3, 7)]

        await kit.call("counter", "resume-1", "increment")
        await c.wait_for(lambda f: f.get("seq") == 7)
        assert seqs(c) == [3, 4, 5, 6, 7]


async def test_resume_with_cursor_at_head_replays_nothing(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Counter)
    async with kit:
        for _ in range(3):
            await kit.call("counter", "resume-2", "increment")
        c = kit.connect("counter", "resume-2", cursor=3)
        await kit.settle()
        assert len(c.frames) == 1
        assert c.frames[0]["type"] == "welcome"
        assert c.frames[0]["resume"] == "replay"
        assert c.frames[0]["cursor"] == 3


async def test_resume_with_cursor_older_than_retention_gets_a_snapshot(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Counter, log_retention=5)
    async with kit:
        for _ in range(20):
            await kit.call("counter", "resume-3", "increment")
        fresh = kit.connect("counter", "resume-3")
        await kit.settle()
        oldest = fresh.frames[0]["oldest"]
        assert 20 - oldest + 1 >= 5  # at least the retention is kept
        assert oldest > 3  # and the log was pruned

        expired = kit.connect("counter", "resume-3", cursor=2)
        at_edge = kit.connect("counter", "resume-3", cursor=oldest - 1)
        past_edge = kit.connect("counter", "resume-3", cursor=oldest - 2)
        await kit.settle()

        for c in (expired, past_edge):
            assert len(c.frames) == 1  # nothing replayed
            welcome = c.frames[0]
            assert welcome["type"] == "welcome"
            assert (welcome["resume"], welcome["reason"]) == ("snapshot", "cursor_expired")
            assert (welcome["state"], welcome["cursor"]) == ({"count": 20}, 20)

        assert at_edge.frames[0]["type"] == "welcome"
        assert at_edge.frames[0]["resume"] == "replay"
        assert seqs(at_edge) == list(range(oldest, 21))


async def test_resume_with_cursor_ahead_of_the_actor_gets_a_snapshot(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Counter)
    async with kit:
        for _ in range(3):
            await kit.call("counter", "resume-4", "increment")
        c = kit.connect("counter", "resume-4", cursor=10)
        await kit.settle()
        assert len(c.frames) == 1
        welcome = c.frames[0]
        assert welcome["type"] == "welcome"
        assert (welcome["resume"], welcome["reason"]) == ("snapshot", "cursor_ahead")
        assert (welcome["state"], welcome["cursor"]) == ({"count": 3}, 3)


async def test_connect_without_cursor_is_fresh_with_current_state(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Counter)
    async with kit:
        for _ in range(3):
            await kit.call("counter", "resume-5", "increment")
        c = kit.connect("counter", "resume-5")
        await kit.settle()
        assert len(c.frames) == 1
        welcome = c.frames[0]
        assert welcome["type"] == "welcome"
        assert welcome["resume"] == "fresh"
        assert "reason" not in welcome
        assert (welcome["state"], welcome["cursor"]) == ({"count": 3}, 3)
        assert welcome["actor"] == {"kind": "counter", "name": "resume-5"}
        assert welcome["protocol"] == 1


# -- 6. subscriptions ---------------------------------------------------------------------------------
async def test_subscriptions_filter_broadcast_frames_but_never_own_replies(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Chatty)
    async with kit:
        everything = kit.connect("chatty", "subs-1")
        nothing = kit.connect("chatty", "subs-1", subscribe="none")
        events = kit.connect("chatty", "subs-1", subscribe="events")
        assert await nothing.call("everything", 1) == 1
        await kit.settle()

        assert [f["type"] for f in everything.frames] == ["welcome", "state", "event", "message"]
        assert [f["type"] for f in nothing.frames] == ["welcome", "rpc_result"]
        assert [f["type"] for f in events.frames] == ["welcome", "event"]
        assert events.frames[1] == {"type": "event", "seq": 2, "event": {"n": 1}}


async def test_replay_respects_subscriptions(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Chatty)
    async with kit:
        assert await kit.call("chatty", "subs-2", "everything", 1) == 1
        assert await kit.call("chatty", "subs-2", "everything", 2) == 2
        events = kit.connect("chatty", "subs-2", cursor=0, subscribe="events")
        state = kit.connect("chatty", "subs-2", cursor=0, subscribe="state")
        nothing = kit.connect("chatty", "subs-2", cursor=0, subscribe="none")
        await kit.settle()

        assert events.frames[1:] == [
            {"type": "event", "seq": 2, "event": {"n": 1}},
            {"type": "event", "seq": 4, "event": {"n": 2}},
        ]
        assert state.frames[1:] == [
            {"type": "state", "seq": 1, "state": {"n": 1}},
            {"type": "state", "seq": 3, "state": {"n": 2}},
        ]
        assert [f["type"] for f in nothing.frames] == ["welcome"]
        assert all(c.frames[0]["resume"] == "replay" for c in (events, state, nothing))


# -- 7. broadcast and emit ----------------------------------------------------------------------------
async def test_broadcast_reaches_exactly_the_tagged_and_not_excluded_connections(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Lobby)
    async with kit:
        alice = kit.connect("lobby", "lobby-1", principal=Principal("alice", claims={"role": "admin"}))
        bob = kit.connect("lobby", "lobby-1", principal=Principal("bob", claims={"role": "member"}))
        carol = kit.connect("lobby", "lobby-1", principal=Principal("carol", claims={"role": "member"}))
        dave = kit.connect(
            "lobby",
            "lobby-1",
            principal=Principal("dave", claims={"role": "admin"}),
            subscribe="state,events",
        )
        carol.message({"join": "blue"})
        await kit.settle()

        # tagged admin or blue: alice and carol (dave is an admin but does not want messages)
        assert await alice.call("announce", {"n": 1}, tags=["role:admin", "blue"]) == 2
        # everyone but alice and bob: carol only
        assert await alice.call("announce", {"n": 2}, exclude=[alice.conn.id, bob.conn.id]) == 1
        # tagged blue but carol excluded: nobody
        assert await alice.call("announce", {"n": 3}, tags=["blue"], exclude=[carol.conn.id]) == 0
        # excluding the sender by its Connection
        bob.message({"say": "hi"})
        await kit.settle()

        def received(c: KitConnection) -> list[Any]:
            return [f["data"] for f in of_type(c, "message")]

        said = {"from": "bob", "say": "hi"}
        assert received(alice) == [{"n": 1}, said]
        assert received(bob) == []
        assert received(carol) == [{"n": 1}, {"n": 2}, said]
        assert received(dave) == []


async def test_emitted_events_share_the_seq_sequence_with_state_frames(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Lobby)
    async with kit:
        c = kit.connect("lobby", "lobby-2")
        assert await c.call("record", 1) == [2, 3]
        assert await c.call("record", 5) == [5, 6]
        await kit.settle()
        assert [(f["type"], f["seq"]) for f in of_type(c, "state", "event")] == [
            ("state", 1),
            ("event", 2),
            ("state", 3),
            ("state", 4),
            ("event", 5),
            ("state", 6),
        ]
        assert [f["event"] for f in of_type(c, "event")] == [{"round": 1}, {"round": 5}]


# -- 8. connection state ------------------------------------------------------------------------------
async def test_connection_state_accepts_small_json_and_refuses_more_than_16_kib(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Badge)
    async with kit:
        c = kit.connect("badge", "badge-1")
        other = kit.connect("badge", "badge-1")
        c.message({"set": {"nick": "ann"}})
        echo = await c.wait_for(lambda f: f["type"] == "message")
        assert echo["data"] == {"state": {"nick": "ann"}}

        largest = "x" * (MAX_CONNECTION_STATE_BYTES - 2)  # with its quotes: exactly 16 KiB
        c.message({"set": largest})
        await c.wait_for(lambda f: f["type"] == "message" and f["data"]["state"] == largest)

        c.message({"set": largest + "x"})
        error = await c.wait_for(lambda f: f["type"] == "error")
        assert error["code"] == "handler_error"
        assert error["message"].startswith("ValueError: ")
        assert isinstance(Badge.errors["badge-1"][-1], ValueError)

        c.message({})  # the refused state did not replace the previous one
        await kit.settle()
        assert of_type(c, "message")[-1]["data"] == {"state": largest}
        other.message({})  # each connection has its own state
        await kit.settle()
        assert of_type(other, "message")[-1]["data"] == {"state": None}

    direct = Connection("direct", RecordingSink())
    direct.set_state({"small": [1, 2, 3]})
    with pytest.raises(ValueError, match="larger than 16384 bytes"):
        direct.set_state({"big": "y" * MAX_CONNECTION_STATE_BYTES})
    assert direct.state == {"small": [1, 2, 3]}


# -- 9. Reject ----------------------------------------------------------------------------------------
async def test_on_connect_reject_closes_only_that_connection_without_welcome(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Doorman)
    async with kit:
        ann = kit.connect("doorman", "door-1", principal=Principal("ann"))
        mallory = kit.connect("doorman", "door-1", principal=Principal("mallory"))
        bob = kit.connect("doorman", "door-1", principal=Principal("bob"))

        assert await mallory.sink.wait_closed() == (4403, "nope")
        await kit.settle()
        assert mallory.frames == []

        assert ann.frames[0]["type"] == "welcome"
        assert bob.frames[0]["type"] == "welcome"
        # mallory's admission write was rolled back with her rejected turn
        assert (bob.frames[0]["state"], bob.frames[0]["cursor"]) == ({"admitted": 2}, 2)
        assert of_type(ann, "state") == [{"type": "state", "seq": 2, "state": {"admitted": 2}}]
        assert ann.sink.closed is None
        assert bob.sink.closed is None
        assert await ann.call("who") == ["ann", "bob"]
        assert await bob.call("who") == ["ann", "bob"]


# -- 10. actor-to-actor calls and what is callable ----------------------------------------------------
async def test_actor_calls_another_actor_and_gets_its_committed_result(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Caller, Partner, Counter)
    async with kit:
        c = kit.connect("caller", "a2a-1")
        assert await c.call("bump", "a2a-target", 3) == 3
        assert await c.call("bump", "a2a-target", 4) == 7
        assert await kit.call("counter", "a2a-target", "get") == 7


async def test_call_chain_back_to_an_actor_fails_with_reentrant_call_instead_of_hanging(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Caller, Partner, Counter)
    async with kit:
        c = kit.connect("caller", "a2a-2")
        err = await call_error(c, "ping", "a2a-partner")
        assert err.code == "reentrant_call"
        # both actors are free again
        assert await c.call("add", 1, 2) == 3
        assert await kit.call("caller", "a2a-2", "me") == "caller"
        assert await kit.call("partner", "a2a-partner", "back", "a2a-2") == "caller"  # B → A is no cycle


async def test_only_public_callable_methods_can_be_called(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Caller, Partner, Counter)
    async with kit:
        c = kit.connect("caller", "a2a-3")
        for method in ("missing", "_secret", "__init__", "helper", "on_start", "set_state", "__class__"):
            err = await call_error(c, method)
            assert err.code == "method_not_found", method
            with pytest.raises(RpcError) as info:
                await kit.call("caller", "a2a-3", method)
            assert info.value.code == "method_not_found", method
        assert await c.call("me") == "caller"


async def test_wrong_arguments_give_invalid_arguments(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Caller, Partner, Counter)
    async with kit:
        c = kit.connect("caller", "a2a-4")
        for args, kwargs in (((1,), {}), ((1, 2, 3), {}), ((1,), {"c": 2}), ((), {"a": 1, "b": 2, "z": 3})):
            err = await call_error(c, "add", *args, **kwargs)
            assert err.code == "invalid_arguments", (args, kwargs)
        assert await c.call("add", 1, b=2) == 3
        # a TypeError raised inside a method with fitting arguments is the method's own error
        assert (await call_error(c, "add", 1, "x")).code == "handler_error"


# -- 11. turn timeout ---------------------------------------------------------------------------------
async def test_turn_timeout_cancels_the_turn_rolls_back_and_frees_the_mailbox(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Sleepy, turn_timeout=0.2)
    async with kit:
        c = kit.connect("sleepy", "timeout-1")
        answer = asyncio.ensure_future(call_error(c, "hang"))
        await clock.armed(1)  # the turn is waiting: its deadline is armed on the runtime's clock
        clock.advance(0.2)  # time moves; nothing sleeps
        err = await answer
        assert err.code == "timeout"
        assert await c.call("snapshot") == {"state": {"count": 0}, "seq": 0, "marks": 0}
        assert await c.call("increment") == 1
        await kit.settle()
        assert of_type(c, "state") == [{"type": "state", "seq": 1, "state": {"count": 1}}]


async def test_an_in_process_caller_is_told_the_turn_timed_out_not_that_its_own_wait_ran_out(
    tmp_path: Path,
) -> None:
    """``Registry.call``/``run`` pass the actor's own timeout answer through: "turn exceeded", which
    says where the time went, not the caller's "no answer within" (its ``call_timeout`` is far off)."""
    kit, clock = make_kit(tmp_path, Sleepy, turn_timeout=0.05)
    async with kit:
        answer = asyncio.ensure_future(kit.call("sleepy", "timeout-2", "hang"))
        await clock.armed(2)  # the caller's wait (30 s) and the turn's deadline (0.05 s)
        clock.advance(0.05)
        with pytest.raises(CallTimeout, match=r"^turn exceeded 0\.05 s$"):
            await answer
    kit, clock = make_kit(tmp_path, Sleepy, turn_timeout=30, call_timeout=0.05, stop_timeout=0.1)
    async with kit:
        answer = asyncio.ensure_future(kit.call("sleepy", "timeout-2", "hang"))
        await clock.armed(2)  # the caller's wait (0.05 s) and the turn's deadline (30 s)
        clock.advance(0.05)
        with pytest.raises(CallTimeout, match=r"^no answer within 0\.05 s$"):
            await answer


class Stubborn(Actor):
    """A turn whose clean-up after a cancel must finish (as the online backup waits for its copying
    thread), and a second input queued behind it."""

    kind = "stubborn"
    initial_state = {"n": 0}
    cleaning: ClassVar[asyncio.Event]
    cleaned: ClassVar[asyncio.Event]
    started_next: ClassVar[bool] = False

    @callable
    async def hold(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cleaning.set()
            while not self.cleaned.is_set():  # the clean-up is not interrupted by further cancels
                with contextlib.suppress(asyncio.CancelledError):
                    await self.cleaned.wait()
            raise

    @callable
    async def next(self) -> None:
        Stubborn.started_next = True


async def test_a_cancel_that_lands_with_the_turn_timeout_is_not_lost(tmp_path: Path) -> None:
    """The turn's timeout cancels it; while its clean-up runs, a shutdown cancels the actor's task
    too. The second cancel is not taken for the timeout's and dropped: it ends the task, and the
    input queued behind never runs."""
    Stubborn.cleaning, Stubborn.cleaned, Stubborn.started_next = asyncio.Event(), asyncio.Event(), False
    kit, clock = make_kit(tmp_path, Stubborn, turn_timeout=0.05)
    async with kit:
        c = kit.connect("stubborn", "s1")
        c.send_call("hold")
        c.send_call("next")
        await clock.armed(1)  # the hold turn's deadline
        clock.advance(0.05)
        await asyncio.wait_for(Stubborn.cleaning.wait(), 5)  # the timeout fired: clean-up under way
        host = kit.registry.hosts[("stubborn", "s1")]
        host.task.cancel()  # a shutdown's cancel, landing during the clean-up
        Stubborn.cleaned.set()
        done, _ = await asyncio.wait([host.task], timeout=5)
        assert done, "the actor's task went on after the second cancel"
        assert host.task.cancelled()
        assert not Stubborn.started_next


# -- 12. dormancy -------------------------------------------------------------------------------------
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
            assert key in kit.registry._releasing
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
            assert len(kit.registry._releasing) == 16  # 24 were closed here, on the loop
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
        assert woken._host.file.closed
        assert woken._host.task.done()
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
async def test_concurrent_first_inputs_activate_an_actor_exactly_once(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Crowd)
    async with kit:
        before = kit.registry.activations
        conns = [kit.connect("crowd", "flight-1") for _ in range(100)]
        results = await asyncio.gather(*(kit.call("crowd", "flight-1", "increment") for _ in range(100)))
        await kit.settle()

        assert sorted(results) == list(range(1, 101))
        assert kit.registry.activations - before == 1
        assert Crowd.starts["flight-1"] == 1
        assert all(c.frames[0]["type"] == "welcome" for c in conns)
        assert len({c.frames[0]["connection_id"] for c in conns}) == 100
        assert await kit.call("crowd", "flight-1", "get") == 100


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
            await kit.call("counter", "busy-3", "get")
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


# -- 17. turn-only API --------------------------------------------------------------------------------
async def test_sql_and_writes_outside_a_turn_raise_not_in_turn(tmp_path: Path) -> None:
    go = asyncio.Event()
    outcome: asyncio.Future[list[BaseException]] = asyncio.get_running_loop().create_future()
    Worker.plans["late-1"] = (go, outcome)
    kit, _ = make_kit(tmp_path, Worker)
    async with kit:
        c = kit.connect("worker", "late-1")
        assert await c.call("defer") == "deferred"
        await kit.settle()
        go.set()  # the turn that started the task is long over
        async with asyncio.timeout(5):
            failures = await outcome

        assert len(failures) == 4
        assert all(isinstance(f, NotInTurn) for f in failures), failures
        assert await c.call("snapshot") == {"state": {"count": 0}, "seq": 0, "jobs": 0}
        await kit.settle()
        assert seqs(c) == []


class _SlowAndFast(Actor):
    kind = "slowfast"
    initial_state = {"n": 0}
    gate: ClassVar[asyncio.Event | None] = None

    @callable
    async def inc(self) -> int:
        self.set_state({"n": self.state["n"] + 1})
        n: int = self.state["n"]
        return n

    @callable
    async def slow(self) -> str:
        gate = type(self).gate
        assert gate is not None
        await gate.wait()  # awaits before writing anything
        self.set_state({"n": self.state["n"] + 100})
        return "slow done"


async def test_a_slow_turn_does_not_hold_back_the_replies_of_earlier_turns_in_its_batch(
    tmp_path: Path,
) -> None:
    """Group commit without head-of-line blocking: a fast call queued just before a slow one shares
    its batch, yet its reply (committed) leaves while the slow one is still waiting."""
    _SlowAndFast.gate = asyncio.Event()
    async with ActorKit([_SlowAndFast], tmp_path) as kit:
        c = kit.connect("slowfast", "hol")
        await c.wait_for(lambda f: f["type"] == "welcome")
        fast_id = c.send_call("inc")
        slow_id = c.send_call("slow")  # same batch: both queued before the actor runs
        fast = await c.wait_for(lambda f: f.get("id") == fast_id, timeout=2)
        assert fast == {"type": "rpc_result", "id": fast_id, "ok": True, "result": 1}
        assert not any(f.get("id") == slow_id for f in c.frames)
        host = kit.registry.hosts[("slowfast", "hol")]
        assert host.in_turn, "the slow turn is still running"
        _SlowAndFast.gate.set()
        slow = await c.wait_for(lambda f: f.get("id") == slow_id)
        assert slow["result"] == "slow done"
        assert [f["seq"] for f in c.frames if f["type"] == "state"] == [1, 2]
        assert await c.call("inc") == 102


class _Chatty(Actor):
    kind = "chatty"
    initial_state = {"topic": ""}
    log_retention = 5

    @callable
    async def topic(self, text: str) -> None:
        self.set_state({"topic": text})

    @callable
    async def say(self, n: int) -> None:
        for i in range(n):
            self.emit({"i": i})

    @callable
    async def on_disk(self) -> dict[str, Any]:
        row = self.sql.one("SELECT state, seq FROM roost_state WHERE id = 1")
        assert row is not None
        frames = self.sql.scalar("SELECT count(*) FROM roost_log WHERE kind = 'state'")
        return {"snapshot": row[0], "snapshot_seq": row[1], "state_frames": frames}


async def test_the_state_survives_pruning_of_its_frame_and_reactivation(tmp_path: Path) -> None:
    """A state change is one log row; when pruning drops that row, the snapshot row keeps the state,
    so a reactivated actor (or one recovered after a crash) has its state whatever was pruned."""
    async with ActorKit([_Chatty], tmp_path) as kit:
        await kit.call("chatty", "p", "topic", "kept")
        before = await kit.call("chatty", "p", "on_disk")
        assert before["state_frames"] == 1, "the state is in its frame"
        assert before["snapshot"] == '{"topic":""}', "the snapshot row is not rewritten on every change"
        await kit.call("chatty", "p", "say", 20)  # pruning drops the state frame
        after = await kit.call("chatty", "p", "on_disk")
        assert after["state_frames"] == 0
        assert after["snapshot"] == '{"topic":"kept"}'
        assert after["snapshot_seq"] == 1
        kit.clock.advance(kit.registry.config.idle_timeout + 1)  # type: ignore[attr-defined]
        assert kit.registry.sweep() == 1
        assert await kit.registry.snapshot("chatty", "p") == ({"topic": "kept"}, 21)
