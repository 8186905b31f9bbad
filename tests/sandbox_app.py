"""Agent kinds with a sandbox workspace, for the sandbox tests in process and in ``roost serve
tests.sandbox_app:app`` child processes (one kind per disposition).

A turn's text is the plan, as JSON: ``[["ws_append", {"line": "one"}], ["ws_append_slow", {"line":
"two"}], ...]`` (:class:`Scripted`). ``ws_append`` appends a line to ``notes/log.txt`` inside the turn;
``ws_append_slow`` does it as a background job, ``ws_append_hang`` inside the turn but hangs there
once (``$SANDBOX_INLINE_MARKER``). Each call also appends ``item attempt line`` to the
file named by ``$SANDBOX_EFFECTS`` (outside the workspace: how often each step ran). The first attempt
of ``ws_append_slow``, after its write, creates ``$SANDBOX_MARKER`` and hangs, so a test can SIGKILL
the server while that write is pending.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson
from pydantic import BaseModel

from roost.actors.registry import RuntimeConfig
from roost.agent import (
    WORKSPACE_TOOLS,
    Agent,
    AgentConfig,
    Manifest,
    ModelRequest,
    ModelStep,
    PermissionsProfile,
    SandboxSpec,
    ToolCall,
    ToolContext,
    tool,
)
from roost.agent.models import Model
from roost.agent.sandbox import SandboxError
from roost.transport import create_app

__all__ = ["KINDS", "MANIFEST", "Scripted", "app"]

MANIFEST = Manifest.of(
    "v1",
    {"README.md": "read me\n", "src/app.py": "print('app')\n", "notes/log.txt": ""},
)
PROFILE = PermissionsProfile("notes", read_only=("src", "README.md"), read_write=("notes", "out"))
CONFIG = AgentConfig(heartbeat_interval=0.25, lease_ttl=1.0, job_backoff=0.2)


class Line(BaseModel):
    line: str


def _effect(ctx: ToolContext, line: str) -> None:
    path = os.environ.get("SANDBOX_EFFECTS")
    if path:
        with open(path, "a") as f:
            f.write(f"{ctx.item_id} {ctx.attempt} {line}\n")


@tool(approval_mode="safe_readonly")
async def ws_append(ctx: ToolContext, args: Line) -> dict[str, Any]:
    """Append a line to notes/log.txt."""
    if ctx.workspace is None:
        raise SandboxError("no workspace")
    _effect(ctx, args.line)
    ctx.workspace.append("notes/log.txt", args.line + "\n")
    return {"appended": args.line}


@tool(approval_mode="safe_readonly", background=True)
async def ws_append_slow(ctx: ToolContext, args: Line) -> dict[str, Any]:
    """Append a line to notes/log.txt in a background job (the first attempt hangs after writing
    when ``$SANDBOX_MARKER`` is set)."""
    if ctx.workspace is None:
        raise SandboxError("no workspace")
    _effect(ctx, args.line)
    ctx.workspace.append("notes/log.txt", args.line + "\n")
    marker = os.environ.get("SANDBOX_MARKER")
    if marker and ctx.attempt == 1:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.close(fd)
        await asyncio.sleep(120)  # killed here
    return {"appended": args.line}


@tool(approval_mode="safe_readonly")
async def ws_append_hang(ctx: ToolContext, args: Line) -> dict[str, Any]:
    """Append a line inside the turn; the first time (``$SANDBOX_INLINE_MARKER`` missing) create the
    marker after writing and hang, so that the turn is killed with the write pending."""
    if ctx.workspace is None:
        raise SandboxError("no workspace")
    _effect(ctx, args.line)
    ctx.workspace.append("notes/log.txt", args.line + "\n")
    marker = os.environ.get("SANDBOX_INLINE_MARKER")
    if marker:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return {"appended": args.line}
        os.close(fd)
        await asyncio.sleep(120)  # killed here, inside the turn
    return {"appended": args.line}


@tool(approval_mode="safe_readonly")
async def ws_append_then_fail(ctx: ToolContext, args: Line) -> dict[str, Any]:
    """Append a line to notes/log.txt, then fail (a step whose write must not survive)."""
    if ctx.workspace is None:
        raise SandboxError("no workspace")
    ctx.workspace.append("notes/log.txt", args.line + "\n")
    raise RuntimeError("failed after writing")


class Scripted:
    """The turn's text is its plan (JSON); the second step ends the run."""

    inline = True

    async def step(self, request: ModelRequest) -> ModelStep:
        if request.steps:
            return ModelStep(text="done: " + ", ".join(f"{s.tool} {s.status}" for s in request.steps))
        calls = orjson.loads(request.text)
        return ModelStep(tool_calls=[ToolCall(name=name, args=args) for name, args in calls])


class Workspaced(Agent):
    kind = "ws_resumable"
    config = CONFIG
    tools = (ws_append, ws_append_slow, ws_append_hang, ws_append_then_fail, *WORKSPACE_TOOLS)
    sandbox = SandboxSpec(MANIFEST, PROFILE, "resumable")

    def make_model(self) -> Model:
        return Scripted()


class SnapshotWorkspaced(Workspaced):
    kind = "ws_snapshot"
    sandbox = SandboxSpec(MANIFEST, PROFILE, "snapshot")


class RecreateWorkspaced(Workspaced):
    kind = "ws_recreate"
    sandbox = SandboxSpec(MANIFEST, PROFILE, "recreate")


class SessionWorkspaced(Workspaced):
    """Each run starts from the final snapshot of the session's previous run."""

    kind = "ws_session"
    sandbox = SandboxSpec(MANIFEST, PROFILE, "resumable", start="session")


KINDS = (Workspaced, SnapshotWorkspaced, RecreateWorkspaced, SessionWorkspaced)

# turn_timeout well above the hang (a job's worker is not a turn, but the kinds share the defaults)
app = create_app(list(KINDS), config=RuntimeConfig(turn_timeout=90.0, poll_interval=0.5))
