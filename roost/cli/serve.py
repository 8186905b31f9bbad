"""``roost serve``: an app made by ``create_app`` on uvicorn, configured as measured in ``bench/``.

uvloop, httptools, the sans-I/O websockets implementation, per-message deflate off; access settings
from the command line (``--jwks`` and the JWT options: :mod:`roost.cli.jwt_options`) and
``$ROOST_SECRET`` (``docs/security.md``).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from roost.cli.errors import CommandFailed, UsageError
from roost.cli.jwt_options import add_jwt_options, jwt_hook
from roost.cli.limits import MAX_HANDSHAKE_LINE
from roost.cli.options import (
    add_data_option,
    at_least,
    listen_host,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from roost.cli.tokens import signer_from_env

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from roost.actors import DescriptorBudget
    from roost.transport.app import RoostApp

__all__ = ["GC_THRESHOLDS", "MAX_HANDSHAKE_LINE", "add_parser", "load_app"]

#: The cyclic collector's thresholds under ``roost serve`` (``gc.set_threshold``; see :func:`_serve`).
GC_THRESHOLDS = (2_000, 10, 1_000)


def load_app(spec: str | None) -> object:
    """Import ``module:attribute``; ``None`` gives the example app. Raises :class:`UsageError`."""
    if spec is None:
        import roost.client
        from roost.examples.kinds import KINDS
        from roost.transport.app import create_app

        return create_app(KINDS, web_dir=Path(roost.client.__file__).parent / "web")
    module_name, _, attr = spec.partition(":")
    if not attr or not module_name:
        raise UsageError(f"expected MODULE:APP, got {spec!r}")
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UsageError(f"{module_name} has no attribute {attr!r}") from None


def otel_provider() -> TracerProvider:
    """``--otel``: the OpenTelemetry SDK's tracer provider, exporting over OTLP/HTTP in batches to
    ``$OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``; the SDK's own variables, headers and
    ``OTEL_SERVICE_NAME`` included). Needs the ``otel`` extra."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise UsageError(f"--otel needs the OpenTelemetry SDK: pip install 'roost[otel]' ({exc})") from None
    provider = SdkProvider(
        resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "roost")})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: any free port)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def connection_cap(args: argparse.Namespace, found: DescriptorBudget | None) -> tuple[int | None, int | None]:
    """The connections the server holds at once (uvicorn's ``limit_concurrency``; None: no cap) and
    the open sockets past which a new one is closed at once (None: none): ``--max-connections`` if
    given (0: no cap), else what the descriptor reserve holds
    (:meth:`~roost.actors.DescriptorBudget.connections` and
    :meth:`~roost.actors.DescriptorBudget.ceiling`; no cap without a descriptor limit)."""
    if args.max_connections is not None:
        return (args.max_connections or None), None
    if found is None:
        return None, None
    return found.connections(), found.ceiling()


def _secure(app: RoostApp, args: argparse.Namespace, found: DescriptorBudget | None) -> None:
    """Access settings from the command line and ``$ROOST_SECRET`` (see docs/security.md). Under a
    connection cap, one client's connections are by default at most half of it: an anonymous
    address's unless ``--max-conns-per-address`` is given, an authenticated principal's at most that
    unless ``--max-conns-per-principal`` is."""
    from roost.transport.auth import allow_all
    from roost.transport.limits import Limits
    from roost.transport.security import claims_authorize, token_authenticate

    cap = connection_cap(args, found)[0]
    share = max(1, cap // 2) if cap is not None else None
    per_principal = args.max_conns_per_principal
    if per_principal is None:
        per_principal = 1000 if share is None else min(1000, share)
    per_address = args.max_conns_per_address if args.max_conns_per_address is not None else share
    limits = Limits(
        conn_rate=args.rate_limit or None,
        conn_burst=2 * args.rate_limit,
        principal_rate=args.principal_rate_limit or None,
        principal_burst=2 * args.principal_rate_limit,
        conns_per_actor=args.max_conns_per_actor or None,
        conns_per_principal=per_principal or None,
        anonymous_rate=args.anonymous_rate_limit or None,
        anonymous_burst=2 * args.anonymous_rate_limit,
        conns_per_address=per_address or None,
        anonymous_creation_rate=args.anonymous_creation_rate or None,
        anonymous_creation_burst=args.anonymous_creation_burst,
        anonymous_network_creation_rate=args.anonymous_network_creation_rate or None,
        anonymous_network_creation_burst=args.anonymous_network_creation_burst,
        anonymous_total_creation_rate=args.anonymous_total_creation_rate or None,
        anonymous_total_creation_burst=args.anonymous_total_creation_burst,
        creation_rate=args.creation_rate or None,
        creation_burst=args.creation_burst,
    )
    signer = signer_from_env()
    jwts = jwt_hook(args, signer)  # --jwks: JWTs, and roost1 tokens too if ROOST_SECRET is set
    unknown = [k for k in args.jwt_default_kind or () if k != "*" and k not in app.registry.kinds]
    if jwts is not None and unknown:  # a typo would grant nothing, and every call be forbidden
        raise UsageError(
            f"--jwt-default-kind {', '.join(unknown)}: the app has no such kind "
            f"(its kinds: {', '.join(sorted(app.registry.kinds))})"
        )
    if jwts is not None and app.authenticate is not allow_all:
        raise UsageError("--jwks: the app has its own authenticate hook")
    if jwts is not None:
        app.secure(authenticate=jwts, authorize=claims_authorize)
    elif signer is not None and app.authenticate is allow_all:  # an app with its own hooks keeps them
        app.secure(authenticate=token_authenticate(signer), authorize=claims_authorize)
    app.secure(origins=args.origin or None, limits=limits)


def _fit_descriptors(app: RoostApp) -> DescriptorBudget | None:
    """Raise the descriptor limit and check that enough actors fit before listening: a limit too low
    is one line and exit 1, not a traceback from the app's start-up (the app sizes ``max_active`` to
    it again when it starts, with what it then has open). What was found sizes the connection cap
    and the clients' shares of it."""
    from roost.actors import TooFewDescriptors, fit_descriptors

    config = app.registry.config
    try:
        found = fit_descriptors(config.max_active, config.fd_reserve)
    except TooFewDescriptors as exc:
        raise CommandFailed(str(exc)) from None
    if found is not None and found.raised_from is not None:
        logging.getLogger("roost.serve").info(
            "descriptor limit raised from %d to %d (the hard limit)", found.raised_from, found.limit
        )
    return found


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from roost.transport import uvicorn_protocols
    from roost.transport.app import RoostApp

    if args.config is not None:  # read by the agent runtime (roost.agent.config) when kinds start
        if not Path(args.config).is_file():
            raise UsageError(f"--config {args.config}: no such file")
        os.environ["ROOST_CONFIG"] = args.config
    from roost.agent.config import ConfigError, load_config

    try:  # --config, $ROOST_CONFIG or ./roost.toml: refused here, not at every agent's first turn
        load_config()
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.data is not None:
        if Path(args.data).exists() and not Path(args.data).is_dir():
            raise UsageError(f"--data {args.data}: not a directory")
        try:
            Path(args.data).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CommandFailed(f"--data {args.data}: cannot create it: {exc.strerror}") from None
    app = load_app(args.app)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    found: DescriptorBudget | None = None
    if isinstance(app, RoostApp):
        changes: dict[str, object] = {}
        if args.data is not None:
            changes["data_dir"] = Path(args.data)
        if args.idle_timeout is not None:
            changes["idle_timeout"] = args.idle_timeout
        if args.retention is not None:
            changes["log_retention"] = args.retention
        if args.durability is not None:
            changes["durability"] = args.durability
        app.configure(**changes)
        if args.metrics or args.otel:
            app.observe(metrics=args.metrics, tracer_provider=otel_provider() if args.otel else None)
        found = _fit_descriptors(app)
        _secure(app, args, found)
        max_size = app.max_frame_bytes
    elif args.data is not None:
        raise UsageError("--data needs an app made by roost.create_app")
    elif args.metrics or args.otel:
        raise UsageError("--metrics and --otel need an app made by roost.create_app")
    else:
        max_size = 1 << 20

    protocols = uvicorn_protocols.choose()
    if protocols.fallback is not None:
        logging.getLogger("roost.serve").warning(
            "uvicorn's own protocols instead of Roost's (no handshake timeout, no 414 answer, "
            "no connection cap on WebSocket handshakes): %s",
            protocols.fallback,
        )
    logging.getLogger("roost.serve").info("%s", uvicorn_protocols.fast_paths(protocols))
    cap, ceiling = connection_cap(args, found)
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=args.host,
        port=args.port,
        loop="uvloop",
        http=protocols.http,
        ws_ping_interval=args.ping_interval or None,
        ws_ping_timeout=args.ping_interval or None,
        forwarded_allow_ips=args.forwarded_allow_ips,
        ws=protocols.ws,
        ws_per_message_deflate=False,
        ws_max_size=max_size,
        lifespan="on",
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
        limit_concurrency=cap,  # past it: HTTP 503, handshakes included (Roost's protocol class)
    )
    from roost.transport.security import redact_logs

    if protocols.fallback is None:  # Roost's classes (the module imports uvicorn's internal one)
        from roost.transport import uvicorn_http

        uvicorn_http.HANDSHAKE_TIMEOUT = args.handshake_timeout
        uvicorn_http.CEILING = ceiling
        # one peer address holds at most its share of the sockets, as of the WebSockets (the trusted
        # proxies aside: the clients behind one are told apart by the address it forwards)
        given = args.max_conns_per_address
        uvicorn_http.PEER_SHARE = (
            (given or None) if given is not None else (max(1, cap // 2) if cap else None)
        )
        uvicorn_http.EXEMPT = frozenset(h.strip() for h in args.forwarded_allow_ips.split(",") if h.strip())
        uvicorn_http.quiet_uvicorn_refusals()
    # belt and braces: no token reaches a log line, whoever writes it (uvicorn set up its handlers
    # when its Config was made, just above)
    redact_logs("uvicorn", "uvicorn.error", "uvicorn.access")
    server = uvicorn.Server(config)
    # Messages make short-lived acyclic objects that reference counting frees; the cyclic collector
    # only adds pauses. Move what start-up allocated out of its sight. What it still sees is mostly
    # what activations leave alive (about 500 tracked objects an actor: its connection's prepared
    # statements, tasks, futures): a young collection examines each once, however rarely it runs, so
    # a short one often pauses the loop less than a long one seldom. 50,000 objects a collection paused
    # it 17-50 ms each time 100 actors were activated at once, in the middle of their streams;
    # 2,000 pauses it at most about 4 ms (a middle-aged collection, every tenth, at most 17 ms;
    # 1,000 paused about as long and cost idle connections 2-3 KB more each, as measured). A
    # full collection may come after a thousand middle-aged ones (2×10⁷ net allocations of tracked
    # objects, against 10⁸ before), and only once the long-lived objects grew by a quarter
    # (CPython's own rule). The survivors are not the only cost: what is alive mid-turn is examined
    # by each young collection, which the collector's total time (about the same at 2,000 as at
    # 50,000 over the streaming runs) takes in.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    server.run()
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from roost.actors import RuntimeConfig

    ours = RuntimeConfig()  # the defaults create_app starts from
    serve = sub.add_parser("serve", help="serve actors over WebSockets and HTTP")
    serve.add_argument("app", nargs="?", help="MODULE:APP (default: the example kinds)")
    add_data_option(serve, app_decides=True)
    serve.add_argument("--config", help="roost.toml with the [agent] settings (default: ./roost.toml if any)")
    serve.add_argument("--host", type=listen_host, default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=_port, default=8000, help="port to listen on (0: any free port)")
    serve.add_argument(
        "--idle-timeout",
        type=positive_float,
        help=f"seconds before an idle actor sleeps (default: the app's; create_app: {ours.idle_timeout:g})",
    )
    serve.add_argument(
        "--retention",
        type=positive_int,
        help=f"frames kept per actor for resume (default: the app's; create_app: {ours.log_retention})",
    )
    serve.add_argument(
        "--durability",
        choices=["normal", "full"],
        help="normal survives a process crash; full also a power loss (an fsync per commit); "
        "default: the app's (normal)",
    )
    serve.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="log level"
    )
    serve.add_argument("--origin", action="append", help="allowed browser origin (repeat; default: any)")
    serve.add_argument(
        "--rate-limit", type=non_negative_float, default=1000.0, help="frames/s per connection (0: off)"
    )
    serve.add_argument(
        "--principal-rate-limit",
        type=non_negative_float,
        default=5000.0,
        help="frames/s per principal (0: off)",
    )
    serve.add_argument("--max-conns-per-actor", type=non_negative_int, default=10_000, help="(0: no limit)")
    serve.add_argument(
        "--max-connections",
        type=non_negative_int,
        help="connections held at once; past it HTTP 503 (0: no cap; default: what the descriptor "
        "reserve holds)",
    )
    serve.add_argument(
        "--max-conns-per-principal",
        type=non_negative_int,
        help="(0: no limit; default: 1000, or half the connection cap if less)",
    )
    serve.add_argument(
        "--anonymous-rate-limit",
        type=non_negative_float,
        default=0.0,
        help="frames/s per address of anonymous clients (0: off)",
    )
    serve.add_argument(
        "--max-conns-per-address",
        type=non_negative_int,
        help="connections per address of anonymous clients (0: off; default: half the connection cap)",
    )
    serve.add_argument(
        "--anonymous-creation-rate",
        type=non_negative_float,
        default=1.0,
        help="new actors/s per address of anonymous clients (0: off)",
    )
    serve.add_argument(
        "--anonymous-creation-burst",
        type=at_least(1),
        default=200.0,
        help="new actors an anonymous address may create at once",
    )
    serve.add_argument(
        "--anonymous-network-creation-rate",
        type=non_negative_float,
        default=5.0,
        help="new actors/s per IPv6 /48 of anonymous clients (0: off)",
    )
    serve.add_argument(
        "--anonymous-network-creation-burst",
        type=at_least(1),
        default=1000.0,
        help="new actors an IPv6 /48 of anonymous clients may create at once",
    )
    serve.add_argument(
        "--anonymous-total-creation-rate",
        type=non_negative_float,
        default=50.0,
        help="new actors/s of all anonymous clients together (0: off)",
    )
    serve.add_argument(
        "--anonymous-total-creation-burst",
        type=at_least(1),
        default=5000.0,
        help="new actors all anonymous clients together may create at once",
    )
    serve.add_argument(
        "--creation-rate",
        type=non_negative_float,
        default=0.0,
        help="new actors/s per authenticated principal (0: off, the default)",
    )
    serve.add_argument(
        "--creation-burst",
        type=at_least(1),
        default=1000.0,
        help="new actors an authenticated principal may create at once",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        default="127.0.0.1",
        help="proxies whose X-Forwarded-For gives the client's address (comma list, or *)",
    )
    serve.add_argument(
        "--handshake-timeout",
        type=positive_float,
        default=10.0,
        help="seconds a client has to send its request headers, and to take its close frame before "
        "its connection is reset",
    )
    serve.add_argument(
        "--ping-interval",
        type=non_negative_float,
        default=20.0,
        help="WebSocket ping interval; a dead peer is closed after two (0: no pings)",
    )
    serve.add_argument(
        "--metrics",
        action="store_true",
        help="serve Prometheus metrics at GET /metrics, to admins only (needs roost[metrics])",
    )
    serve.add_argument(
        "--otel",
        action="store_true",
        help="export OpenTelemetry traces over OTLP/HTTP to $OTEL_EXPORTER_OTLP_ENDPOINT (needs roost[otel])",
    )
    add_jwt_options(serve)
    serve.set_defaults(func=_serve)
