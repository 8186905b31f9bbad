"""Frames for the ``roost.client`` unit tests, built as the server would send them."""

from __future__ import annotations

from roost.client import ResumeState, Welcome
from roost.client.frames import JSON, Frame

__all__ = ["delivered_seqs", "event", "state", "welcome"]


def welcome(
    resume: str = "fresh",
    cursor: int = 0,
    *,
    state: JSON = None,
    oldest: int | None = None,
    reason: str | None = None,
) -> Welcome:
    frame: Frame = {
        "type": "welcome",
        "protocol": 1,
        "connection_id": "conn-1",
        "actor": {"kind": "counter", "name": "c1"},
        "state": state,
        "cursor": cursor,
        "resume": resume,
        "oldest": 1 if oldest is None else oldest,
    }
    if reason is not None:
        frame["reason"] = reason
    return Welcome.parse(frame)


def state(seq: int, value: JSON = None) -> Frame:
    return {"type": "state", "seq": seq, "state": {"n": seq} if value is None else value}


def event(seq: int) -> Frame:
    return {"type": "event", "seq": seq, "event": {"e": seq}}


def delivered_seqs(resume: ResumeState, frames: list[Frame]) -> list[int]:
    return [f["seq"] for f in frames if resume.on_frame(f)]
