"""Actors as MCP servers over streamable HTTP: ``/mcp/{kind}/{name}`` and ``/mcp/{kind}``.

``/mcp/{kind}/{name}`` serves one actor: its ``@callable`` methods as tools, its state as a resource
(:mod:`roost.transport.mcp_tools`). ``/mcp/{kind}`` gives each MCP session an actor of its own, named
``mcp-<session key>`` (in the principal's tenant): a new session, a new actor, created when the
session opens and deleted when it ends (a ``DELETE``, or forgotten after idling: see
:meth:`McpService._forget_idle`) as ``roost delete`` deletes one, with an audit record. A restart
ends every session but leaves their actors (``roost ls`` lists them, ``roost delete`` removes them).

The protocol is the SDK's (:class:`mcp.server.streamable_http_manager.StreamableHTTPSessionManager`,
one per app, with its sessions, SSE streams and JSON-RPC framing); this module is the gate in front
of it. For every request, in order (a refusal is a JSON-RPC error body with the HTTP status of
Roost's failure table, ``docs/protocol.md``):

1. the kind must be served (404 ``unknown_kind``) and the name valid (400 ``bad_address``);
2. ``Origin`` (DNS rebinding): with the app's ``origins`` allow-list, a request that sends one must
   send a listed one; without a list, only a loopback origin (``http://localhost:*``,
   ``http://127.0.0.1:*``, ``http://[::1]:*``) passes; a request without ``Origin`` (not a browser)
   passes → 403 ``origin_refused``;
3. an ``MCP-Protocol-Version`` header must name a version with sessions (2024-11-05 to 2025-11-25;
   the SDK's session-less 2026 drafts are not served) → 400 ``bad_frame``;
4. ``authenticate`` (Roost's tokens: ``Authorization: Bearer``) → 401 ``unauthenticated``;
5. ``authorize(principal, kind, name, "connect")``, the name scoped to the principal's tenant →
   403 ``forbidden``;
6. the principal's request rate (its token bucket, as for HTTP calls) → 429 ``rate_limited``;
7. a request with an ``Mcp-Session-Id`` must come for the session's own path and from the principal
   that opened it (same tenant and id), else 404 ``Session not found``, as an unknown or ended one
   (the SDK answers ``Bad Request: Missing session ID`` for a request without one other than
   ``initialize``). Other sessions are never affected.

Then each tool call is checked as an HTTP call is (read-only principals, ``call:<method>``,
creations); with tracing on, its turn's span is a child of the request's W3C ``traceparent`` (header,
or query parameter), as an HTTP call's is, and an agent run it starts takes that trace id. Bodies
are bounded by the app's ``max_frame_bytes`` (413), open sessions by
:data:`MAX_SESSIONS` (503 for a new one beyond) and by :data:`MAX_SESSIONS_PER_PRINCIPAL` per
principal, per address for anonymous clients (429 ``rate_limited`` for a new one beyond).

A session is a connection to its actor: opening one (``initialize``, no session id yet) creates the
actor as a WebSocket connect does, with the same checks: a read-only principal cannot create one
(403 ``forbidden``), and a creation takes a token of the principal's creation buckets (429
``creation_limited``). The SSE streams are resumable: their events are kept in the actor's own file
(:class:`roost.transport.mcp_events.ActorEventStore`), and a session's go when it ends (``DELETE``).

Lifecycle: the session manager starts with the first MCP request (in a task of its own) and stops
with the app (:meth:`McpService.aclose`: open streams end, sessions are forgotten).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from importlib import metadata
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import orjson
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from roost.actors import ANONYMOUS, InvalidActorAddress, Principal, RpcError, UnknownKind
from roost.protocol.failures import http_status
from roost.transport.access import Refused
from roost.transport.admin import delete_live
from roost.transport.mcp_events import BINDING, ActorEventStore
from roost.transport.mcp_tools import TRACE_SCOPE, Binding, McpExtras, build_server
from roost.transport.security import hide_token, origin_allowed

if TYPE_CHECKING:
    from roost.transport.interfaces import Runtime

__all__ = ["LOOPBACK_HOSTS", "SESSION_HEADER", "McpService", "mcp_origin_allowed"]

log = logging.getLogger("roost.mcp")

SESSION_HEADER = "mcp-session-id"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
#: Sessions idle this long are closed by the SDK; their bindings are forgotten after it too.
IDLE_S = 30 * 60.0
#: Open sessions at most (the SDK answers a new one 503 beyond; the open ones are unaffected).
MAX_SESSIONS = 10_000
#: Open sessions one principal may hold (anonymous clients: one address), so that no one client can
#: take all of :data:`MAX_SESSIONS` from the others.
MAX_SESSIONS_PER_PRINCIPAL = 100
#: The reconnection delay the SSE streams suggest to clients (their `retry:` field), in milliseconds.
RETRY_MS = 1000


def _roost_version() -> str:
    try:
        return metadata.version("roost")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def mcp_origin_allowed(request: Request, origins: frozenset[str] | None) -> bool:
    """Step 2 of the module doc: the allow-list if there is one, else loopback origins only."""
    if origins is not None:
        return origin_allowed(request, origins)
    origin = request.headers.get("origin")
    if origin is None:
        return True
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in LOOPBACK_HOSTS


def _refusal(code: str, message: str, status: int | None = None, retry_after: int | None = None) -> Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": f"{code}: {message}"}}
    headers = {"WWW-Authenticate": "Bearer"} if code == "unauthenticated" else {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return Response(
        orjson.dumps(body),
        status_code=status or http_status(code),
        media_type="application/json",
        headers=headers,
    )


class McpService:
    """The ASGI endpoint of both MCP routes (module doc). ``extras``: prompts and resources the app
    adds to every session (:class:`~roost.transport.mcp_tools.McpExtras`)."""

    def __init__(self, runtime: Runtime, *, version: str | None = None) -> None:
        self.runtime = runtime
        self.version = version if version is not None else _roost_version()
        self.extras = McpExtras()
        self.sessions: dict[str, Binding] = {}
        self.events: ActorEventStore | None = None
        self._manager: StreamableHTTPSessionManager | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._ending: set[asyncio.Task[None]] = set()

    # -- lifecycle ------------------------------------------------------------------------------------
    async def _ensure_running(self) -> StreamableHTTPSessionManager:
        if self._manager is not None:
            return self._manager
        async with self._lock:
            if self._manager is None:
                registry = self.runtime.registry
                self.events = ActorEventStore(registry)
                manager = StreamableHTTPSessionManager(
                    build_server(self.runtime, self.extras, self.version),
                    event_store=self.events,
                    max_request_body_size=self.runtime.max_frame_bytes,
                    session_idle_timeout=IDLE_S,
                    retry_interval=RETRY_MS,
                    max_sessions=MAX_SESSIONS,
                )
                started = asyncio.Event()
                self._stop = asyncio.Event()
                task = asyncio.create_task(self._serve(manager, started, self._stop), name="roost-mcp")
                ready = asyncio.create_task(started.wait())
                await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
                if not started.is_set():  # it failed to start: the request that asked says why
                    ready.cancel()
                    await task
                    raise RuntimeError("the MCP session manager stopped before it started")
                self._task = task
                self._manager = manager
        return self._manager

    async def _serve(
        self, manager: StreamableHTTPSessionManager, started: asyncio.Event, stop: asyncio.Event
    ) -> None:
        async with manager.run():
            started.set()
            await stop.wait()

    async def aclose(self) -> None:
        """Stop the session manager (every open stream ends)."""
        task, stop = self._task, self._stop
        self._manager = self._task = self._stop = None
        self.sessions.clear()
        if task is not None and stop is not None:
            stop.set()
            await task
        if self._ending:
            await asyncio.gather(*self._ending, return_exceptions=True)

    # -- the gate ----------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        refused = await self._admit(request)
        if isinstance(refused, Response):
            await refused(scope, receive, send)
            return
        bound, new = refused
        manager = await self._ensure_running()
        scope["roost.mcp"] = bound
        if self.runtime.tracing is not None:  # a tool call's turn is a child of the request's traceparent
            from roost.transport.tracing import parent_context

            scope[TRACE_SCOPE] = parent_context(request.headers, request.query_params)
        token = BINDING.set(bound)
        ending = request.method == "DELETE"
        held: list[Message] = []  # a DELETE's answer waits for what goes with the session

        async def hold(message: Message) -> None:
            held.append(message)

        bound.in_flight += 1
        try:
            await manager.handle_request(
                scope, receive, hold if ending else self._watch(bound, send) if new else send
            )
        finally:
            bound.in_flight -= 1
            bound.last_used = self.runtime.access.clock()
            BINDING.reset(token)
        if ending:
            sid = request.headers.get(SESSION_HEADER)
            ok = bool(held) and held[0].get("status", 500) < 400
            if ok and sid is not None and self.sessions.get(sid) is bound:
                del self.sessions[sid]
                await self._end(bound)
            for message in held:
                await send(message)

    def _watch(self, bound: Binding, send: Send) -> Send:
        """``send``, remembering the session the SDK opens with this answer (its ``Mcp-Session-Id``)."""

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                for key, value in message.get("headers", ()):
                    if key.decode("latin-1").lower() == SESSION_HEADER:
                        self._forget_idle()
                        self.sessions[value.decode("latin-1")] = bound
            await send(message)

        return watched

    def _forget_idle(self) -> None:
        """Forget the sessions the SDK has surely ended: idle (no request in flight, an open GET stream
        included) for twice its idle timeout. A forgotten session's id is refused (404) from then on,
        so forgetting one too early can end it but never lets another principal in."""
        cutoff = self.runtime.access.clock() - IDLE_S * 2
        for sid in [sid for sid, b in self.sessions.items() if b.in_flight == 0 and b.last_used < cutoff]:
            ending = asyncio.create_task(self._end(self.sessions.pop(sid)), name="roost-mcp-end")
            self._ending.add(ending)
            ending.add_done_callback(self._ending.discard)

    async def _end(self, bound: Binding) -> None:
        """What goes with a session that ended: its actor if it was the session's own (deleted as
        ``roost delete`` does, with an audit record), else the session's stored events."""
        try:
            if bound.own:
                if self.runtime.registry.exists(bound.kind, bound.scoped):
                    await delete_live(
                        self.runtime.registry,
                        bound.kind,
                        bound.scoped,
                        reason="its MCP session ended",
                        by=bound.principal.id,
                    )
            elif self.events is not None:
                await self.events.forget(bound)
        except Exception:  # the session is over either way; the actor is left for the operator
            log.exception("cleaning up after MCP session on %s/%r failed", bound.kind, bound.scoped)

    async def _admit(self, request: Request) -> tuple[Binding, bool] | Response:
        runtime = self.runtime
        await runtime.ensure_started()
        hide_token(request.scope)
        registry, access = runtime.registry, runtime.access
        kind: str = request.path_params["kind"]
        asked: str | None = request.path_params.get("name")
        try:
            registry.kind_of(kind)
            if asked is not None:
                registry.validate(kind, asked)
        except UnknownKind as exc:
            return _refusal("unknown_kind", str(exc))
        except InvalidActorAddress as exc:
            return _refusal("bad_address", str(exc))
        if not mcp_origin_allowed(request, access.origins):
            log.warning(
                "refused MCP %s: origin %r not allowed", request.url.path, request.headers.get("origin")
            )
            return _refusal("origin_refused", "origin not allowed")
        version = request.headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            served = ", ".join(HANDSHAKE_PROTOCOL_VERSIONS)
            return _refusal(
                "bad_frame", f"MCP protocol version {version[:40]!r} is not served: use one of {served}"
            )
        sid = request.headers.get(SESSION_HEADER)
        known = self.sessions.get(sid) if sid is not None else None
        if sid is not None and known is None:  # unknown, ended or forgotten: never the SDK's to serve
            log.info("refused MCP session %r on %s: unknown", sid[:64], request.url.path)
            return _refusal("not_found", "Session not found", 404)
        key = known.key if known is not None else secrets.token_hex(16)
        name = asked if asked is not None else f"mcp-{key}"
        verdict = await access.admit(request, kind, name, "connect")
        if isinstance(verdict, Refused):
            return _refusal(verdict.code, verdict.message)
        principal = verdict.principal
        client = request.client.host if request.client else None
        bucket = access.principal_bucket(principal, client)
        if bucket is not None and not bucket.take(access.clock()):
            return _refusal("rate_limited", "too many requests for this principal")
        path = request.url.path
        if known is not None:
            owner = (known.principal.tenant, known.principal.id)
            if known.path != path or owner != (principal.tenant, principal.id):
                log.warning("refused MCP session %r on %s: another path or principal", str(sid)[:64], path)
                return _refusal("not_found", "Session not found", 404)
            known.principal = principal  # a renewed token's claims apply from now on
            return known, False
        if sid is None and self._held_by(principal, client) >= MAX_SESSIONS_PER_PRINCIPAL:
            return _refusal(
                "rate_limited",
                f"this principal holds {MAX_SESSIONS_PER_PRINCIPAL} MCP sessions: end one first",
            )
        if sid is None and not registry.exists(kind, verdict.name):  # a new session creates its actor
            if principal.claims.get("read_only"):
                return _refusal("forbidden", "read-only principals cannot create actors")
            refused = access.creation(principal, kind, verdict.name, client)
            if refused is not None:
                return _refusal(refused.code, refused.message, retry_after=refused.retry_after)
            try:
                await registry.prepare(kind, verdict.name)
            except RpcError as exc:
                return _refusal(exc.code, exc.message)
        bound = Binding(
            kind,
            name,
            verdict.name,
            principal,
            path,
            key,
            client,
            own=asked is None,
            last_used=access.clock(),
        )
        return bound, sid is None

    def _held_by(self, principal: Principal, client: str | None) -> int:
        """Open sessions of ``principal`` (anonymous: of its address)."""
        self._forget_idle()
        anonymous = principal.id == ANONYMOUS.id and principal.tenant == ANONYMOUS.tenant
        return sum(
            1
            for b in self.sessions.values()
            if (b.principal.tenant, b.principal.id) == (principal.tenant, principal.id)
            and (not anonymous or b.client == client)
        )
