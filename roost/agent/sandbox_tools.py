"""Catalog tools over the run's workspace: ``workspace_list``, ``workspace_read``, ``workspace_write``.

Give them to an agent kind that declares a sandbox (``tools = (*WORKSPACE_TOOLS, ...)``). They are
steps like any other, so they pass the execution gate: ``workspace_write`` is ``mutating`` (a grant
must cover its exact arguments), the read and list tools ``safe_readonly``; what they return passes
the payload policy (a secret in a file is redacted in the result and its event). Paths, the
permissions profile and the limits are the workspace's (:mod:`roost.agent.sandbox`); a refusal fails
the step with its reason.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from roost.agent.catalog import ToolContext, tool
from roost.agent.sandbox import SandboxError, Workspace

__all__ = ["WORKSPACE_TOOLS", "workspace_list", "workspace_read", "workspace_write"]


class ListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prefix: str = ""


class ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1)


class WriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1)
    text: str


def _workspace(ctx: ToolContext) -> Workspace:
    if ctx.workspace is None:
        raise SandboxError("this agent has no workspace (declare sandbox = SandboxSpec(...))")
    return ctx.workspace


@tool(keywords=("list files",))
async def workspace_list(ctx: ToolContext, args: ListArgs) -> dict[str, Any]:
    """List the readable files of the run's workspace (under a prefix)."""
    return {"files": _workspace(ctx).listing(args.prefix)}


@tool(keywords=("read file",))
async def workspace_read(ctx: ToolContext, args: ReadArgs) -> dict[str, Any]:
    """Read a text file of the run's workspace."""
    data = _workspace(ctx).read(args.path)
    return {"path": args.path, "bytes": len(data), "text": data.decode("utf-8", errors="replace")}


@tool(approval_mode="mutating", keywords=("write file",))
async def workspace_write(ctx: ToolContext, args: WriteArgs) -> dict[str, Any]:
    """Write a text file into the run's workspace (replacing it)."""
    digest = _workspace(ctx).write(args.path, args.text)
    return {"path": args.path, "bytes": len(args.text.encode()), "digest": digest}


WORKSPACE_TOOLS = (workspace_list, workspace_read, workspace_write)
