"""MCP tools in the catalog, and the worker side of one MCP call.

Each tool a server lists becomes a :class:`~roost.agent.catalog.Tool` named ``mcp__SERVER__TOOL``:
its arguments are checked against the tool's input schema (JSON Schema) before a step is planned,
and a model sees that schema; it runs as a background job (it is I/O) with the server's approval
mode. Its function (:func:`call`) drives the capability session row through ``ctx.turn`` and the
connection through the process's pool (:mod:`roost.agent.mcp_client`).

The deterministic planner picks an MCP tool when the request names it (its keywords: its catalog
name, or ``keywords`` of the server's settings) and reads its arguments from the JSON object that
follows the name in the request (``mcp__files__read {"path": "a.txt"}``).

Guarantees (tests in ``tests/test_mcp_client.py``):

- **The same gate as every tool**: approval mode, payload policy, telemetry, jobs and retries.
- **A server's wrong answer is final**: an ``isError`` result, or one that violates the tool's output
  schema, fails the step (not retried) with the reason.
- **A call that may have had its effect is not made again without leave**: a call whose connection
  broke under it (:class:`~roost.agent.mcp_client.ConnectionLost` ``sent``), or that was under way
  when its Roost process was lost, is made again at once only for a tool the server annotates
  ``readOnlyHint`` or ``idempotentHint``; for any other the run waits for ``provide_input``
  (:meth:`~roost.agent.capabilities.Capabilities.open`). One that could not be sent (no connection,
  a 404) is retried. A call that timed out fails, not retried. Every call carries the step's idempotency key
  in its ``_meta`` (``roost/idempotency_key``), the same for every run of the attempt after a lost
  process, so that a server can tell a repeat.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Collection, Sequence
from typing import Any, ClassVar, Protocol

import jsonschema  # type: ignore[import-untyped]  # no stubs; a dependency of mcp
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, model_validator

from roost.agent.capabilities import DECLINES, Capabilities, Opened
from roost.agent.catalog import NeedInput, Tool, ToolContext
from roost.agent.mcp_client import (
    CallTimedOut,
    ConnectionLost,
    McpConnection,
    Rejoin,
    SessionExpired,
    mcp_pool,
)
from roost.agent.mcp_config import CapabilitySessions, McpServer, mcp_tool_name, server_of
from roost.agent.models import arguments_in

__all__ = ["MAX_NAME", "McpToolError", "catalog_name", "mcp_tool_name", "server_of", "tools_of"]

log = logging.getLogger("roost.agent.mcp")


class McpToolError(RuntimeError):
    """The server answered the call with an error or with a result that breaks its output schema, or
    did not answer in time: final (``retryable`` False): a call is run again only when its connection
    broke under it."""

    retryable: bool = False


class McpArgs(BaseModel):
    """Arguments of an MCP tool: any JSON object its input schema accepts (subclassed per tool)."""

    model_config = ConfigDict(extra="allow")
    mcp_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    @model_validator(mode="before")
    @classmethod
    def _fits_schema(cls, data: Any) -> Any:
        try:
            jsonschema.validate(data, cls.mcp_schema)
        except jsonschema.ValidationError as exc:
            where = ".".join(str(p) for p in exc.absolute_path)
            raise ValueError(f"{where + ': ' if where else ''}{exc.message[:300]}") from None
        except jsonschema.SchemaError as exc:
            raise ValueError(f"the server's input schema is not valid: {exc.message[:300]}") from None
        return data

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(cls.mcp_schema)


class HasCapabilities(Protocol):
    @property
    def capabilities(self) -> Capabilities: ...


class CapabilityHost(Protocol):
    @property
    def orchestrator(self) -> HasCapabilities: ...


def _caps(actor: Any) -> Capabilities:
    host: CapabilityHost = actor
    return host.orchestrator.capabilities


def _plan_args(*names: str) -> Any:
    """The deterministic planner's arguments: the JSON object after the tool's catalog name or one
    of its keywords (:func:`roost.agent.models.arguments_in`)."""

    def plan(text: str) -> dict[str, Any]:
        return arguments_in(text, *names)

    return plan


def tools_of(server: McpServer, listed: Sequence[types.Tool]) -> list[Tool]:
    """The catalog tools of ``server``'s listed tools. **What a model endpoint would refuse never
    reaches it**: a catalog name is made of letters, digits, ``_`` and ``-``, 64 characters at most
    (what OpenAI's function names allow; :func:`catalog_name`), and a tool whose input schema is no
    valid JSON Schema of an object is left out, logged with the reason, so that one bad tool cannot
    make every request of the agent fail."""
    made = []
    taken: set[str] = set()
    for t in listed:
        schema = dict(t.input_schema)
        problem = _schema_problem(schema)
        if problem is not None:
            log.warning("MCP server %r: tool %r left out of the catalog: %s", server.name, t.name, problem)
            continue
        name = catalog_name(server.name, t.name, taken)
        taken.add(name)
        notes = t.annotations
        repeatable = notes is not None and bool(notes.read_only_hint or notes.idempotent_hint)
        model = type(f"{name}_args", (McpArgs,), {"mcp_schema": schema})
        made.append(
            Tool(
                name=name,
                fn=_tool_fn(server, t.name, repeatable),
                args_model=model,
                description=f"{t.description or t.name} (MCP server {server.name})",
                approval_mode=server.tool_approval.get(t.name, server.approval_mode),
                background=True,
                keywords=tuple(k.lower() for k in server.keywords.get(t.name, (name,))),
                plan_args=_plan_args(name, *server.keywords.get(t.name, ())),
            )
        )
    return made


#: What a tool's catalog name may hold, and how long it may be (OpenAI's ``^[a-zA-Z0-9_-]{1,64}$``).
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64


def catalog_name(server: str, tool: str, taken: Collection[str] = ()) -> str:
    """``mcp__SERVER__TOOL``, each character outside ``A-Za-z0-9_-`` made ``_``; a name that had to
    change (or is longer than :data:`MAX_NAME`, or already ``taken``) ends with 8 hex digits of the
    tool's own name, so that two tools never share one. The call uses the tool's own name."""
    plain = mcp_tool_name(server, tool)
    name = _NAME_CHARS.sub("_", plain)
    if name == plain and len(name) <= MAX_NAME and name not in taken:
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def _schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` cannot be a tool's input schema (no valid JSON Schema, or not of an object)."""
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"its input schema is not valid JSON Schema: {exc.message[:200]}"
    if schema.get("type", "object") != "object":
        return f"its input schema is of {str(schema.get('type'))[:40]!r}, not of an object"
    return None


def _tool_fn(server: McpServer, tool: str, repeatable: bool) -> Any:
    async def run(ctx: ToolContext, args: BaseModel) -> Any:
        return await call(ctx, server, tool, args.model_dump(mode="json"), repeatable=repeatable)

    return run


async def call(
    ctx: ToolContext, server: McpServer, tool: str, arguments: dict[str, Any], *, repeatable: bool = False
) -> Any:
    """One MCP call of a background job (see the module doc and docs/design.md); in a
    ``roost.mcp.call`` span when the job attempt is traced (:mod:`roost.agent.tracing`).
    ``repeatable``: the server marks the tool read-only or idempotent (its annotations), so a call
    whose connection broke under it may run again."""
    from roost.agent.tracing import job_spans  # the OpenTelemetry API: the MCP SDK loads it anyway

    spans = job_spans()
    if spans is None:
        return await _call_retrying(ctx, server, tool, arguments, repeatable)
    with spans.tracer.start_as_current_span(
        "roost.mcp.call", attributes={"roost.mcp.server": server.name, "roost.mcp.tool": tool}
    ):
        return await _call_retrying(ctx, server, tool, arguments, repeatable)


class _Reopen(Exception):
    """The connection ``open`` chose ended before the call went out: open the row again."""


async def _call_retrying(
    ctx: ToolContext, server: McpServer, tool: str, arguments: dict[str, Any], repeatable: bool
) -> Any:
    expired = reopened = 0
    while True:  # a session that expired under the call may be re-initialised once; a row reopened once
        try:
            return await _once(ctx, server, tool, arguments, repeatable)
        except SessionExpired:
            expired += 1
            if expired > 1:
                raise SessionExpired(f"MCP server {server.name!r}: the new session expired too") from None
        except _Reopen:
            reopened += 1
            if reopened > 1:
                raise ConnectionLost(f"MCP server {server.name!r}: the connection ended twice") from None


async def _once(
    ctx: ToolContext, server: McpServer, tool: str, arguments: dict[str, Any], repeatable: bool
) -> Any:
    """Open the row, connect if needed, call; the row records how it went."""
    opened, settings, pool, owner = await ctx.turn(lambda a: _open(a, ctx, server, repeatable))
    if opened.action == "wait":
        raise NeedInput(opened.question or "the MCP session expired")
    if opened.action == "declined":
        raise McpToolError(
            f"tool {tool!r}: not made again: its earlier call may have had its effect, and the user "
            "declined to make it again"
        )
    cid = opened.capability_session_id
    ttl = server.session_ttl_s
    conn = pool.live(cid) if opened.action == "reuse" else None
    if opened.action == "reuse" and conn is None:  # it ended since open: decide again, never a new one here
        await ctx.turn(
            lambda a: _caps(a).session_gone(cid, "the connection ended", expired=False, sent=False)
        )
        raise _Reopen
    try:
        if conn is None and opened.action == "rejoin":
            assert opened.resume_token is not None
            assert opened.handshake is not None
            conn = await pool.connect(cid, server, owner, Rejoin(opened.resume_token, opened.handshake))
        if conn is None:
            conn = await pool.connect(cid, server, owner)
            sid, handshake = conn.session_id, conn.handshake
            await ctx.turn(lambda a: _caps(a).connected(cid, sid, ttl, handshake))
        result = await _call(ctx, conn, pool, opened, settings, tool, arguments)
    except (SessionExpired, ConnectionLost) as exc:
        reason, expired = str(exc), isinstance(exc, SessionExpired)
        sent = exc.sent  # False: it never reached the server (no connection, or a 404 answered it)
        await ctx.turn(lambda a: _caps(a).session_gone(cid, reason, expired=expired, sent=sent))
        raise  # the next attempt's open decides (a call that may have had its effect waits for leave)
    await ctx.turn(lambda a: _caps(a).called(cid, ttl))
    return _value(server, tool, result)


def _open(
    actor: Any, ctx: ToolContext, server: McpServer, repeatable: bool
) -> tuple[Opened, CapabilitySessions, Any, str]:
    pool = mcp_pool(actor.extension.process)
    caps = _caps(actor)
    opened = caps.open(
        ctx.run_id,
        server.name,
        server.transport,
        ctx.item_id,
        ctx.attempt,
        lambda cid: pool.live(cid) is not None,
        repeatable,
    )
    owner = f"{actor.kind}\0{actor.name}"  # the name within its tenant: one pool of sessions per actor
    return opened, actor.settings().capability_sessions, pool, owner


async def _call(
    ctx: ToolContext,
    conn: McpConnection,
    pool: Any,
    opened: Opened,
    settings: CapabilitySessions,
    tool: str,
    arguments: dict[str, Any],
) -> types.CallToolResult:
    cid, job_id, attempt = opened.capability_session_id, opened.job_id, ctx.attempt

    class Progress:
        async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
            if settings.emit_progress_events:
                try:
                    await ctx.progress(progress, total or 0, message or "")  # fractions kept
                except Exception:  # no longer current: a cancel stops the attempt's task itself
                    return

    progress = Progress()

    async def elicit(message: str, schema: dict[str, Any]) -> types.ElicitResult | types.ErrorData:
        waiter = pool.wait_for_answer(cid)  # before the turn: an answer may come right after it
        how, answer = await ctx.turn(lambda a: _caps(a).elicit(cid, job_id, attempt, message, schema))
        if how != "wait":
            pool.waiters.pop(cid, None)
            waiter.cancel()
        if how == "refused":
            return types.ErrorData(code=types.INVALID_PARAMS, message=str(answer))
        if how == "wait":
            answer = await waiter
        if not isinstance(answer, dict):
            return types.ErrorData(code=types.INVALID_PARAMS, message="the answer is not an object")
        if answer in DECLINES:  # the user refused to answer
            return types.ElicitResult(action=answer["action"])
        return types.ElicitResult(action="accept", content=answer)

    conn.on_elicit = elicit
    try:
        return await conn.call(tool, arguments, progress, ctx.idempotency_key or None)
    except CallTimedOut as exc:  # final: running it again could repeat its effect
        raise McpToolError(f"tool {tool!r}: {exc}") from None
    except RuntimeError as exc:  # the SDK's check of the result against the output schema
        raise McpToolError(f"MCP server {conn.server.name!r} tool {tool!r}: {exc}") from None
    except MCPError as exc:  # the server answered the call with an error: final, unless it timed out
        error = McpToolError(
            f"MCP server {conn.server.name!r} tool {tool!r}: error {exc.code}: {exc.message}"
        )
        await ctx.turn(lambda a: _caps(a).answered(cid))  # answered: no longer under way
        raise error from None
    finally:
        conn.on_elicit = None


def _value(server: McpServer, tool: str, result: types.CallToolResult) -> Any:
    """The step's result: the structured content, else the text, else the content blocks."""
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if result.is_error:
        raise McpToolError(f"MCP server {server.name!r} tool {tool!r} failed: {' '.join(texts)[:500]}")
    if result.structured_content is not None:
        return result.structured_content
    if len(texts) == len(result.content):
        return "\n".join(texts)
    return [c.model_dump(mode="json", exclude_none=True) for c in result.content]
