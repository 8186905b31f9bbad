"""``roost.client``'s resume rule (``ResumeState``), without a server: every seq is delivered once and in
order across fresh starts, replays, snapshots and reconnects; impossible replays and malformed updates
are protocol violations.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roost.client import (
    ProtocolViolation,
    ResumeState,
)
from roost.client.frames import Frame
from tests.client_frames import delivered_seqs, event, state, welcome

# -- ResumeState ---------------------------------------------------------------------------------


def test_fresh_starts_from_the_welcome() -> None:
    resume = ResumeState()
    assert resume.query_cursor() is None
    resume.on_welcome(welcome("fresh", 5, state={"n": 5}))
    assert (resume.last_seq, resume.state, resume.query_cursor()) == (5, {"n": 5}, 5)
    assert delivered_seqs(resume, [state(4), state(5), event(6), state(7)]) == [6, 7]
    assert resume.state == {"n": 7}
    assert resume.query_cursor() == 7


def test_replay_delivers_exactly_the_frames_after_the_cursor() -> None:
    resume = ResumeState(cursor=3)
    assert resume.query_cursor() == 3
    resume.on_welcome(welcome("replay", 6, state={"n": 6}))
    assert resume.replaying
    assert resume.last_seq == 3
    assert resume.state == {"n": 6}
    assert delivered_seqs(resume, [state(4), event(5), state(6), state(7)]) == [4, 5, 6, 7]
    assert not resume.replaying
    assert (resume.last_seq, resume.state, resume.state_seq) == (7, {"n": 7}, 7)


def test_replayed_state_frames_do_not_move_state_back_in_time() -> None:
    resume = ResumeState(cursor=1)
    resume.on_welcome(welcome("replay", 3, state={"n": 3}))
    assert resume.on_frame(state(2))
    assert resume.state == {"n": 3}
    assert resume.state_seq == 3
    assert resume.last_seq == 2


def test_duplicates_and_old_frames_are_dropped() -> None:
    resume = ResumeState()
    resume.on_welcome(welcome("fresh", 0))
    frames = [state(1), state(1), event(2), state(1), event(2), state(3), event(3)]
    assert delivered_seqs(resume, frames) == [1, 2, 3]


@pytest.mark.parametrize(("cursor", "reason"), [(2, "cursor_expired"), (50, "cursor_ahead")])
def test_snapshot_continues_from_the_welcome(cursor: int, reason: str) -> None:
    resume = ResumeState(cursor=cursor)
    resume.on_welcome(welcome("snapshot", 20, state={"n": 20}, oldest=10, reason=reason))
    assert (resume.last_seq, resume.state, resume.query_cursor()) == (20, {"n": 20}, 20)
    assert delivered_seqs(resume, [state(20), state(21)]) == [21]


def test_messages_are_always_delivered_after_the_welcome() -> None:
    resume = ResumeState()
    message: Frame = {"type": "message", "data": 1}
    with pytest.raises(ProtocolViolation, match="before the welcome"):
        resume.on_frame(message)
    resume.on_welcome(welcome())
    assert resume.on_frame(message)
    assert resume.on_frame(message)
    assert resume.last_seq == 0


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "state", "state": 1},
        {"type": "state", "seq": 0, "state": 1},
        {"type": "state", "seq": "1", "state": 1},
        {"type": "event", "seq": True, "event": 1},
        {"type": "state", "seq": 1},
        {"type": "event", "seq": 1},
    ],
)
def test_malformed_updates_are_violations(frame: Frame) -> None:
    resume = ResumeState()
    resume.on_welcome(welcome())
    with pytest.raises(ProtocolViolation):
        resume.on_frame(frame)


def test_on_frame_refuses_other_types() -> None:
    resume = ResumeState()
    resume.on_welcome(welcome())
    with pytest.raises(ValueError, match="update"):
        resume.on_frame({"type": "rpc_result", "id": "1"})


@pytest.mark.parametrize(
    ("cursor", "w"),
    [
        (None, {"resume": "replay", "cursor": 4}),  # a replay without a cursor
        (9, {"resume": "replay", "cursor": 4}),  # replay from beyond the actor's cursor
        (2, {"resume": "replay", "cursor": 40, "oldest": 10}),  # replay older than retention
    ],
)
def test_impossible_replays_are_violations(cursor: int | None, w: dict[str, int | str]) -> None:
    resume = ResumeState(cursor)
    with pytest.raises(ProtocolViolation, match="replay"):
        resume.on_welcome(welcome(str(w["resume"]), int(w["cursor"]), oldest=int(w.get("oldest", 1))))


def test_replay_at_the_oldest_boundary_is_allowed() -> None:
    resume = ResumeState(cursor=9)
    resume.on_welcome(welcome("replay", 40, oldest=10))
    assert delivered_seqs(resume, [state(s) for s in range(10, 41)]) == list(range(10, 41))


@settings(database=None, max_examples=300, deadline=None)
@given(
    connections=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=6),  # frames logged while disconnected
            st.integers(min_value=0, max_value=6),  # frames logged while connected
            st.integers(min_value=0, max_value=15),  # frames received before the drop
        ),
        min_size=1,
        max_size=8,
    ),
    duplicate=st.booleans(),
    retention=st.integers(min_value=1, max_value=60),
)
def test_reconnects_deliver_every_seq_once_and_in_order(
    connections: list[tuple[int, int, int]], duplicate: bool, retention: int
) -> None:
    """A model server following protocol.md, with connections dropping at random points.

    Delivered seqs always strictly increase; unless a cursor expired (``snapshot``), they are
    exactly the seqs after the first welcome's cursor, without a gap.
    """
    log: list[Frame] = []

    def append(count: int) -> None:
        for _ in range(count):
            seq = len(log) + 1
            log.append(state(seq) if seq % 2 else event(seq))

    resume = ResumeState()
    delivered: list[int] = []
    first_cursor: int | None = None
    snapshots = 0
    for offline, online, received in connections:
        append(offline)
        total = len(log)
        oldest = max(1, total - retention + 1)
        cursor = resume.query_cursor()
        if cursor is None:
            resume.on_welcome(welcome("fresh", total, oldest=oldest))
            start = total
        elif cursor < oldest - 1:
            resume.on_welcome(welcome("snapshot", total, oldest=oldest, reason="cursor_expired"))
            snapshots += 1
            start = total
        else:
            resume.on_welcome(welcome("replay", total, oldest=oldest))
            start = cursor
        if first_cursor is None:
            first_cursor = total
        append(online)
        sent = [f for f in log if f["seq"] > start][:received]  # replayed, then live frames
        if duplicate:
            sent += sent[:1]
        delivered += delivered_seqs(resume, sent)
    assert delivered == sorted(set(delivered))
    assert first_cursor is not None
    if snapshots == 0:
        assert delivered == list(range(first_cursor + 1, (resume.last_seq or 0) + 1))


def test_a_full_session_with_a_drop_loses_nothing() -> None:
    resume = ResumeState()
    resume.on_welcome(welcome("fresh", 2, state={"n": 2}))
    seen = delivered_seqs(resume, [state(3), event(4)])
    # Dropped; the actor moved on to 7 meanwhile; reconnect with cursor=4.
    assert resume.query_cursor() == 4
    resume.on_welcome(welcome("replay", 7, state={"n": 7}))
    seen += delivered_seqs(resume, [state(5), event(6), state(7), state(8)])
    assert seen == [3, 4, 5, 6, 7, 8]
    assert resume.state == {"n": 8}
