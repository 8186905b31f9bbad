"""An MCP tool call through Roost ÷ the same call served by the MCP SDK alone.

``python -m bench.mcp [--reps 5] [--seconds 3]`` (and section ``mcp_server`` of ``python -m bench``).
Two servers, each its own process on 127.0.0.1, both on uvicorn with uvloop and httptools:

- Roost: ``roost serve`` of the default app (limits off, as in ``bench/rpc.py``); the tool is the
  ``counter`` actor's ``increment`` at ``/mcp/counter/bench`` (a turn, committed to SQLite before the
  answer);
- the SDK: its low-level ``Server`` with one ``increment`` tool that adds to a number in memory, on
  its own streamable HTTP app (``Server.streamable_http_app``), the same session manager Roost uses.

The client, its own process (``--client URL``), is the SDK's client: one session, ``tools/call``
``increment {"by": 1}`` one after the other for ``--seconds`` after a short warm-up; it reports calls
per second and the median round trip; the server's CPU per call is read from ``/proc`` around the
run. Each repetition measures both servers, in alternating order, and the figures are ratios paired
per repetition (median, min–max): Roost's server CPU per call ÷ the SDK's (the one that holds on a
busy machine), its median round trip ÷ the SDK's, and its calls per second ÷ the SDK's. What the
ratios hold: Roost's gate (origin, authentication, rate), the registry call (a turn, its SQLite
commit), the argument check and the event store's writes (turns of the same actor), against a tool
that does no I/O and an SDK server without an event store. One run's figures: ``bench/RESULTS.md``,
*MCP tool calls*.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.procs import Server, free_port, log, proc_cpu_s, run_client, running

__all__ = ["main", "run"]

WARMUP_S = 0.5


async def _client(url: str, seconds: float) -> dict[str, Any]:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        warm = time.perf_counter() + WARMUP_S
        warmed = 0
        while time.perf_counter() < warm:
            await session.call_tool("increment", {"by": 1})
            warmed += 1
        trips: list[float] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            start = time.perf_counter()
            result = await session.call_tool("increment", {"by": 1})
            trips.append(time.perf_counter() - start)
            if result.is_error:
                raise RuntimeError(f"the tool failed: {result.content}")
    return {
        "calls_per_s": len(trips) / seconds,
        "p50_us": statistics.median(trips) * 1e6,
        "calls": len(trips),
        "all_calls": warmed + len(trips),
    }


def _sdk_app() -> Any:
    import mcp_types as types
    from mcp.server.lowlevel import Server as McpServer

    count = 0

    async def list_tools(ctx: Any, params: Any) -> Any:
        schema = {"type": "object", "properties": {"by": {"type": "integer", "default": 1}}}
        return {"tools": [{"name": "increment", "description": "Add to a number", "inputSchema": schema}]}

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        nonlocal count
        count += int((params.arguments or {}).get("by", 1))
        return {"content": [{"type": "text", "text": str(count)}], "structuredContent": {"result": count}}

    server: McpServer[Any] = McpServer("sdk-bench", on_list_tools=list_tools, on_call_tool=call_tool)
    return server.streamable_http_app(streamable_http_path="/mcp")


def _serve_sdk(port: int) -> None:
    import uvicorn

    uvicorn.run(_sdk_app(), host="127.0.0.1", port=port, log_level="warning", loop="uvloop", http="httptools")


def _servers(data: Path) -> tuple[Server, Server]:
    roost_port, sdk_port = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "roost.cli",
        "serve",
        "--data",
        str(data / "roost"),
        "--port",
        str(roost_port),
    ]
    argv += ["--rate-limit", "0", "--principal-rate-limit", "0", "--log-level", "warning"]
    roost = Server("roost-mcp", argv, roost_port, data / "roost.log")
    sdk = Server(
        "sdk-mcp",
        [sys.executable, "-m", "bench.mcp", "--serve-sdk", str(sdk_port)],
        sdk_port,
        data / "sdk.log",
    )
    return roost, sdk


def _measure(server: Server, url: str, seconds: float) -> dict[str, Any]:
    """One client run against ``server``, with the server's CPU per call (the session's set-up and
    the warm-up counted in, over every call made)."""
    before = proc_cpu_s(server.pid)
    result = run_client(["--client", url, "--seconds", str(seconds)], seconds + 60, "bench.mcp")
    result["cpu_us"] = (proc_cpu_s(server.pid) - before) / result["all_calls"] * 1e6
    return result


def _median_range(values: list[float]) -> list[float]:
    return [statistics.median(values), min(values), max(values)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.mcp", description=__doc__)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--serve-sdk", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.client:
        print(json.dumps(asyncio.run(_client(a.client, a.seconds))))
        return
    if a.serve_sdk:
        _serve_sdk(a.serve_sdk)
        return
    print(json.dumps(run(a.reps, a.seconds)["summary"]))


def run(reps: int = 5, seconds: float = 3.0) -> dict[str, Any]:
    """Both servers, ``reps`` paired repetitions: ``{"reps": [...], "summary": {figure: [median, min,
    max]}}`` (section ``mcp_server`` of ``python -m bench``)."""
    data = Path(tempfile.mkdtemp(prefix="roost-bench-mcp-"))
    roost, sdk = _servers(data)
    servers = {"roost": roost, "sdk": sdk}
    urls = {
        "roost": f"http://127.0.0.1:{roost.port}/mcp/counter/bench",
        "sdk": f"http://127.0.0.1:{sdk.port}/mcp",
    }
    rows: list[dict[str, dict[str, Any]]] = []
    try:
        with running(roost, sdk):
            for rep in range(reps):
                order = ("roost", "sdk") if rep % 2 == 0 else ("sdk", "roost")
                row = {name: _measure(servers[name], urls[name], seconds) for name in order}
                rows.append(row)
                ours, theirs = row["roost"], row["sdk"]
                log(
                    f"rep {rep + 1}: roost {ours['calls_per_s']:.0f}/s p50 {ours['p50_us']:.0f} µs "
                    f"cpu {ours['cpu_us']:.0f} µs/call; sdk {theirs['calls_per_s']:.0f}/s "
                    f"p50 {theirs['p50_us']:.0f} µs cpu {theirs['cpu_us']:.0f} µs/call"
                )
    finally:
        shutil.rmtree(data, ignore_errors=True)
    summary: dict[str, list[float]] = {"cpu_ratio": [], "p50_ratio": [], "throughput_ratio": []}
    for r in rows:
        summary["cpu_ratio"].append(r["roost"]["cpu_us"] / r["sdk"]["cpu_us"])
        summary["p50_ratio"].append(r["roost"]["p50_us"] / r["sdk"]["p50_us"])
        summary["throughput_ratio"].append(r["roost"]["calls_per_s"] / r["sdk"]["calls_per_s"])
    for name in ("roost", "sdk"):
        for figure in ("cpu_us", "p50_us", "calls_per_s"):
            summary[f"{name}_{figure}"] = [r[name][figure] for r in rows]
    return {"reps": rows, "summary": {key: _median_range(values) for key, values in summary.items()}}


if __name__ == "__main__":
    main()
