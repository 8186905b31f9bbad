"""The output gate (``roost.actors.outputs``): frames are held until their turn's commit, a batch's
replies leave in order with gap-free ``seq`` numbers, subscriptions filter broadcast frames, and
broadcast and emit reach exactly the connections they name.

Real SQLite files under ``tmp_path``, a ``FakeClock`` for idle time and timeouts, no sleeps: every wait
is on a condition (``wait_for``, ``settle``, an ``asyncio.Event``) or on the fake clock.
Each test talks to its own actor name.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from roost.actors import (
    Principal,
)
from roost.examples.kinds import Counter
from roost.testing import KitConnection
from tests.runtime_support import (
    Chatty,
    Frame,
    Gated,
    Lobby,
    make_kit,
    of_type,
)


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
