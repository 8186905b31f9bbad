"""``python -m roost.client``: watch an actor, or call it, from the command line.

    python -m roost.client ws://127.0.0.1:8000/agents/counter/c1
    python -m roost.client --kind counter --name c1 --call increment '[2]' --count 10
    python -m roost.client URL --chaos 0.5 --seed 1
    ROOST_TOKEN=… python -m roost.client URL          # or --token TOKEN

With a token (``--token``, or ``$ROOST_TOKEN``; the option wins), the client presents it as the
``token`` query parameter, which the server takes out of the URL before anything logs it.

Every output line is one compact JSON object, printed with ``print``:

- without ``--call``: every welcome, every processed ``state``/``event``/``message`` frame and
  every ``error`` frame, until Ctrl-C (or a terminal close);
- with ``--call``: ``--count`` sequential calls, one line per result (``{"result": ...}``) or
  failure (``{"error": {"code", "message"}}``), then exit (status 1 if any call failed);
- with ``--chaos``: one ``{"reconnect": n, "resume": mode, ...}`` line per reconnect.

Exit status: 0 on success, 1 if a call failed or the client stopped for another reason (protocol
violation), 2 on a usage error, 3 if the server closed the connection for good (terminal close),
130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
from collections.abc import Sequence

import orjson
from websockets.exceptions import InvalidURI
from websockets.uri import parse_uri

from .client import Client
from .errors import ClientClosed, ClientError, RpcError, TerminalClose
from .frames import JSON, Welcome
from .urls import actor_url, parse_subscribe, with_token


def _line(value: JSON) -> None:
    print(orjson.dumps(value).decode(), flush=True)


def _arguments(value: str) -> tuple[list[JSON], dict[str, JSON]]:
    parsed = orjson.loads(value)
    if isinstance(parsed, list):
        return parsed, {}
    if isinstance(parsed, dict):
        return [], parsed
    raise ValueError("ARGS_JSON must be a JSON array (positional) or object (keyword)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m roost.client",
        description="Print an actor's frames, or call one of its methods, as JSON lines.",
    )
    parser.add_argument("url", nargs="?", help="ws://HOST:PORT/agents/KIND/NAME")
    parser.add_argument("--base", default="ws://127.0.0.1:8000", help="server URL with --kind/--name")
    parser.add_argument("--kind", help="actor kind (instead of URL)")
    parser.add_argument("--name", help="actor name (instead of URL), any string")
    parser.add_argument("--cursor", type=int, help="resume after this seq")
    parser.add_argument("--subscribe", help="state,events,messages subset, or none")
    parser.add_argument(
        "--token", help="an access token (default: $ROOST_TOKEN), sent as the token query parameter"
    )
    parser.add_argument("--chaos", type=float, default=0.0, metavar="SECONDS", help="mean time between drops")
    parser.add_argument(
        "--call",
        nargs="+",
        metavar=("METHOD", "ARGS_JSON"),
        help="call METHOD with ARGS_JSON (a JSON array, or an object for keyword arguments)",
    )
    parser.add_argument("--count", type=int, default=1, help="number of calls (with --call)")
    parser.add_argument("--timeout", type=float, default=10.0, help="per-call timeout, seconds")
    parser.add_argument("--seed", type=int, help="seed of the backoff and chaos randomness")
    return parser


def _resolve_url(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> str:
    if ns.url is not None:
        if ns.kind is not None or ns.name is not None:
            parser.error("give either URL or --kind/--name, not both")
        url: str = ns.url
        return url
    if ns.kind is None or ns.name is None:
        parser.error("give URL, or --kind and --name")
    try:
        return actor_url(ns.base, ns.kind, ns.name)
    except ValueError as exc:
        parser.error(str(exc))


async def _watch(client: Client) -> None:
    async with client.updates() as updates:
        async for frame in updates:
            _line(frame)


async def _calls(
    client: Client, method: str, args: list[JSON], kwargs: dict[str, JSON], ns: argparse.Namespace
) -> int:
    failures = 0
    for _ in range(ns.count):
        try:
            _line({"result": await client.call_with(method, args, kwargs, timeout=ns.timeout)})
        except RpcError as exc:
            failures += 1
            _line({"error": {"code": exc.code, "message": exc.message}})
        except ClientError as exc:
            if client.closed_reason is not None:
                raise  # the client stopped: no later call can succeed
            failures += 1
            _line({"error": {"code": type(exc).__name__, "message": str(exc)}})
    return 1 if failures else 0


async def run(ns: argparse.Namespace, url: str) -> int:
    """Run the command described by parsed arguments ``ns`` against ``url``; the exit status."""
    chaos: float = ns.chaos

    def on_welcome(welcome: Welcome) -> None:
        if ns.call is None:
            _line(welcome.raw)
        if chaos > 0 and client.reconnects > 0:
            _line(
                {
                    "reconnect": client.reconnects,
                    "resume": str(welcome.resume),
                    "reason": welcome.reason,
                    "cursor": welcome.cursor,
                    "connection_id": welcome.connection_id,
                }
            )

    client = Client(
        url,
        cursor=ns.cursor,
        subscribe=ns.subscribe,
        rng=random.Random(ns.seed),
        chaos=chaos,
        on_welcome=on_welcome,
        on_error=None if ns.call is not None else _line,
    )
    try:
        async with client:
            if ns.call is None:
                await _watch(client)
                status = 0
            else:
                method, *rest = ns.call
                args, kwargs = _arguments(rest[0]) if rest else ([], {})
                status = await _calls(client, method, args, kwargs, ns)
    except TerminalClose as exc:
        print(f"roost.client: {exc}", file=sys.stderr)
        return 3
    except ClientError as exc:  # stopped for another reason (protocol violation...)
        print(f"roost.client: {exc}", file=sys.stderr)
        return 1
    reason = client.closed_reason
    if isinstance(reason, TerminalClose):
        print(f"roost.client: {reason}", file=sys.stderr)
        return 3
    if reason is not None and not isinstance(reason, ClientClosed):
        print(f"roost.client: {reason}", file=sys.stderr)
        return 1
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    url = _resolve_url(parser, ns)
    token = ns.token if ns.token is not None else os.environ.get("ROOST_TOKEN")
    if token:
        url = with_token(url, token, add=True)
    try:
        parse_uri(url)
    except InvalidURI as exc:
        parser.error(str(exc))
    if ns.call is not None:
        if len(ns.call) > 2:
            parser.error("--call takes METHOD and at most one ARGS_JSON")
        if len(ns.call) == 2:
            try:
                _arguments(ns.call[1])
            except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
                parser.error(f"ARGS_JSON: {exc}")
    if ns.count < 0:
        parser.error("--count must be >= 0")
    if ns.chaos < 0:
        parser.error("--chaos must be >= 0")
    if ns.subscribe is not None:
        try:
            parse_subscribe(ns.subscribe)
        except ValueError as exc:
            parser.error(str(exc))
    try:
        return asyncio.run(run(ns, url))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
