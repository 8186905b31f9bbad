"""Every frame the server sends, built in one place (``docs/protocol.md``, *Server frames*).

Each builder returns the text of one WebSocket frame. JSON that is already encoded (a state or an
event, which the actor's log stores as text) is spliced in as it is, never decoded and encoded again.

Guarantee: every builder returns one JSON object whose ``type`` is the frame's name, and encoding it
never raises for JSON values orjson encodes (``tests/test_protocol_frames.py``). orjson decodes 1,024
levels of nesting but encodes only about 255, so a value a client sent is not always one: the ids the
server echoes back are short scalars (the id rule, ``docs/protocol.md`` *Client frames*), and a value
an actor sends is encoded inside its turn, which fails if it cannot be.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "PROTOCOL_VERSION",
    "auth_error",
    "auth_ok",
    "encode",
    "error",
    "event",
    "message",
    "pong",
    "rpc_chunk",
    "rpc_error",
    "rpc_ok",
    "state",
    "welcome",
]

#: The one protocol version: the welcome carries it, ``/healthz`` reports it, clients check it.
PROTOCOL_VERSION = 1


def encode(frame: dict[str, Any]) -> str:
    """Encode a server frame as the text of one WebSocket frame."""
    return orjson.dumps(frame).decode()


def welcome(
    connection_id: str,
    kind: str,
    name: str,
    state_json: str,
    cursor: int,
    oldest: int,
    resume: str,
    reason: str | None = None,
) -> str:
    """The first frame of every accepted connection: who, the state, the log's bounds, how it resumes."""
    frame: dict[str, Any] = {
        "type": "welcome",
        "protocol": PROTOCOL_VERSION,
        "connection_id": connection_id,
        "actor": {"kind": kind, "name": name},
        "state": orjson.Fragment(state_json),
        "cursor": cursor,
        "oldest": oldest,
        "resume": resume,
    }
    if reason is not None:
        frame["reason"] = reason
    return encode(frame)


def state(seq: int, state_json: str) -> str:
    """A state change, logged under ``seq``."""
    return encode({"type": "state", "seq": seq, "state": orjson.Fragment(state_json)})


def event(seq: int, event_json: str) -> str:
    """A durable event, logged under ``seq``."""
    return encode({"type": "event", "seq": seq, "event": orjson.Fragment(event_json)})


def message(data: Any) -> str:
    """An ephemeral message (not logged)."""
    return encode({"type": "message", "data": data})


def rpc_ok(call_id: str, result: Any) -> str:
    """A call's result."""
    return encode({"type": "rpc_result", "id": call_id, "ok": True, "result": result})


def rpc_error(call_id: str, code: str, text: str) -> str:
    """A call's failure, with a wire error code (``docs/protocol.md``, *Error codes*)."""
    return encode(
        {"type": "rpc_result", "id": call_id, "ok": False, "error": {"code": code, "message": text}}
    )


def rpc_chunk(call_id: str, chunk: Any) -> str:
    """One chunk of a streaming call."""
    return encode({"type": "rpc_chunk", "id": call_id, "chunk": chunk})


def error(code: str, text: str, call_id: str | None = None) -> str:
    """An error that belongs to no call (a bad frame, a failed message hook); ``call_id``: the id of
    an ``rpc`` frame refused as a bad frame although its id was good (the caller's answer)."""
    if call_id is not None:
        return encode({"type": "error", "code": code, "message": text, "id": call_id})
    return encode({"type": "error", "code": code, "message": text})


def pong(ping_id: str | int | float | None) -> str:
    """The answer to a ``ping``, after every frame sent before it; ``ping_id`` is the ping's own (a
    short scalar: the id rule)."""
    return encode({"type": "pong", "id": ping_id})


def auth_ok(auth_id: Any, exp: float | None) -> str:
    """The answer to an accepted ``auth`` frame: the connection now runs on the new token, which
    expires at ``exp`` (seconds since the epoch; ``None``: it does not expire)."""
    return encode({"type": "auth_result", "id": auth_id, "ok": True, "exp": exp})


def auth_error(auth_id: Any, code: str, text: str) -> str:
    """The answer to a refused ``auth`` frame: the connection goes on with the token it had."""
    return encode(
        {"type": "auth_result", "id": auth_id, "ok": False, "error": {"code": code, "message": text}}
    )
