"""Section ``streams``: streamed model output through a chat agent (``bench/stream_app.py``).

The agent's model emits words as fast as it can, each word the wall clock at its yield; the server runs
the default batching (``stream_batch_count``, ``stream_batch_interval``). Per repetition, one load
client process (``bench/stream_client.py``) measures three shapes:

- ``one``: one chat actor, one subscriber, ``stream_tokens`` words;
- ``hundred``: one chat actor, ``stream_subs`` subscribers (every ``model_delta`` fans out to all);
- ``concurrent``: ``stream_concurrent`` chat actors streaming at once, one subscriber each;
- ``paced``: as many chat actors at once, each model yielding ``stream_pace`` words a second (a hosted
  model's pace: 30–100 tokens a second), ``stream_paced_tokens`` words each. Here the stream batch's
  interval, not its count, decides how many words a batch holds (one or two), so the server runs
  many more turns per word than in ``concurrent``.

Figures: ``model_delta`` frames (and words) received per second summed over the subscribers, and per
word the time from the model yielding it to a subscriber reading it (p50, p99, max). Ceiling, same
repetition: the Starlette/uvicorn echo at c=100 in messages/s, as for the broadcast fan-out (a delta
frame is one send to each subscriber; an echo message one receive and one send).
"""

from __future__ import annotations

import json
import shutil
import sys
from typing import Any

from bench.fanout import _echo
from bench.procs import Server, free_port, log, run_client, running
from bench.rpc import echo_server
from bench.settings import Settings

__all__ = ["SHAPES", "run"]

SHAPES = ("one", "hundred", "concurrent", "paced")


def stream_server(s: Settings, data: str) -> Server:
    """``roost serve bench.stream_app:app``, the limits off as for every server of the suite."""
    port = free_port()
    argv = [sys.executable, "-m", "roost.cli", "serve", "bench.stream_app:app", "--data", data]
    argv += ["--port", str(port), "--rate-limit", "0", "--principal-rate-limit", "0"]
    argv += ["--max-conns-per-actor", "0", "--max-connections", "0", "--max-conns-per-address", "0"]
    # 100 chat actors made at once by one address: the creation buckets would refuse most of them
    argv += ["--anonymous-creation-rate", "0", "--anonymous-network-creation-rate", "0"]
    argv += ["--anonymous-total-creation-rate", "0"]
    log_path = s.data_dir / "logs" / "streams.log"
    return Server("roost-streams", [*argv, "--log-level", "warning"], port, log_path)


def _shape(s: Settings, port: int, shape: str, prefix: str) -> dict[str, Any]:
    actors, subs, tokens, pace = {
        "one": (1, 1, s.stream_tokens, 0.0),
        "hundred": (1, s.stream_subs, s.stream_tokens, 0.0),
        "concurrent": (s.stream_concurrent, 1, s.stream_concurrent_tokens, 0.0),
        "paced": (s.stream_concurrent, 1, s.stream_paced_tokens, s.stream_pace),
    }[shape]
    spec: dict[str, Any] = {"port": port, "actors": actors, "subs": subs, "tokens": tokens}
    spec |= {"pace": pace, "prefix": prefix, "timeout": 240}
    return run_client(["--spec", json.dumps(spec)], timeout=300, module="bench.stream_client")


def run(s: Settings) -> dict[str, Any]:
    """``{"reps": [{"one": {...}, "hundred": {...}, "concurrent": {...}, "echo": {...}}], ...}``."""
    data = s.data_dir / "run" / "streams"
    shutil.rmtree(data, ignore_errors=True)
    roost = stream_server(s, str(data))
    echo = echo_server(s, "starlette")
    reps: list[dict[str, Any]] = []
    with running(roost, echo):
        for rep in range(s.reps):
            one: dict[str, Any] = {"echo": _echo(s, echo.port, echo.pid)}
            for shape in SHAPES:
                one[shape] = _shape(s, roost.port, shape, f"r{rep}{shape}")
            reps.append(one)
            log(
                "streams rep "
                f"{rep + 1}/{s.reps}: "
                + " · ".join(
                    f"{k} {one[k]['frames_s']:,.0f} deltas/s, p99 {one[k]['lag_p99_ms']:.0f} ms"
                    for k in SHAPES
                )
                + f" · echo {one['echo']['ops_s']:,.0f} msg/s"
            )
    shutil.rmtree(data, ignore_errors=True)
    return {
        "reps": reps,
        "subs": s.stream_subs,
        "concurrent": s.stream_concurrent,
        "tokens": s.stream_tokens,
        "concurrent_tokens": s.stream_concurrent_tokens,
        "paced_tokens": s.stream_paced_tokens,
        "pace": s.stream_pace,
        "echo_conc": s.echo_ceiling_conc,
    }
