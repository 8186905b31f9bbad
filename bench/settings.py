"""Run parameters: the full suite (a few minutes) and the quick smoke variant (seconds)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

__all__ = ["BENCH_DIR", "ROOT", "SECTIONS", "Settings", "settings_for"]

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent

#: Section names accepted by ``--only``, in run order.
SECTIONS = (
    "sqlite",
    "rpc",
    "callkeys",
    "fanout",
    "activation",
    "memory",
    "wakeups",
    "streams",
    "mcp_agent",
    "mcp_server",
    "langgraph",
    "workflows",
)


@dataclass(frozen=True, slots=True)
class Settings:
    quick: bool
    reps: int  # repetitions of every figure (min/median/max over them)
    point_s: float  # one request/response point (one concurrency level, one server)
    warmup_s: float  # request/response warm-up before the points of each client run
    concs: tuple[int, ...]  # durable RPC connection counts (each connection its own actor)
    hot_conns: int  # connections hammering one actor name
    fanout_conns: int  # subscribers of one actor
    fanout_s: float
    sqlite_s: float  # one raw SQLite commit-rate cell
    sqlite_batch: int  # rows per commit of the batched ceiling
    activation_files: int  # dormant actor files on disk
    activation_sample: int  # activations per variant per repetition
    memory_steps: tuple[int, int, int]  # idle connections: baseline, then two measured steps
    memory_reps: int
    wakeup_actors: int  # dormant actors of the burst set (each with wakeup_per_actor pending wake-ups)
    wakeup_per_actor: int
    wakeup_small_actors: int  # the small burst set the start-up time is compared against
    wakeup_spread: int  # unsaturated run: this many wake-ups (one per dormant actor) …
    wakeup_spread_s: float  # … due evenly over this many seconds
    wakeup_reps: int
    stream_tokens: int  # words of one streamed answer (one and a hundred subscribers)
    stream_subs: int  # subscribers of one chat actor
    stream_concurrent: int  # chat actors streaming at once
    stream_concurrent_tokens: int  # words of each of those answers
    stream_paced_tokens: int  # words of each answer of the paced shape (as many actors as concurrent)
    stream_pace: float  # words a second each model of the paced shape yields
    mcp_calls: int  # MCP tool calls per repetition, direct and through an agent
    mcp_server_s: float  # seconds of MCP tool calls per server per repetition
    langgraph_s: float  # seconds of LangGraph runs per saver per repetition
    data_dir: Path  # bulky data (actor files, SQLite ceilings, server data dirs, logs)

    @property
    def echo_ceiling_conc(self) -> int:
        """The echo concurrency the fan-out rate is compared against."""
        return max(self.concs)


def settings_for(quick: bool, reps: int | None = None, data_dir: Path | None = None) -> Settings:
    base = Settings(
        quick=False,
        reps=5,
        point_s=1.5,
        warmup_s=0.2,
        concs=(1, 10, 100),
        hot_conns=100,
        fanout_conns=1000,
        fanout_s=2.0,
        sqlite_s=1.0,
        sqlite_batch=100,
        activation_files=100_000,
        activation_sample=2000,
        memory_steps=(10, 1000, 5000),
        memory_reps=3,
        wakeup_actors=10_000,
        wakeup_per_actor=10,
        wakeup_small_actors=100,
        wakeup_spread=2000,
        wakeup_spread_s=10.0,  # 200 wake-ups/s offered: about a third of what one core serves one by one
        wakeup_reps=3,
        stream_tokens=4000,
        stream_subs=100,
        stream_concurrent=100,
        stream_concurrent_tokens=1000,
        stream_paced_tokens=300,
        stream_pace=50.0,
        mcp_calls=50,
        mcp_server_s=3.0,
        langgraph_s=3.0,
        data_dir=BENCH_DIR / ".data",
    )
    if quick:
        base = replace(
            base,
            quick=True,
            reps=1,
            point_s=0.3,
            warmup_s=0.05,
            hot_conns=20,
            fanout_conns=100,
            fanout_s=0.4,
            sqlite_s=0.2,
            activation_files=200,
            activation_sample=50,
            memory_steps=(10, 60, 110),
            memory_reps=1,
            wakeup_actors=200,
            wakeup_small_actors=20,
            wakeup_spread=200,
            wakeup_spread_s=1.0,
            wakeup_reps=1,
            stream_tokens=200,
            stream_subs=10,
            stream_concurrent=10,
            stream_concurrent_tokens=100,
            stream_paced_tokens=20,
            stream_pace=50.0,
            mcp_calls=5,
            mcp_server_s=0.3,
            langgraph_s=0.3,
        )
    if reps is not None:
        base = replace(
            base,
            reps=reps,
            memory_reps=reps if quick else min(reps, base.memory_reps),
            wakeup_reps=reps if quick else min(reps, base.wakeup_reps),
        )
    if data_dir is not None:
        base = replace(base, data_dir=data_dir)
    return base
