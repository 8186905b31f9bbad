"""Turns served over a real WebSocket (``ActorHost.submit``: inline, or in the actor's mailbox task
with ``ROOST_FAST_PATHS=0``; the suite runs on both sides).

- **A turn runs as the actor's task**: a turn that suspends (on a sleep, on a call to another actor)
  runs as the actor's task before and after it suspends, and returns its result; turns pipelined
  behind it run one at a time, in order.
- **``turn_timeout`` cuts a turn short**: at its deadline on the runtime's clock its caller gets
  ``timeout``, its write is rolled back (from the state and the log), and the actor goes on, not
  restarted.
- **Group commit**: turns share commits, and every acknowledged increment is counted, once; no reply
  leaves before the commit of its write.
- **A failed commit releases nothing over the WebSocket**: the reply and the state frame of a batch
  whose COMMIT failed never reach the client, which is closed with 1011; the actor reloads the
  committed state.
- **A ``CancelledError`` raised in a turn stops the actor cleanly**: its client is closed with 1011,
  its task ends, and the next connection gets it back from disk.

Real servers on 127.0.0.1 in this process, real SQLite files, a ``FakeClock`` for the turn timeout.
Waiting is on frames, events and conditions; the only timeouts bound how long a failure takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
import pytest
import websockets

from roost.actors import Actor, callable
from roost.actors.registry import RuntimeConfig
from roost.examples.kinds import Counter
from roost.scheduler import FakeClock
from roost.storage import ActorFile, actor_path
from roost.testing import encode
from roost.testing import rpc_frame as rpc
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.support import Statements, actor_state, call, recv, serve_in_process

Frame = dict[str, Any]


# -- actor kinds --------------------------------------------------------------------------------------
class Stepper(Actor):
    """Turns that suspend; each records which task ran it."""

    kind = "stepper"
    initial_state = {"n": 0}
    seen: ClassVar[list[dict[str, Any]]] = []

    def _note(self, method: str, **facts: Any) -> None:
        type(self).seen.append({"method": method, **facts})

    @callable
    async def sleepy(self, seconds: float) -> int:
        task = asyncio.current_task()
        await asyncio.sleep(seconds)
        self._note("sleepy", task_before=task, task_after=asyncio.current_task())
        n: int = self.state["n"] + 1
        self.set_state({"n": n})
        return n

    @callable
    async def via(self, other: str, by: int) -> int:
        """Awaits another actor (a real suspension) and folds its answer into this actor's state."""
        task = asyncio.current_task()
        got: int = await self.actor("counter", other).call("increment", by)
        self._note("via", task_before=task, task_after=asyncio.current_task())
        self.set_state({"n": self.state["n"] + got})
        return got

    @callable
    async def slow(self, seconds: float) -> int:
        """Writes, then waits longer than the turn may last."""
        self.set_state({"n": self.state["n"] + 100})
        self._note("slow", task_before=asyncio.current_task())
        await asyncio.sleep(seconds)
        n: int = self.state["n"]
        return n

    @callable
    def add(self) -> int:
        n: int = self.state["n"] + 1
        self.set_state({"n": n})
        return n

    @callable
    def get(self) -> int:
        n: int = self.state["n"]
        return n


class Tally(Actor):
    """A counter that counts its turns."""

    kind = "tally"
    initial_state = {"count": 0}
    turns: ClassVar[int] = 0

    @callable
    def increment(self) -> int:
        type(self).turns += 1
        count: int = self.state["count"] + 1
        self.set_state({"count": count})
        return count


@pytest.fixture
def fresh_kinds() -> Iterator[None]:
    Stepper.seen = []
    Tally.turns = 0
    yield
    Stepper.seen = []


# -- a turn runs as the actor's task, times out, shares commits ---------------------------------------
async def test_a_turn_that_suspends_runs_as_the_actor_task_and_returns_its_result(
    data_dir: Path, fresh_kinds: None
) -> None:
    app = create_app([Stepper, Counter], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/stepper/s?subscribe=none") as ws:
            assert (await recv(ws))["type"] == "welcome"
            host = app.registry.hosts[("stepper", "s")]
            assert (await call(ws, "1", "sleepy", 0.01))["result"] == 1
            first = Stepper.seen[0]
            assert first["task_before"] is host.task, f"the turn ran as {first['task_before']!r}"
            assert first["task_after"] is host.task, f"it was continued by {first['task_after']!r}"
            assert (await call(ws, "2", "via", "c", 5))["result"] == 5
            assert (await call(ws, "3", "via", "c", 2))["result"] == 7
            # pipelined behind turns that suspend: one turn at a time, in order
            for i, method in enumerate(["sleepy", "add", "sleepy", "add"], start=4):
                await ws.send(rpc(str(i), method, *([0.01] if method == "sleepy" else [])))
            got = [await recv(ws) for _ in range(4)]
            assert [(f["id"], f["result"]) for f in got] == [("4", 14), ("5", 15), ("6", 16), ("7", 17)]
            assert (await call(ws, "8", "get"))["result"] == 17
            async with httpx.AsyncClient() as http:
                counter = (await http.get(f"http://{addr}/agents/counter/c")).json()
            assert counter["state"] == {"count": 7}
    seen = Stepper.seen
    assert [s["method"] for s in seen] == ["sleepy", "via", "via", "sleepy", "sleepy"]
    for s in seen:
        assert s["task_before"] is host.task, f"{s['method']} ran as {s['task_before']!r}"
        assert s["task_after"] is host.task, f"{s['method']} was continued by {s['task_after']!r}"
    assert actor_state(data_dir, "stepper", "s") == {"n": 17}


async def test_a_turn_past_turn_timeout_gets_timeout_is_rolled_back_and_the_actor_goes_on(
    data_dir: Path, fresh_kinds: None
) -> None:
    config = RuntimeConfig(turn_timeout=0.3)
    clock = FakeClock()
    app = create_app([Stepper], data_dir=data_dir, config=config, limits=NO_RATE_LIMITS, clock=clock)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/stepper/t?subscribe=none") as ws:
            assert (await recv(ws))["type"] == "welcome"
            host = app.registry.hosts[("stepper", "t")]
            assert (await call(ws, "1", "add"))["result"] == 1
            await ws.send(rpc("slow", "slow", 60.0))
            await ws.send(rpc("after", "get"))  # queued behind the slow turn
            await clock.armed(1)  # the slow turn suspended: its deadline is armed on the clock
            clock.advance(0.29)
            await asyncio.sleep(0)
            assert clock.timers == 1, "the turn timed out before turn_timeout"
            clock.advance(0.01)  # exactly at the deadline
            slow = await recv(ws)
            after = await recv(ws)
            assert (await call(ws, "2", "add"))["result"] == 2
            assert app.registry.hosts[("stepper", "t")] is host, "the actor was restarted"
            assert not host.task.done()
    assert Stepper.seen[0]["method"] == "slow"
    assert (slow["id"], slow["ok"], slow["error"]["code"]) == ("slow", False, "timeout")
    assert after == {"type": "rpc_result", "id": "after", "ok": True, "result": 1}, "not rolled back"
    assert actor_state(data_dir, "stepper", "t") == {"n": 2}
    file = ActorFile.open(actor_path(data_dir, "stepper", "t"), "stepper", "t")
    try:
        states = [orjson.loads(frame)["state"]["n"] for _, kind, frame in file.replay(0) if kind == "state"]
    finally:
        file.close()
    assert states == [1, 2], "the timed-out turn's write reached the log"


async def test_turns_share_commits_and_every_acknowledged_increment_is_counted(
    data_dir: Path, fresh_kinds: None
) -> None:
    connections, calls_each = 20, 30
    app = create_app([Tally], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/tally/hot?subscribe=none"
        async with websockets.connect(url) as first:
            assert (await recv(first))["type"] == "welcome"
            host = app.registry.hosts[("tally", "hot")]
            stats = Statements(host.file.conn, host.file, lambda: int(host.state["count"]))
            early: list[tuple[int, int]] = []  # (result, committed) for replies seen before their commit

            async def hammer(i: int) -> list[int]:
                results: list[int] = []
                async with websockets.connect(url) as ws:
                    assert (await recv(ws))["type"] == "welcome"
                    for j in range(calls_each):
                        result = (await call(ws, f"{i}.{j}", "increment"))["result"]
                        if result > stats.committed:
                            early.append((result, stats.committed))
                        results.append(result)
                return results

            acked = [r for rs in await asyncio.gather(*(hammer(i) for i in range(connections))) for r in rs]
            final = await call(first, "final", "increment")
    calls = connections * calls_each
    assert sorted(acked) == list(range(1, calls + 1)), "an increment was lost or applied twice"
    assert final["result"] == calls + 1
    assert actor_state(data_dir, "tally", "hot") == {"count": calls + 1}
    assert early == [], "a reply arrived before the commit of its write"
    assert Tally.turns == calls + 1
    assert stats.commits <= calls // 2, f"{stats.commits} commits for {calls} calls: no group commit"


# -- found by review: each of these failed before its fix ---------------------------------------------
class Doomed(Counter):
    """``doomed`` writes, then its batch's COMMIT fails (the SQLite progress handler interrupts it)."""

    kind = "doomed"

    @callable
    def doomed(self) -> int:
        self.set_state({"count": self.state["count"] + 100})
        conn = self.extension.connection()
        conn.set_progress_handler(lambda: 1 if conn.in_transaction else 0, 1)  # interrupt the COMMIT
        n: int = self.state["count"]
        return n


async def test_a_failed_commit_releases_nothing_over_the_websocket(data_dir: Path) -> None:
    """The output gate: the reply and the state frame of a batch whose commit
    failed never reach the client; it is closed with 1011; the actor reloads the committed state."""
    app = create_app([Doomed], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/doomed/d1") as ws:
            assert (await recv(ws))["type"] == "welcome"
            for i in (1, 2):
                await ws.send(encode({"type": "rpc", "id": str(i), "method": "increment"}))
                state, reply = await recv(ws), await recv(ws)  # one batch: the state frame, the reply
                assert (state["type"], state["state"], reply["result"]) == ("state", {"count": i}, i)
            await ws.send(encode({"type": "rpc", "id": "d", "method": "doomed"}))
            seen: list[Frame] = []
            code = None
            try:
                while True:
                    seen.append(await recv(ws))
            except websockets.ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else None
            assert seen == [], f"frames of the failed batch left the server: {seen}"
            assert code == 1011
        async with websockets.connect(f"ws://{addr}/agents/doomed/d1?subscribe=none") as ws:
            welcome = await recv(ws)
            assert welcome["state"] == {"count": 2}
            assert (await call(ws, "3", "increment"))["result"] == 3


class Quits(Counter):
    """``quit`` raises ``CancelledError`` without ever suspending (as some library code does)."""

    kind = "quits"

    @callable
    def quit(self) -> None:
        raise asyncio.CancelledError


async def test_a_cancelled_error_raised_in_a_turn_stops_the_actor_cleanly(data_dir: Path) -> None:
    """It must not escape into the protocol's ``data_received`` (the client saw 1006 and the actor's
    task stayed parked forever): the actor stops as after any crash (close 1011), its task ends, and
    the next connection gets it back from disk."""
    app = create_app([Quits], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/quits/q?subscribe=none") as ws:
            assert (await recv(ws))["type"] == "welcome"
            assert (await call(ws, "1", "increment"))["result"] == 1
            host = app.registry.hosts[("quits", "q")]
            await ws.send(encode({"type": "rpc", "id": "2", "method": "quit"}))
            code = None
            try:
                while True:
                    await recv(ws)
            except websockets.ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else None
            assert code == 1011
        async with asyncio.timeout(5):
            await asyncio.gather(host.task, return_exceptions=True)  # ended, not parked forever
        async with websockets.connect(f"ws://{addr}/agents/quits/q?subscribe=none") as ws:
            assert (await recv(ws))["state"] == {"count": 1}
            assert (await call(ws, "3", "increment"))["result"] == 2
