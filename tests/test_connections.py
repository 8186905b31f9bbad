"""Connections: resuming from a cursor (replay or snapshot), a connection's own small state, and
``Reject`` in ``on_connect``.

Real SQLite files under ``tmp_path``, a ``FakeClock`` for idle time and timeouts, no sleeps: every wait
is on a condition (``wait_for``, ``settle``, an ``asyncio.Event``) or on the fake clock.
Each test talks to its own actor name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.actors import (
    Connection,
    Principal,
)
from roost.actors.connection import MAX_CONNECTION_STATE_BYTES
from roost.examples.kinds import Counter
from roost.testing import RecordingSink
from tests.runtime_support import (
    Badge,
    Doorman,
    make_kit,
    of_type,
    seqs,
)


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
        assert error["message"].startswith("internal error in on_message (ref ")
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
