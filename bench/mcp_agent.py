"""An MCP tool call through an agent ÷ the same call made with the MCP SDK's client directly.

``python -m bench.mcp_agent [--reps 5] [--calls 50]`` (and section ``mcp_agent`` of ``python -m
bench``). The MCP server is one process over stdio (``bench/mcp_tool_server.py``: an ``echo`` tool that
does no I/O). Each repetition, in alternating order:

- **direct**: the SDK's client (``mcp.client``, one session) calls ``echo`` ``--calls`` times, one
  after the other: the round trip of each;
- **through the agent**: an agent whose catalog holds the server's tool (``mcp_servers``) is asked
  ``--calls`` turns, one after the other, each planning the tool (the deterministic model), running
  it as a background job through the execution gate (lease, capability session row, payload policy,
  events) and ending verified: from ``turn`` to its ``turn_completed`` event.

Figures: the median of each, and their ratio paired per repetition (median, min–max). The ratio is
what the runtime costs around one MCP call: a turn to plan, a job's begin and finish turns, its
capability session's row, the events, each committed to the agent's SQLite file.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "run"]

ROOT = Path(__file__).resolve().parent.parent
#: The server, run as a module from the repository (as a script, bench/mcp.py would shadow the SDK).
SERVER = ("-m", "bench.mcp_tool_server")


async def _direct(calls: int) -> list[float]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=list(SERVER), cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("echo", {"text": "warm"})
        trips = []
        for i in range(calls):
            start = time.perf_counter()
            result = await session.call_tool("echo", {"text": f"call {i}"})
            trips.append(time.perf_counter() - start)
            if result.is_error:
                raise RuntimeError(f"echo failed: {result}")
        return trips


async def _through_agent(calls: int, data: Path) -> list[float]:
    from roost.agent import Agent, AgentConfig, McpServer
    from roost.scheduler import SystemClock
    from roost.testing import ActorKit

    class Echoer(Agent):
        kind = "echoer"
        config = AgentConfig()
        mcp_servers = (McpServer(name="bench", command=sys.executable, args=SERVER, cwd=str(ROOT)),)

    async with ActorKit([Echoer], data, clock=SystemClock()) as kit:
        conn = kit.connect("echoer", "bench")
        ends = 0

        def events(*types: str) -> list[dict[str, Any]]:
            return [
                f["event"]
                for f in conn.frames
                if f.get("type") == "event" and f["event"]["event_type"] in types
            ]

        def done(n: int) -> bool:
            return len(events("turn_completed", "turn_failed")) >= n

        trips = []
        for i in range(calls + 1):  # the first opens the connection to the server: not counted
            start = time.perf_counter()
            await conn.call("turn", f'mcp__bench__echo {{"text": "call {i}"}}')
            ends += 1
            await conn.wait_for(functools.partial(_ended, done, ends), timeout=30)
            if i:
                trips.append(time.perf_counter() - start)
        failed = [
            f for f in conn.frames if f.get("type") == "event" and f["event"]["event_type"] == "turn_failed"
        ]
        if failed:
            raise RuntimeError(f"a turn failed: {failed[0]['event']['payload']}")
        return trips


def _ended(done: Any, n: int, frame: dict[str, Any]) -> bool:
    return bool(done(n))


def run(reps: int = 5, calls: int = 50) -> dict[str, Any]:
    """``{"reps": [{"direct_ms": median, "agent_ms": median, "ratio": agent ÷ direct}], ...}``."""
    out = []
    for rep in range(reps):
        data = Path(tempfile.mkdtemp(prefix="roost-bench-mcp-"))
        try:
            if rep % 2 == 0:
                direct = asyncio.run(_direct(calls))
                agent = asyncio.run(_through_agent(calls, data))
            else:
                agent = asyncio.run(_through_agent(calls, data))
                direct = asyncio.run(_direct(calls))
        finally:
            shutil.rmtree(data, ignore_errors=True)
        d, a = statistics.median(direct) * 1e3, statistics.median(agent) * 1e3
        out.append({"direct_ms": d, "agent_ms": a, "ratio": a / d})
        print(
            f"rep {rep + 1}/{reps}: direct {d:.2f} ms, through the agent {a:.2f} ms: {a / d:.1f} ×",
            flush=True,
        )
    return {"reps": out, "calls": calls}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.mcp_agent", description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args(argv)
    res = run(a.reps, a.calls)
    ratios = sorted(r["ratio"] for r in res["reps"])
    print(
        json.dumps({**res, "ratio_median": statistics.median(ratios), "ratio_range": [ratios[0], ratios[-1]]})
    )


if __name__ == "__main__":
    main()
