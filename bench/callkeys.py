"""Section ``callkeys``: what an idempotency key costs per call, keyed ÷ unkeyed in the same run.

One ``roost serve`` over a fresh data directory. Each repetition drives, in alternating order, the same
actors (connection *i* calls ``counter/keys-i`` with ``?subscribe=none``) with two request streams that
differ only in the key, one load-client process each:

- unkeyed: ``{"type":"rpc","id":"<n>","method":"increment","args":[1]}``;
- keyed: the same with ``"idempotency_key":"bench-<rep>-<n>"``, a new key per call (the actor looks it
  up, runs the call and records its result in the same commit, and prunes to its retention).

Both streams make each request's frame (``bench.loadgen.numbered``), so the load client does the same
work on both sides; the difference is the server's. Figures: durable ops/s and server CPU per call,
paired keyed ÷ unkeyed per repetition, and the server CPU per call that the key adds.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from bench.procs import Server, log, run_client, running
from bench.rpc import roost_server
from bench.settings import Settings

__all__ = ["VARIANTS", "run"]

_UNKEYED = '{"type":"rpc","id":"%(n)d","method":"increment","args":[1]}'
_KEYED = '{"type":"rpc","id":"%(n)d","method":"increment","args":[1],"idempotency_key":"bench-REP-%(n)d"}'
VARIANTS = ("unkeyed", "keyed")


def _points(s: Settings) -> list[dict[str, Any]]:
    concs = (min(s.concs), sorted(s.concs)[min(1, len(s.concs) - 1)])  # 1 and 10 connections
    return [{"name": f"c{c}", "group": "own", "conns": c, "pin": c == 1} for c in dict.fromkeys(concs)]


def _drive(s: Settings, srv: Server, template: str) -> dict[str, Any]:
    points = _points(s)
    spec = {
        "port": srv.port,
        "server_pid": srv.pid,
        "frame": _UNKEYED % {"n": 0},
        "template": template,
        "expect": "rpc_ok",
        "welcome": True,
        "groups": {"own": {"path": "/agents/counter/keys-{i}?subscribe=none", "n": points[-1]["conns"]}},
        "warmup": s.warmup_s,
        "duration": s.point_s,
        "points": points,
    }
    res = run_client(["rr", "--spec", json.dumps(spec)], timeout=120 + s.point_s * len(points) * 2)
    errors = sum(int(p["errors"]) for p in res["points"].values())
    if errors:
        raise RuntimeError(f"callkeys: {errors} replies were not a success")
    return res


def run(s: Settings) -> dict[str, Any]:
    """``{"reps": [{"unkeyed": {"points": …}, "keyed": {"points": …}}], "frames": {…}}``."""
    data = s.data_dir / "run" / "callkeys"
    shutil.rmtree(data, ignore_errors=True)
    server = roost_server(s, "roost-callkeys", str(data))
    reps: list[dict[str, Any]] = []
    with running(server):
        for rep in range(s.reps):
            order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
            templates = {"unkeyed": _UNKEYED, "keyed": _KEYED.replace("REP", str(rep))}
            one = {v: _drive(s, server, templates[v]) for v in order}
            reps.append(one)
            line = " · ".join(
                f"{p} ops/s unkeyed {one['unkeyed']['points'][p]['ops_s']:,.0f} "
                f"keyed {one['keyed']['points'][p]['ops_s']:,.0f}"
                for p in one["unkeyed"]["points"]
            )
            log(f"callkeys rep {rep + 1}/{s.reps}: {line}")
    shutil.rmtree(data, ignore_errors=True)
    frames = {"unkeyed": _UNKEYED % {"n": 1}, "keyed": _KEYED.replace("REP", "0") % {"n": 1}}
    return {"reps": reps, "frames": frames}
