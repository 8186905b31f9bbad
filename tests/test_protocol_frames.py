"""The pure protocol parts (``roost.protocol``): every server frame from one builder, and the resume rule."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from roost.protocol import PROTOCOL_VERSION, ResumeMode, decide_resume, frames

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_every_builder_returns_one_json_object_named_after_its_frame(value: Any) -> None:
    text = orjson.dumps(value).decode()
    built = {
        "welcome": frames.welcome("c1", "counter", "n", text, 3, 1, "replay"),
        "state": frames.state(3, text),
        "event": frames.event(4, text),
        "message": frames.message(value),
        "rpc_result": frames.rpc_ok("1", value),
        "rpc_chunk": frames.rpc_chunk("1", value),
        "error": frames.error("bad_frame", "no"),
        "pong": frames.pong(value),
        "auth_result": frames.auth_ok(value, 1.5),
    }
    for name, frame in built.items():
        obj = orjson.loads(frame)
        assert obj["type"] == name
    assert orjson.loads(built["state"])["state"] == value  # spliced in as it was encoded
    assert orjson.loads(built["welcome"])["protocol"] == PROTOCOL_VERSION
    failed = orjson.loads(frames.rpc_error("7", "timeout", "late"))
    assert failed == {
        "type": "rpc_result",
        "id": "7",
        "ok": False,
        "error": {"code": "timeout", "message": "late"},
    }
    refused = orjson.loads(frames.auth_error(value, "unauthenticated", "no"))
    assert refused == {
        "type": "auth_result",
        "id": value,
        "ok": False,
        "error": {"code": "unauthenticated", "message": "no"},
    }


@pytest.mark.parametrize(
    ("cursor", "seq", "oldest", "mode", "reason", "after"),
    [
        (None, 5, 1, ResumeMode.FRESH, None, None),
        (6, 5, 1, ResumeMode.SNAPSHOT, "cursor_ahead", None),
        (2, 10, 4, ResumeMode.SNAPSHOT, "cursor_expired", None),
        (3, 10, 4, ResumeMode.REPLAY, None, 3),  # oldest - 1: nothing it missed was pruned
        (10, 10, 4, ResumeMode.REPLAY, None, None),  # up to date: nothing to replay
        (0, 0, 1, ResumeMode.REPLAY, None, None),  # an empty log
    ],
)
def test_the_resume_rule_decides_from_cursor_seq_and_oldest(
    cursor: int | None, seq: int, oldest: int, mode: ResumeMode, reason: str | None, after: int | None
) -> None:
    resume = decide_resume(cursor, seq, oldest)
    assert (resume.mode, resume.reason, resume.replay_after) == (mode, reason, after)
