"""Section ``fanout``: broadcast of state frames from one actor to many connections.

Per repetition one load-client process opens ``fanout_conns`` connections to ``counter/fan`` subscribed
to state (``?subscribe=state``) plus one driver connection (``?subscribe=none``) that calls
``increment`` in a request/response loop for a fixed time; every increment is one state frame to every
subscriber. The figure is state frames received per second summed over all subscribers, within the
timed window; afterwards the client waits (bounded) until every frame arrived and reports any shortfall.

Ceiling, same repetition: the Starlette/uvicorn echo at the highest request/response concurrency
(c=100), in messages/s. An echo message costs the server one receive and one send; a fan-out frame is
one send (the receive of the increment is shared by all subscribers), so the ratio can exceed 1.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from bench.procs import log, run_client, running
from bench.rpc import RPC_FRAME, echo_server, roost_server
from bench.settings import Settings

__all__ = ["run"]


def _fanout(s: Settings, port: int, pid: int) -> dict[str, Any]:
    spec = {
        "port": port,
        "server_pid": pid,
        "sub_path": "/agents/counter/fan?subscribe=state",
        "driver_path": "/agents/counter/fan?subscribe=none",
        "subs": s.fanout_conns,
        "frame": RPC_FRAME,
        "warmup": s.warmup_s,
        "duration": s.fanout_s,
    }
    return run_client(["fanout", "--spec", json.dumps(spec)], timeout=180 + s.fanout_s)


def _echo(s: Settings, port: int, pid: int) -> dict[str, Any]:
    c = s.echo_ceiling_conc
    spec = {
        "port": port,
        "server_pid": pid,
        "frame": RPC_FRAME,
        "expect": "echo",
        "welcome": False,
        "groups": {"own": {"path": "/echo", "n": c}},
        "warmup": s.warmup_s,
        "duration": s.point_s,
        "points": [{"name": f"c{c}", "group": "own", "conns": c}],
    }
    point: dict[str, Any] = run_client(["rr", "--spec", json.dumps(spec)], timeout=120 + s.point_s)["points"][
        f"c{c}"
    ]
    return point


def run(s: Settings) -> dict[str, Any]:
    """``{"reps": [{"fanout": {...}, "echo": {...}}], "subs": N, "echo_conc": c}``."""
    data = s.data_dir / "run" / "fanout"
    shutil.rmtree(data, ignore_errors=True)
    roost = roost_server(s, "roost-fanout", str(data))
    echo = echo_server(s, "starlette")
    reps: list[dict[str, Any]] = []
    with running(roost, echo):
        for rep in range(s.reps):
            one: dict[str, Any] = {}
            if rep % 2 == 0:
                one["fanout"] = _fanout(s, roost.port, roost.pid)
                one["echo"] = _echo(s, echo.port, echo.pid)
            else:
                one["echo"] = _echo(s, echo.port, echo.pid)
                one["fanout"] = _fanout(s, roost.port, roost.pid)
            reps.append(one)
            f = one["fanout"]
            log(
                f"fanout rep {rep + 1}/{s.reps}: {f['frames_s']:,.0f} state frames/s to {f['subs']} "
                f"subscribers ({f['increments_s']:,.0f} increments/s; delivered "
                f"{f['delivered_total']}/{f['expected_total']}, closed {f['closed']}) · "
                f"echo c={s.echo_ceiling_conc} {one['echo']['ops_s']:,.0f} msg/s"
            )
    shutil.rmtree(data, ignore_errors=True)
    return {"reps": reps, "subs": s.fanout_conns, "echo_conc": s.echo_ceiling_conc}
