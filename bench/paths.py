"""Section ``paths``: what each path built on another library's private internals is worth.

Roost has fast paths that use names other libraries do not document (see ``roost.transport.uvicorn_ws``
and ``roost.actors.inline``). The rule they live by: a path stays only while it is worth at least 10 %
of durable RPC throughput, measured here; then it is pinned, detected at start-up and tested on both
sides. This section serves the same durable RPC (``counter.increment``, ``?subscribe=none``, connection
*i* on its own actor) from one ``roost serve`` per variant, each variant switching paths off with the
environment variables the modules document, plus the Starlette/uvicorn echo as the ceiling:

- ``all``: as shipped (every path that detection allows);
- one variant per switch in :data:`VARIANTS`, with only that path off;
- ``public``: every switch off (public APIs of other libraries only).

One load client holds connections to every server and runs rounds (8 per repetition): each round
drives every server for one short slice (a fifth of a point) at 10 connections and at 1 (client and
server pinned to different CPUs, as in ``rpc``), servers in rotated order, so a burst of load from
elsewhere on the shared machine hits every variant within the same second. The report gives each
variant's throughput ÷ ``all`` paired per round: a path's worth is ``1 − (variant without it ÷ all)``.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from bench.procs import Server, log, run_client, running
from bench.rpc import RPC_FRAME, echo_server, roost_server
from bench.settings import Settings
from bench.stats import pluck, ratios, summarize

__all__ = ["VARIANTS", "run"]

#: Variant name → the environment it is served with. ``all`` first: every ratio is against it.
VARIANTS: dict[str, dict[str, str]] = {
    "all": {},
    "no-headers": {"ROOST_FRAME_HEADERS": "0"},
    "no-inline": {"ROOST_INLINE_TURNS": "0"},
    "no-direct": {"ROOST_DIRECT_FRAMES": "0"},
    "public": {"ROOST_INLINE_TURNS": "0", "ROOST_DIRECT_FRAMES": "0"},
}

_POINTS = [
    {"name": "c10", "conns": 10},
    {"name": "c1", "conns": 1, "pin": True},
]


def _target(kind: str, srv: Server) -> dict[str, Any]:
    echo = kind == "starlette"
    return {
        "name": kind,
        "port": srv.port,
        "pid": srv.pid,
        "path": "/echo" if echo else "/agents/counter/rpc-{i}?subscribe=none",
        "welcome": not echo,
        "expect": "echo" if echo else "rpc_ok",
    }


def run(s: Settings) -> dict[str, Any]:
    """``{"variants": {name: env}, "slice_s": x, "reps": [{server: {"points": {...}}}]}`` (servers:
    ``starlette`` and every variant; one rep per round of slices)."""
    root = s.data_dir / "run" / "paths"
    shutil.rmtree(root, ignore_errors=True)
    servers: dict[str, Server] = {"starlette": echo_server(s, "starlette")}
    for name, env in VARIANTS.items():
        servers[name] = roost_server(s, f"roost-{name}", str(root / name), env)
    slice_s = s.point_s / 5
    rounds = 8 * s.reps
    spec = {
        "frame": RPC_FRAME,
        "targets": [_target(kind, srv) for kind, srv in servers.items()],
        "points": _POINTS,
        "warmup": s.warmup_s,
        "slice": slice_s,
        "rounds": rounds,
    }
    timeout = 120 + rounds * len(servers) * len(_POINTS) * (slice_s + 0.2)
    with running(*servers.values()):
        res = run_client(["ab", "--spec", json.dumps(spec)], timeout=timeout)
    shutil.rmtree(root, ignore_errors=True)
    reps = [{kind: {"points": pts} for kind, pts in one.items()} for one in res["rounds"]]
    errors = sum(int(p["errors"]) for one in reps for srv in one.values() for p in srv["points"].values())
    if errors:
        raise RuntimeError(f"{errors} replies were not the expected answer")
    for name in VARIANTS:
        c10 = ratios(
            pluck(reps, name, "points", "c10", "ops_s"), pluck(reps, "all", "points", "c10", "ops_s")
        )
        log(f"paths: {name} c10 ÷ all {summarize(c10).med:.3f} over {len(c10)} rounds")
    return {"variants": VARIANTS, "slice_s": slice_s, "reps": reps}
