"""Section ``rpc``: echo ceilings and Roost's durable RPC, side by side in every repetition.

Three servers run for the whole section: the raw ``websockets`` echo, the Starlette/uvicorn echo (our
stack doing no work) and ``roost serve`` over a fresh data directory. Each repetition drives every server
once, in rotated order, with one load-client process per server: request/response at 1, 10 and 100
connections (and, for Roost, 100 connections on one actor name). The request is the same ~55-byte
frame everywhere, ``{"type":"rpc","id":"1","method":"increment","args":[1]}``: the echo servers send it
back, Roost runs ``counter.increment`` and replies with ``rpc_result`` after the commit.

- durable RPC: connection ``i`` calls its own actor ``counter/rpc-i`` with ``?subscribe=none``, so
  only the call's own reply comes back. The 1-connection point runs with client and server pinned to
  two different CPUs (otherwise its latency is bimodal with the scheduler's placement);
- hot actor: every connection calls ``counter/hot``. Afterwards the actor's count is read over HTTP and
  must equal the number of acknowledged increments (nothing acknowledged was lost, nothing counted twice).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import sys
import threading
from typing import Any

from bench.procs import Server, free_port, http_json, log, run_client, running
from bench.settings import Settings

__all__ = ["RPC_FRAME", "SERVERS", "roost_server", "run"]

RPC_FRAME = '{"type":"rpc","id":"1","method":"increment","args":[1]}'
SERVERS = ("raw", "starlette", "roost")


def roost_server(s: Settings, name: str, data: str) -> Server:
    """``roost serve`` (the real CLI entry point) over ``data`` on a free port.

    Rate and connection limits are off: they are a policy for clients on the internet (1,000 frames/s
    per connection by default) and would cap the load this suite measures; everything else is as
    shipped (the per-frame checks still run)."""
    port = free_port()
    argv = [sys.executable, "-m", "roost.cli", "serve", "--data", data, "--port", str(port)]
    argv += ["--rate-limit", "0", "--principal-rate-limit", "0", "--max-conns-per-actor", "0"]
    argv += ["--max-connections", "0", "--max-conns-per-address", "0"]
    env: dict[str, str] = {}
    mode = observed()
    if mode in ("metrics", "both"):
        argv += ["--metrics"]
    if mode in ("traces", "both"):  # every span recorded and exported to a real OTLP/HTTP sink
        argv += ["--otel"]
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp_sink()}
    return Server(name, [*argv, "--log-level", "warning"], port, s.data_dir / "logs" / f"{name}.log", env)


def observed() -> str:
    """``ROOST_BENCH_OBSERVE``: ``metrics`` (the Roost servers run with ``--metrics``), ``traces``
    (``--otel``), ``both`` (or ``1``); anything else: neither, as shipped."""
    mode = os.environ.get("ROOST_BENCH_OBSERVE", "")
    return "both" if mode == "1" else mode


_SINK: list[str] = []


def otlp_sink() -> str:
    """An OTLP/HTTP endpoint in this process that takes every export and answers 200 (started once)."""
    if not _SINK:

        class Sink(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        _SINK.append(f"http://127.0.0.1:{server.server_address[1]}")
    return _SINK[0]


def echo_server(s: Settings, kind: str) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "bench.echo_servers", kind, "--port", str(port)]
    return Server(f"echo-{kind}", argv, port, s.data_dir / "logs" / f"echo-{kind}.log")


def _points(s: Settings, hot: bool) -> list[dict[str, Any]]:
    pts: list[dict[str, Any]] = [
        {"name": f"c{c}", "group": "own", "conns": c, "pin": c == 1} for c in s.concs
    ]
    if hot:
        pts.append({"name": "hot", "group": "hot", "conns": s.hot_conns})
    return pts


def _drive(s: Settings, kind: str, srv: Server) -> dict[str, Any]:
    roost = kind == "roost"
    groups: dict[str, Any] = {
        "own": {"path": "/agents/counter/rpc-{i}?subscribe=none" if roost else "/echo", "n": max(s.concs)}
    }
    if roost:
        groups["hot"] = {"path": "/agents/counter/hot?subscribe=none", "n": s.hot_conns}
    spec = {
        "port": srv.port,
        "server_pid": srv.pid,
        "frame": RPC_FRAME,
        "expect": "rpc_ok" if roost else "echo",
        "welcome": roost,
        "groups": groups,
        "warmup": s.warmup_s,
        "duration": s.point_s,
        "points": _points(s, roost),
    }
    timeout = 120 + s.point_s * (len(s.concs) + 1) * 2
    res = run_client(["rr", "--spec", json.dumps(spec)], timeout=timeout)
    errors = sum(int(p["errors"]) for p in res["points"].values())
    if errors:
        raise RuntimeError(f"{kind}: {errors} replies were not the expected answer")
    return res


def run(s: Settings) -> dict[str, Any]:
    """``{"reps": [{server: {"points": {...}, "replies": {...}}}], "hot_check": {...}}``."""
    data = s.data_dir / "run" / "rpc"
    shutil.rmtree(data, ignore_errors=True)
    servers = {
        "raw": echo_server(s, "raw"),
        "starlette": echo_server(s, "starlette"),
        "roost": roost_server(s, "roost-rpc", str(data)),
    }
    reps: list[dict[str, Any]] = []
    hot_acked = 0
    with running(*servers.values()):
        for rep in range(s.reps):
            order = SERVERS[rep % 3 :] + SERVERS[: rep % 3]
            one: dict[str, Any] = {}
            for kind in order:
                one[kind] = _drive(s, kind, servers[kind])
            hot_acked += int(one["roost"]["replies"]["hot"])
            reps.append(one)
            pts = {k: one[k]["points"] for k in SERVERS}
            c10 = f"c{s.concs[min(1, len(s.concs) - 1)]}"
            log(
                f"rpc rep {rep + 1}/{s.reps}: {c10} ops/s raw {pts['raw'][c10]['ops_s']:,.0f} · "
                f"starlette {pts['starlette'][c10]['ops_s']:,.0f} · roost {pts['roost'][c10]['ops_s']:,.0f}"
                f" · hot actor {pts['roost']['hot']['ops_s']:,.0f} ops/s"
            )
        state = http_json(servers["roost"].port, "/agents/counter/hot")
    count = int(state["state"]["count"])
    check = {"count": count, "acked": hot_acked, "ok": count == hot_acked}
    log(f"rpc: hot actor count {count} vs acknowledged {hot_acked}: {'ok' if check['ok'] else 'MISMATCH'}")
    shutil.rmtree(data, ignore_errors=True)
    return {"reps": reps, "hot_check": check, "frame": RPC_FRAME}
