"""The ``roost`` command.

``roost serve [MODULE:APP] --data DIR --port PORT`` serves an app made by ``create_app`` (default: the
example kinds, ``counter`` and ``room``) on uvicorn, configured as measured in ``bench/``: uvloop,
the sans-I/O websockets implementation, per-message deflate off.

``roost ls --data DIR [--kind K]`` lists actors from the directory database without opening their files;
``roost schedules --data DIR`` lists the actors with pending wake-ups, soonest first.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from roost.storage import Directory
    from roost.transport.app import RoostApp

__all__ = ["load_app", "main"]


def load_app(spec: str | None) -> object:
    """Import ``module:attribute``; ``None`` gives the example app."""
    if spec is None:
        import roost.client
        from roost.examples.kinds import KINDS
        from roost.transport.app import create_app

        return create_app(KINDS, web_dir=Path(roost.client.__file__).parent / "web")
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"roost: expected MODULE:APP, got {spec!r}")
    sys.path.insert(0, ".")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SystemExit(f"roost: {module_name} has no attribute {attr!r}") from None


#: The websockets library refuses handshake lines over 8 KiB by default. A 256-character name needs up
#: to 3 KiB percent-encoded; raising the limit lets longer (invalid) names reach the app and get a
#: clear 4400. Past this limit the handshake is refused with HTTP 414 (see roost.transport.uvicorn_ws).
MAX_HANDSHAKE_LINE = "32768"


def _secure(app: RoostApp, args: argparse.Namespace) -> None:
    """Access settings from the command line and ``$ROOST_SECRET`` (see docs/security.md)."""
    from roost.transport.auth import allow_all
    from roost.transport.limits import Limits
    from roost.transport.security import claims_authorize, token_authenticate
    from roost.transport.tokens import TokenSigner

    limits = Limits(
        conn_rate=args.rate_limit or None,
        conn_burst=2 * args.rate_limit,
        principal_rate=args.principal_rate_limit or None,
        principal_burst=2 * args.principal_rate_limit,
        conns_per_actor=args.max_conns_per_actor or None,
        conns_per_principal=args.max_conns_per_principal or None,
        anonymous_rate=args.anonymous_rate_limit or None,
        anonymous_burst=2 * args.anonymous_rate_limit,
        conns_per_address=args.max_conns_per_address or None,
    )
    secret = os.environ.get("ROOST_SECRET")
    if secret and app.authenticate is allow_all:  # an app with its own hooks keeps them
        signer = TokenSigner([s.strip() for s in secret.split(",") if s.strip()])
        app.secure(authenticate=token_authenticate(signer), authorize=claims_authorize)
    app.secure(origins=args.origin or None, limits=limits)


def _token(args: argparse.Namespace) -> int:
    """Issue a signed token with ``$ROOST_SECRET`` (the first of its comma-separated values)."""
    from roost.transport.tokens import TokenSigner

    secret = os.environ.get("ROOST_SECRET")
    if not secret:
        print("roost: set ROOST_SECRET (at least 32 bytes)", file=sys.stderr)
        return 2
    signer = TokenSigner([s.strip() for s in secret.split(",") if s.strip()])
    print(
        signer.issue(
            args.sub,
            ttl=args.ttl,
            tenant=args.tenant,
            kinds=args.kind or None,
            names=args.name or None,
            read_only=args.read_only,
            admin=args.admin,
        )
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    os.environ.setdefault("WEBSOCKETS_MAX_LINE_LENGTH", MAX_HANDSHAKE_LINE)
    import uvicorn

    from roost.transport.app import RoostApp

    if args.config is not None:  # read by the agent runtime (roost.agent.config) when kinds start
        os.environ["ROOST_CONFIG"] = args.config
    app = load_app(args.app)
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
        _secure(app, args)
        max_size = app.max_frame_bytes
    elif args.data is not None:
        raise SystemExit("roost: --data needs an app made by transport.create_app")
    else:
        max_size = 1 << 20
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")

    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="roost.transport.uvicorn_http:RoostHttpToolsProtocol",
        ws_ping_interval=args.ping_interval or None,
        ws_ping_timeout=args.ping_interval or None,
        forwarded_allow_ips=args.forwarded_allow_ips,
        ws="roost.transport.uvicorn_ws:RoostWebSocketProtocol",
        ws_per_message_deflate=False,
        ws_max_size=max_size,
        lifespan="on",
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    from roost.transport import uvicorn_http
    from roost.transport.security import redact_logs

    uvicorn_http.HANDSHAKE_TIMEOUT = args.handshake_timeout
    # belt and braces: no token reaches a log line, whoever writes it (uvicorn set up its handlers
    # when its Config was made, just above)
    redact_logs("uvicorn", "uvicorn.error", "uvicorn.access")
    server = uvicorn.Server(config)
    # Messages make short-lived acyclic objects that reference counting frees; the cyclic collector
    # only adds pauses. Move what start-up allocated out of its sight and let it run less often.
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    server.run()
    return 0


@contextlib.contextmanager
def _directory(data_dir: str) -> Iterator[Directory | None]:
    """The data directory's directory database, or None (with a message) when there is none."""
    from roost.storage import Directory

    data = Path(data_dir)
    if not (data / "directory.sqlite").exists():
        print(f"no data directory at {data}", file=sys.stderr)
        yield None
        return
    directory = Directory(data)
    try:
        yield directory
    finally:
        directory.close()


def _ls(args: argparse.Namespace) -> int:
    with _directory(args.data) as directory:
        if directory is None:
            return 1
        entries = directory.list(args.kind, limit=args.limit)
        print(f"{'KIND':<12} {'NAME':<32} {'CREATED':<20} {'LAST ACTIVE':<20} NEXT ALARM")
        for e in entries:
            alarm = _ts(e.next_alarm_at) if e.next_alarm_at is not None else "-"
            print(f"{e.kind:<12} {e.name!r:<32} {_ts(e.created_at):<20} {_ts(e.last_active_at):<20} {alarm}")
        print(f"{len(entries)} of {directory.count()} actor(s)")
    return 0


def _schedules(args: argparse.Namespace) -> int:
    """Pending wake-ups across all actors, from the directory database (one alarm per actor)."""
    with _directory(args.data) as directory:
        if directory is None:
            return 1
        entries = directory.alarms(limit=args.limit)
        print(f"{'NEXT ALARM (UTC)':<24} {'KIND':<12} NAME")
        for e in entries:
            assert e.next_alarm_at is not None
            when = datetime.fromtimestamp(e.next_alarm_at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            print(f"{when:<24} {e.kind:<12} {e.name!r}")
        print(f"{len(entries)} of {directory.count_alarms()} actor(s) with pending wake-ups")
    return 0


def _workers(args: argparse.Namespace) -> int:
    """Worker processes of the agent runtime, as they last reported (WorkerHeartbeat)."""
    with _directory(args.data) as directory:
        if directory is None:
            return 1
        rows = directory.workers()
        print(f"{'WORKER':<24} {'PID':>8} {'HOST':<20} {'STARTED':<20} {'LAST HEARTBEAT':<20} JOBS")
        for w in rows:
            print(
                f"{w.worker_id:<24} {w.pid:>8} {w.hostname[:20]:<20} {_ts(w.started_at):<20} "
                f"{_ts(w.heartbeat_at):<20} {w.running_jobs}"
            )
        print(f"{len(rows)} worker(s)")
    return 0


def _print_json(value: object) -> None:
    import orjson

    sys.stdout.write(
        orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"
    )


def _data_ops(args: argparse.Namespace) -> int:
    """inspect, export, delete and offline backup (``roost.transport.admin``), with clear refusals."""
    from roost.storage import ActorLocked
    from roost.transport import admin

    data = Path(args.data)
    if not (data / "directory.sqlite").exists():
        print(f"roost: no data directory at {data}", file=sys.stderr)
        return 1
    if getattr(args, "tenant", None) and getattr(args, "name", None):
        args.name = f"{args.tenant}\x00{args.name}"  # a tenant's actor (see roost.transport.security)
    try:
        if args.command == "inspect":
            if args.kind is None:
                _print_json(admin.inspect_directory(data))
            else:
                _print_json(admin.inspect_actor(data, args.kind, args.name))
        elif args.command == "export":
            exported = admin.export_actor(data, args.kind, args.name)
            if args.out:
                import orjson

                Path(args.out).write_bytes(orjson.dumps(exported, option=orjson.OPT_INDENT_2))
                print(f"exported {args.kind}/{args.name!r} to {args.out}")
            else:
                _print_json(exported)
        elif args.command == "delete":
            if not args.yes:
                print(
                    f"roost: deleting {args.kind}/{args.name!r} cannot be undone; add --yes", file=sys.stderr
                )
                return 2
            record = admin.delete_actor(data, args.kind, args.name, reason=args.reason or "")
            print(f"deleted {args.kind}/{args.name!r}; audit record in {data / admin.AUDIT_LOG}")
            _print_json(record)
        elif args.command == "backup":
            if args.server:
                return _backup_online(args)
            manifest = admin.backup_offline(data, Path(args.out))
            print(
                f"backed up {manifest['actors']} actor(s) to {args.out}; integrity failures: "
                f"{manifest['integrity_failures']}"
            )
            return 0 if manifest["integrity_failures"] == 0 else 1
    except ActorLocked as exc:
        print(
            f"roost: {exc}: a running server holds it (for a backup while serving, use --server)",
            file=sys.stderr,
        )
        return 1
    except FileNotFoundError as exc:
        print(f"roost: {exc}", file=sys.stderr)
        return 1
    except FileExistsError as exc:
        print(f"roost: {exc}: a backup goes into a new directory", file=sys.stderr)
        return 1
    return 0


def _backup_online(args: argparse.Namespace) -> int:
    import httpx

    token = os.environ.get("ROOST_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.post(
        f"{args.server.rstrip('/')}/admin/backup", json={"name": args.out}, headers=headers, timeout=3600
    )
    try:
        body = r.json()
    except ValueError:  # not our JSON (a proxy's page, say)
        body = {"ok": False, "error": {"message": r.text[:200]}}
    if not body.get("ok"):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        print(f"roost: backup failed (HTTP {r.status_code}): {message}", file=sys.stderr)
        return 1
    manifest = body["result"]
    print(
        f"backed up {manifest['actors']} actor(s) to {manifest['path']} while serving; integrity failures: "
        f"{manifest['integrity_failures']}"
    )
    return 0 if manifest["integrity_failures"] == 0 else 1


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _actor_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    command: str,
    help: str,
    *,
    optional: bool = False,
) -> argparse.ArgumentParser:
    """A data command about one actor (``kind name``, optional for ``inspect``), its data directory and
    tenant; run by :func:`_data_ops`."""
    parser = sub.add_parser(command, help=help)
    parser.add_argument("kind", nargs="?" if optional else None)
    parser.add_argument("name", nargs="?" if optional else None)
    parser.add_argument("--data", default="data")
    parser.add_argument("--tenant", help="the actor's tenant (its name is scoped to it)")
    parser.set_defaults(func=_data_ops, command=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="roost", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve actors over WebSockets and HTTP")
    serve.add_argument("app", nargs="?", help="MODULE:APP (default: the example kinds)")
    serve.add_argument("--data", help="data directory (default: $ROOST_DATA or ./data)")
    serve.add_argument("--config", help="roost.toml with the [agent] settings (default: ./roost.toml if any)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--idle-timeout", type=float, help="seconds before an idle actor sleeps")
    serve.add_argument("--retention", type=int, help="logged frames kept per actor for resume")
    serve.add_argument("--durability", choices=["normal", "full"])
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--origin", action="append", help="allowed browser origin (repeat; default: any)")
    serve.add_argument("--rate-limit", type=float, default=1000.0, help="frames/s per connection (0: off)")
    serve.add_argument(
        "--principal-rate-limit", type=float, default=5000.0, help="frames/s per principal (0: off)"
    )
    serve.add_argument("--max-conns-per-actor", type=int, default=10_000, help="(0: no limit)")
    serve.add_argument("--max-conns-per-principal", type=int, default=1000, help="(0: no limit)")
    serve.add_argument(
        "--anonymous-rate-limit",
        type=float,
        default=0.0,
        help="frames/s per address of anonymous clients (0: off)",
    )
    serve.add_argument(
        "--max-conns-per-address",
        type=int,
        default=0,
        help="connections per address of anonymous clients (0: off)",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        default="127.0.0.1",
        help="proxies whose X-Forwarded-For gives the client's address (comma list, or *)",
    )
    serve.add_argument("--handshake-timeout", type=float, default=10.0, help="seconds to send the headers")
    serve.add_argument(
        "--ping-interval",
        type=float,
        default=20.0,
        help="WebSocket ping interval; a dead peer is closed after two (0: no pings)",
    )
    serve.set_defaults(func=_serve)
    _actor_command(sub, "inspect", "what a data directory, or one actor, holds (read-only)", optional=True)
    exp = _actor_command(sub, "export", "one actor as JSON: state, tables, events, schedules")
    exp.add_argument("--out", help="file to write (default: stdout)")
    dele = _actor_command(sub, "delete", "delete one actor for good (leaves an audit record)")
    dele.add_argument("--reason")
    dele.add_argument("--yes", action="store_true", help="yes, really")
    bak = sub.add_parser("backup", help="SQLite online backup of a data directory into a new directory")
    bak.add_argument("--data", default="data")
    bak.add_argument(
        "--out",
        required=True,
        help="a directory to create (with --server: a name under the server's backup root)",
    )
    bak.add_argument(
        "--server",
        help="URL of the server holding the data (backup while serving; "
        "$ROOST_TOKEN with the admin claim if it authenticates)",
    )
    bak.set_defaults(func=_data_ops, command="backup")
    tok = sub.add_parser("token", help="issue a signed access token (needs $ROOST_SECRET)")
    tok.add_argument("sub", help="the principal's id")
    tok.add_argument("--tenant")
    tok.add_argument("--kind", action="append", help="allowed kind (repeat; default: all)")
    tok.add_argument("--name", action="append", help="allowed name pattern (repeat; default: all)")
    tok.add_argument("--read-only", action="store_true")
    tok.add_argument("--admin", action="store_true", help="may use /admin (backup)")
    tok.add_argument("--ttl", type=float, default=3600.0, help="seconds until it expires")
    tok.set_defaults(func=_token)
    ls = sub.add_parser("ls", help="list actors from the directory database")
    ls.add_argument("--data", default="data")
    ls.add_argument("--kind")
    ls.add_argument("--limit", type=int, default=100)
    ls.set_defaults(func=_ls)
    sch = sub.add_parser("schedules", help="list pending wake-ups from the directory database")
    sch.add_argument("--data", default="data")
    sch.add_argument("--limit", type=int, default=100)
    sch.set_defaults(func=_schedules)
    wk = sub.add_parser("workers", help="list agent worker processes and their last heartbeat")
    wk.add_argument("--data", default="data")
    wk.set_defaults(func=_workers)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
