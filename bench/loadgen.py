"""The load-client process: ``python -m bench.loadgen MODE --spec JSON``; prints one JSON object.

Modes (every loop is bounded by a deadline and a count):

- ``rr``: open connection groups, then run request/response points: each of ``conns`` connections loops
  ``send frame → await reply`` for ``duration`` seconds. Reports ops/s, p50/p99 latency of every round
  trip, reply errors, and the server's and this client's CPU per operation. A point with ``pin`` runs
  with this client and the server on two different CPUs (see :func:`pinned`).
- ``ab``: the same request/response points against several servers at once, interleaved in short
  slices (see :func:`run_ab`): for comparing two builds of one server on a shared machine.
- ``fanout``: ``subs`` connections subscribed to one actor count the frames they receive while one
  driver connection calls ``increment`` in a loop for ``duration`` seconds.
- ``hold``: open idle connections in steps (each does one request), print ``{"ready": n}`` after each
  step and wait for a line on stdin before the next step (``quit`` or EOF ends).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvloop

from bench.procs import proc_cpu_s
from bench.stats import pct
from bench.wsclient import WsConn, connect, connect_many, masked_frame

Spec = dict[str, Any]
_MAX_OPS_PER_CONN = 10_000_000
_OK = b'"ok":true'


def _paths(template: str, n: int, names: int | None = None) -> list[str]:
    return [template.format(i=i % (names or n)) for i in range(n)]


def _reply_ok(expect: str, payload_len: int) -> Callable[[bytes], bool]:
    if expect == "rpc_ok":
        return lambda reply: _OK in reply
    return lambda reply: len(reply) == payload_len


async def rr_point(
    conns: list[WsConn],
    frame: bytes | Callable[[], bytes],
    check: Callable[[bytes], bool],
    duration: float,
    server_pid: int,
) -> dict[str, Any]:
    """One request/response point. ``frame``: the frame every request sends, or a function that makes
    each request's own (outside the timed round trip)."""
    make = frame if callable(frame) else None
    lat: list[int] = []
    add = lat.append
    errors = 0
    clock = time.perf_counter_ns
    cpu_srv0, cpu_cli0 = proc_cpu_s(server_pid), time.process_time()
    start = clock()
    deadline = start + int(duration * 1e9)

    async def worker(c: WsConn) -> int:
        nonlocal errors
        n = 0
        while n < _MAX_OPS_PER_CONN:
            request = make() if make is not None else frame
            assert isinstance(request, bytes)
            t0 = clock()
            reply = await c.request(request)
            t1 = clock()
            add(t1 - t0)
            n += 1
            if not check(reply):
                errors += 1
            if t1 >= deadline:
                break
        return n

    async with asyncio.timeout(duration + 60):
        counts = await asyncio.gather(*(worker(c) for c in conns))
    secs = (clock() - start) / 1e9
    total = sum(counts)
    srv = proc_cpu_s(server_pid) - cpu_srv0
    cli = time.process_time() - cpu_cli0
    return {
        "conns": len(conns),
        "n": total,
        "secs": secs,
        "ops_s": total / secs,
        "p50_us": pct(lat, 50) / 1e3,
        "p99_us": pct(lat, 99) / 1e3,
        "errors": errors,
        "srv_cpu_us_per_op": srv / total * 1e6 if total else None,
        "cli_cpu_us_per_op": cli / total * 1e6 if total else None,
    }


@contextlib.contextmanager
def pinned(server_pid: int, pin: bool) -> Iterator[bool]:
    """With ``pin`` (and ≥ 2 CPUs): this client on one CPU and the server on another for the block.

    At one connection the scheduler otherwise places client and server on the same CPU in some runs
    (direct hand-off, ~2.5× faster round trips) and on different CPUs in others, so c=1 is bimodal.
    Different CPUs is the realistic case: a server core woken by traffic from elsewhere.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        yield False
        return
    mine, theirs = os.sched_getaffinity(0), os.sched_getaffinity(server_pid)
    os.sched_setaffinity(0, {cpus[0]})
    os.sched_setaffinity(server_pid, {cpus[1]})
    try:
        yield True
    finally:
        os.sched_setaffinity(server_pid, theirs)
        os.sched_setaffinity(0, mine)


def numbered(template: str) -> Callable[[], bytes]:
    """Frames made from ``template`` with ``%(n)d`` replaced by 0, 1, 2 … (one per request: a new
    idempotency key each time, say), masked as every client frame is."""
    numbers = itertools.count()
    return lambda: masked_frame((template % {"n": next(numbers)}).encode())


async def run_rr(spec: Spec) -> dict[str, Any]:
    """``spec["template"]`` (optional): each request's frame made by :func:`numbered` instead of the one
    pre-masked ``spec["frame"]``."""
    port, pid = int(spec["port"]), int(spec["server_pid"])
    payload = str(spec["frame"]).encode()
    frame: bytes | Callable[[], bytes] = masked_frame(payload)
    if spec.get("template"):
        frame = numbered(str(spec["template"]))
    check = _reply_ok(str(spec["expect"]), len(payload))
    welcome = bool(spec["welcome"])
    groups: dict[str, list[WsConn]] = {}
    out: dict[str, Any] = {"points": {}}
    try:
        for name, g in spec["groups"].items():
            groups[name] = await connect_many(port, _paths(g["path"], int(g["n"])), welcome=welcome)
        first = next(iter(groups.values()))
        if spec["warmup"] > 0:
            await rr_point(first[:10], frame, check, float(spec["warmup"]), pid)
        for p in spec["points"]:
            conns = groups[p["group"]][: int(p["conns"])]
            with pinned(pid, bool(p.get("pin"))) as did:
                res = await rr_point(conns, frame, check, float(spec["duration"]), pid)
            out["points"][p["name"]] = res | {"pinned": did}
    finally:
        for conns in groups.values():
            for c in conns:
                c.close()
        await asyncio.sleep(0.05)
    welcomes = 1 if welcome else 0
    out["replies"] = {name: sum(c.received - welcomes for c in conns) for name, conns in groups.items()}
    return out


def _points_of(target: Spec, spec: Spec) -> list[Spec]:
    points: list[Spec] = target["points"] if "points" in target else spec["points"]
    return points


async def run_ab(spec: Spec) -> dict[str, Any]:
    """Several servers, one client: each round runs every point (a target's own ``points``, else the
    spec's) against every target for one short slice, targets in rotated order, so that a burst of
    load from elsewhere on the machine hits all of them within a round.
    Returns ``{"rounds": [{target: {point: result}}]}``."""
    frame = masked_frame(str(spec["frame"]).encode())
    size = len(str(spec["frame"]).encode())
    targets: list[Spec] = spec["targets"]
    conns: dict[str, list[WsConn]] = {}
    rounds: list[dict[str, Any]] = []
    slice_s = float(spec["slice"])
    try:
        for t in targets:
            n = max(int(p["conns"]) for p in _points_of(t, spec))
            conns[t["name"]] = await connect_many(
                int(t["port"]), _paths(str(t["path"]), n), welcome=bool(t["welcome"])
            )
            check = _reply_ok(str(t["expect"]), size)
            await rr_point(conns[t["name"]], frame, check, float(spec["warmup"]), int(t["pid"]))
        for r in range(int(spec["rounds"])):
            k = r % len(targets)
            one: dict[str, Any] = {}
            for t in targets[k:] + targets[:k]:
                check = _reply_ok(str(t["expect"]), size)
                one[t["name"]] = res = {}
                for p in _points_of(t, spec):
                    pid = int(t["pid"])
                    with pinned(pid, bool(p.get("pin"))):
                        res[p["name"]] = await rr_point(
                            conns[t["name"]][: int(p["conns"])], frame, check, slice_s, pid
                        )
            rounds.append(one)
    finally:
        for group in conns.values():
            for c in group:
                c.close()
        await asyncio.sleep(0.05)
    return {"rounds": rounds}


async def run_fanout(spec: Spec) -> dict[str, Any]:
    port = int(spec["port"])
    frame = masked_frame(str(spec["frame"]).encode())
    subs: list[WsConn] = []
    driver: WsConn | None = None
    try:
        subs = await connect_many(port, [str(spec["sub_path"])] * int(spec["subs"]), welcome=True)
        for c in subs:
            c.keep = False  # count only
        driver = await connect(port, str(spec["driver_path"]), welcome=True)

        async def drive(seconds: float) -> int:
            assert driver is not None
            n = 0
            deadline = time.perf_counter() + seconds
            while n < _MAX_OPS_PER_CONN:
                reply = await driver.request(frame)
                if _OK not in reply:
                    raise RuntimeError(f"increment failed: {reply[:200]!r}")
                n += 1
                if time.perf_counter() >= deadline:
                    break
            return n

        def delivered() -> int:
            return sum(c.received for c in subs) - len(subs)  # minus the welcomes

        async def settle(expected: int, limit: float) -> int:
            """Poll the counters (bumped by ``data_received``) until ``expected`` or ``limit`` s."""
            for _ in range(int(limit / 0.01)):
                if delivered() >= expected:
                    break
                await asyncio.sleep(0.01)
            return delivered()

        warm = await drive(float(spec["warmup"]))
        await settle(warm * len(subs), 10.0)
        r0, t0 = delivered(), time.perf_counter()
        async with asyncio.timeout(float(spec["duration"]) + 60):
            incs = await drive(float(spec["duration"]))
        r1, t1 = delivered(), time.perf_counter()
        final = await settle((warm + incs) * len(subs), 10.0)
        expected = (warm + incs) * len(subs)
        return {
            "subs": len(subs),
            "secs": t1 - t0,
            "increments": incs,
            "increments_s": incs / (t1 - t0),
            "frames": r1 - r0,
            "frames_s": (r1 - r0) / (t1 - t0),
            "expected_total": expected,
            "delivered_total": final,
            "closed": sum(1 for c in subs if c.lost or c.closed_by_server is not None),
        }
    finally:
        for c in subs:
            c.close()
        if driver is not None:
            driver.close()
        await asyncio.sleep(0.05)


async def run_hold(spec: Spec) -> dict[str, Any]:
    port = int(spec["port"])
    frame = masked_frame(str(spec["frame"]).encode())
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    paths = _paths(str(spec["path"]), max(spec["steps"]), int(spec["names"]))
    conns: list[WsConn] = []
    t_all = time.monotonic()
    try:
        for target in spec["steps"]:
            t0 = time.perf_counter()
            new = await connect_many(
                port, paths[len(conns) : target], welcome=bool(spec["welcome"]), batch=200
            )
            connect_s = time.perf_counter() - t0
            for i in range(0, len(new), 500):  # one request each, so buffers exist as in real use
                async with asyncio.timeout(60):
                    await asyncio.gather(*(c.request(frame) for c in new[i : i + 500]))
            conns += new
            print(json.dumps({"ready": len(conns), "connect_s": connect_s}), flush=True)
            line = await asyncio.wait_for(reader.readline(), 300)
            if not line or line.strip() == b"quit" or time.monotonic() - t_all > 900:
                break
    finally:
        for c in conns:
            c.close()
        await asyncio.sleep(0.2)
    return {"held": len(conns), "closed": sum(1 for c in conns if c.closed_by_server is not None)}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.loadgen")
    ap.add_argument("mode", choices=["rr", "ab", "fanout", "hold"])
    ap.add_argument("--spec", required=True, help="JSON object with the mode's parameters")
    a = ap.parse_args()
    spec: Spec = json.loads(a.spec)
    runner = {"rr": run_rr, "ab": run_ab, "fanout": run_fanout, "hold": run_hold}[a.mode]
    result = uvloop.run(runner(spec))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
