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
   duplicates, gaps. Exit status 0 when there was at least one reconnect, no duplicate and no gap.

The server is stopped at the end (and killed if the demo is interrupted): no process is left behind.
Talks to the server only over its public protocol, through :class:`demo_client.Client`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.prompt import Confirm
from rich.table import Table

from .client import Client
from .demo import Server, free_port
from .frames import Welcome
from .urls import actor_url

__all__ = ["main"]

REQUEST = "analyze the documents and make a report"
CONFIG = """\
[agent]
heartbeat_interval = 0.5
lease_ttl = 2.0

[agent.tools.analyze_documents]
delay_s = {delay}
"""


class Timeline:
    """Every event the client processed, in order, and the welcomes it received."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[int, dict[str, Any]]] = asyncio.Queue()
        self.seqs: list[int] = []
        self.welcomes: list[Welcome] = []

    def on_event(self, event: Any, seq: int) -> None:
        self.seqs.append(seq)
        self.queue.put_nowait((seq, event))

    def on_welcome(self, welcome: Welcome) -> None:
        self.welcomes.append(welcome)

    def gaps(self) -> int:
        """Seqs missing between the first and the last processed one."""
        if not self.seqs:
            return 0
        return (self.seqs[-1] - self.seqs[0] + 1) - len(set(self.seqs))


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
            ok = await follow(client, timeline, reply, assume_yes=assume_yes, console=console)
            run_info = await client.call("get_run", reply["run_id"], timeout=10)
            assert isinstance(run_info, dict)
            report = summary(client, timeline, run_info, data, console)
            return ok and report
    finally:
        server.stop()
        console.print(f"server stopped after {time.monotonic() - started:.1f} s")


async def follow(
    client: Client, timeline: Timeline, reply: dict[str, Any], *, assume_yes: bool, console: Console
) -> bool:
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
                    client.drop(away=1.5)  # stay away a moment: the agent goes on without us
                    cursor = client.cursor
                    console.print(f"  [yellow]✂ connection dropped[/]; back in 1.5 s with cursor={cursor}")
                    await asyncio.sleep(0.1)
                    await client.wait_connected(timeout=15)
                    welcome = timeline.welcomes[-1]
                    console.print(
                        f"  [yellow]↻ reconnected[/]: resume={welcome.resume}; "
                        f"{welcome.cursor - (cursor or 0)} event(s) from while we were away are replayed"
                    )
            elif kind == "tool_completed":
                console.print(f"  [green]✔[/] {payload['tool']}: {summary_of(payload['result'])}")
            elif kind == "approval_requested":
                console.print(
                    f"[bold]3.[/] approval needed: [bold]{payload['tool']}[/] ({payload['mode']}) "
                    f"with {payload['args']}"
                )
                yes = True
                if not assume_yes and sys.stdin.isatty():
                    yes = Confirm.ask("   approve?", default=True, console=console)
                else:
                    console.print("   approved automatically (stdin is not a terminal, or --yes)")
                await client.call("approve", payload["approval_id"], "grant" if yes else "deny", timeout=10)
            elif kind == "verification_completed":
                console.print(
                    f"[bold]4.[/] verification: [bold]{payload['verification_result']}[/] by "
                    f"{payload['verifier']} — {payload['detail']}"
                )
            elif kind in ("turn_completed", "turn_failed", "turn_cancelled"):
                console.print(f"   {kind.replace('_', ' ')}")
                return bool(kind == "turn_completed")


def summary_of(result: Any) -> str:
    text = result.get("summary") if isinstance(result, dict) else None
    return text if isinstance(text, str) else str(result)[:80]


def summary(
    client: Client, timeline: Timeline, run_info: dict[str, Any], data: Path, console: Console
) -> bool:
    refs = run_info.get("evidence_refs") or []
    path = next((data / r[5:] for r in refs if r.startswith("file:")), None)
    table = Table(title="summary", show_header=False, show_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row(
        "run", f"{run_info['run_id']} · {run_info['status']} · verified {run_info['verification_result']}"
    )
    table.add_row("report", str(path) if path else "-")
    table.add_row("events received", str(len(timeline.seqs)))
    table.add_row("reconnects", str(client.reconnects))
    table.add_row("duplicates", str(client.duplicates))
    table.add_row("gaps", str(timeline.gaps()))
    console.print(table)
    checks = {
        "the run completed and passed verification": run_info["status"] == "completed"
        and run_info["verification_result"] == "pass",
        "the report exists": path is not None and path.is_file(),
        "at least one reconnect": client.reconnects >= 1,
        "no duplicate": client.duplicates == 0,
        "no gap": timeline.gaps() == 0,
    }
    for name, held in checks.items():
        console.print(f"  {'[green]PASS' if held else '[red]FAIL'}[/] {name}")
    return all(checks.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demo_client.agent_demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--yes", action="store_true", help="approve without asking")
    parser.add_argument("--data", type=Path, help="data directory (default: a new temporary one, kept)")
    parser.add_argument("--delay", type=float, default=0.6, help="seconds per document in the analysis")
    args = parser.parse_args(argv)
    data = args.data or Path(tempfile.mkdtemp(prefix="roost-demo-"))
    data.mkdir(parents=True, exist_ok=True)
    console = Console(highlight=False)
    ok = asyncio.run(run(data, assume_yes=args.yes, delay=args.delay, console=console))
    console.print("[bold green]PASS[/]" if ok else "[bold red]FAIL[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
