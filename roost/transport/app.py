"""The Starlette app factory: ``create_app(kinds, ...)`` → an ASGI app serving actors.

Routes: ``WS /agents/{kind}/{name}``, ``GET /agents/{kind}/{name}``,
``POST /agents/{kind}/{name}/rpc/{method}``, ``GET /healthz``; for the operator ``POST /admin/backup``,
``GET /admin/actors/{kind}/{name}``, ``GET /admin/actors/{kind}/{name}/export`` and
``DELETE /admin/actors/{kind}/{name}``; MCP over streamable HTTP at ``/mcp/{kind}/{name}`` and
``/mcp/{kind}`` (:mod:`roost.transport.mcp`).

The app can be served by ``roost serve module:app`` or mounted inside any ASGI application (FastAPI
included). Its runtime starts with the app's lifespan, or — when mounted in an app that does not forward
lifespan events to sub-apps — on the first request. Shutdown closes every WebSocket with 1001 and then
drains and closes every live actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.routing import Route, WebSocketRoute

from roost.actors import Actor, Observer, Observers, Registry, RuntimeConfig
from roost.protocol.codes import CloseCode
from roost.scheduler import Clock
from roost.transport.access import Access
from roost.transport.auth import Authenticate, allow_all
from roost.transport.cloudflare import CloudflareCursors
from roost.transport.endpoint import WebSocketEndpoint
from roost.transport.http import (
    admin_backup,
    admin_delete,
    admin_export,
    admin_gc,
    admin_inspect,
    get_actor,
    get_metrics,
    healthz,
    post_rpc,
)
from roost.transport.limits import Limits
from roost.transport.security import Authorize
from roost.transport.sink import SocketSink
from roost.transport.web import web_routes

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider
    from prometheus_client import CollectorRegistry

    from roost.transport.mcp import McpService
    from roost.transport.tracing import Tracing

__all__ = ["RoostApp", "create_app"]

log = logging.getLogger("roost")


class ActorNameConvertor(PathConvertor):
    """``{name:actor_name}``: the rest of the path, as ``{name:actor_name}``, with a newline in it too.

    Starlette's ``path`` is ``.*``, and ``.`` matches anything but ``\n``: a name holding ``%0A`` matched
    no route (a plain-text 404 over HTTP, a 403 handshake over WebSocket). With this one every name
    reaches the address checks (:func:`roost.transport.codec.actor_address`, the registry's), which
    serve it or refuse it with ``bad_address``."""

    regex = "(?s:.*)"


register_url_convertor("actor_name", ActorNameConvertor())


class RoostApp(Starlette):
    """A Starlette app with a Roost runtime. ``app.registry`` holds the live actors."""

    registry: Registry
    authenticate: Authenticate
    access: Access
    max_frame_bytes: int
    max_in_flight: int
    send_queue: int
    send_queue_bytes: int
    sinks: set[SocketSink]
    cloudflare_cursors: CloudflareCursors  #: Cloudflare clients' resume points (roost.transport.cloudflare)
    mcp: McpService  #: the MCP routes; ``app.mcp.extras`` takes the app's prompts and resources
    metrics: CollectorRegistry | None  #: what ``GET /metrics`` exposes (None: off)
    tracing: Tracing | None  #: the app's spans (None: off)
    _started: bool
    _start_lock: asyncio.Lock

    def configure(self, **changes: Any) -> None:
        """Change runtime settings (``data_dir``, ``idle_timeout``, …) before the app starts."""
        if self._started:
            raise RuntimeError("configure() after the app started")
        for key, value in changes.items():
            if key == "data_dir":
                value = Path(value)
            if not hasattr(self.registry.config, key):
                raise TypeError(f"unknown setting {key!r}")
            setattr(self.registry.config, key, value)

    def observe(self, *, metrics: bool = False, tracer_provider: TracerProvider | None = None) -> None:
        """Turn on Prometheus metrics at ``GET /metrics`` (:mod:`roost.transport.metrics`) and/or
        OpenTelemetry spans from ``tracer_provider`` (:mod:`roost.transport.tracing`) before the app
        starts; both are off until asked for, and then cost what those modules say."""
        if self._started:
            raise RuntimeError("observe() after the app started")
        observers: list[Observer] = []
        if metrics:
            from roost.transport.metrics import metrics_registry  # prometheus-client: only when asked

            self.metrics, observed = metrics_registry(self)
            observers.append(observed)
        if tracer_provider is not None:
            from roost.transport.tracing import Tracing

            self.tracing = Tracing(tracer_provider)
            observers.append(self.tracing)
        if observers:
            self.registry.observer = observers[0] if len(observers) == 1 else Observers(*observers)

    def secure(
        self,
        *,
        authenticate: Authenticate | None = None,
        authorize: Authorize | None = None,
        origins: Iterable[str] | None = None,
        limits: Limits | None = None,
    ) -> None:
        """Change the access settings (``docs/security.md``) before the app starts; ``None`` keeps one."""
        if self._started:
            raise RuntimeError("secure() after the app started")
        old = self.access
        if authenticate is not None:
            self.authenticate = authenticate
        self.access = Access(
            self.registry,
            self.authenticate,
            authorize if authorize is not None else old.authorize,
            origins if origins is not None else old.origins,
            limits if limits is not None else old.limits,
            self.registry.clock.monotonic,
        )

    async def ensure_started(self) -> None:
        """Start the runtime if the lifespan did not (mounted sub-app). Idempotent."""
        if self._started:
            return
        async with self._start_lock:
            if not self._started:
                await self._startup()

    async def _startup(self) -> None:
        await self.registry.start()
        self._started = True
        if self.authenticate is allow_all:
            log.warning(
                "authentication: none configured; every client is allowed as 'anonymous'. "
                "Pass authenticate= to create_app() to restrict access."
            )
        log.info(
            "roost: %d kind(s) [%s], data in %s",
            len(self.registry.kinds),
            ", ".join(sorted(self.registry.kinds)),
            self.registry.config.data_dir.resolve(),
        )

    async def aclose(self) -> None:
        """Shut the runtime down (for a mounted app whose parent does not forward lifespan)."""
        await self._shutdown()

    async def _shutdown(self) -> None:
        if not self._started:
            return
        for sink in list(self.sinks):
            sink.close(CloseCode.GOING_AWAY, "server shutting down")
        writers = [s.task for s in self.sinks if s.task is not None]
        if writers:
            await asyncio.wait(writers, timeout=2.0)
        await self.mcp.aclose()
        await self.registry.stop()
        self._started = False


def create_app(
    kinds: Iterable[type[Actor]],
    *,
    data_dir: str | os.PathLike[str] | None = None,
    config: RuntimeConfig | None = None,
    authenticate: Authenticate = allow_all,
    authorize: Authorize | None = None,
    origins: Iterable[str] | None = None,
    limits: Limits | None = None,
    clock: Clock | None = None,
    max_frame_bytes: int = 1 << 20,
    send_queue: int = 1024,
    send_queue_bytes: int = 4 << 20,
    max_in_flight: int = 256,
    web_dir: str | os.PathLike[str] | None = None,
    debug: bool = False,
    metrics: bool = False,
    tracer_provider: TracerProvider | None = None,
) -> RoostApp:
    """Build the ASGI app serving ``kinds``.

    ``data_dir`` defaults to ``$ROOST_DATA`` or ``./data``. ``max_frame_bytes`` bounds one client
    frame (larger: close 1009); ``send_queue`` bounds frames waiting for one slow client and
    ``send_queue_bytes`` their size in memory (4 MiB; more of either: close 1013; kept below the
    default log retention so that such a client can resume by replay);
    ``max_in_flight`` bounds the calls and messages one connection has queued at the actor (more
    are answered ``overloaded``). ``web_dir``: a directory with an ``index.html`` (and its scripts and
    styles) served at ``/`` and ``/web/{file}`` — ``roost serve`` uses it for the demo page.

    Access (``docs/security.md``): ``authenticate`` (e.g. :func:`roost.transport.security.token_authenticate`)
    names the principal; ``authorize(principal, kind, name, action)`` is asked on connect, every call
    and message, and every HTTP request (e.g. :func:`roost.transport.security.claims_authorize`);
    ``origins`` is the allow-list of browser origins (``None``: any); ``limits`` bounds rates and
    connections (:class:`roost.transport.limits.Limits`, safe defaults).

    Observability (off by default): ``metrics=True`` serves Prometheus metrics at ``GET /metrics``
    to admins only (:mod:`roost.transport.metrics`; needs ``prometheus-client``, the ``metrics`` extra);
    ``tracer_provider`` (an OpenTelemetry ``TracerProvider``) gets the spans of
    :mod:`roost.transport.tracing`. :meth:`RoostApp.observe` turns either on later, before start.
    """
    cfg = config or RuntimeConfig()
    if data_dir is not None:
        cfg.data_dir = Path(data_dir)
    elif config is None:
        cfg.data_dir = Path(os.environ.get("ROOST_DATA", "data"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        assert isinstance(app, RoostApp)
        await app.ensure_started()
        try:
            yield
        finally:
            await app.aclose()

    app = RoostApp(debug=debug, lifespan=lifespan)
    app.registry = Registry(kinds, cfg, clock=clock)
    app.authenticate = authenticate
    app.access = Access(
        app.registry, authenticate, authorize, origins, limits or Limits(), app.registry.clock.monotonic
    )
    app.max_frame_bytes = max_frame_bytes
    app.send_queue = send_queue
    app.send_queue_bytes = send_queue_bytes
    app.max_in_flight = max_in_flight
    app.sinks = set()
    app.cloudflare_cursors = CloudflareCursors()
    app.metrics = None
    app.tracing = None
    app._started = False
    app._start_lock = asyncio.Lock()
    app.state.roost = app
    ws = WebSocketEndpoint(app)
    from roost.transport.mcp import McpService  # the MCP SDK: loaded by an app, not by `import roost`

    app.mcp = McpService(app)
    app.router.routes.extend(
        [
            WebSocketRoute("/agents/{kind}/{name:actor_name}", ws),
            Route("/agents/{kind}/{name:actor_name}/rpc/{method}", post_rpc, methods=["POST"]),
            Route("/agents/{kind}/{name:actor_name}", get_actor, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", get_metrics, methods=["GET"]),
            Route("/mcp/{kind}/{name:actor_name}", app.mcp, methods=["GET", "POST", "DELETE"]),
            Route("/mcp/{kind}", app.mcp, methods=["GET", "POST", "DELETE"]),
            Route("/admin/backup", admin_backup, methods=["POST"]),
            Route("/admin/gc", admin_gc, methods=["POST"]),
            Route("/admin/actors/{kind}/{name:actor_name}/export", admin_export, methods=["GET"]),
            Route("/admin/actors/{kind}/{name:actor_name}", admin_inspect, methods=["GET"]),
            Route("/admin/actors/{kind}/{name:actor_name}", admin_delete, methods=["DELETE"]),
        ]
    )
    if web_dir is not None:
        app.router.routes.extend(web_routes(Path(web_dir)))
    app.observe(metrics=metrics, tracer_provider=tracer_provider)
    return app
