"""LangGraph checkpoints per second through ``AsyncRoostSaver`` ÷ through LangGraph's own
``AsyncSqliteSaver``, on the same graph, in the same run.

``python -m bench.langgraph [--reps 3] [--seconds 3]`` (and section ``langgraph`` of
``python -m bench``). The graph: a chain of :data:`NODES` nodes, each adding 1 to a number
(``operator.add``), so each invocation stores ``NODES + 2`` checkpoints (the input, one per node,
the end) and one write per node, with LangGraph's default durability (``"async"``: a checkpoint is
saved while the next step runs, and an invocation returns once all are saved). For ``--seconds``
after a short warm-up the bench process invokes it one invocation after another, round
:data:`THREADS` thread ids, against:

- Roost: ``roost serve roost.integrations.langgraph:app`` in its own process on 127.0.0.1 (limits
  off, as in ``bench/rpc.py``), ``AsyncRoostSaver`` over loopback: each ``put``/``put_writes`` a
  call over a WebSocket, a turn of the thread's actor committed to its SQLite file before the reply;
  once with the default ``--durability normal`` (WAL, ``synchronous=NORMAL``: survives a crash of
  the process, no fsync) and once with ``--durability full`` (an fsync per commit);
- LangGraph's ``AsyncSqliteSaver`` on one SQLite file in the bench process (``aiosqlite``, WAL and
  SQLite's default ``synchronous=FULL``: an fsync per commit, its own commit per write, no network).

Each repetition measures the three, in rotated order; the figure is checkpoints per second (counted
with ``alist`` after the timed part), and the ratios Roost ÷ SQLite paired per repetition (median,
min–max): ``ratio`` at Roost's default durability, ``ratio_full`` at the same (fsync) as SQLite's.
One run's figures: ``bench/RESULTS.md``, *LangGraph checkpoints*.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench.procs import Server, free_port, log, running

__all__ = ["main", "run"]

NODES = 5
#: Each repetition's invocations go round these many threads (a thread's state stays one number).
THREADS = 10
WARMUP_S = 0.5


class _Count(TypedDict):
    count: Annotated[int, operator.add]


def _graph(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(_Count)
    previous = START
    for i in range(NODES):
        name = f"n{i}"
        builder.add_node(name, lambda state: {"count": 1})
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=saver)


async def _measure(saver: Any, seconds: float) -> dict[str, Any]:
    graph = _graph(saver)
    tag = uuid.uuid4().hex
    threads = [f"bench-{tag}-{i}" for i in range(THREADS)]
    runs = 0

    async def once() -> None:
        nonlocal runs
        await graph.ainvoke({"count": 0}, {"configurable": {"thread_id": threads[runs % THREADS]}})
        runs += 1

    async def stored() -> int:
        return sum([len([t async for t in saver.alist({"configurable": {"thread_id": t}})]) for t in threads])

    warm = time.perf_counter() + WARMUP_S
    while time.perf_counter() < warm:
        await once()
    before, runs = await stored(), 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        await once()
    elapsed = time.perf_counter() - start
    checkpoints = await stored() - before
    return {"checkpoints_per_s": checkpoints / elapsed, "runs": runs, "checkpoints": checkpoints}


async def _roost(url: str, seconds: float) -> dict[str, Any]:
    from roost.integrations.langgraph import AsyncRoostSaver

    async with AsyncRoostSaver(url=url) as saver:
        return await _measure(saver, seconds)


async def _sqlite(path: Path, seconds: float) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        return await _measure(saver, seconds)


def _server(data: Path, durability: str) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "roost.cli", "serve", "roost.integrations.langgraph:app"]
    argv += ["--data", str(data / durability), "--port", str(port), "--durability", durability]
    argv += ["--log-level", "warning", "--rate-limit", "0", "--principal-rate-limit", "0"]
    argv += ["--anonymous-creation-rate", "0", "--anonymous-network-creation-rate", "0"]
    argv += ["--anonymous-total-creation-rate", "0"]
    return Server(f"roost-langgraph-{durability}", argv, port, data / f"{durability}.log")


#: What each repetition measures: Roost at each durability, and LangGraph's SQLite saver.
SAVERS = ("roost", "roost_full", "sqlite")


def run(reps: int = 3, seconds: float = 3.0) -> dict[str, Any]:
    """The three savers, ``reps`` paired repetitions (the order rotated): ``{"reps": [...], "summary":
    {figure: [median, min, max]}}`` (section ``langgraph`` of ``python -m bench``)."""
    data = Path(tempfile.mkdtemp(prefix="roost-bench-langgraph-"))
    normal, full = _server(data, "normal"), _server(data, "full")
    urls = {"roost": f"ws://127.0.0.1:{normal.port}", "roost_full": f"ws://127.0.0.1:{full.port}"}
    rows: list[dict[str, dict[str, Any]]] = []
    try:
        with running(normal, full):
            for rep in range(reps):
                order = SAVERS[rep % 3 :] + SAVERS[: rep % 3]
                row: dict[str, dict[str, Any]] = {}
                for name in order:
                    if name == "sqlite":
                        row[name] = asyncio.run(_sqlite(data / f"sqlite-{rep}.db", seconds))
                    else:
                        row[name] = asyncio.run(_roost(urls[name], seconds))
                rows.append(row)
                log(
                    f"rep {rep + 1}: " + ", ".join(f"{n} {row[n]['checkpoints_per_s']:.0f}/s" for n in SAVERS)
                )
    finally:
        shutil.rmtree(data, ignore_errors=True)
    summary: dict[str, list[float]] = {
        "ratio": [r["roost"]["checkpoints_per_s"] / r["sqlite"]["checkpoints_per_s"] for r in rows],
        "ratio_full": [r["roost_full"]["checkpoints_per_s"] / r["sqlite"]["checkpoints_per_s"] for r in rows],
    }
    for name in SAVERS:
        summary[f"{name}_checkpoints_per_s"] = [r[name]["checkpoints_per_s"] for r in rows]
    return {
        "reps": rows,
        "summary": {k: [statistics.median(v), min(v), max(v)] for k, v in summary.items()},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.langgraph", description=__doc__)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args(argv)
    print(json.dumps(run(a.reps, a.seconds)["summary"]))


if __name__ == "__main__":
    main()
