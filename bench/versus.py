"""``python -m bench.versus --base REV``: durable RPC of this checkout against another commit, paired.

Two full ``make bench`` runs one after the other compare badly on a shared machine: the Starlette echo
alone moved between 10,000 and 31,000 msg/s from one repetition to the next. This serves both builds at
once instead, each as its own ``roost serve`` (the base from ``git archive REV``, run with the same
Python and packages), beside the Starlette/uvicorn echo as the ceiling, and drives them from one load
client in interleaved slices (``bench.loadgen`` mode ``ab``): every round gives each server one short
slice at 10 connections and one at 1 (client and server pinned to different CPUs, as in ``rpc``),
servers in rotated order, so a burst of load from elsewhere hits all three within the same second.
Ratios are paired per round (``head ÷ base``, each ``÷ echo``); the median over rounds and its
interquartile range are printed as a Markdown table. ``--base .`` with ``--base-env
ROOST_FAST_PATHS=0`` measures one build against itself with the fast paths off.

The frame is the ``rpc`` section's (``counter.increment``, ``?subscribe=none``, connection *i* on its
own actor ``rpc-i``) at 1, 10 and 100 connections, and 100 connections on one actor (``hot``, compared
with the echo at 100), with the rate and connection limits off as there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.procs import Server, child_env, free_port, log, run_client, running
from bench.rpc import RPC_FRAME, echo_server
from bench.settings import BENCH_DIR, ROOT, settings_for
from bench.stats import pct, pluck, ratios

__all__ = ["main"]

_POINTS = [
    {"name": "c10", "conns": 10},
    {"name": "c1", "conns": 1, "pin": True},
    {"name": "c100", "conns": 100},
]
#: One hot actor: 100 connections calling the same actor (``hot``), against the echo at 100.
_HOT = [{"name": "hot", "conns": 100}]
#: Table rows: (label, target suffix, point, the echo's point it is compared with).
_ROWS = [
    ("c=1", "", "c1", "c1"),
    ("c=10", "", "c10", "c10"),
    ("c=100", "", "c100", "c100"),
    ("one hot actor, 100 connections", "-hot", "hot", "c100"),
]


def _checkout(rev: str, into: Path) -> str:
    """``git archive rev`` unpacked into ``into``; returns the full commit id."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    archive = subprocess.Popen(["git", "archive", sha], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {sha} failed")
    return sha


def _cli_module(tree: Path) -> str:
    """The CLI module of a checkout: ``roost.cli`` since the namespace, ``transport.cli`` before."""
    if (tree / "roost" / "cli").is_dir():
        return "roost.cli"
    if (tree / "roost" / "transport" / "cli.py").is_file():
        return "roost.transport.cli"
    return "transport.cli"


def _server(name: str, tree: Path, data: Path, logs: Path, extra: dict[str, str]) -> Server:
    module = _cli_module(tree)
    env = {"PYTHONPATH": str(tree), **extra}
    where = subprocess.run(  # the child must import the tree's code, not the installed package
        [sys.executable, "-c", f"import {module} as m; print(m.__file__)"],
        cwd=tree,
        env=child_env(env),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"{name}: {module} is imported from {where}, not from {tree}")
    port = free_port()
    argv = [sys.executable, "-m", module, "serve", "--data", str(data), "--port", str(port)]
    argv += ["--rate-limit", "0", "--principal-rate-limit", "0", "--max-conns-per-actor", "0"]
    argv += ["--log-level", "warning"]
    return Server(name, argv, port, logs / f"{name}.log", env=env, cwd=tree)


def _targets(servers: dict[str, Server]) -> list[dict[str, Any]]:
    """The echo, and each Roost server twice: connection *i* on its own actor, and all on one."""
    out: list[dict[str, Any]] = []
    for name, srv in servers.items():
        echo = name == "echo"
        one = {"port": srv.port, "pid": srv.pid, "welcome": not echo, "expect": "echo" if echo else "rpc_ok"}
        own = "/echo" if echo else "/agents/counter/rpc-{i}?subscribe=none"
        out.append({"name": name, "path": own, **one})
        if not echo:
            out.append(
                {"name": f"{name}-hot", "path": "/agents/counter/hot?subscribe=none", "points": _HOT, **one}
            )
    return out


def _med_iqr(values: list[float]) -> str:
    return f"{pct(values, 50):.3f} ({pct(values, 25):.3f}–{pct(values, 75):.3f})"


def _tree(rev: str, into: Path) -> tuple[Path, str]:
    """A directory is used as it is (a working tree with changes); anything else is a commit."""
    if Path(rev).is_dir():
        tree = Path(rev)
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True, check=False
        ).stdout.strip()
        return tree, f"{sha or tree.name} (a working tree, as it is)"
    return into, _checkout(rev, into)[:7]


def _with(env: dict[str, str] | None) -> str:
    """How a side's own environment is named in the report (nothing without one)."""
    return " with " + " ".join(f"{k}={v}" for k, v in env.items()) if env else ""


def measure(
    base: str,
    head: str,
    rounds: int,
    slice_s: float,
    data_dir: Path,
    base_env: dict[str, str] | None = None,
    head_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    root = data_dir / "versus"
    base_tree, base_name = _tree(base, root / "base-tree")
    head_tree, head_name = _tree(head, root / "head-tree")
    logs = data_dir / "logs"
    s = settings_for(False, data_dir=data_dir)
    servers = {
        "echo": echo_server(s, "starlette"),
        "base": _server("base", base_tree, root / "base-data", logs, base_env or {}),
        "head": _server("head", head_tree, root / "head-data", logs, head_env or {}),
    }
    spec = {
        "frame": RPC_FRAME,
        "targets": _targets(servers),
        "points": _POINTS,
        "warmup": 1.0,
        "slice": slice_s,
        "rounds": rounds,
    }
    timeout = 120 + rounds * (len(servers) * len(_POINTS) + 2) * (slice_s + 0.3)
    with running(*servers.values()):
        res = run_client(["ab", "--spec", json.dumps(spec)], timeout=timeout)
    shutil.rmtree(root, ignore_errors=True)
    reps = res["rounds"]
    errors = sum(int(p["errors"]) for one in reps for srv in one.values() for p in srv.values())
    if errors:
        raise RuntimeError(f"{errors} replies were not the expected answer")
    return {
        "base": base_name + _with(base_env),
        "head": head_name + _with(head_env),
        "rounds": reps,
        "slice_s": slice_s,
    }


def render(res: dict[str, Any]) -> str:
    reps = res["rounds"]
    lines = [
        f"Base `{res['base']}`, head `{res['head']}`: {len(reps)} rounds of "
        f"{res['slice_s']} s slices per server and point. Median over rounds (interquartile range).",
        "",
        "| point | base ops/s | head ops/s | head ÷ base | base ÷ echo | head ÷ echo | "
        "base server CPU/op µs | head server CPU/op µs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, suffix, name, echo_point in _ROWS:
        ops = {k: pluck(reps, k + suffix, name, "ops_s") for k in ("base", "head")}
        ops["echo"] = pluck(reps, "echo", echo_point, "ops_s")
        cpu = {
            k: [v for v in pluck(reps, k + suffix, name, "srv_cpu_us_per_op") if v is not None]
            for k in ("base", "head")
        }
        lines.append(
            f"| {label} | {pct([v for v in ops['base'] if v], 50):,.0f} | "
            f"{pct([v for v in ops['head'] if v], 50):,.0f} | {_med_iqr(ratios(ops['head'], ops['base']))} | "
            f"{_med_iqr(ratios(ops['base'], ops['echo']))} | {_med_iqr(ratios(ops['head'], ops['echo']))} | "
            f"{pct(cpu['base'], 50):.1f} | {pct(cpu['head'], 50):.1f} |"
        )
    return "\n".join(lines) + "\n"


def _env(ap: argparse.ArgumentParser, pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            ap.error(f"expected NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.versus", description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="a commit, or a directory holding a checkout")
    ap.add_argument("--head", default=str(ROOT), help="the same (default: this checkout, as it is)")
    ap.add_argument(
        "--base-env", action="append", default=[], metavar="NAME=VALUE", help="environment of the base server"
    )
    ap.add_argument(
        "--head-env", action="append", default=[], metavar="NAME=VALUE", help="environment of the head server"
    )
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--slice", type=float, default=0.3, help="seconds per server and point in a round")
    ap.add_argument("--data-dir", type=Path, default=BENCH_DIR / ".data")
    ap.add_argument("--json", type=Path, help="also write the raw rounds here")
    a = ap.parse_args(argv)
    res = measure(a.base, a.head, a.rounds, a.slice, a.data_dir, _env(ap, a.base_env), _env(ap, a.head_env))
    if a.json:
        a.json.write_text(json.dumps(res))
    log("versus: done")
    print(render(res), end="")


if __name__ == "__main__":
    main()
