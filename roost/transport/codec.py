"""The protocol's codec: client frames, actor paths and connect queries parsed; pure functions of
their input, no asyncio, no sockets (tested in ``tests/test_protocol.py``).

Guarantees:

- :func:`parse_client_frame` never raises anything but :class:`ProtocolError`, whatever the input.
- Every client id a frame it returns carries (an ``rpc``, ``ping`` or ``auth`` id, echoed in the
  replies) is a short scalar (the id rule, ``docs/protocol.md`` *Client frames*), so no reply that
  echoes one can fail to encode.
- :func:`parse_actor_path` returns names exactly as the client percent-encoded them, refuses a name that
  is not one path segment or not UTF-8, and never normalises ``.`` or ``..``.

:mod:`roost.transport.protocol` (the connection's rules) re-exports every name of this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple
from urllib.parse import parse_qs, unquote_to_bytes

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from roost.protocol import frames

__all__ = [
    "AuthFrame",
    "ClientFrame",
    "ConnectParams",
    "MessageFrame",
    "PingFrame",
    "ProtocolError",
    "RpcFrame",
    "SubscribeFrame",
    "actor_address",
    "encode",
    "error_frame",
    "parse_actor_path",
    "parse_client_frame",
    "parse_connect_query",
]


class ProtocolError(Exception):
    """A frame or address that breaks the protocol; ``code`` is the wire error code; ``call_id``: the
    id of an ``rpc`` frame whose id was good and another field bad (its answer carries it)."""

    def __init__(self, code: str, message: str, call_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.call_id = call_id


class _Frame(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class RpcFrame(NamedTuple):
    """``{"type":"rpc","id":str,"method":str,"args"?:list,"kwargs"?:object,"idempotency_key"?:str}``;
    ``id``, ``method`` and ``idempotency_key`` are 1 to 128 characters (the ``id`` is echoed in the
    call's replies: the id rule; the key names the call across reconnects, ``None`` if absent or
    ``null``: :mod:`roost.actors.callkeys`). The most
    frequent frame by far, so it is checked by hand (five type tests cost a fifth of a pydantic
    validation); the other frames are pydantic models."""

    type: Literal["rpc"]
    id: str
    method: str
    args: list[Any]
    kwargs: dict[str, Any]
    idempotency_key: str | None = None


def _rpc_frame(obj: dict[str, Any]) -> RpcFrame:
    call_id, method = obj.get("id"), obj.get("method")
    if type(call_id) is not str or not 0 < len(call_id) <= _MAX_NAME:
        raise ProtocolError("bad_frame", f"rpc: id: {_NAME_RULE}")
    if type(method) is not str or not 0 < len(method) <= _MAX_NAME:
        raise ProtocolError("bad_frame", f"rpc: method: {_NAME_RULE}", call_id)
    args = obj.get("args", _ABSENT)
    if args is _ABSENT:
        args = []
    elif type(args) is not list:
        raise ProtocolError("bad_frame", "rpc: args: must be a list", call_id)
    kwargs = obj.get("kwargs", _ABSENT)
    if kwargs is _ABSENT:
        kwargs = {}
    elif type(kwargs) is not dict:
        raise ProtocolError("bad_frame", "rpc: kwargs: must be an object", call_id)
    key = obj.get("idempotency_key")
    if key is not None and (type(key) is not str or not 0 < len(key) <= _MAX_NAME):
        raise ProtocolError("bad_frame", f"rpc: idempotency_key: {_NAME_RULE}", call_id)
    return RpcFrame("rpc", call_id, method, args, kwargs, key)


_MAX_NAME = 128
_NAME_RULE = f"must be a string of 1 to {_MAX_NAME} characters"
_ABSENT: Any = object()

# The id rule (docs/protocol.md, *Client frames*): a client id the server echoes back is a short
# scalar, so that no id can make the reply carrying it fail to encode (orjson decodes 1,024 levels of
# nesting but encodes only about 255). An ``rpc`` frame's ``id`` is a string of 1 to 128 characters; a
# ``ping`` frame's ``id`` is absent (``null``), a number, or a string of at most 128 characters.
# Anything else is ``bad_frame``.
_PING_ID_RULE = f"must be a number or a string of at most {_MAX_NAME} characters"


def _echoable_id(value: object) -> bool:
    """Whether ``value`` may be a ``ping`` id (the id rule above; ``bool`` is not a number here)."""
    if isinstance(value, str):
        return len(value) <= _MAX_NAME
    return type(value) is int or type(value) is float


class MessageFrame(_Frame):
    type: Literal["message"]
    data: Any = None


class SubscribeFrame(_Frame):
    type: Literal["subscribe"]
    state: StrictBool | None = None
    events: StrictBool | None = None
    messages: StrictBool | None = None


class PingFrame(_Frame):
    """``{"type":"ping","id"?:number|str}``; the ``id`` is echoed in the ``pong``: absent (``None``), a
    number, or a string of at most 128 characters (the id rule, checked by :func:`parse_client_frame`)."""

    type: Literal["ping"]
    id: str | int | float | None = None


class AuthFrame(_Frame):
    """``{"type":"auth","token":str,"id"?:number|str}``: go on with a new token (a renewal); the
    answer, an ``auth_result``, echoes ``id`` (the id rule, as for a ping)."""

    type: Literal["auth"]
    token: StrictStr = Field(min_length=1)
    id: str | int | float | None = None


ClientFrame = RpcFrame | MessageFrame | SubscribeFrame | PingFrame | AuthFrame
_MODELS: dict[str, type[_Frame]] = {
    "message": MessageFrame,
    "subscribe": SubscribeFrame,
    "ping": PingFrame,
    "auth": AuthFrame,
}


def parse_client_frame(data: str | bytes) -> ClientFrame:
    """Decode one client frame. Raises :class:`ProtocolError` (``bad_frame`` / ``unknown_type``)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError("bad_frame", f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("bad_frame", "a frame must be a JSON object")
    kind = obj.get("type")
    if kind == "rpc":
        return _rpc_frame(obj)
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ProtocolError("unknown_type", f"unknown frame type {str(kind)[:64]!r}")
    if kind == "ping" or kind == "auth":  # both echo their id, under the same rule
        echoed = obj.get("id")
        if echoed is not None and not _echoable_id(echoed):
            raise ProtocolError("bad_frame", f"{kind}: id: {_PING_ID_RULE}")
    try:
        frame = model.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProtocolError("bad_frame", f"{kind}: {where}: {first['msg']}") from None
    assert isinstance(frame, MessageFrame | SubscribeFrame | PingFrame | AuthFrame)
    return frame


encode = frames.encode
error_frame = frames.error


def _segment(raw: bytes, what: str) -> str:
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("bad_address", f"{what} is not UTF-8 after percent-decoding") from None


def parse_actor_path(raw_path: bytes, trailing: int = 0) -> tuple[str, str]:
    """``(kind, name)`` from the raw (still percent-encoded) request path.

    The path ends with ``…/agents/{kind}/{name}`` followed by ``trailing`` more segments (2 for
    ``/rpc/{method}``). Raw segments never contain a ``/``, so a ``/`` inside a name must arrive as
    ``%2F``; the caller checks that the kind found here is the one its router matched.
    """
    parts = raw_path.split(b"?", 1)[0].split(b"/")
    if trailing:
        parts = parts[:-trailing]
    if len(parts) < 3:
        raise ProtocolError("bad_address", "path must end with /agents/{kind}/{name}")
    return _segment(parts[-2], "kind"), _segment(parts[-1], "name")


def actor_address(scope: Mapping[str, Any], trailing: int = 0) -> tuple[str, str]:
    """``(kind, name)`` of a request routed to ``…/agents/{kind}/{name:actor_name}[/rpc/{method}]``.

    The raw path decides (so that ``%2F`` stays inside a name), and it must agree with what the router
    matched on the decoded path: ``/agents/counter/x/counter/y`` is refused instead of quietly serving
    ``counter/y`` to a hook that checked ``counter/x/counter/y``.
    """
    raw = scope.get("raw_path") or str(scope["path"]).encode()
    kind, name = parse_actor_path(raw, trailing)
    params = scope.get("path_params") or {}
    if (kind, name) != (params.get("kind", kind), params.get("name", name)):
        raise ProtocolError("bad_address", "the name must be one path segment (send / as %2F)")
    return kind, name


class ConnectParams(BaseModel):
    model_config = ConfigDict(frozen=True)
    cursor: int | None = None
    subscribe: str | None = None
    #: ``dialect``: ``roost`` or ``cf`` (the Cloudflare Agents dialect, :mod:`roost.transport.cloudflare`)
    dialect: str | None = None
    #: ``_pk``: a PartySocket's stable id (1 to 128 characters)
    pk: str | None = None


def parse_connect_query(query: bytes | str) -> ConnectParams:
    """``cursor`` (an integer >= 0), ``subscribe``, ``dialect`` (``roost`` or ``cf``) and ``_pk`` (a
    PartySocket's id, 1 to 128 characters) from the query string."""
    text = query.decode("latin-1") if isinstance(query, bytes) else query
    q = parse_qs(text, keep_blank_values=True)
    cursor: int | None = None
    if "cursor" in q:
        value = q["cursor"][-1]
        if not (value.isascii() and value.isdigit()) or len(value) > 19 or int(value) >= 1 << 63:
            raise ProtocolError("bad_address", "cursor must be an integer >= 0 (64-bit)")
        cursor = int(value)
    subscribe = q["subscribe"][-1] if "subscribe" in q else None
    dialect = q["dialect"][-1] if "dialect" in q else None
    if dialect is not None and dialect not in ("roost", "cf"):
        raise ProtocolError("bad_address", "dialect must be roost or cf")
    pk = q["_pk"][-1] if "_pk" in q else None
    if pk is not None and not 0 < len(pk) <= 128:
        raise ProtocolError("bad_address", "_pk must be 1 to 128 characters")
    return ConnectParams(cursor=cursor, subscribe=subscribe, dialect=dialect, pk=pk)
