"""Frame encoding, decoding and validation (pure: no I/O).

Frames are JSON objects, one per WebSocket text frame (protocol.md). Only the fields the client
relies on are validated; unknown fields are kept in the dicts handed to the application.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from roost.protocol.frames import PROTOCOL_VERSION as _SERVER_PROTOCOL_VERSION
from roost.protocol.resume import ResumeMode as ResumeMode  # the one definition, re-exported

from .errors import ProtocolViolation

#: Any JSON value (the payloads of state, events, messages, call arguments and results).
JSON = Any
#: One decoded frame.
Frame = dict[str, JSON]

#: The protocol version this client speaks (``welcome.protocol``): the server's own, from one place.
PROTOCOL_VERSION = _SERVER_PROTOCOL_VERSION


def decode_frame(raw: str | bytes) -> Frame:
    """Decode one received WebSocket message; raises ``ProtocolViolation`` unless a JSON object."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProtocolViolation(f"frame is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ProtocolViolation(f"frame is not a JSON object: {type(value).__name__}")
    return value


def encode_frame(frame: Mapping[str, JSON]) -> str:
    """Encode a frame as the text of one WebSocket text frame.

    Raises ``TypeError`` (``orjson.JSONEncodeError``) if a value is not JSON-serialisable.
    """
    return orjson.dumps(frame).decode()


def is_int(value: object) -> bool:
    """A JSON integer (``bool`` is an ``int`` subclass in Python but not a JSON number)."""
    return isinstance(value, int) and not isinstance(value, bool)


def frame_seq(frame: Mapping[str, JSON]) -> int:
    """The ``seq`` of a ``state`` or ``event`` frame; ``ProtocolViolation`` if missing or bad."""
    seq: JSON = frame.get("seq")
    if not is_int(seq) or seq < 1:
        raise ProtocolViolation(f"{frame.get('type')} frame without a valid seq: {seq!r}")
    result: int = seq
    return result


def _field(frame: Mapping[str, JSON], name: str, kind: type) -> JSON:
    value: JSON = frame.get(name)
    if kind is int:
        ok = is_int(value) and value >= 0
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ProtocolViolation(f"welcome field {name!r} is missing or invalid: {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Welcome:
    """A validated ``welcome`` frame (always the first frame of a connection)."""

    protocol: int
    connection_id: str
    kind: str
    name: str
    state: JSON
    cursor: int
    resume: ResumeMode
    oldest: int
    reason: str | None
    raw: Frame

    @classmethod
    def parse(cls, frame: Frame) -> Welcome:
        """Validate a decoded frame as a welcome; raises ``ProtocolViolation`` otherwise."""
        if frame.get("type") != "welcome":
            raise ProtocolViolation(f"first frame is not a welcome: type={frame.get('type')!r}")
        protocol = _field(frame, "protocol", int)
        if protocol != PROTOCOL_VERSION:
            raise ProtocolViolation(f"unsupported protocol version {protocol!r}")
        actor = _field(frame, "actor", dict)
        kind, name = actor.get("kind"), actor.get("name")
        if not isinstance(kind, str) or not isinstance(name, str):
            raise ProtocolViolation(f"welcome field 'actor' is invalid: {actor!r}")
        if "state" not in frame:
            raise ProtocolViolation("welcome field 'state' is missing")
        resume_value: JSON = frame.get("resume")
        try:
            resume = ResumeMode(resume_value)
        except ValueError:
            raise ProtocolViolation(f"unknown resume mode {resume_value!r}") from None
        reason = frame.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise ProtocolViolation(f"welcome field 'reason' is invalid: {reason!r}")
        return cls(
            protocol=protocol,
            connection_id=_field(frame, "connection_id", str),
            kind=kind,
            name=name,
            state=frame["state"],
            cursor=_field(frame, "cursor", int),
            resume=resume,
            oldest=_field(frame, "oldest", int),
            reason=reason,
            raw=frame,
        )
