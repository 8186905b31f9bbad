"""``python -m bench [--quick] [--reps N] [--only a,b] [--out bench/RESULTS.md] [--data-dir DIR]``."""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench import (
    activation,
    callkeys,
    fanout,
    langgraph,
    mcp,
    mcp_agent,
    memory,
    rpc,
    sqlite_ceiling,
    streams,
    wakeups,
    workflows,
)
from bench.dataset import Dataset, ensure_dataset
from bench.machine import machine_info
from bench.procs import log
from bench.report import render
from bench.settings import BENCH_DIR, SECTIONS, Settings, settings_for


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument(
        "--quick", action="store_true", help="seconds-long smoke variant (numbers not meaningful)"
    )
    ap.add_argument("--reps", type=int, help="repetitions per figure (default 5; quick 1; memory at most 3)")
    ap.add_argument("--only", help=f"comma list of sections: {','.join(SECTIONS)}")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "RESULTS.md")
    ap.add_argument("--data-dir", type=Path, help=f"bulky data (default {BENCH_DIR / '.data'})")
    a = ap.parse_args(argv)
    if a.reps is not None and a.reps < 1:
        ap.error("--reps must be ≥ 1")
    return a


def _raise_fd_limit(need: int) -> None:
    """Raise the soft descriptor limit (inherited by the children) towards ``need``, up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _section(s: Settings, name: str, dataset: Dataset | None) -> dict[str, Any]:
    if name == "sqlite":
        return sqlite_ceiling.run(s)
    if name == "rpc":
        return rpc.run(s)
    if name == "callkeys":
        return callkeys.run(s)
    if name == "fanout":
        return fanout.run(s)
    if name == "activation":
        return activation.run(s, dataset)
    if name == "wakeups":
        return wakeups.run(s)
    if name == "streams":
        return streams.run(s)
    if name == "workflows":
        return workflows.run(s)
    if name == "mcp_agent":
        return mcp_agent.run(s.reps, s.mcp_calls)
    if name == "mcp_server":
        return mcp.run(s.reps, s.mcp_server_s)
    if name == "langgraph":
        return langgraph.run(s.reps, s.langgraph_s)
    return memory.run(s, dataset)


def run(s: Settings, only: tuple[str, ...]) -> dict[str, Any]:
    s.data_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "machine": machine_info(s.data_dir),
        "settings": {
            "quick": s.quick,
            "reps": s.reps,
            "memory_reps": s.memory_reps,
            "point_s": s.point_s,
            "warmup_s": s.warmup_s,
            "data_dir": str(s.data_dir),
        },
        "sections": {},
        "section_s": {},
        "errors": {},
    }
    shutil.rmtree(s.data_dir / "logs", ignore_errors=True)  # server logs of this run only
    t_all = time.monotonic()
    dataset: Dataset | None = None
    for name in only:
        t0 = time.monotonic()
        log(f"== section {name}")
        try:
            if name in ("activation", "memory") and dataset is None:
                dataset = ensure_dataset(s.data_dir, s.activation_files)
            results["sections"][name] = _section(s, name, dataset)
        except Exception as exc:  # report the others; the exit status says something failed
            log(f"section {name} FAILED: {type(exc).__name__}: {exc}")
            results["errors"][name] = "".join(traceback.format_exception_only(exc)).strip()[-2000:]
        results["section_s"][name] = time.monotonic() - t0
    results["wall_s"] = time.monotonic() - t_all
    return results


def _results_name(s: Settings) -> str:
    """Quick runs keep their own file: a smoke run never replaces a full run's raw figures."""
    return "results-quick.json" if s.quick else "results.json"


def _merge(path: Path, new: dict[str, Any], only: tuple[str, ...]) -> dict[str, Any]:
    """``--only``: the sections run now replace theirs in the previous results of the same mode, so that
    RESULTS.md keeps the other sections (each section's figures still come from one run)."""
    try:
        prev: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return new
    if prev.get("settings", {}).get("quick") != new["settings"]["quick"]:
        return new
    for name in only:
        prev["sections"].pop(name, None)
        prev["errors"].pop(name, None)
        if name in new["sections"]:
            prev["sections"][name] = new["sections"][name]
        if name in new["errors"]:
            prev["errors"][name] = new["errors"][name]
        prev["section_s"][name] = new["section_s"][name]
    prev["wall_s"] = sum(prev["section_s"].values())
    prev.setdefault("rerun", []).extend(only)
    return prev


#: In RESULTS.md, what follows this line is written by hand (comparisons, decisions) and kept by a run.
KEPT = "<!-- Below: written by hand, kept when make bench rewrites the sections above. -->"


def _kept(out: Path) -> str:
    """The hand-written part of the file a run replaces (from :data:`KEPT` on), or nothing."""
    try:
        text = out.read_text()
    except OSError:
        return ""
    at = text.find(KEPT)
    return "\n" + text[at:] if at >= 0 else ""


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    s = settings_for(a.quick, a.reps, a.data_dir)
    only = SECTIONS if not a.only else tuple(x.strip() for x in a.only.split(",") if x.strip())
    unknown = set(only) - set(SECTIONS)
    if unknown:
        print(f"unknown section(s) {sorted(unknown)}; choose from {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    only = tuple(x for x in SECTIONS if x in only)
    _raise_fd_limit(4 * max(s.memory_steps[-1], s.fanout_conns) + 1000)
    log(f"bench: {'quick' if s.quick else 'full'} suite, sections {', '.join(only)}, {s.reps} reps")
    results = run(s, only)
    if a.only:
        results = _merge(s.data_dir / _results_name(s), results, only)
    (s.data_dir / _results_name(s)).write_text(json.dumps(results, indent=1))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(render(results) + _kept(a.out))
    log(f"bench: wrote {a.out} ({results['wall_s']:.0f} s)")
    if results["errors"]:
        log(
            f"bench: section(s) failed: {', '.join(results['errors'])} (server logs in {s.data_dir / 'logs'})"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
