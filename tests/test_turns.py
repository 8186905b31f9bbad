"""Turns (``roost.actors.turn``): a state update's fixed order, atomic turns, streaming calls that
commit at each chunk, the turn timeout (on the runtime's clock: tests move a ``FakeClock``), and the
API that only works inside a turn.

Real SQLite files under ``tmp_path``, a ``FakeClock`` for idle time and timeouts, no sleeps: every wait
is on a condition (``wait_for``, ``settle``, an ``asyncio.Event``) or on the fake clock.
Each test talks to its own actor name.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, ClassVar

import pytest

from roost.actors import (
    Actor,
    callable,
)
from roost.actors.errors import CallTimeout, NotInTurn
from roost.examples.kinds import Counter
from roost.testing import ActorKit
from tests.runtime_support import (
    Frame,
    Guarded,
    Ledger,
    Sleepy,
    Streamer,
    Worker,
    call_error,
    make_dormant,
    make_kit,
    of_type,
    seqs,
)


# -- 1. set_state: validate → persist → broadcast → on_state_changed ---------------------------------
async def test_set_state_refused_by_validate_state_writes_and_sends_nothing(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Guarded)
    async with kit:
        c = kit.connect("guarded", "validate-1")
        assert await c.call("add", 5) == 5

        err = await call_error(c, "add", -10)
        assert err.code == "handler_error"
        assert err.message.startswith("internal error in add (ref ")  # the text is only in the log

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
        assert err.message.startswith("internal error in write (ref ")
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
        assert err.message.startswith("internal error in tick_then_fail (ref ")
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


# -- 11. turn timeout ---------------------------------------------------------------------------------
async def test_turn_timeout_cancels_the_turn_rolls_back_and_frees_the_mailbox(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Sleepy, turn_timeout=0.2)
    async with kit:
        c = kit.connect("sleepy", "timeout-1")
        answer = asyncio.ensure_future(call_error(c, "hang"))
        await clock.armed(1)  # the turn is waiting: its deadline is armed on the runtime's clock
        clock.advance(0.19)  # time moves; nothing sleeps
        await asyncio.sleep(0)
        assert clock.timers == 1, "the turn timed out before turn_timeout"
        assert not answer.done()
        clock.advance(0.01)  # exactly at the deadline
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
