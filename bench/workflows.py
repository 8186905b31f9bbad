"""Section ``workflows``: what the workflow core costs, a 10-step workflow ÷ the same 10 writes as
plain turns, measured in the same run.

An in-process :class:`~roost.actors.registry.Registry` over a fresh data directory (real SQLite files,
the system clock), ``actors`` actors of one kind driven concurrently, each by one sequential loop, in
alternating order within each repetition:

- *plain*: ``write(i)``, a call whose turn inserts one row; ten calls make one unit;
- *in-turn*: ``start_workflow("ten")``: a workflow of ten ``step.do`` steps, each inserting the same
  row, with its records (the workflow row, ten step rows, its history, a ``workflow`` event); it
  completes inside the start's turn (in-turn steps run on until the first wait);
- *outside*: ``start_workflow("ten_outside")``: ten ``step.external`` steps that do nothing, each
  run by the process's runner and recorded in a turn of its own; the caller waits for the
  last of its steps (an in-turn one, not counted) to be recorded.

Figures: steps (or writes) per second, and the ratios paired per repetition: *in-turn* ÷ *plain* is
the issue's figure (the core's cost on the writes a workflow makes), *outside* ÷ *plain* what a step
outside turns costs.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench.procs import log
from bench.settings import Settings
from bench.stats import pluck, ratios, summarize
from roost.actors import callable
from roost.actors.registry import Registry, RuntimeConfig
from roost.workflows import Step, StepAttempt, Workflows, workflow

__all__ = ["HEADING", "VARIANTS", "render", "run"]

HEADING = "## Workflow core"
VARIANTS = ("plain", "in_turn", "outside")
STEPS = 10


class BenchFlow(Workflows):
    kind = "benchflow"
    migrations = ("CREATE TABLE rows (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)",)

    def _write(self, v: int) -> int:
        self.sql.execute("INSERT INTO rows (v) VALUES (?)", (v,))
        return v

    @callable
    async def write(self, v: int) -> int:
        return self._write(v)

    @workflow
    async def ten(self, step: Step, _: Any) -> int:
        total = 0
        for i in range(STEPS):
            total += await step.do(f"w{i}", partial(self._write, i))
        return total

    @workflow
    async def ten_outside(self, step: Step, _: Any) -> int:
        total = 0
        for i in range(STEPS):
            total += await step.external(f"x{i}", partial(_nothing, i=i))
        await step.do("signal", lambda: _signal(step.workflow_id))
        return total


async def _nothing(_: StepAttempt, i: int) -> int:
    return i


#: In-process only: the futures the outside variant's callers wait on, by workflow id.
_WAITERS: dict[str, asyncio.Future[None]] = {}


def _signal(wid: str) -> None:
    fut = _WAITERS.pop(wid, None)
    if fut is not None and not fut.done():
        fut.set_result(None)


async def _drive(reg: Registry, variant: str, actors: int, seconds: float, rep: int) -> dict[str, Any]:
    async def loop(a: int) -> int:
        name = f"{variant}-{rep}-{a}"
        units = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            if variant == "plain":
                for i in range(STEPS):
                    await reg.call(BenchFlow.kind, name, "write", [i], {})
            elif variant == "in_turn":
                status, _ = await reg.call(
                    BenchFlow.kind, name, "start_workflow", ["ten", None, f"u{units}"], {}
                )
                assert status["status"] == "completed", status
            else:
                wid = f"{name}-u{units}"
                fut = _WAITERS[wid] = asyncio.get_running_loop().create_future()
                await reg.call(BenchFlow.kind, name, "start_workflow", ["ten_outside", None, wid], {})
                await asyncio.wait_for(fut, 30)
            units += 1
        return units

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(loop(a) for a in range(actors)))
    wall = time.perf_counter() - t0
    steps = sum(counts) * STEPS
    return {"steps": steps, "wall_s": wall, "steps_s": steps / wall}


async def _run_async(s: Settings, data: Path) -> dict[str, Any]:
    actors = 4 if s.quick else 8
    seconds = 0.5 if s.quick else max(1.0, s.point_s)
    reps: list[dict[str, Any]] = []
    reg = Registry([BenchFlow], RuntimeConfig(data_dir=data, turn_timeout=60.0))
    await reg.start()
    try:
        for rep in range(s.reps):
            order = VARIANTS if rep % 2 == 0 else tuple(reversed(VARIANTS))
            row: dict[str, Any] = {}
            for variant in order:
                row[variant] = await _drive(reg, variant, actors, seconds, rep)
                log(f"workflows rep {rep} {variant}: {row[variant]['steps_s']:,.0f} steps/s")
            reps.append(row)
    finally:
        await reg.stop()
    return {"actors": actors, "seconds": seconds, "steps": STEPS, "reps": reps}


def run(s: Settings) -> dict[str, Any]:
    data = s.data_dir / "workflows"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    try:
        return asyncio.run(_run_async(s, data))
    finally:
        shutil.rmtree(data, ignore_errors=True)


def render(res: dict[str, Any]) -> list[str]:
    reps = res["reps"]
    col = {v: pluck(reps, v, "steps_s") for v in VARIANTS}

    def f(values: list[float | None] | list[float], digits: int = 0) -> str:
        s = summarize(values)
        if not s.ok:
            return "–"
        if s.n == 1 or s.lo == s.hi:
            return f"{s.med:,.{digits}f}"
        return f"{s.med:,.{digits}f} ({s.lo:,.{digits}f}–{s.hi:,.{digits}f})"

    return [
        HEADING,
        "",
        f"In process (a `Registry` over real files), {res['actors']} actors driven at once, one sequential "
        f"loop each, {res['seconds']} s per variant, variants alternating per repetition. *plain*: ten "
        "`write` calls, one row each; *in-turn*: a workflow of ten `step.do` steps writing the same rows "
        "(it completes inside its start's turn); *outside*: ten `step.external` steps doing nothing, each "
        "a runner task and a recording turn. Ratios paired per repetition.",
        "",
        "| plain writes/s | in-turn steps/s | outside steps/s | in-turn ÷ plain | outside ÷ plain |",
        "|---:|---:|---:|---:|---:|",
        f"| {f(col['plain'])} | {f(col['in_turn'])} | {f(col['outside'])} | "
        f"{f(ratios(col['in_turn'], col['plain']), 2)} | {f(ratios(col['outside'], col['plain']), 2)} |",
        "",
    ]
