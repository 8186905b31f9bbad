"""HTTP endpoints: an actor's state snapshot, calls with JSON arguments, the health check, and the
operator's admin endpoints (a backup while serving; a live actor inspected or exported).

Every answer is JSON encoded with orjson. Errors use the same codes as the WebSocket protocol, with the
HTTP status of the one failure table (:mod:`roost.protocol.failures`, ``docs/protocol.md`` *Errors*).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from roost.actors import (
    INLINE_TURNS,
    MAX_KEY,
    ActorLocked,
    ActorNotFound,
    InvalidActorAddress,
    Principal,
    RpcError,
    UnknownKind,
    fast_paths_off,
)
from roost.protocol.failures import http_status
from roost.storage.blobs import GRACE
from roost.transport.access import Refused
from roost.transport.admin import delete_live, export_live, inspect_live
from roost.transport.auth import allow_all, run_authenticate
from roost.transport.backup import backup_online
from roost.transport.collect import collect_online
from roost.transport.protocol import PROTOCOL_VERSION, ProtocolError, actor_address
from roost.transport.security import check_client_name, hide_token, origin_allowed

if TYPE_CHECKING:
    from roost.transport.interfaces import Runtime
    from roost.transport.tracing import Tracing

__all__ = [
    "PROXY_HEADERS",
    "JSONResponse",
    "admin_backup",
    "admin_delete",
    "admin_export",
    "admin_gc",
    "admin_inspect",
    "get_actor",
    "get_metrics",
    "healthz",
    "post_rpc",
]


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def _error(code: str, message: str, retry_after: int | None = None) -> JSONResponse:
    return JSONResponse(
        {"ok": False, "error": {"code": code, "message": message}},
        status_code=http_status(code),
        headers=None if retry_after is None else {"Retry-After": str(retry_after)},
    )


async def _guard(
    app: Runtime, request: Request, trailing: int, action: str
) -> tuple[str, str, str, Principal] | JSONResponse:
    """The checks of :mod:`roost.transport.access`: ``(kind, name as asked, name in the principal's tenant,
    principal)``, or the refusal."""
    await app.ensure_started()
    hide_token(request.scope)
    try:
        kind, name = actor_address(request.scope, trailing)
        app.registry.validate(kind, name)
    except ProtocolError as exc:
        return _error(exc.code, exc.message)
    except InvalidActorAddress as exc:
        return _error("bad_address", str(exc))
    except UnknownKind as exc:
        return _error("unknown_kind", str(exc))
    verdict = await app.access.admit(request, kind, name, action)
    if isinstance(verdict, Refused):
        return _error(verdict.code, verdict.message)
    try:
        app.registry.validate(kind, verdict.name)
    except InvalidActorAddress as exc:
        return _error("bad_address", str(exc))
    bucket = app.access.principal_bucket(verdict.principal, request.client.host if request.client else None)
    if bucket is not None and not bucket.take(app.access.clock()):
        app.access.limited += 1
        return _error("rate_limited", "too many requests for this principal")
    return kind, name, verdict.name, verdict.principal


async def get_actor(request: Request) -> Response:
    """``GET /agents/{kind}/{name}``: the committed state. Creates nothing (404 if never created)."""
    app: Runtime = request.app.state.roost
    addr = await _guard(app, request, 0, "read")
    if isinstance(addr, Response):
        return addr
    kind, name, scoped, _ = addr
    try:
        state, seq = await app.registry.snapshot(kind, scoped)
    except ActorNotFound as exc:
        return _error("not_found", str(exc))
    except RpcError as exc:
        return _error(exc.code, exc.message)
    return JSONResponse({"actor": {"kind": kind, "name": name}, "state": state, "cursor": seq})


async def post_rpc(request: Request) -> Response:
    """``POST /agents/{kind}/{name}/rpc/{method}`` with a JSON array (args) or object (kwargs).

    A call creates the actor it calls, unless it cannot change it, or its principal (anonymous: its
    address) has no creation token left: 429 ``creation_limited`` with ``Retry-After`` (calls to an
    actor that exists never count, see :meth:`roost.transport.access.Access.creation`). A read-only
    call (the method is ``@callable(readonly=True)``) to an actor never created answers 404
    ``not_found`` and creates nothing, no file and no directory row, as ``GET /agents/{kind}/{name}``
    does. A read-only principal is refused ``forbidden`` before that (a method that is not read-only,
    or an actor never created: read-only principals create nothing, over WebSocket either)."""
    app: Runtime = request.app.state.roost
    method = request.path_params["method"]
    addr = await _guard(app, request, 2, f"call:{method}")
    if isinstance(addr, Response):
        return addr
    kind, _, name, principal = addr
    key = request.headers.get("idempotency-key")
    if key is not None and not 0 < len(key) <= MAX_KEY:
        return _error("bad_frame", f"Idempotency-Key: must be 1 to {MAX_KEY} characters")
    info = app.registry.callable_info(kind, method)
    if principal.claims.get("read_only"):
        if info is not None and not info.readonly:
            return _error("forbidden", f"read-only: {method} is not a read-only method")
        if not app.registry.exists(kind, name):
            return _error("forbidden", "read-only principals cannot create actors")
    elif info is not None and info.readonly and not app.registry.exists(kind, name):
        return _error("not_found", str(ActorNotFound(kind, name)))
    elif info is not None:  # a missing method creates nothing (Registry.call), so costs no token
        client = request.client.host if request.client else None
        refused = app.access.creation(principal, kind, name, client)
        if refused is not None:
            return _error(refused.code, refused.message, refused.retry_after)
    body = await _read_body(request, app.max_frame_bytes)
    if body is None:
        return _error("too_large", f"body larger than {app.max_frame_bytes} bytes")
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
    if app.tracing is not None:
        return await _traced_call(
            app, app.tracing, request, (kind, name, method), args, kwargs, principal, key
        )
    try:
        result, chunks = await app.registry.call(
            kind, name, method, args, kwargs, principal=principal, idempotency_key=key
        )
    except RpcError as exc:
        return _error(exc.code, exc.message)
    content: dict[str, Any] = {"ok": True, "result": result}
    if info is not None and info.streaming:
        content["chunks"] = chunks
    return JSONResponse(content)


async def _traced_call(
    app: Runtime,
    tracing: Tracing,
    request: Request,
    address: tuple[str, str, str],
    args: list[Any],
    kwargs: dict[str, Any],
    principal: Principal,
    key: str | None,
) -> Response:
    """:func:`post_rpc`'s call inside a ``roost.call`` span, a child of the request's ``traceparent``
    (:mod:`roost.transport.tracing`); the turn's span is its child."""
    from opentelemetry import trace

    from roost.transport.tracing import parent_context

    kind, name, method = address
    parent = parent_context(request.headers, request.query_params)
    with tracing.tracer.start_as_current_span(
        "roost.call",
        context=parent,
        kind=trace.SpanKind.SERVER,
        attributes={"roost.kind": kind, "roost.method": method},
    ) as span:
        try:
            result, chunks = await app.registry.call(
                kind,
                name,
                method,
                args,
                kwargs,
                principal=principal,
                idempotency_key=key,
                trace=trace.set_span_in_context(span),
            )
        except RpcError as exc:
            span.set_attribute("roost.error", exc.code)
            return _error(exc.code, exc.message)
    content: dict[str, Any] = {"ok": True, "result": result}
    info = app.registry.callable_info(kind, method)
    if info is not None and info.streaming:
        content["chunks"] = chunks
    return JSONResponse(content)


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as it is known to exceed ``limit`` (never read in full)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


#: Headers a proxy adds to what it forwards; any of them keeps a request off the loopback rule of
#: :func:`_admin` (the client a proxy on this host forwards for is not this host's operator).
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip", "via")


async def _admin(app: Runtime, request: Request, name: str, action: str) -> Principal | JSONResponse:
    """Who may use an admin endpoint: a principal with the ``admin`` claim and no tenant (a tenant's
    admin does not own the other tenants' data), allowed by ``authorize(principal, "admin", name,
    action)``, from an allowed origin. Without authentication configured: clients on the loopback
    interface that are not browsers (no ``Origin``) and did not come through a proxy (none of
    :data:`PROXY_HEADERS`), i.e. the operator's own ``roost … --server``: behind a reverse proxy on the
    same host every remote client connects from the loopback interface. A proxy that adds none of
    those headers cannot be told from the operator (``docs/security.md``)."""
    await app.ensure_started()
    hide_token(request.scope)
    if not origin_allowed(request, app.access.origins):
        return _error("origin_refused", "origin not allowed")
    principal = await run_authenticate(app.authenticate, request)
    if principal is None:
        return _error("unauthenticated", "not authenticated")
    if app.authenticate is allow_all:
        local = request.client is not None and request.client.host in ("127.0.0.1", "::1")
        proxied = any(header in request.headers for header in PROXY_HEADERS)
        if not local or proxied or "origin" in request.headers:
            return _error(
                "forbidden", "admin only: without authentication, from this host's command line (not a proxy)"
            )
    elif not principal.claims.get("admin") or principal.tenant is not None:
        return _error("forbidden", "admin only (an admin token without a tenant)")
    if not await app.access.allowed(principal, "admin", name, action):
        return _error("forbidden", f"{action} is not allowed")
    return principal


async def admin_backup(request: Request) -> Response:
    """``POST /admin/backup`` ``{"name": "2026-11-29"}``: a backup consistent while serving
    (:func:`roost.transport.backup.backup_online`) into ``<backup root>/<name>``, a new directory; the root is
    ``$ROOST_BACKUP_DIR``, by default ``backups`` beside the data directory. Who: :func:`_admin`, with
    ``authorize(principal, "admin", "backup", "admin:backup")``."""
    app: Runtime = request.app.state.roost
    refused = await _admin(app, request, "backup", "admin:backup")
    if isinstance(refused, Response):
        return refused
    body = await _read_body(request, 4096)
    try:
        name = orjson.loads(body or b"{}")["name"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        name = None
    if not isinstance(name, str) or not _BACKUP_NAME.fullmatch(name):
        return _error(
            "bad_frame",
            'expected {"name": "<letters, digits, . _ ->"}: a new directory under the backup root',
        )
    out = backup_root(app) / name
    try:
        manifest = await backup_online(app.registry, out)
    except FileExistsError:
        return _error("invalid_arguments", f"backup {name!r} exists: a backup goes into a new directory")
    except RpcError as exc:
        return _error(exc.code, f"{exc.message} (the partial copy in {out} has no manifest.json)")
    return JSONResponse({"ok": True, "result": {**manifest, "path": str(out)}})


async def admin_gc(request: Request) -> Response:
    """``POST /admin/gc`` with an optional body ``{"grace": seconds, "dry_run": true}``: what ``roost gc``
    does, while serving (:func:`roost.transport.collect.collect_online`): the blobs no actor's file
    references, stored more than ``grace`` seconds (default an hour) before it started, are removed;
    the report is the answer. Who: :func:`_admin`, with ``authorize(principal, "admin", "gc",
    "admin:gc")``. An actor that could not be marked: its error, and nothing was removed."""
    app: Runtime = request.app.state.roost
    refused = await _admin(app, request, "gc", "admin:gc")
    if isinstance(refused, Response):
        return refused
    body = await _read_body(request, 4096)
    try:
        asked = orjson.loads(body) if body and body.strip() else {}
        grace = asked.get("grace", GRACE)
        dry_run = asked.get("dry_run", False)
    except (orjson.JSONDecodeError, AttributeError):
        grace, dry_run = None, None
    if (
        isinstance(grace, bool)
        or not isinstance(grace, int | float)
        or not 0 <= grace < 1e9
        or not isinstance(dry_run, bool)
    ):
        return _error("bad_frame", 'expected no body, or {"grace": <seconds, 0 or more>, "dry_run": <bool>}')
    try:
        report = await collect_online(app.registry, grace=float(grace), dry_run=dry_run)
    except RpcError as exc:
        return _error(exc.code, exc.message)
    return JSONResponse({"ok": True, "result": report})


async def _admin_actor(
    request: Request, trailing: int, action: str
) -> tuple[Runtime, str, str, Principal] | JSONResponse:
    """``(app, kind, stored name, principal)`` of ``/admin/actors/{kind}/{name}[?tenant=T]`` once the
    caller is an admin allowed ``action`` on ``kind/name``; or the refusal."""
    app: Runtime = request.app.state.roost
    try:
        kind, name = actor_address(request.scope, trailing)
        tenant = request.query_params.get("tenant")
        if tenant is not None:
            check_client_name(tenant)
            name = f"{tenant}\x00{name}"  # a tenant's actor (scoped_name)
        app.registry.validate(kind, name)
    except ProtocolError as exc:
        return _error(exc.code, exc.message)
    except (InvalidActorAddress, ValueError) as exc:
        return _error("bad_address", str(exc))
    except UnknownKind as exc:
        return _error("unknown_kind", str(exc))
    principal = await _admin(app, request, f"{kind}/{name}", action)
    if isinstance(principal, Response):
        return principal
    return app, kind, name, principal


async def admin_inspect(request: Request) -> Response:
    """``GET /admin/actors/{kind}/{name}[?tenant=T]``: what ``roost inspect KIND NAME`` reports, read
    inside a turn of the actor (:func:`roost.transport.admin.inspect_live`): live actors included.
    Who: :func:`_admin`, with ``authorize(principal, "admin", "KIND/NAME", "admin:inspect")``. An
    actor never created: 404 ``not_found``, and nothing is created."""
    return await _admin_read(request, 0, "admin:inspect")


async def admin_export(request: Request) -> Response:
    """``GET /admin/actors/{kind}/{name}/export[?tenant=T]``: what ``roost export KIND NAME`` writes,
    read inside a turn of the actor (:func:`roost.transport.admin.export_live`). Who: as
    :func:`admin_inspect`, with ``"admin:export"``."""
    return await _admin_read(request, 1, "admin:export")


async def _admin_read(request: Request, trailing: int, action: str) -> Response:
    addr = await _admin_actor(request, trailing, action)
    if isinstance(addr, Response):
        return addr
    app, kind, name, _ = addr
    read = inspect_live if action == "admin:inspect" else export_live
    try:
        report = await read(app.registry, kind, name)
    except ActorNotFound as exc:
        return _error("not_found", str(exc))
    except RpcError as exc:
        return _error(exc.code, exc.message)
    return JSONResponse({"ok": True, "result": report})


async def admin_delete(request: Request) -> Response:
    """``DELETE /admin/actors/{kind}/{name}[?tenant=T]`` with an optional body ``{"reason": "…"}``:
    what ``roost delete KIND NAME`` does, through the server (:func:`roost.transport.admin.delete_live`):
    a live actor is stopped and kept from activating while its file and directory row go; the audit
    record, by the principal's id, is the answer. Who: :func:`_admin`, with ``authorize(principal,
    "admin", "KIND/NAME", "admin:delete")``. An actor never created: 404 ``not_found``; one live in
    another process: 503 ``actor_unavailable``."""
    addr = await _admin_actor(request, 0, "admin:delete")
    if isinstance(addr, Response):
        return addr
    app, kind, name, principal = addr
    body = await _read_body(request, 4096)
    try:
        reason = orjson.loads(body).get("reason", "") if body and body.strip() else ""
    except (orjson.JSONDecodeError, AttributeError):
        reason = None
    if not isinstance(reason, str):
        return _error("bad_frame", 'expected no body, or {"reason": "<why>"}')
    try:
        record = await delete_live(app.registry, kind, name, reason=reason, by=principal.id)
    except (ActorNotFound, FileNotFoundError) as exc:
        return _error("not_found", str(exc))
    except ActorLocked as exc:
        return _error("actor_unavailable", str(exc))
    except RpcError as exc:
        return _error(exc.code, exc.message)
    return JSONResponse({"ok": True, "result": record})


_BACKUP_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9._\-]{0,63}")


def backup_root(app: Runtime) -> Path:
    configured = os.environ.get("ROOST_BACKUP_DIR")
    return Path(configured) if configured else app.registry.config.data_dir.resolve().parent / "backups"


async def get_metrics(request: Request) -> Response:
    """``GET /metrics``: the Prometheus exposition of :mod:`roost.transport.metrics` (404 when the app
    was made without ``metrics=True``). Who: :func:`_admin`, with ``authorize(principal, "admin",
    "metrics", "admin:metrics")`` — a scrape shows actor kinds and traffic."""
    app: Runtime = request.app.state.roost
    if app.metrics is None:
        return _error("not_found", "metrics are off (create_app(metrics=True), roost serve --metrics)")
    refused = await _admin(app, request, "metrics", "admin:metrics")
    if isinstance(refused, JSONResponse):
        return refused
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(app.metrics), media_type=CONTENT_TYPE_LATEST)


async def healthz(request: Request) -> Response:
    """``GET /healthz``: liveness and a few counters; ``descriptors``: the descriptor limit and the
    ``max_active`` sized to it at start (``null`` where the process has no limit); ``directory``:
    touches waiting for the next flush (``pending``) and writes refused so far because another process
    held the directory's lock (``busy``: never waited for on the event loop)."""
    app: Runtime = request.app.state.roost
    registry = app.registry
    found = registry.descriptors
    directory = registry.directory
    return JSONResponse(
        {
            "ok": True,
            "protocol": PROTOCOL_VERSION,
            "active_actors": len(registry.hosts),
            "max_active": registry.config.max_active,
            "descriptors": None if found is None else found.as_json(),
            "connections": len(app.sinks),
            "directory": {
                "pending": directory.pending if directory is not None else 0,
                "busy": directory.busy if directory is not None else 0,
            },
            # the fast paths (docs/design.md): whether turns run inline in this process, and how many
            # open connections the direct frame path serves
            "fast_paths": {
                "switched_off": fast_paths_off() is not None,  # ROOST_FAST_PATHS=0
                "inline_turns": INLINE_TURNS.on,
                "direct_connections": sum(sink.direct is not None for sink in app.sinks),
            },
        }
    )
