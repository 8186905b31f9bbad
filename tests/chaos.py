"""The chaos soak: many clients, random disconnects, the server SIGKILLed and restarted at random
moments, wake-ups and background jobs running throughout — then every invariant is checked.

``make soak`` runs it for 10 minutes; ``tests/test_chaos.py`` runs a 60-second smoke in ``make test``.
``python -m tests.chaos --seconds 600 [--seed N]`` prints operations done, kills survived and
invariant violations (which must be 0), and exits 1 if there is any.

Invariants checked:

1. **No acknowledged write lost**: after the last restart every counter holds at least the highest
   value a writer was told, and at most the increments sent.
2. **Gap-free seq streams**: every watcher processed a contiguous run of seqs, except across a
   ``snapshot`` welcome for an expired cursor; a ``cursor_ahead`` snapshot (the server forgot what a
   client saw) is a violation.
3. **Every wake-up effect applied once**: each wake counter ends equal to the number of distinct
   idempotency keys scheduled on it (unknown outcomes are re-sent with the same key after the run).
4. **At most one lease per job**: in each agent's log, no job reports progress or completion for an
   attempt after a newer attempt started.
5. **At most one heavy operation per project**: in each agent's log, the heavy step of one run never
   starts while another run's heavy step is open.
6. **SQLite integrity** of every file after every kill.
7. **No file outside the data directory** (the soak's own log aside).
8. **Bounded memory**: the server's resident memory stays under a bound across the run, with slow
   readers on (connections that resume from cursor 0 and then never read, so the server holds what
   their send bound allows and closes them with 1013 past it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, WebSocketException

from roost.client import Client
from roost.client.errors import ClientError
from roost.client.frames import Welcome
from roost.examples.demo import free_port
from roost.storage import actor_path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = """
[agent]
heartbeat_interval = 0.25
lease_ttl = 1.0
job_backoff = 0.2
[agent.tools.analyze_documents]
delay_s = 0.15
"""
MEMORY_BOUND_MB = 400


@dataclass
class Stats:
    ops: int = 0
    acks: dict[str, list[int]] = field(default_factory=dict)  # counter → values acknowledged, in order
    sent: dict[str, int] = field(default_factory=dict)  # counter → increments sent
    keys: dict[str, set[str]] = field(default_factory=dict)  # wake counter → keys acknowledged
    #: per wake counter, the keys whose outcome is unknown, with the delay each was asked with (a
    #: resend must ask the same, or it is another schedule under the key: idempotency_conflict)
    unknown_keys: dict[str, dict[str, float]] = field(default_factory=dict)
    runs: dict[str, set[str]] = field(default_factory=dict)  # agent → run ids started
    kills: int = 0
    max_rss_mb: float = 0.0
    violations: list[str] = field(default_factory=list)
    frames_seen: int = 0
    snapshots: int = 0
    slow_readers: int = 0  # connections opened that never read
    slow_closed: dict[int, int] = field(default_factory=dict)  # close code → slow readers closed with it


class Server:
    """``roost serve`` on a fixed port, killed and restarted by the soak."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.data = root / "data"
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = open(root / "server.log", "ab")

    def start(self) -> None:
        cmd = [sys.executable, "-m", "roost.cli", "serve", "--data", str(self.data)]
        cmd += ["--port", str(self.port), "--config", str(self.root / "roost.toml"), "--log-level", "warning"]
        cmd += ["--rate-limit", "0", "--principal-rate-limit", "0", "--idle-timeout", "2"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=self.log, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def rss_mb(self) -> float:
        if self.proc is None:
            return 0.0
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


def integrity(data: Path) -> list[str]:
    """Files whose ``integrity_check`` is not ok. Checked on copies (database and WAL), so that the
    server, not this check, is what recovers the originals after a kill."""
    import shutil
    import tempfile

    bad = []
    with tempfile.TemporaryDirectory() as scratch:
        for path in [data / "directory.sqlite", *data.glob("actors/*/*/*/*.sqlite")]:
            copy = Path(scratch) / path.name
            shutil.copyfile(path, copy)
            wal = path.with_name(path.name + "-wal")
            if wal.exists():
                shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
            conn = sqlite3.connect(copy, timeout=5)
            try:
                result = conn.execute("PRAGMA integrity_check").fetchone()[0]
            finally:
                conn.close()
            if result != "ok":
                bad.append(f"{path.name}: {result}")
    return bad


def check_acks(name: str, acks: list[int], final: int, sent: int) -> list[str]:
    """Invariant 1 for a counter with one writer: every acknowledged value is above the one before
    (a lost acknowledged increment would make a later one repeat or go back), and the final count
    covers every acknowledged increment and no more than were sent."""
    out = [f"counter {name}: acknowledged {b} after {a}" for a, b in itertools.pairwise(acks) if b <= a]
    if acks and final < max(len(acks), acks[-1]):
        out.append(f"counter {name}: {final} after {len(acks)} acknowledged increments (last {acks[-1]})")
    if final > sent:
        out.append(f"counter {name}: {final} > {sent} sent")
    return out


def check_wakes(name: str, value: int, keys: int) -> list[str]:
    """Invariant 3: one effect per distinct key, exactly."""
    return [] if value == keys else [f"wake counter {name}: {value} effects for {keys} keys"]


async def writer(url: str, name: str, stats: Stats, stop: asyncio.Event, rng: random.Random) -> None:
    """Increments one counter; a reply is an acknowledged write."""
    async with Client(f"{url}/agents/counter/{name}", subscribe="none", rng=random.Random(rng.random())) as c:
        while not stop.is_set():
            stats.sent[name] = stats.sent.get(name, 0) + 1
            try:
                value = await c.call("increment", timeout=5)
            except (ClientError, TimeoutError):
                await asyncio.sleep(0.05)
                continue
            assert isinstance(value, int)
            stats.acks.setdefault(name, []).append(value)
            stats.ops += 1


async def scheduler(url: str, name: str, stats: Stats, stop: asyncio.Event, rng: random.Random) -> None:
    """Schedules ``add(1)`` on a wake counter with a fresh idempotency key each time."""
    keys = stats.keys.setdefault(name, set())
    unknown = stats.unknown_keys.setdefault(name, {})
    i = 0
    async with Client(f"{url}/agents/counter/{name}", subscribe="none", rng=random.Random(rng.random())) as c:
        while not stop.is_set():
            i += 1
            key = f"{name}-{i}"
            delay = rng.uniform(0.1, 2.0)
            try:
                await c.call("increment_later", delay, 1, key, timeout=5)
                keys.add(key)
                stats.ops += 1
            except (ClientError, TimeoutError):
                unknown[key] = delay
            await asyncio.sleep(rng.uniform(0.02, 0.1))


class Watcher:
    """Follows an actor's frames with random drops; checks the seq stream."""

    def __init__(self, name: str, stats: Stats, start: int | None = None) -> None:
        self.name = name
        self.stats = stats
        #: The last seq processed: at first the cursor the client connects with (``None``: no cursor).
        self.last: int | None = start

    def on_welcome(self, welcome: Welcome) -> None:
        """A ``replay`` welcome is followed by the seqs after the cursor the client sent, which is
        :attr:`last` (the client resumes from the last seq it processed): ``welcome.cursor`` is the
        actor's newest seq, not where the replay starts."""
        if welcome.resume == "snapshot":
            self.stats.snapshots += 1
            if welcome.reason == "cursor_ahead":
                self.stats.violations.append(f"{self.name}: the server forgot seq {self.last} (cursor_ahead)")
            elif self.last is not None and self.last >= welcome.oldest - 1:  # it could have replayed
                self.stats.violations.append(
                    f"{self.name}: cursor {self.last} called expired; the log starts at {welcome.oldest}"
                )
            self.last = welcome.cursor
        elif welcome.resume == "fresh" or self.last is None:
            self.last = welcome.cursor

    def on_frame(self, _: Any, seq: int) -> None:
        self.stats.frames_seen += 1
        if self.last is not None and seq != self.last + 1:
            self.stats.violations.append(f"{self.name}: seq {seq} after {self.last}")
        self.last = seq


async def watcher(
    url: str, kind: str, name: str, stats: Stats, stop: asyncio.Event, rng: random.Random
) -> None:
    w = Watcher(f"watch {kind}/{name}", stats, start=0)
    client = Client(
        f"{url}/agents/{kind}/{name}",
        cursor=w.last,
        chaos=rng.uniform(0.5, 2.0),
        rng=random.Random(rng.random()),
        on_welcome=w.on_welcome,
        on_state=w.on_frame,
        on_event=w.on_frame,
    )
    async with client:
        await stop.wait()
        # a client that stopped (the server broke the resume rules: ProtocolViolation, or a terminal
        # close) checked nothing after that; a frame sent twice breaks "no duplicates"
        if client.closed_reason is not None:
            stats.violations.append(f"{w.name}: the client stopped: {client.closed_reason!r}")
        if client.duplicates:
            stats.violations.append(f"{w.name}: {client.duplicates} frames received twice")


async def slow_reader(url: str, name: str, stats: Stats, stop: asyncio.Event, rng: random.Random) -> None:
    """Connects to a counter with ``cursor=0`` (a replay of its whole log) and then reads nothing for a
    while: the websockets client stops reading its socket once its small queue is full, so every frame
    after that waits in the server's send queue for this connection. Then it reads what is left and
    notes the code the server closed it with, if the server did, and connects again."""
    while not stop.is_set():
        try:
            async with connect(f"{url}/agents/counter/{name}?cursor=0", max_queue=4, max_size=None) as ws:
                stats.slow_readers += 1
                await asyncio.sleep(rng.uniform(2.0, 15.0))
                with contextlib.suppress(TimeoutError, ConnectionClosed):  # read what is left, and the close
                    async with asyncio.timeout(5.0):
                        async for _ in ws:
                            pass
                if ws.close_code is not None:
                    code = int(ws.close_code)
                    stats.slow_closed[code] = stats.slow_closed.get(code, 0) + 1
        except (OSError, WebSocketException, ConnectionClosed):
            await asyncio.sleep(0.2)


async def agent_user(url: str, name: str, stats: Stats, stop: asyncio.Event, rng: random.Random) -> None:
    """Starts heavy analyses on a docs agent, now and then, in the background."""
    runs = stats.runs.setdefault(name, set())
    async with Client(f"{url}/agents/docs/{name}", subscribe="none", rng=random.Random(rng.random())) as c:
        while not stop.is_set():
            with contextlib.suppress(ClientError, TimeoutError):
                reply = await c.call("turn", "analyze the documents", None, True, timeout=5)
                assert isinstance(reply, dict)
                runs.add(reply["run_id"])
                stats.ops += 1
            await asyncio.sleep(rng.uniform(0.5, 2.0))


def check_agent_log(data: Path, name: str, stats: Stats) -> None:
    """Invariants 4 and 5 on the agent's log, read from its file."""
    path = actor_path(data, "docs", name)
    if not path.exists():
        return
    conn = sqlite3.connect(path)
    try:
        frames = [
            orjson.loads(r[0]) for r in conn.execute("SELECT frame FROM roost_log WHERE kind = 'event'")
        ]
    finally:
        conn.close()
    newest: dict[str, int] = {}  # job → newest attempt started
    heavy_open: str | None = None
    for frame in frames:
        event = frame["event"]
        kind, payload = event.get("event_type"), event.get("payload") or {}
        job, attempt = payload.get("job_id"), payload.get("attempt")
        if kind == "tool_started" and job and isinstance(attempt, int):
            newest[job] = max(newest.get(job, 0), attempt)
        elif kind in ("tool_progress", "tool_completed") and job and attempt and attempt < newest.get(job, 0):
            stats.violations.append(
                f"docs/{name}: job {job} attempt {attempt} wrote after attempt {newest[job]}"
            )
        if payload.get("tool") == "analyze_documents":
            if kind == "tool_started" and payload.get("attempt", 1) == 1:
                if heavy_open not in (None, event["run_id"]):
                    stats.violations.append(
                        f"docs/{name}: two heavy runs at once ({heavy_open}, {event['run_id']})"
                    )
                heavy_open = event["run_id"]
            elif kind in ("tool_completed", "tool_cancelled") or (
                kind == "tool_failed" and not payload.get("will_retry")
            ):
                heavy_open = None
        if kind in ("turn_completed", "turn_failed", "turn_cancelled") and heavy_open == event["run_id"]:
            heavy_open = None


def prepare(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "roost.toml").write_text(CONFIG)


def repo_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout


def tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


async def soak(seconds: float, seed: int, root: Path, *, quiet: bool = False) -> Stats:
    rng = random.Random(seed)
    await asyncio.to_thread(prepare, root)
    server = Server(root, free_port())
    url = f"ws://127.0.0.1:{server.port}"
    stats = Stats()

    def say(text: str) -> None:
        if not quiet:
            print(text, flush=True)

    before_repo = await asyncio.to_thread(repo_status)
    server.start()
    stop = asyncio.Event()
    counters = [f"w{i}" for i in range(6)]
    wakes = [f"wake{i}" for i in range(3)]
    agents = ["a0", "a1"]
    tasks = [asyncio.create_task(writer(url, n, stats, stop, rng)) for n in counters]
    tasks += [asyncio.create_task(scheduler(url, n, stats, stop, rng)) for n in wakes]
    tasks += [asyncio.create_task(watcher(url, "counter", n, stats, stop, rng)) for n in counters[:3]]
    tasks += [asyncio.create_task(watcher(url, "docs", n, stats, stop, rng)) for n in agents]
    tasks += [asyncio.create_task(agent_user(url, n, stats, stop, rng)) for n in agents]
    tasks += [asyncio.create_task(slow_reader(url, n, stats, stop, rng)) for n in counters[:4]]
    started = time.monotonic()
    chaos_until = seconds * 0.8  # the last fifth runs without kills: one long-lived server process

    async def sample_memory() -> None:
        while True:
            stats.max_rss_mb = max(stats.max_rss_mb, server.rss_mb())
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample_memory())
    try:
        while time.monotonic() - started < chaos_until:
            pause = max(0.1, chaos_until - (time.monotonic() - started))
            await asyncio.sleep(min(rng.uniform(3.0, 10.0), pause))
            if time.monotonic() - started >= chaos_until:
                break
            await asyncio.to_thread(server.kill)
            stats.kills += 1
            for bad in await asyncio.to_thread(integrity, server.data):
                stats.violations.append(f"integrity after kill {stats.kills}: {bad}")
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            await asyncio.to_thread(server.start)
            say(
                f"[{time.monotonic() - started:6.1f} s] kill {stats.kills} survived; ops {stats.ops}; "
                f"rss {stats.max_rss_mb:.0f} MB; violations {len(stats.violations)}"
            )
        calm = max(0.0, seconds - (time.monotonic() - started))
        say(f"[{time.monotonic() - started:6.1f} s] no more kills; {calm:.0f} s on one server process")
        await asyncio.sleep(calm)
        stop.set()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                stats.violations.append(f"a client task failed: {outcome!r}")
        await settle(url, server, stats, counters, wakes, agents)
    finally:
        stop.set()
        sampler.cancel()
        server.stop()
    if stats.max_rss_mb > MEMORY_BOUND_MB:
        stats.violations.append(f"server memory {stats.max_rss_mb:.0f} MB over {MEMORY_BOUND_MB} MB")
    for bad in integrity(server.data):
        stats.violations.append(f"integrity at the end: {bad}")
    for name in agents:
        check_agent_log(server.data, name, stats)
    outside = {p for p in tree(root) if not p.is_relative_to(server.data)} - {
        root / "server.log",
        root / "roost.toml",
    }
    if outside:
        stats.violations.append(f"files outside the data directory: {sorted(map(str, outside))[:5]}")
    after_repo = await asyncio.to_thread(repo_status)
    if after_repo != before_repo:
        stats.violations.append("the soak changed the repository's working tree")
    return stats


async def settle(
    url: str, server: Server, stats: Stats, counters: list[str], wakes: list[str], agents: list[str]
) -> None:
    """After the chaos: re-send unknown wake-up keys (idempotent), wait for every wake-up and run to
    finish (bounded), then check invariants 1 and 3."""
    for name in wakes:
        async with Client(f"{url}/agents/counter/{name}", subscribe="none") as c:
            for key, delay in sorted(stats.unknown_keys.get(name, {}).items()):
                await c.call("increment_later", delay, 1, key, timeout=10)  # the same spec, resent
                stats.keys[name].add(key)
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
        while time.monotonic() < deadline:
            pending = 0
            for name in wakes:
                r = await http.post(f"/agents/counter/{name}/rpc/schedules", json=[])
                pending += len(r.json()["result"])
            for name in agents:
                for run_id in stats.runs.get(name, set()):
                    r = await http.post(f"/agents/docs/{name}/rpc/get_run", json=[run_id])
                    if r.json()["result"]["status"] in ("queued", "in_progress"):
                        pending += 1
            if pending == 0:
                break
            await asyncio.sleep(0.5)
        else:
            stats.violations.append("wake-ups or runs still pending 60 s after the chaos ended")
        for name in counters:
            value = (await http.get(f"/agents/counter/{name}")).json()["state"]["count"]
            stats.violations += check_acks(name, stats.acks.get(name, []), value, stats.sent.get(name, 0))
        for name in wakes:
            value = (await http.get(f"/agents/counter/{name}")).json()["state"]["count"]
            stats.violations += check_wakes(name, value, len(stats.keys.get(name, set())))


def report(stats: Stats, seconds: float) -> str:
    lines = [
        f"chaos soak: {seconds:.0f} s",
        f"operations done: {stats.ops} ({sum(len(a) for a in stats.acks.values())} increments acknowledged, "
        f"{sum(len(k) for k in stats.keys.values())} wake-up keys, "
        f"{sum(len(r) for r in stats.runs.values())} agent runs)",
        f"frames checked by watchers: {stats.frames_seen} (snapshot welcomes: {stats.snapshots})",
        f"kills survived: {stats.kills}",
        f"slow readers: {stats.slow_readers} connections that never read (closed by the server: "
        f"{dict(sorted(stats.slow_closed.items())) or 'none'})",
        f"server memory: max {stats.max_rss_mb:.0f} MB (bound {MEMORY_BOUND_MB} MB)",
        f"invariant violations: {len(stats.violations)}",
    ]
    lines += [f"  - {v}" for v in stats.violations[:20]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--root", type=Path, help="scratch directory (default: a new temporary one)")
    args = parser.parse_args(argv)
    import tempfile

    root = args.root or Path(tempfile.mkdtemp(prefix="roost-soak-"))
    print(f"seed {args.seed}; scratch {root}", flush=True)
    stats = asyncio.run(soak(args.seconds, args.seed, root))
    print(report(stats, args.seconds))
    return 1 if stats.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
