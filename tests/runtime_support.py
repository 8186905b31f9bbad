"""Helpers and actor kinds shared by the actor runtime's tests (test_turns, test_output_gate,
test_connections, test_calls, test_activation)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from roost.actors import (
    Actor,
    Connection,
    Reject,
    RpcError,
    callable,
)
from roost.scheduler import FakeClock
from roost.testing import ActorKit, KitConnection

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
    async def peek(self, target: str) -> int:
        """A read-only call to another actor (``counter.get``)."""
        result: int = await self.actor("counter", target).call("get")
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
