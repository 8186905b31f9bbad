"""Agent kinds and helpers shared by the agent runtime's tests."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from roost.agent import AgentConfig, NeedInput, ToolContext, tool
from roost.agent.agent import Agent
from roost.client import MessageText
from roost.examples.docs_agent import DocsAgent
from roost.scheduler import FakeClock
from roost.storage import actor_path
from roost.testing import ActorKit, KitConnection

__all__ = [
    "FAST",
    "Docs",
    "Flaky",
    "Payloads",
    "advance",
    "drive",
    "event_types",
    "events",
    "items_of",
    "log_frames",
]

FAST = AgentConfig(
    heartbeat_interval=0.5,
    lease_ttl=2.0,
    job_backoff=0.5,
    tools={"analyze_documents": {"delay_s": 0.2}},
)


class Docs(DocsAgent):
    config = FAST


class Nothing(BaseModel):
    pass


class Blob(BaseModel):
    size: int = 1_000_000


@tool(keywords=("blob",))
async def make_blob(ctx: ToolContext, args: Blob) -> dict[str, Any]:
    """Return a heavy, secret-laden result."""
    import base64

    raw = bytes(range(256)) * (args.size // 256 + 1)
    return {
        "image": base64.b64encode(raw[: args.size]).decode(),
        "api_key": "sk-live-0123456789abcdefghij",
        "note": "call me with Bearer abcdefghijklmnop0123 please",
    }


@tool(keywords=("ask",))
async def ask_user(ctx: ToolContext, args: Nothing) -> dict[str, Any]:
    """Needs the user's favourite colour."""
    if not ctx.inputs:
        raise NeedInput("what is your favourite colour?")
    return {"colour": ctx.inputs[-1]}


@tool(keywords=("boom",))
async def boom(ctx: ToolContext, args: Nothing) -> None:
    """Always fails, with a long message."""
    raise RuntimeError(
        "it broke with Authorization: Bearer supersecretbearer0 password=hunter2\n"
        "Traceback (most recent call last):\n  File secret internals"
    )


class Payloads(Agent):
    kind = "payloads"
    config = FAST
    tools = (make_blob, ask_user, boom)


class FlakyArgs(BaseModel):
    fail_times: int = 1


FLAKY_CALLS: list[int] = []


def _fail_times(text: str) -> dict[str, Any]:
    import re

    found = re.search(r"fail (\d+)", text)
    return {"fail_times": int(found.group(1))} if found else {}


@tool(background=True, keywords=("flaky",), plan_args=_fail_times)
async def flaky(ctx: ToolContext, args: FlakyArgs) -> dict[str, Any]:
    """Fails its first ``fail_times`` attempts."""
    FLAKY_CALLS.append(ctx.attempt)
    await ctx.progress(0, 1)
    if ctx.attempt <= args.fail_times:
        raise ConnectionError(f"attempt {ctx.attempt} failed")
    await ctx.progress(1, 1)
    return {"summary": f"ok on attempt {ctx.attempt}"}


@tool(background=True, keywords=("quiet",))
async def quiet(ctx: ToolContext, args: Nothing) -> str:
    """Works for a long time and never reports progress (only heartbeats keep its lease)."""
    await ctx.sleep(3600)
    return "woke"


class Flaky(Agent):
    kind = "flaky"
    config = FAST
    tools = (flaky, quiet)


def advance(kit: ActorKit, seconds: float) -> None:
    """Move the kit's fake clock."""
    assert isinstance(kit.clock, FakeClock)
    kit.clock.advance(seconds)


def events(conn: KitConnection) -> list[dict[str, Any]]:
    return [f["event"] for f in conn.frames if f.get("type") == "event"]


def event_types(conn: KitConnection) -> list[str]:
    return [e["event_type"] for e in events(conn)]


async def drive(
    kit: ActorKit,
    done: Callable[[], bool],
    *,
    step: float = 0.05,
    max_steps: int = 2000,
    io_wait: float = 0.0,
) -> None:
    """Let actors run and move the fake clock by ``step`` until ``done()`` (bounded). ``io_wait``:
    real seconds to wait per step, for work waiting on real sockets."""
    for _ in range(max_steps):
        await kit.settle()
        for _ in range(5):  # worker tasks live outside mailboxes: give them turns of the loop
            await asyncio.sleep(0)
        if io_wait:
            await asyncio.sleep(io_wait)
        await kit.settle()
        if done():
            return
        advance(kit, step)
    raise AssertionError("condition not reached")


def log_frames(data_dir: Path, kind: str, name: str) -> list[str]:
    """Every frame of an actor's log, read from its SQLite file by a separate connection."""
    conn = sqlite3.connect(actor_path(data_dir, kind, name))
    try:
        return [r[0] for r in conn.execute("SELECT frame FROM roost_log ORDER BY seq")]
    finally:
        conn.close()


def items_of(data_dir: Path, kind: str, name: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(actor_path(data_dir, kind, name))
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM roost_agent_items ORDER BY run_id, step_index")]
    finally:
        conn.close()


def reassemble(payloads: list[dict[str, Any]]) -> str:
    """The Python client's reassembly (``MessageText``) of these deltas: none missed, none twice."""
    texts = MessageText()
    for d in payloads:
        texts.feed({"event_type": "model_delta", "payload": d})
    assert texts.gaps == 0, "a delta was missed"
    assert texts.duplicates == 0, "a delta came twice"
    return "".join(texts.texts.values())


def file_text(data_dir: Path, kind: str, name: str, *, skip: tuple[str, ...] = ()) -> str:
    """Every row of every table of an actor's file, as text (read after the actor closed)."""
    conn = sqlite3.connect(actor_path(data_dir, kind, name))
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = [repr(conn.execute(f"SELECT * FROM {t}").fetchall()) for t in tables if t not in skip]
        return "\n".join(rows)
    finally:
        conn.close()
