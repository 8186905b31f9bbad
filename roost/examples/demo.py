"""``make demo``: a real server, a writer, a watcher that keeps getting dropped, and a SIGKILL.

Runs on the embedded default (SQLite in a temporary directory, 127.0.0.1 only, no keys):

1. starts ``roost serve`` in a child process;
2. a *writer* client increments ``counter/demo`` from 10 concurrent callers while a *watcher* client is
   dropped at random moments and resumes from its cursor each time;
3. the server is killed with SIGKILL in the middle of a second burst and restarted on the same data
   directory; the clients reconnect by themselves;
4. checks and prints: the watcher saw every ``seq`` exactly once and in order, and the count after the
   crash is at least every acknowledged increment and at most every sent one.

Exit status 0 when every check holds, 1 otherwise. Talks to the server only over its public protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from roost.client.client import Client
from roost.client.errors import ClientError
from roost.client.urls import actor_url

__all__ = ["Server", "free_port", "main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """``roost serve`` as a child process on a fixed port, so that a restart keeps the address."""

    def __init__(self, data: Path, port: int, *extra: str) -> None:
        self.data = data
        self.port = port
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "roost.cli", "serve"),
                *("--data", str(self.data), "--port", str(self.port), "--log-level", "warning"),
                *self.extra,
            ],
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"server exited: {err}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(20)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()


def say(text: str) -> None:
    print(text, flush=True)


async def burst(
    writer: Client,
    calls: int,
    stats: dict[str, int],
    stop: asyncio.Event,
    reached: tuple[int, asyncio.Event] | None = None,
) -> None:
    """10 concurrent callers share ``calls`` increments; stops early when ``stop`` is set.

    ``reached = (n, event)`` sets the event once ``n`` of these calls were acknowledged.
    """
    remaining = [calls]
    acked_here = [0]

    async def caller() -> None:
        while remaining[0] > 0 and not stop.is_set():
            remaining[0] -= 1
            stats["sent"] += 1
            try:
                await writer.call("increment", timeout=10)
                stats["acked"] += 1
                acked_here[0] += 1
                if reached is not None and acked_here[0] >= reached[0]:
                    reached[1].set()
            except ClientError:
                stats["unknown"] += 1  # lost with the connection: applied or not, unknown

    await asyncio.gather(*(caller() for _ in range(10)))


async def run(data: Path, seed: int) -> bool:
    port = free_port()
    server = Server(data, port, "--rate-limit", "0", "--principal-rate-limit", "0")  # a load demo
    say(f"1. starting `roost serve --data {data} --port {port}`")
    server.start()
    url = actor_url(f"ws://127.0.0.1:{port}", "counter", "demo")
    seen: list[int] = []
    modes: list[str] = []
    rng = random.Random(seed)

    progress = asyncio.Event()

    def on_state(state: Any, seq: int) -> None:
        seen.append(seq)
        progress.set()

    ok = True
    try:
        async with (
            Client(
                url,
                rng=random.Random(rng.random()),
                chaos=0.03,
                on_state=on_state,
                on_welcome=lambda w: modes.append(w.resume),
            ) as watcher,
            Client(url, rng=random.Random(rng.random())) as writer,
        ):
            await watcher.wait_connected(10)
            await writer.wait_connected(10)
            start_seq = watcher.cursor or 0
            stats = {"sent": 0, "acked": 0, "unknown": 0}
            say("2. writer: 2,000 increments from 10 concurrent callers; watcher dropped at random")
            await burst(writer, 2000, stats, asyncio.Event())
            say(f"   acknowledged {stats['acked']} of {stats['sent']}; count is now {writer.state}")

            say("3. second burst of 2,000; the server is killed with SIGKILL in the middle of it")
            stop, halfway = asyncio.Event(), asyncio.Event()
            task = asyncio.create_task(burst(writer, 2000, stats, stop, (1000, halfway)))
            await halfway.wait()
            server.kill()
            killed_at = dict(stats)
            stop.set()
            await task
            say(
                f"   killed with {killed_at['acked']} acknowledged; when the burst stopped, {stats['sent']} "
                f"sent in all, {stats['acked']} acknowledged (replies already on their way), "
                f"{stats['unknown']} whose reply was lost with the connection (outcome unknown to the client)"
            )
            server.start()
            say("   restarted on the same data directory; clients reconnect by themselves")
            await writer.wait_connected(20)
            count = await writer.call("get", timeout=10)
            say(f"   count after the crash: {count}")
            if not stats["acked"] <= count <= stats["sent"]:
                ok = False
                say(f"   FAIL: expected {stats['acked']} <= count <= {stats['sent']}")
            else:
                say(f"   ok: {stats['acked']} acknowledged <= {count} <= {stats['sent']} sent")
            final_seq = await _head(writer)
            async with asyncio.timeout(20):
                while (watcher.cursor or 0) < final_seq:
                    progress.clear()
                    await progress.wait()
            expected = list(range(start_seq + 1, final_seq + 1))
            say(
                f"4. watcher: dropped {watcher.drops} times, reconnected {watcher.reconnects} times "
                f"({modes[1:].count('replay')} by replay), processed {len(seen)} state frames"
            )
            if seen == expected:
                say(f"   ok: every seq from {start_seq + 1} to {final_seq} exactly once, in order")
            else:
                ok = False
                missing = sorted(set(expected) - set(seen))[:10]
                say(f"   FAIL: seqs differ (first missing: {missing}, processed {len(seen)})")
            if watcher.state != {"count": count}:
                ok = False
                say(f"   FAIL: watcher state {watcher.state} != count {count}")
    finally:
        server.stop()
    say("PASS" if ok else "FAIL")
    return ok


async def _head(client: Client) -> int:
    """The actor's newest seq, from a fresh welcome (the protocol's view, not internals)."""
    async with Client(client.url, reconnect=False) as probe:
        await probe.wait_connected(10)
        welcome = probe.last_welcome
        assert welcome is not None
        head: int = welcome["cursor"]
        return head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m roost.examples.demo", description=__doc__)
    parser.add_argument("--data", help="data directory (default: a new temporary one)")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    data = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="roost-demo-"))
    try:
        ok = asyncio.run(run(data, args.seed))
    finally:
        if not args.data:
            shutil.rmtree(data, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
