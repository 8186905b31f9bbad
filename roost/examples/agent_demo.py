"""``make demo``: the ``docs`` agent plans, shows live progress, waits for approval, survives a dropped
connection without missing or repeating anything, and finishes with a verified report.

Runs on the embedded default (SQLite in a fresh data directory, 127.0.0.1 only, the deterministic
planner, no keys):

1. starts ``roost serve`` in a child process;
2. asks the ``docs`` agent to "analyze the documents and make a report" and prints the plan;
3. shows the background analysis as progress bars; midway, drops the connection, which the client
   restores by itself, resuming from its cursor (the events of the gap are replayed, none twice);
4. asks for the approval of ``generate_report`` (answered ``yes`` by itself when stdin is not a
   terminal, or with ``--yes``);
5. prints the verification, the report's path and a summary: events received, reconnects,
   duplicates, gaps;
6. sends a message to the ``chat`` agent and prints its answer as it streams (``model_delta``
   events); midway, drops the connection: the answer goes on in the server, and after the reconnect
   the missed text is replayed, so what is printed has no gap and no repeat (checked against the
   answer the agent stored).

Exit status 0 when each flow had at least one reconnect, no duplicate and no gap.

The server is stopped at the end (and killed if the demo is interrupted): no process is left behind.
Talks to the server only over its public protocol, through :class:`roost.client.Client`.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.prompt import Confirm
from rich.table import Table

from roost.client.client import Client
from roost.client.errors import ConnectionLost, RpcError
from roost.client.frames import Welcome
from roost.client.messages import MessageText
from roost.client.urls import actor_url

from .demo import Server, free_port

__all__ = ["main"]

REQUEST = "analyze the documents and make a report"
CHAT = "how do durable actors keep their files, their logs and their wake-ups across a crash?"
CONFIG = """\
[agent]
heartbeat_interval = 0.5
lease_ttl = 2.0
stream_pace = 0.04

[agent.tools.analyze_documents]
delay_s = {delay}
"""


class Timeline:
    """Every event the client processed, in order, and the welcomes it received. The checks are made
    here, on what the application was handed, not on the client's own bookkeeping."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[int, dict[str, Any]]] = asyncio.Queue()
        self.seqs: list[int] = []
        self.welcomes: list[Welcome] = []
        self.replayed = 0  # events received after a replay welcome with seq up to its cursor
        self.welcomed = asyncio.Event()

    def on_event(self, event: Any, seq: int) -> None:
        self.seqs.append(seq)
        welcome = self.welcomes[-1] if self.welcomes else None
        if (
            welcome is not None
            and welcome.resume == "replay"
            and len(self.welcomes) > 1
            and seq <= welcome.cursor
        ):
            self.replayed += 1
        self.queue.put_nowait((seq, event))

    def on_welcome(self, welcome: Welcome) -> None:
        self.welcomes.append(welcome)
        self.welcomed.set()

    def duplicates(self) -> int:
        """Events handed to the application more than once, or out of order."""
        repeats = len(self.seqs) - len(set(self.seqs))
        disorder = sum(1 for a, b in zip(self.seqs, self.seqs[1:], strict=False) if b <= a)
        return max(repeats, disorder)

    def gaps(self) -> int:
        """Seqs missing between the first and the last processed one."""
        if not self.seqs:
            return 0
        return (max(self.seqs) - min(self.seqs) + 1) - len(set(self.seqs))


async def run(data: Path, *, assume_yes: bool, delay: float, console: Console) -> bool:
    (data / "roost.toml").write_text(CONFIG.format(delay=delay))
    port = free_port()
    server = Server(data, port, "--config", str(data / "roost.toml"))
    console.print(f"[bold]1.[/] starting [cyan]roost serve --data {data} --port {port}[/]")
    server.start()
    timeline = Timeline()
    started = time.monotonic()
    try:
        url = actor_url(f"ws://127.0.0.1:{port}", "docs", "demo")
        client = Client(url, on_event=timeline.on_event, on_welcome=timeline.on_welcome)
        async with client:
            await client.wait_connected(timeout=10)
            console.print(f"[bold]2.[/] asking the docs agent: [italic]{REQUEST!r}[/]")
            reply = await client.call("turn", REQUEST, session_id="demo", timeout=10)
            assert isinstance(reply, dict)
            outcome = await follow(client, timeline, reply, assume_yes=assume_yes, console=console)
            run_info = await client.call("get_run", reply["run_id"], timeout=10)
            assert isinstance(run_info, dict)
            docs_ok = summary(client, timeline, run_info, data, console, denied=outcome == "denied")
        return await chat(port, console) and docs_ok
    finally:
        server.stop()
        console.print(f"server stopped after {time.monotonic() - started:.1f} s")


async def follow(
    client: Client, timeline: Timeline, reply: dict[str, Any], *, assume_yes: bool, console: Console
) -> str:
    """Print the run's events as they come; drop the connection once midway; answer the approval."""
    dropped = False
    progress = Progress(
        TextColumn("  {task.description:<20}"),
        BarColumn(),
        TextColumn("{task.completed:>2}/{task.total} {task.fields[message]}"),
        console=console,
        transient=False,
    )
    bars: dict[str, TaskID] = {}
    outcome = "completed"
    with progress:
        while True:
            seq, event = await asyncio.wait_for(timeline.queue.get(), 30)
            kind = event["event_type"]
            payload = event["payload"]
            if event["turn_id"] != reply["turn_id"]:
                continue
            if kind == "plan_ready":
                table = Table(title="plan", show_edge=False)
                for col in ("#", "tool", "approval", "runs as"):
                    table.add_column(col)
                for item in payload["items"]:
                    table.add_row(
                        str(item["step_index"] + 1),
                        item["tool"],
                        item["approval_mode"],
                        "background job" if item["background"] else "inline",
                    )
                console.print(table)
            elif kind == "tool_started":
                console.print(f"  [green]▶[/] {payload['tool']} started (seq {seq})")
            elif kind == "tool_progress":
                key = payload["job_id"]
                if key not in bars:
                    bars[key] = progress.add_task(payload["tool"], total=payload["total"], message="")
                progress.update(bars[key], completed=payload["done"], message=payload.get("message", ""))
                if not dropped and payload["done"] >= 2:
                    dropped = True
                    timeline.welcomed.clear()
                    client.drop(away=1.5)  # stay away a moment: the agent goes on without us
                    cursor = client.cursor
                    console.print(f"  [yellow]✂ connection dropped[/]; back in 1.5 s with cursor={cursor}")
                    await asyncio.wait_for(timeline.welcomed.wait(), 15)  # the next welcome
                    welcome = timeline.welcomes[-1]
                    if welcome.resume == "replay":
                        missed = welcome.cursor - (cursor or 0)
                        console.print(
                            f"  [yellow]↻ reconnected[/]: the server replays the {missed} event(s) "
                            "logged while we were away, then live ones"
                        )
                    else:
                        console.print(f"  [red]↻ reconnected without replay[/] (resume={welcome.resume})")
            elif kind == "tool_completed":
                console.print(f"  [green]✔[/] {payload['tool']}: {summary_of(payload['result'])}")
            elif kind == "approval_requested":
                console.print(
                    f"[bold]3.[/] approval needed: [bold]{payload['tool']}[/] ({payload['mode']}) "
                    f"with {payload['args']}"
                )
                yes = True
                if not assume_yes and sys.stdin.isatty():
                    progress.stop()  # the live display would draw over the question
                    # asked in a thread: the event loop keeps the connection alive meanwhile
                    yes = await asyncio.to_thread(Confirm.ask, "   approve?", default=True, console=console)
                    progress.start()
                else:
                    console.print("   approved automatically (stdin is not a terminal, or --yes)")
                if not yes:
                    outcome = "denied"
                await decide(client, payload["approval_id"], "grant" if yes else "deny")
            elif kind == "verification_completed":
                console.print(
                    f"[bold]4.[/] verification: [bold]{payload['verification_result']}[/] by "
                    f"{payload['verifier']} — {payload['detail']}"
                )
            elif kind in ("turn_completed", "turn_failed", "turn_cancelled"):
                if outcome == "denied" and kind == "turn_failed":
                    console.print("   turn ended: you denied the report, so it was not written (as asked)")
                    return outcome
                console.print(f"   {kind.replace('_', ' ')}")
                return "completed" if kind == "turn_completed" else "failed"


async def chat(port: int, console: Console) -> bool:
    """Step 6: a streamed answer of the ``chat`` agent, with the connection dropped mid-stream."""
    timeline = Timeline()
    texts = MessageText()
    client = Client(
        actor_url(f"ws://127.0.0.1:{port}", "chat", "demo"),
        on_event=timeline.on_event,
        on_welcome=timeline.on_welcome,
    )
    async with client:
        await client.wait_connected(timeout=10)
        console.print(f"[bold]6.[/] asking the chat agent: [italic]{CHAT!r}[/]")
        reply = await client.call("send", CHAT, timeout=10)
        assert isinstance(reply, dict)
        console.print("   ", end="")
        deltas = 0
        dropped_at = ""
        while True:
            _, event = await asyncio.wait_for(timeline.queue.get(), 30)
            if event["turn_id"] != reply["turn_id"]:
                continue
            if event["event_type"] in ("turn_completed", "turn_failed", "turn_cancelled"):
                break
            new = texts.feed(event)
            if new:
                console.print(new, end="", markup=False, soft_wrap=True)
                deltas += 1
            if deltas == 3 and not dropped_at:
                dropped_at = texts.text(event["payload"]["message_id"])
                timeline.welcomed.clear()
                client.drop(away=1.0)  # the answer streams on in the server meanwhile
                console.print(" [yellow]✂[/] ", end="")
                await asyncio.wait_for(timeline.welcomed.wait(), 15)
                console.print("[yellow]↻[/] ", end="")
        console.print()
        console.print("   (✂ the connection dropped mid-answer; ↻ back, the text missed meanwhile replayed)")
        page = await client.call("messages", timeout=10)
    assert isinstance(page, dict)
    stored = next(m for m in page["messages"] if m["message_id"] == reply["message_id"])
    shown = "".join(texts.texts.values())
    checks = {
        "the answer streamed and completed": stored["status"] == "completed" and deltas > 3,
        "the drop landed mid-stream": 0 < len(dropped_at) < len(stored["content"]),
        "the printed answer is the stored one (no gap, no repeat)": shown == stored["content"],
        "at least one reconnect": client.reconnects >= 1,
        "no duplicate": timeline.duplicates() == 0 and client.duplicates == 0 and texts.duplicates == 0,
        "no gap": timeline.gaps() == 0 and texts.gaps == 0,
    }
    for name, held in checks.items():
        console.print(f"  {'[green]PASS' if held else '[red]FAIL'}[/] {name}")
    return all(checks.values())


async def decide(client: Client, approval_id: str, decision: str) -> None:
    """Answer the approval; if the connection drops before the reply, ask again once reconnected
    (an approval already decided by the first attempt answers ``invalid_transition``: done)."""
    for attempt in range(3):
        try:
            await client.call("approve", approval_id, decision, timeout=10)
            return
        except RpcError as exc:
            if exc.code == "invalid_transition":
                return
            raise
        except ConnectionLost:
            if attempt == 2:
                raise
            await client.wait_connected(timeout=15)


def summary_of(result: Any) -> str:
    text = result.get("summary") if isinstance(result, dict) else None
    return text if isinstance(text, str) else str(result)[:80]


def summary(
    client: Client,
    timeline: Timeline,
    run_info: dict[str, Any],
    data: Path,
    console: Console,
    *,
    denied: bool = False,
) -> bool:
    refs = run_info.get("evidence_refs") or []
    path = next((data / r[5:] for r in refs if r.startswith("file:")), None)
    console.print("[bold]5.[/] what the client was handed")
    table = Table(title="summary", show_header=False, show_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row(
        "run", f"{run_info['run_id']} · {run_info['status']} · verified {run_info['verification_result']}"
    )
    table.add_row("report", str(path) if path else "-")
    table.add_row(
        "events received", f"{len(timeline.seqs)} ({timeline.replayed} of them replayed after the drop)"
    )
    table.add_row("reconnects", str(client.reconnects))
    table.add_row(
        "duplicates",
        f"{timeline.duplicates()} (frames re-sent by the server and dropped: {client.duplicates})",
    )
    table.add_row("gaps", str(timeline.gaps()))
    console.print(table)
    checks: dict[str, bool] = {}
    if denied:
        checks["you denied the report: none was written"] = path is None and run_info["status"] == "failed"
    else:
        checks["the run completed and passed verification"] = (
            run_info["status"] == "completed" and run_info["verification_result"] == "pass"
        )
        checks["the report exists"] = path is not None and path.is_file()
    checks["at least one reconnect"] = client.reconnects >= 1
    checks["no duplicate"] = timeline.duplicates() == 0 and client.duplicates == 0
    checks["no gap"] = timeline.gaps() == 0
    for name, held in checks.items():
        console.print(f"  {'[green]PASS' if held else '[red]FAIL'}[/] {name}")
    return all(checks.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m roost.examples.agent_demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--yes", action="store_true", help="approve without asking")
    parser.add_argument(
        "--data", type=Path, help="data directory, kept (default: a new temporary one, removed at exit)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary data directory; say where")
    parser.add_argument("--delay", type=float, default=0.6, help="seconds per document in the analysis")
    args = parser.parse_args(argv)
    temporary = args.data is None
    data = args.data or Path(tempfile.mkdtemp(prefix="roost-demo-"))
    data.mkdir(parents=True, exist_ok=True)
    console = Console(highlight=False)
    try:
        ok = asyncio.run(main_task(data, assume_yes=args.yes, delay=args.delay, console=console))
    except KeyboardInterrupt:
        console.print("interrupted; the server was stopped")
        return 130
    finally:
        if temporary and not args.keep:
            shutil.rmtree(data, ignore_errors=True)
        elif temporary:
            console.print(f"data directory kept: {data}")
    console.print("[bold green]PASS[/]" if ok else "[bold red]FAIL[/]")
    return 0 if ok else 1


async def main_task(data: Path, *, assume_yes: bool, delay: float, console: Console) -> bool:
    """:func:`run`, cancelled on SIGTERM or SIGHUP too, so that its ``finally`` stops the server."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return await run(data, assume_yes=assume_yes, delay=delay, console=console)
    except asyncio.CancelledError:
        console.print("stopped by a signal; the server was stopped")
        return False


if __name__ == "__main__":
    raise SystemExit(main())
