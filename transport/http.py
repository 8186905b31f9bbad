"""HTTP endpoints: an actor's state snapshot, calls with JSON arguments, and the health check.

Every answer is JSON encoded with orjson. Errors use the same codes as the WebSocket protocol, with the
HTTP status given in ``docs/protocol.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from actors.errors import (
    ActorNotFound,
    InvalidActorAddress,
    RpcError,
    UnknownKind,
)
from transport.auth import run_authenticate
from transport.protocol import PROTOCOL_VERSION, ProtocolError, parse_actor_path

if TYPE_CHECKING:
    from transport.app import RoostApp

__all__ = ["JSONResponse", "get_actor", "healthz", "post_rpc"]

_STATUS = {
    "bad_frame": 400,
    "bad_address": 400,
    "unknown_type": 400,
    "invalid_arguments": 400,
    "unknown_kind": 404,
    "not_found": 404,
    "method_not_found": 404,
    "reentrant_call": 409,
    "handler_error": 500,
    "overloaded": 503,
    "actor_unavailable": 503,
    "timeout": 504,
    "unauthenticated": 401,
}


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def _error(code: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"ok": False, "error": {"code": code, "message": message}},
        status_code=_STATUS.get(code, 400),
    )


def _address(request: Request, trailing: int) -> tuple[str, str]:
    raw = request.scope.get("raw_path") or request.scope["path"].encode()
    kind, name = parse_actor_path(raw, trailing)
    if kind != request.path_params.get("kind", kind):
        raise ProtocolError("bad_address", "the name must be one path segment (%2F for /)")
    return kind, name


async def _guard(app: RoostApp, request: Request, trailing: int) -> tuple[str, str] | JSONResponse:
    await app.ensure_started()
    try:
        kind, name = _address(request, trailing)
        app.registry.validate(kind, name)
    except ProtocolError as exc:
        return _error(exc.code, exc.message)
    except InvalidActorAddress as exc:
        return _error("bad_address", str(exc))
    except UnknownKind as exc:
        return _error("unknown_kind", str(exc))
    if await run_authenticate(app.authenticate, request) is None:
        return _error("unauthenticated", "not authenticated")
    return kind, name


async def get_actor(request: Request) -> Response:
    """``GET /agents/{kind}/{name}``: the committed state. Creates nothing (404 if never created)."""
    app: RoostApp = request.app.state.roost
    addr = await _guard(app, request, 0)
    if isinstance(addr, Response):
        return addr
    kind, name = addr
    try:
        state, seq = await app.registry.snapshot(kind, name)
    except ActorNotFound as exc:
        return _error("not_found", str(exc))
    except RpcError as exc:
        return _error(exc.code, exc.message)
    return JSONResponse({"actor": {"kind": kind, "name": name}, "state": state, "cursor": seq})


async def post_rpc(request: Request) -> Response:
    """``POST /agents/{kind}/{name}/rpc/{method}`` with a JSON array (args) or object (kwargs)."""
    app: RoostApp = request.app.state.roost
    addr = await _guard(app, request, 2)
    if isinstance(addr, Response):
        return addr
    kind, name = addr
    body = await request.body()
    if len(body) > app.max_frame_bytes:
        return _error("bad_frame", f"body larger than {app.max_frame_bytes} bytes")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    if body.strip():
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return _error("bad_frame", f"body is not JSON: {exc}")
        if isinstance(parsed, list):
            args = parsed
        elif isinstance(parsed, dict):
            kwargs = parsed
        else:
            return _error("bad_frame", "body must be a JSON array (args) or object (kwargs)")
    method = request.path_params["method"]
    try:
        result, chunks = await app.registry.call(kind, name, method, args, kwargs)
    except RpcError as exc:
        return _error(exc.code, exc.message)
    content: dict[str, Any] = {"ok": True, "result": result}
    info = app.registry.callable_info(kind, method)
    if info is not None and info.streaming:
        content["chunks"] = chunks
    return JSONResponse(content)


async def healthz(request: Request) -> Response:
    """``GET /healthz``: liveness and a few counters."""
    app: RoostApp = request.app.state.roost
    registry = app.registry
    return JSONResponse(
        {
            "ok": True,
            "protocol": PROTOCOL_VERSION,
            "active_actors": len(registry.hosts),
            "connections": len(app.sinks),
        }
    )
