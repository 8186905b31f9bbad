"""The Python client's reassembly of streamed model output (roost/client/messages.py)."""

from __future__ import annotations

from typing import Any

from roost.client import MessageText


def delta(offset: int, text: str, mid: str = "run_1.0") -> dict[str, Any]:
    return {"event_type": "model_delta", "payload": {"message_id": mid, "offset": offset, "text": text}}


def test_each_character_once_in_order() -> None:
    m = MessageText()
    assert m.feed(delta(0, "hello ")) == "hello "
    assert m.feed(delta(6, "world")) == "world"
    assert m.feed(delta(0, "hello ")) == ""  # a repeat adds nothing
    assert m.feed(delta(3, "lo world!")) == "!"  # overlapping: only what is new
    assert m.text("run_1.0") == "hello world!"
    assert m.duplicates == 2
    assert m.gaps == 0


def test_a_gap_is_counted_and_not_appended() -> None:
    m = MessageText()
    m.feed(delta(0, "abc"))
    assert m.feed(delta(10, "xyz")) == ""
    assert m.gaps == 1
    assert m.text("run_1.0") == "abc"


def test_messages_are_kept_apart_and_a_restart_empties_one() -> None:
    m = MessageText()
    m.feed(delta(0, "first", "a"))
    m.feed(delta(0, "second", "b"))
    m.feed({"event_type": "model_stream_restarted", "payload": {"message_id": "a", "discarded": 5}})
    assert m.feed(delta(0, "again", "a")) == "again"
    assert (m.text("a"), m.text("b")) == ("again", "second")


def test_other_events_and_malformed_payloads_are_ignored() -> None:
    m = MessageText()
    assert m.feed({"event_type": "turn_started", "payload": {}}) == ""
    assert m.feed({"event_type": "model_delta", "payload": {"message_id": "a", "offset": "x"}}) == ""
    assert m.feed(None) == ""
    assert m.texts == {}
