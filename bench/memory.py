"""Section ``memory``: server RSS per idle connection, and per dormant actor.

Idle connections (``memory_reps`` repetitions, a fresh pair of servers each): a hold client (its own
process) opens ``steps[0]`` connections (the baseline, which also pulls in lazy imports), then
``steps[1]``, then ``steps[2]``; every connection does one request and then sits idle. The server's
VmRSS is read 0.5 s after each step; KB per connection = ΔRSS / Δconnections against the baseline.

- Roost: ``/agents/counter/idle-{i mod 10}`` (10 actors, default subscriptions), the welcome and one
  ``get`` call each;
- ceiling: the bare Starlette/uvicorn echo with the same uvicorn settings, one echo each.

Dormant actors: a freshly started ``roost serve`` over an empty data directory and one over the data
set of ``activation_files`` dormant actors, each after the same warm-up (one HTTP ``increment`` of
``counter/a000000`` and a ``/healthz``); bytes per dormant actor = ΔRSS / N. ``active_actors`` from
``/healthz`` must be 1: only the actor touched is live.
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import time
from typing import IO, Any

from bench.dataset import Dataset, ensure_dataset, name_of
from bench.procs import Server, child_env, http_json, log, running
from bench.rpc import RPC_FRAME, echo_server, roost_server
from bench.settings import ROOT, Settings

__all__ = ["run"]

_GET_FRAME = '{"type":"rpc","id":"g","method":"get"}'
_SETTLE_S = 0.5


def _readline(stream: IO[str], timeout: float) -> str:
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise TimeoutError(f"no line from the hold client within {timeout} s")
    return stream.readline()


def _hold(s: Settings, srv: Server, roost: bool) -> dict[str, Any]:
    spec = {
        "port": srv.port,
        "path": "/agents/counter/idle-{i}" if roost else "/echo",
        "names": 10 if roost else 1,
        "steps": list(s.memory_steps),
        "welcome": roost,
        "frame": _GET_FRAME if roost else RPC_FRAME,
    }
    cmd = [sys.executable, "-m", "bench.loadgen", "hold", "--spec", json.dumps(spec)]
    cli = subprocess.Popen(
        cmd, cwd=ROOT, env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    rss: list[int] = []
    connect_s: list[float] = []
    live: list[int] = []
    try:
        assert cli.stdin is not None
        assert cli.stdout is not None
        for _ in s.memory_steps:
            line = _readline(cli.stdout, 300)
            if not line:
                raise RuntimeError(f"hold client ended early (rc={cli.poll()})")
            info = json.loads(line)
            time.sleep(_SETTLE_S)
            rss.append(srv.rss_kb())
            connect_s.append(float(info["connect_s"]))
            if roost:
                live.append(int(http_json(srv.port, "/healthz")["connections"]))
            cli.stdin.write("next\n")
            cli.stdin.flush()
        cli.stdin.write("quit\n")
        cli.stdin.flush()
        cli.wait(60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait(10)
    n0 = s.memory_steps[0]
    per_conn = [(r - rss[0]) / (n - n0) for r, n in zip(rss[1:], s.memory_steps[1:], strict=True)]
    return {"rss_kb": rss, "kb_per_conn": per_conn, "connect_s": connect_s, "server_connections": live}


def _idle(s: Settings, rep: int) -> dict[str, Any]:
    one: dict[str, Any] = {}
    for kind in ("starlette", "roost") if rep % 2 == 0 else ("roost", "starlette"):
        data = s.data_dir / "run" / "memory-roost"
        shutil.rmtree(data, ignore_errors=True)
        srv = roost_server(s, "roost-memory", str(data)) if kind == "roost" else echo_server(s, "starlette")
        with running(srv):
            time.sleep(0.3)
            one[kind] = _hold(s, srv, kind == "roost")
        shutil.rmtree(data, ignore_errors=True)
    return one


def _dormant_one(s: Settings, data: str, name: str) -> dict[str, Any]:
    srv = roost_server(s, name, data)
    with running(srv):
        http_json(srv.port, f"/agents/counter/{name_of(0)}/rpc/increment", body=b"[1]")
        health = http_json(srv.port, "/healthz")
        time.sleep(_SETTLE_S)
        return {"rss_kb": srv.rss_kb(), "active_actors": int(health["active_actors"])}


def _dormant(s: Settings, ds: Dataset, rep: int) -> dict[str, Any]:
    empty = s.data_dir / "run" / "memory-empty"
    one: dict[str, Any] = {}
    for kind in ("empty", "full") if rep % 2 == 0 else ("full", "empty"):
        shutil.rmtree(empty, ignore_errors=True)
        one[kind] = _dormant_one(s, str(empty if kind == "empty" else ds.root), f"roost-dormant-{kind}")
    shutil.rmtree(empty, ignore_errors=True)
    one["bytes_per_actor"] = (one["full"]["rss_kb"] - one["empty"]["rss_kb"]) * 1024 / ds.n
    return one


def run(s: Settings, dataset: Dataset | None = None) -> dict[str, Any]:
    """``{"idle": [{server: hold result}], "dormant": [{...}], "steps": [...], "files": N}``."""
    idle: list[dict[str, Any]] = []
    for rep in range(s.memory_reps):
        one = _idle(s, rep)
        idle.append(one)
        st, ro = one["starlette"]["kb_per_conn"], one["roost"]["kb_per_conn"]
        log(
            f"memory rep {rep + 1}/{s.memory_reps}: KB per idle connection at {s.memory_steps[1]} / "
            f"{s.memory_steps[2]}: starlette echo {st[0]:.1f} / {st[1]:.1f} · roost {ro[0]:.1f} / {ro[1]:.1f}"
        )
    ds = dataset or ensure_dataset(s.data_dir, s.activation_files)
    dormant: list[dict[str, Any]] = []
    for rep in range(s.memory_reps):
        d = _dormant(s, ds, rep)
        dormant.append(d)
        log(
            f"memory rep {rep + 1}/{s.memory_reps}: RSS empty {d['empty']['rss_kb'] / 1024:.1f} MB · "
            f"{ds.n:,} dormant {d['full']['rss_kb'] / 1024:.1f} MB → {d['bytes_per_actor']:.2f} B/actor; "
            f"active actors {d['full']['active_actors']}"
        )
    return {"idle": idle, "dormant": dormant, "steps": list(s.memory_steps), "files": ds.n}
