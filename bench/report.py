"""RESULTS.md: machine info, one table per section (median (min–max) over repetitions, every ratio next to
the ceiling it is measured against), and the targets table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench import workflows
from bench.settings import BENCH_DIR
from bench.stats import Summary, pluck, ratios, summarize
from bench.targets import Target, evaluate

__all__ = ["HEADINGS", "fmt", "render"]

HEADINGS = (
    "## Machine",
    "## Method",
    "## Ceilings: echo servers",
    "## Ceilings: raw SQLite commits",
    "## Durable RPC",
    "## One hot actor",
    "## Idempotency keys",
    "## Broadcast fan-out",
    "## Cold activation",
    "## Memory",
    "## Wake-ups",
    "## Streamed model output",
    "## MCP tool calls through an agent",
    "## MCP tool calls served by an actor",
    "## Targets",
    "## LangGraph checkpoints",
    workflows.HEADING,
)

Res = dict[str, Any]
Col = Sequence[float | None]
_ECHO = {"raw": "raw `websockets` echo (uvloop)", "starlette": "Starlette/uvicorn echo (our stack, no work)"}


def fmt(x: Summary | Col, digits: int = 0) -> str:
    """``median (min–max)``, or one value for a single repetition."""
    s = x if isinstance(x, Summary) else summarize(x)
    if not s.ok:
        return "–"
    if s.n == 1 or s.lo == s.hi:
        return f"{s.med:,.{digits}f}"
    return f"{s.med:,.{digits}f} ({s.lo:,.{digits}f}–{s.hi:,.{digits}f})"


def _ratio(num: Col, den: Col) -> str:
    return fmt(ratios(num, den), 2)


def _not_run(heading: str, section: str, errors: dict[str, str]) -> list[str]:
    if section in errors:
        return [heading, "", f"_Section `{section}` failed in this run:_ `{errors[section][:300]}`", ""]
    return [heading, "", f"_Not run in this invocation (`--only` without `{section}`)._", ""]


def _util(reps: list[Res], *path: str) -> Col:
    """Server CPU-seconds per wall second during a point (1.0 = one core saturated)."""
    cpu, ops = pluck(reps, *path, "srv_cpu_us_per_op"), pluck(reps, *path, "ops_s")
    return [None if c is None or o is None else c * o / 1e6 for c, o in zip(cpu, ops, strict=True)]


def _echo(res: Res) -> list[str]:
    reps = res["reps"]
    out = [
        HEADINGS[2],
        "",
        f"Request/response, lean client in its own process, the same {len(res['frame'])}-byte text frame as "
        "the durable RPC; every round trip timed. srv CPU: server process CPU per message; srv util: server "
        "CPU-seconds per second (1.0 = one core); client CPU: the load client's own. 1-connection rows: "
        "client and server pinned to different CPUs (see Method).",
        "",
        "| server | conns | msg/s | p50 µs | p99 µs | srv CPU µs/msg | srv util | client CPU µs/msg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, label in _ECHO.items():
        for c in reps[0][kind]["points"]:
            p = (kind, "points", c)
            out.append(
                f"| {label} | {c[1:]} | {fmt(pluck(reps, *p, 'ops_s'))} | {fmt(pluck(reps, *p, 'p50_us'))} | "
                f"{fmt(pluck(reps, *p, 'p99_us'))} | {fmt(pluck(reps, *p, 'srv_cpu_us_per_op'), 1)} | "
                f"{fmt(_util(reps, *p), 2)} | {fmt(pluck(reps, *p, 'cli_cpu_us_per_op'), 1)} |"
            )
    return [*out, ""]


def _sqlite(res: Res) -> list[str]:
    reps, b = res["reps"], res["batch"]
    labels = {
        "row1": "1 row (100 B) per commit",
        "rowN": f"{b} rows per commit (batched ceiling)",
        "opN": f"{b} increment-equivalents per commit (each: INSERT its log frame, as Roost writes it)",
    }
    out = [
        HEADINGS[3],
        "",
        f"stdlib `sqlite3`, WAL, `synchronous={res['sync']}` (Roost's default durability), a fresh file per "
        "cell, fixed time per cell, cells interleaved over repetitions.",
        "",
        "| cell | commits/s | rows or ops/s | commit p50 µs | commit p99 µs |",
        "|---|---:|---:|---:|---:|",
    ]
    for cell, label in labels.items():
        out.append(
            f"| {label} | {fmt(pluck(reps, cell, 'commits_s'))} | {fmt(pluck(reps, cell, 'items_s'))} | "
            f"{fmt(pluck(reps, cell, 'commit_p50_us'))} | {fmt(pluck(reps, cell, 'commit_p99_us'))} |"
        )
    return [*out, ""]


def _rpc(res: Res) -> list[str]:
    reps = res["reps"]
    concs = [c for c in reps[0]["roost"]["points"] if c != "hot"]
    out = [
        HEADINGS[4],
        "",
        "`counter.increment` over `roost serve`, committed before the reply, `?subscribe=none`; connection "
        "*i* calls its own actor `counter/rpc-i`. Ratios are paired (Roost ÷ the ceiling measured in the "
        "same repetition), then median (min–max) over repetitions.",
        "",
        "| conns | durable ops/s | ÷ Starlette/uvicorn echo | ÷ raw websockets echo | p50 µs | p99 µs "
        "| srv CPU µs/op (Starlette echo) | srv util |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in concs:
        ops = pluck(reps, "roost", "points", c, "ops_s")
        cpu = fmt(pluck(reps, "roost", "points", c, "srv_cpu_us_per_op"), 1)
        echo_cpu = fmt(pluck(reps, "starlette", "points", c, "srv_cpu_us_per_op"), 1)
        out.append(
            f"| {c[1:]} | {fmt(ops)} | {_ratio(ops, pluck(reps, 'starlette', 'points', c, 'ops_s'))} | "
            f"{_ratio(ops, pluck(reps, 'raw', 'points', c, 'ops_s'))} | "
            f"{fmt(pluck(reps, 'roost', 'points', c, 'p50_us'))} | "
            f"{fmt(pluck(reps, 'roost', 'points', c, 'p99_us'))} | {cpu} ({echo_cpu}) | "
            f"{fmt(_util(reps, 'roost', 'points', c), 2)} |"
        )
    c1 = concs[0]
    out += [
        "",
        f"Latency at {c1[1:]} connection (lower is better):",
        "",
        "| figure | Roost | Starlette/uvicorn echo | raw websockets echo | Roost ÷ Starlette | Roost ÷ raw |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key in ("p50_us", "p99_us"):
        roost, star, raw = (pluck(reps, k, "points", c1, key) for k in ("roost", "starlette", "raw"))
        out.append(
            f"| {key[:3]} µs | {fmt(roost)} | {fmt(star)} | {fmt(raw)} | {_ratio(roost, star)} | "
            f"{_ratio(roost, raw)} |"
        )
    return [*out, ""]


def _hot(res: Res, sq: Res | None) -> list[str]:
    reps = res["reps"]
    p = ("roost", "points", "hot")
    hot = pluck(reps, *p, "ops_s")
    top = f"c{max(int(c[1:]) for c in reps[0]['starlette']['points'])}"
    chk = res["hot_check"]
    out = [
        HEADINGS[5],
        "",
        f"{reps[0]['roost']['points']['hot']['conns']} connections call `increment` on the one actor "
        "`counter/hot`; turns that find input waiting share one commit (group commit). Cloudflare documents "
        "a soft limit of 1,000 requests/s per Durable Object.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| durable ops/s | {fmt(hot)} |",
        f"| p50 / p99 µs | {fmt(pluck(reps, *p, 'p50_us'))} / {fmt(pluck(reps, *p, 'p99_us'))} |",
        f"| srv CPU µs/op · srv util | {fmt(pluck(reps, *p, 'srv_cpu_us_per_op'), 1)} · "
        f"{fmt(_util(reps, *p), 2)} |",
        f"| ÷ Starlette/uvicorn echo at {top[1:]} connections (same rep) | "
        f"{_ratio(hot, pluck(reps, 'starlette', 'points', top, 'ops_s'))} |",
    ]
    if sq is not None:
        ceiling = summarize(pluck(sq["reps"], "opN", "items_s")).med
        out.append(
            f"| ÷ raw SQLite batched ceiling ({sq['batch']} increment-equivalents per commit: median "
            f"{ceiling:,.0f} ops/s in this run's `sqlite` section) | {summarize(hot).med / ceiling:.3f} |"
        )
    same = "equal ✓" if chk["ok"] else "**MISMATCH**"
    out += [
        f"| ÷ Cloudflare's 1,000 requests/s soft limit | {summarize(hot).med / 1000:.1f} |",
        f"| final count vs acknowledged increments (all reps) | {chk['count']:,} vs {chk['acked']:,}: "
        f"{same} |",
        "",
    ]
    return out


def _callkeys(res: Res) -> list[str]:
    reps = res["reps"]
    out = [
        HEADINGS[6],
        "",
        "`counter.increment` over `roost serve` (as in *Durable RPC*; connection *i* calls "
        "`counter/keys-i`), the same actors driven with and without an idempotency key, a new key per call "
        f"(`{res['frames']['keyed']}`), in alternating order within each repetition. Keyed: the actor "
        "looks the key up, runs the call and records its result in the same commit, pruning to its "
        "retention. Ratios paired per repetition (keyed ÷ unkeyed).",
        "",
        "| conns | unkeyed ops/s | keyed ops/s | keyed ÷ unkeyed | srv CPU µs/call unkeyed | keyed "
        "| CPU a key adds, µs/call | p50 µs unkeyed / keyed |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in reps[0]["unkeyed"]["points"]:
        col = {v: ("points", c) for v in ("unkeyed", "keyed")}
        ops = {v: pluck(reps, v, *col[v], "ops_s") for v in col}
        cpu = {v: pluck(reps, v, *col[v], "srv_cpu_us_per_op") for v in col}
        added = [
            None if k is None or u is None else k - u
            for k, u in zip(cpu["keyed"], cpu["unkeyed"], strict=True)
        ]
        p50 = {v: fmt(pluck(reps, v, *col[v], "p50_us")) for v in col}
        out.append(
            f"| {c[1:]} | {fmt(ops['unkeyed'])} | {fmt(ops['keyed'])} | "
            f"{_ratio(ops['keyed'], ops['unkeyed'])} | "
            f"{fmt(cpu['unkeyed'], 1)} | {fmt(cpu['keyed'], 1)} | {fmt(added, 1)} | "
            f"{p50['unkeyed']} / {p50['keyed']} |"
        )
    return [*out, ""]


def _fanout(res: Res) -> list[str]:
    reps = res["reps"]
    frames = pluck(reps, "fanout", "frames_s")
    lost = sum(int(r["fanout"]["expected_total"]) - int(r["fanout"]["delivered_total"]) for r in reps)
    closed = sum(int(r["fanout"]["closed"]) for r in reps)
    c = res["echo_conc"]
    return [
        HEADINGS[7],
        "",
        f"One actor `counter/fan`, {res['subs']:,} connections subscribed to state; one driver connection "
        "calls `increment` in a request/response loop; each increment is one state frame to every "
        "subscriber. "
        f"Ceiling: Starlette/uvicorn echo msg/s at {c} connections, same repetition. An echo message is one "
        "receive + one send for the server, a fan-out frame one send, so the ratio can exceed 1.",
        "",
        f"| subscribers | state frames delivered/s | increments/s | ÷ Starlette echo msg/s (c={c}) "
        "| frames lost | subscribers closed |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {res['subs']:,} | {fmt(frames)} | {fmt(pluck(reps, 'fanout', 'increments_s'))} | "
        f"{_ratio(frames, pluck(reps, 'echo', 'ops_s'))} | {lost} | {closed} |",
        "",
    ]


def _activation(res: Res) -> list[str]:
    reps = res["reps"]
    built = "reused from an earlier run" if res["built_s"] is None else f"built in {res['built_s']:.1f} s"
    labels = {
        "raw": (
            "ceiling: raw `sqlite3.connect` + `locking_mode=EXCLUSIVE` (as Roost) + `journal_mode=WAL` "
            "+ `SELECT state`"
        ),
        "get": "**Roost: `Registry.get` + `host.state`** (open, lock, migrations check, load state)",
        "ready": "Roost: … until its `on_start` turn has committed",
        "snapshot": "Roost: `await Registry.snapshot()` (exists check, activation, on_start, read turn)",
        "raw_close": "raw `close()`",
        "close": (
            "Roost deactivation (`Registry.sweep()` + `released()`: save, flush the directory, close file)"
        ),
    }
    out = [
        HEADINGS[8],
        "",
        f"{res['files']:,} dormant `counter` files on disk ({res['file_bytes']:,} bytes each, {built}, "
        f"`{res['root']}`): byte copies of one actor file made with `ActorFile.open`, at the paths "
        "`storage.actor_path` gives, registered in the directory; the copies share the original's "
        "`roost_meta` rows, which activation does not read. Each repetition is a fresh worker process "
        f"activating {res['sample']:,} never-touched actors per variant, interleaved; each Roost actor is "
        "deactivated right after.",
        "",
        "| variant | p50 µs | p99 µs | p50 ÷ raw sqlite3 p50 (same rep) |",
        "|---|---:|---:|---:|",
    ]
    raw = pluck(reps, "raw", "p50_us")
    for key, label in labels.items():
        p50 = pluck(reps, key, "p50_us")
        out.append(f"| {label} | {fmt(p50)} | {fmt(pluck(reps, key, 'p99_us'))} | {_ratio(p50, raw)} |")
    return [*out, ""]


def _memory(res: Res) -> list[str]:
    idle, steps, dormant, n = res["idle"], res["steps"], res["dormant"], res["files"]
    out = [
        HEADINGS[9],
        "",
        f"Server VmRSS, fresh servers per repetition: baseline {steps[0]} connections, then {steps[1]:,} and "
        f"{steps[2]:,} idle connections, each after one request. Roost: spread over 10 `counter` actors, "
        "default subscriptions, the welcome and one `get` each. Kernel socket buffers are not in RSS.",
        "",
        f"| server | baseline RSS MB | KB/conn at {steps[1]:,} | KB/conn at {steps[2]:,} "
        f"| RSS at {steps[2]:,} MB |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, label in (("starlette", "Starlette/uvicorn echo (ceiling)"), ("roost", "Roost")):
        out.append(
            f"| {label} | {fmt(pluck(idle, kind, 'rss_kb', 0, scale=1 / 1024), 1)} | "
            f"{fmt(pluck(idle, kind, 'kb_per_conn', 0), 1)} | "
            f"{fmt(pluck(idle, kind, 'kb_per_conn', 1), 1)} | "
            f"{fmt(pluck(idle, kind, 'rss_kb', 2, scale=1 / 1024), 1)} |"
        )
    r = [
        _ratio(pluck(idle, "roost", "kb_per_conn", i), pluck(idle, "starlette", "kb_per_conn", i))
        for i in (0, 1)
    ]
    out += [
        f"| **Roost ÷ Starlette echo** (paired) | | {r[0]} | {r[1]} | |",
        "",
        f"Per dormant actor: a fresh `roost serve` over an empty data directory vs over the {n:,}-actor data "
        "set, each after one HTTP `increment` of `counter/a000000` and a `/healthz`.",
        "",
        f"| RSS, empty data dir MB | RSS, {n:,} dormant actors MB | bytes per dormant actor "
        "| active actors |",
        "|---:|---:|---:|---:|",
        f"| {fmt(pluck(dormant, 'empty', 'rss_kb', scale=1 / 1024), 1)} | "
        f"{fmt(pluck(dormant, 'full', 'rss_kb', scale=1 / 1024), 1)} | "
        f"{fmt(pluck(dormant, 'bytes_per_actor'), 2)} | "
        f"{', '.join(str(d['full']['active_actors']) for d in dormant)} |",
        "",
    ]
    return out


def _wakeups(res: Res) -> list[str]:
    reps, per = res["reps"], res["per_actor"]
    big, small = res["actors"] * per, res["small_actors"] * per
    n = len(reps)
    out = [
        HEADINGS[10],
        "",
        f"`roost serve` over data sets of dormant `counter` actors with {per} pending one-off wake-ups each "
        f"(`add`, by 1): {res['actors']:,} actors ({big:,} wake-ups) and {res['small_actors']:,} actors "
        f"({small:,}). Files: one actor file made by the runtime (`increment_later` × {per}, "
        f"{res['file_bytes']:,} bytes), byte-copied per actor with its own schedule ids, trigger and "
        "`next_fire`, alarms written to the directory in one transaction "
        f"({res['built_s']:.1f} s for the large set); a sample is checked through the server (state, "
        f"`schedules`) before and after. {n} repetitions, each on a fresh copy.",
        "",
        "Start-up (seconds from spawning `roost serve`; `median (min–max)`):",
        "",
        "| pending wake-ups | to `/healthz`, nothing due (alarms a day ahead) | to `/healthz`, all due "
        "| to the first wake-up fired, all due |",
        "|---:|---:|---:|---:|",
    ]
    for key, count in (("small", small), ("big", big)):
        out.append(
            f"| {count:,} | {fmt(pluck(reps, key, 'idle_healthz_s'), 3)} "
            f"| {fmt(pluck(reps, key, 'healthz_s'), 3)} | {fmt(pluck(reps, key, 'first_fire_s'), 3)} |"
        )
    ratio = [
        _ratio(pluck(reps, "big", k), pluck(reps, "small", k))
        for k in ("idle_healthz_s", "healthz_s", "first_fire_s")
    ]
    out += [f"| **{big:,} ÷ {small:,}** (paired) | {ratio[0]} | {ratio[1]} | {ratio[2]} |", ""]
    full = [r for r in reps if "check" in r["big"]]
    out += [
        "The dispatcher starts in the lifespan, before uvicorn listens: with everything due, the first fire "
        "precedes `/healthz`, whose answer then waits behind the burst.",
        "",
        f"**Saturated burst** (throughput): every wake-up due when the server starts (due before it was "
        f"spawned, the restart-after-downtime case), run to completion in the last repetition ({len(full)} "
        "run). Rate = wake-ups ÷ (all alarms gone from the directory − first fire). Lateness is not "
        "meaningful here (due before the spawn).",
        "",
        "| pending wake-ups | wake-ups/s | first fire → all done, s | srv util (CPU s per s) "
        "| fired / expected | wrong counts or schedules |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for key, count in (("small", small), ("big", big)):
        rows = [r[key] for r in reps if "check" in r[key]]
        for b in rows:
            c = b["check"]
            span = b["done_s"] - b["first_fire_s"]
            util = f"{b['srv_util']:.2f}" if span >= 1.0 else "– (too short)"
            out.append(
                f"| {count:,} | {b['wakeups_s']:,.0f} | {span:.2f} | {util} | "
                f"{c['fires']:,} / {c['expected']:,} | {c['wrong_counts'] + c['bad_schedules']} |"
            )
    sp = reps[0]["spread"]
    out += [
        "",
        f"**Unsaturated spread** (lateness): {sp['n']:,} dormant actors with one wake-up each, due times "
        f"evenly spread over {sp['span_s']:g} s ({sp['offered_s']:,.0f} wake-ups/s offered), the first "
        "due 1.5 s after the spawn. Lateness: each fire's `roost_fires.lateness` (wake turn start − due), "
        "read from every file after the server stopped.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| lateness p50 ms | {fmt(pluck(reps, 'spread', 'p50_ms'), 1)} |",
        f"| lateness p99 ms | {fmt(pluck(reps, 'spread', 'p99_ms'), 1)} |",
        f"| lateness max ms | {fmt(pluck(reps, 'spread', 'max_ms'), 1)} |",
        f"| srv util (CPU s per s) | {fmt(pluck(reps, 'spread', 'srv_util'), 2)} |",
        "| `/healthz` answered before the first due, s | "
        f"{fmt(pluck(reps, 'spread', 'healthz_before_first_due_s'), 2)} |",
        f"| fired / expected (all reps) | {sum(r['spread']['check']['fires'] for r in reps):,} / "
        f"{sum(r['spread']['check']['expected'] for r in reps):,} |",
        "",
    ]
    return out


def _streams(res: Res) -> list[str]:
    reps = res["reps"]
    echo = pluck(reps, "echo", "ops_s")
    shapes = {
        "one": "1 chat actor, 1 subscriber",
        "hundred": f"1 chat actor, {res['subs']} subscribers",
        "concurrent": f"{res['concurrent']} chat actors at once, 1 subscriber each",
    }
    if all("paced" in r for r in reps):
        shapes["paced"] = (
            f"{res['concurrent']} chat actors at once, 1 subscriber each, "
            f"{res['pace']:g} words/s per model ({res['paced_tokens']:,} words)"
        )
    out = [
        HEADINGS[11],
        "",
        "A chat agent (`bench/stream_app.py`) whose model yields words as fast as it can, each word the wall "
        "clock at its yield, with the default batching (`stream_batch_count`, `stream_batch_interval`): "
        f"answers of {res['tokens']:,} words (the concurrent shape: {res['concurrent_tokens']:,} each; "
        "the paced shape's models yield at a hosted model's pace instead). "
        "Delta frames and words received per second, summed over subscribers, from the first send to the "
        "last `turn_completed`; lag: per word, from the model's yield (a paced word: the time it was due) "
        "to a subscriber's read; gap: between two `model_delta` frames a subscriber reads (a model that "
        "yields only when asked stamps a word when the worker asks: the worker's wait for the loop before "
        "it asks is in the gap, not in the lag). Ceiling: "
        f"Starlette/uvicorn echo msg/s at {res['echo_conc']} connections, same repetition.",
        "",
        "| shape | deltas/s | words/s | deltas/s ÷ echo | lag p50 ms | lag p99 ms | lag max ms "
        "| gap p50 ms | gap p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for shape, label in shapes.items():
        frames = pluck(reps, shape, "frames_s")
        out.append(
            f"| {label} | {fmt(frames)} | {fmt(pluck(reps, shape, 'words_s'))} | {_ratio(frames, echo)} | "
            f"{fmt(pluck(reps, shape, 'lag_p50_ms'), 1)} | {fmt(pluck(reps, shape, 'lag_p99_ms'), 1)} | "
            f"{fmt(pluck(reps, shape, 'lag_max_ms'), 1)} | {_gap(reps, shape, 'gap_p50_ms')} | "
            f"{_gap(reps, shape, 'gap_p99_ms')} |"
        )
    lost = sum(int(r[k]["words_expected"]) - int(r[k]["words"]) for r in reps for k in shapes)
    return [*out, "", f"Words not delivered, over every repetition and shape: {lost}.", ""]


def _gap(reps: list[Res], shape: str, key: str) -> str:
    """A gap figure of the shape, or a dash for results from before the client measured it."""
    return fmt(pluck(reps, shape, key), 1) if all(key in r[shape] for r in reps) else "–"


def _mcp_agent(res: Res) -> list[str]:
    reps = res["reps"]
    return [
        HEADINGS[12],
        "",
        f"One MCP server over stdio (`bench/mcp_tool_server.py`, an `echo` tool), {res['calls']} calls per "
        "repetition one after the other: with the SDK's client directly, and as turns of an agent whose "
        "catalog holds the tool (`bench/mcp_agent.py`: plan, background job, capability session row, "
        "events, verification, each committed). Medians per repetition; the ratio paired per repetition.",
        "",
        "| direct, ms | through the agent, ms | agent ÷ direct |",
        "|---:|---:|---:|",
        f"| {fmt(pluck(reps, 'direct_ms'), 2)} | {fmt(pluck(reps, 'agent_ms'), 2)} | "
        f"{fmt(pluck(reps, 'ratio'), 1)} |",
        "",
    ]


def _mcp_server(res: Res) -> list[str]:
    s = res["summary"]

    def cell(key: str, digits: int = 2) -> str:
        med, lo, hi = s[key]
        return f"{med:,.{digits}f} ({lo:,.{digits}f}–{hi:,.{digits}f})"

    return [
        HEADINGS[13],
        "",
        "The SDK's client calls `increment` one call after the other on `roost serve`'s "
        "`/mcp/counter/bench` (a turn committed to SQLite, the gate, the event store) and on the SDK's own "
        "streamable HTTP server with the same tool in memory (`bench/mcp.py`). Ratios paired per repetition.",
        "",
        "| figure | Roost ÷ SDK |",
        "|---|---:|",
        f"| server CPU per call | {cell('cpu_ratio')} |",
        f"| median round trip | {cell('p50_ratio')} |",
        f"| calls per second | {cell('throughput_ratio')} |",
        "",
    ]


def _langgraph(res: Res) -> list[str]:
    s = res["summary"]

    def cell(key: str, digits: int = 2) -> str:
        med, lo, hi = s[key]
        return f"{med:,.{digits}f} ({lo:,.{digits}f}–{hi:,.{digits}f})"

    return [
        HEADINGS[15],
        "",
        "A chain of five nodes invoked one run after another on ten threads, checkpointed through "
        "`AsyncRoostSaver` to `roost serve roost.integrations.langgraph:app` over loopback and through "
        "LangGraph's `AsyncSqliteSaver` on a local file (`bench/langgraph.py`). Paired per repetition.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| checkpoints/s, Roost ÷ AsyncSqliteSaver | {cell('ratio')} |",
        f"| the same, Roost at `--durability full` (an fsync a commit, as SQLite) | {cell('ratio_full')} |",
        f"| checkpoints/s, AsyncRoostSaver | {cell('roost_checkpoints_per_s', 0)} |",
        "| checkpoints/s, AsyncRoostSaver, `--durability full` | "
        f"{cell('roost_full_checkpoints_per_s', 0)} |",
        f"| checkpoints/s, AsyncSqliteSaver | {cell('sqlite_checkpoints_per_s', 0)} |",
        "",
    ]


def _targets(targets: list[Target]) -> list[str]:
    out = [
        HEADINGS[14],
        "",
        "Judged on the median over repetitions (min–max in brackets). A single figure on this machine varies "
        "by ±15–35 %; read a margin under ~15 % as noise.",
        "",
        "| target | threshold | measured | met? |",
        "|---|---|---|---|",
    ]
    for t in targets:
        verdict = "not measured" if t.met is None else ("**met**" if t.met else "**not met**")
        out.append(f"| {t.name} | {t.threshold} | {t.measured} | {verdict} |")
    return [*out, ""]


def _header(results: Res) -> list[str]:
    m: dict[str, str] = results["machine"]
    st = results["settings"]
    kind = "quick smoke variant, numbers not meaningful" if st["quick"] else "full suite"
    return [
        "# Roost benchmark results",
        "",
        f"`python -m bench{' --quick' if st['quick'] else ''}` ({kind}): {st['reps']} repetitions "
        f"({st['memory_reps']} for memory), {results['wall_s']:.0f} s in all, started {m['date']}.",
        "Absolute times mean little on a shared machine: read the ratios, each against a ceiling measured in "
        "the same run and paired per repetition, and the scale figures. Cells show `median (min–max)`.",
        "",
        HEADINGS[0],
        "",
        *(f"- {k}: {v}" for k, v in m.items()),
        "",
        HEADINGS[1],
        "",
        "- Every server and every load client is its own process; all traffic is on 127.0.0.1; servers are "
        "stopped by PID. Clients and servers share the machine's CPUs.",
        "- Load client (`bench/loadgen.py`): asyncio + uvloop, hand-rolled RFC 6455 framing, pre-masked "
        "frames, no compression. Its CPU per message is in the echo table: well below the servers', which "
        "run at ~1 core (srv util), so the server is the bottleneck.",
        f"- Request/response points last {st['point_s']} s each after a {st['warmup_s']} s warm-up; every "
        "loop is bounded by a deadline and a count. Latency: every round trip, nearest-rank percentiles.",
        "- 1-connection points run with the client and the server pinned to two different CPUs "
        "(`sched_setaffinity`, restored afterwards): unpinned, the scheduler sometimes puts both on one CPU "
        "(direct hand-off, ~2.5× faster round trips) and sometimes not, which made c=1 bimodal (echo p50 "
        "26 vs 65 µs in the same run). Separate CPUs is the realistic case. Other points are unpinned.",
        "- `roost serve` as shipped (`python -m roost.cli serve --data DIR --port P --log-level "
        "warning`: uvloop, httptools, websockets-sansio, per-message deflate off), with the rate and "
        "connection limits off (`--rate-limit 0 --principal-rate-limit 0 --max-conns-per-actor 0`: "
        "a policy for internet clients that would cap the load measured here). The Starlette echo uses "
        "the same uvicorn settings; the raw echo is `websockets.asyncio.server.serve` on uvloop, "
        "compression off.",
        f"- Bulky data in `{st['data_dir']}`: the dormant-actor data set is reused between runs; server data "
        "directories are created fresh and removed.",
        "",
    ]


def render(results: Res) -> str:
    sec: Res = results["sections"]
    rpc, sq, err = sec.get("rpc"), sec.get("sqlite"), results.get("errors", {})
    lines = _header(results)
    if results.get("rerun"):
        again = ", ".join(sorted(set(results["rerun"])))
        lines += [
            f"**Not one run:** section(s) {again} were re-run later with `--only` and replaced here; "
            "each section's figures and ratios still come from one run.",
            "",
        ]
    lines += _echo(rpc) if rpc else _not_run(HEADINGS[2], "rpc", err)
    lines += _sqlite(sq) if sq else _not_run(HEADINGS[3], "sqlite", err)
    lines += _rpc(rpc) if rpc else _not_run(HEADINGS[4], "rpc", err)
    lines += _hot(rpc, sq) if rpc else _not_run(HEADINGS[5], "rpc", err)
    lines += _callkeys(sec["callkeys"]) if "callkeys" in sec else _not_run(HEADINGS[6], "callkeys", err)
    lines += _fanout(sec["fanout"]) if "fanout" in sec else _not_run(HEADINGS[7], "fanout", err)
    lines += (
        _activation(sec["activation"]) if "activation" in sec else _not_run(HEADINGS[8], "activation", err)
    )
    lines += _memory(sec["memory"]) if "memory" in sec else _not_run(HEADINGS[9], "memory", err)
    lines += _wakeups(sec["wakeups"]) if "wakeups" in sec else _not_run(HEADINGS[10], "wakeups", err)
    lines += _streams(sec["streams"]) if "streams" in sec else _not_run(HEADINGS[11], "streams", err)
    lines += _mcp_agent(sec["mcp_agent"]) if "mcp_agent" in sec else _not_run(HEADINGS[12], "mcp_agent", err)
    lines += (
        _mcp_server(sec["mcp_server"]) if "mcp_server" in sec else _not_run(HEADINGS[13], "mcp_server", err)
    )
    lines += _langgraph(sec["langgraph"]) if "langgraph" in sec else _not_run(HEADINGS[15], "langgraph", err)
    lines += (
        workflows.render(sec["workflows"])
        if "workflows" in sec
        else _not_run(workflows.HEADING, "workflows", err)
    )
    lines += _targets(evaluate(sec))
    timings = ", ".join(f"{k} {v:.0f} s" for k, v in results["section_s"].items())
    lines += [
        f"Section wall times: {timings}. Raw figures: `{results['settings']['data_dir']}/"
        f"{'results-quick.json' if results['settings']['quick'] else 'results.json'}`.",
        "",
    ]
    # paths inside the repository are shown relative to it: the report names no machine's layout
    return "\n".join(lines).replace(str(BENCH_DIR.parent) + "/", "")
