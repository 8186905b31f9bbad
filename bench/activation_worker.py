"""Cold activation, measured in process (run as ``python -m bench.activation_worker --spec JSON``).

For each of ``k`` iterations, three different dormant actors of the data set are activated, in rotating
order:

- ``raw``: ``sqlite3.connect`` + ``PRAGMA locking_mode=EXCLUSIVE`` + ``PRAGMA journal_mode=WAL`` +
  ``SELECT state FROM roost_state`` on the
  file (the ceiling), then ``close`` (timed separately);
- ``get``: ``Registry.get("counter", name)`` and reading ``host.state`` — the synchronous activation
  (path, exclusive open, migration check, state and log bounds loaded, mailbox task created). The time
  until the ``on_start`` turn has committed (``ready``) is reported too;
- ``snapshot``: ``await Registry.snapshot("counter", name)``, the whole path of a first request: the
  file-exists check, activation, the ``on_start`` turn and a read turn through the mailbox.

After each Roost activation the actor is deactivated with ``Registry.sweep()`` (idle timeout 0), which
saves its state, flushes the directory and hands the file's close to a thread; ``close`` times that
and the wait for the close (``Registry.released()``), so every activation is of a dormant
actor and at most one is live at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import uvloop

from bench.dataset import KIND, name_of
from bench.stats import pct
from roost.actors import Registry, RuntimeConfig
from roost.examples.kinds import KINDS
from roost.storage import actor_path

_WAIT_ROUNDS = 10_000


def _summary(ns: list[int]) -> dict[str, float]:
    us = [v / 1e3 for v in ns]
    return {"p50_us": pct(us, 50), "p99_us": pct(us, 99), "n": len(us)}


async def _until_quiescent(registry: Registry, name: str) -> None:
    host = registry.hosts[(KIND, name)]
    for _ in range(_WAIT_ROUNDS):
        if host.quiescent:
            return
        await asyncio.sleep(0)
    raise TimeoutError(f"{name} did not finish its on_start turn")


async def _deactivate(registry: Registry) -> None:
    if registry.sweep() != 1 or registry.hosts:
        raise RuntimeError("the actor was not deactivated")
    await registry.released()  # the file's close runs in a thread: timed with the rest


async def measure(root: Path, raw_idx: list[int], get_idx: list[int], snap_idx: list[int]) -> dict[str, Any]:
    cfg = RuntimeConfig(data_dir=root, idle_timeout=0.0, sweep_interval=3600.0)
    registry = Registry(KINDS, cfg)
    await registry.start()
    clock = time.perf_counter_ns
    t: dict[str, list[int]] = {k: [] for k in ("raw", "raw_close", "get", "ready", "close", "snapshot")}

    def raw(i: int) -> None:
        path = actor_path(root, KIND, name_of(i))
        t0 = clock()
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")  # as Roost opens its files: like for like
        conn.execute("PRAGMA journal_mode=WAL")
        row = conn.execute("SELECT state FROM roost_state").fetchone()
        t1 = clock()
        conn.close()
        t2 = clock()
        if row is None or "count" not in row[0]:
            raise RuntimeError(f"raw read of {name_of(i)} found {row!r}")
        t["raw"].append(t1 - t0)
        t["raw_close"].append(t2 - t1)

    async def get(i: int) -> None:
        name = name_of(i)
        t0 = clock()
        host = registry.get(KIND, name)
        state = host.state
        t1 = clock()
        await _until_quiescent(registry, name)
        t2 = clock()
        await _deactivate(registry)
        t3 = clock()
        if "count" not in state:
            raise RuntimeError(f"{name}: state {state!r}")
        t["get"].append(t1 - t0)
        t["ready"].append(t2 - t0)
        t["close"].append(t3 - t2)

    async def snapshot(i: int) -> None:
        name = name_of(i)
        t0 = clock()
        state, _ = await registry.snapshot(KIND, name)
        t1 = clock()
        await _until_quiescent(registry, name)
        await _deactivate(registry)
        if "count" not in state:
            raise RuntimeError(f"{name}: state {state!r}")
        t["snapshot"].append(t1 - t0)

    try:
        for k in range(len(raw_idx)):
            steps = [("raw", raw_idx[k]), ("get", get_idx[k]), ("snapshot", snap_idx[k])]
            r = k % 3
            for what, i in steps[r:] + steps[:r]:
                if what == "raw":
                    raw(i)
                elif what == "get":
                    await get(i)
                else:
                    await snapshot(i)
    finally:
        await registry.stop()
    return {k: _summary(v) for k, v in t.items()} | {"activations": registry.activations}


def pick(n: int, seed: int, rep: int, k: int, warm: int) -> tuple[list[int], list[list[int]]]:
    """Warm-up indices and three disjoint lists of ``k`` indices for this repetition (a seeded
    permutation of the data set, a different slice per repetition; it wraps when the set is small)."""
    perm = random.Random(seed).sample(range(n), n)
    base = rep * (3 * k + warm)
    take = [perm[(base + j) % n] for j in range(3 * k + warm)]
    return take[:warm], [take[warm + v * k : warm + (v + 1) * k] for v in range(3)]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.activation_worker")
    ap.add_argument(
        "--spec", required=True, help='{"root": DIR, "n": N, "seed": S, "rep": R, "k": K, "warm": W}'
    )
    spec = json.loads(ap.parse_args().spec)
    root = Path(spec["root"])
    warm, (raw_idx, get_idx, snap_idx) = pick(
        int(spec["n"]), int(spec["seed"]), int(spec["rep"]), int(spec["k"]), int(spec["warm"])
    )
    if warm:  # imports, statement caches, allocator: not measured
        uvloop.run(measure(root, warm, warm[1:] + warm[:1], warm[2:] + warm[:2]))
    result = uvloop.run(measure(root, raw_idx, get_idx, snap_idx))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
