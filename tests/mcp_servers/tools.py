"""One MCP server with every behaviour the client's tests need (see ``tests/test_mcp_client.py``).

``stdio``: over stdin/stdout. ``http PORT``: streamable HTTP on 127.0.0.1:PORT, path ``/mcp``;
``--expire``: a session that made one ``tools/call`` is forgotten, so its next call is answered 404
(what a server that expires sessions does), deterministically. ``--wait-for PATH``: ``tools/list`` is
answered only once ``PATH`` exists. ``--require HEADER=VALUE``: a request without that header is
answered 401.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ToolsServer(MCPServer):
    """Lists ``bad_result`` with an output schema that its results break (the SDK's server checks
    results of the schemas it derives, so this one is added to the listing)."""

    async def list_tools(self) -> list[types.Tool]:
        if WAIT_FOR is not None:  # --wait-for PATH: no listing before it exists
            await _exists(WAIT_FOR)
        listed = await super().list_tools()
        for tool in listed:
            if tool.name == "bad_result":
                tool.output_schema = BAD_SCHEMA
        return listed


WAIT_FOR: Path | None = None


async def _exists(path: Path) -> None:
    """Return once ``path`` exists (polled: another process makes it)."""
    while not await anyio.Path(path).exists():  # noqa: ASYNC110  (a file, not an event of this process)
        await anyio.sleep(0.01)


BAD_SCHEMA = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
app = ToolsServer("roost-test-tools")


@app.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@app.tool()
def whoami() -> int:
    """The server process's pid (which process answered)."""
    return os.getpid()


@app.tool()
def session_id(ctx: Context) -> str:
    """The MCP session id the call came in (streamable HTTP; empty over stdio)."""
    request: Any = ctx.request_context.request
    return str(request.headers.get("mcp-session-id", "")) if request is not None else ""


@app.tool()
def leak() -> dict[str, Any]:
    """Answer with a credential in the result."""
    return {"token": "sk-live-0123456789abcdefghij", "note": "use Bearer abcdefghijklmnop0123 for it"}


@app.tool()
async def count(steps: int, ctx: Context) -> dict[str, int]:
    """Count to ``steps``, reporting progress at each."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    return {"counted": steps}


@app.tool()
async def fractions(ctx: Context) -> str:
    """Report progress in fractions of one."""
    for part in (0.25, 0.5, 1.0):
        await ctx.report_progress(part, 1.0, f"at {part}")
    return "done"


class Colour(BaseModel):
    colour: str


@app.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def ask_colour(ctx: Context) -> str:
    """Ask the user for a colour (an elicitation) and answer with it."""
    answer = await ctx.elicit("What is your favourite colour?", Colour)
    if answer.action != "accept":
        return f"no colour ({answer.action})"
    return f"colour: {answer.data.colour}"


@app.tool()
async def ask_huge(ctx: Context) -> str:
    """Elicit with a message far too large."""
    answer = await ctx.elicit("x" * 1_000_000, Colour)
    return f"asked: {answer.action}"


@app.tool()
def bad_result() -> types.CallToolResult:
    """Declares an output schema (see ToolsServer) and breaks it."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="not a number")],
        structured_content={"total": "not a number"},
    )


@app.tool()
def fail() -> str:
    """Always fails (an isError result)."""
    raise RuntimeError("the tool failed on purpose")


@app.tool(annotations=types.ToolAnnotations(idempotent_hint=True))
def die_once(marker: str) -> str:
    """Kill the server mid-call the first time (``marker`` does not exist yet), else answer; marked
    idempotent (a call lost under it may run again)."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died")
        os._exit(3)
    return "alive"


@app.tool(annotations=types.ToolAnnotations(idempotent_hint=True))
def crash() -> str:
    """Kill the server mid-call, every time (marked idempotent)."""
    os._exit(3)


@app.tool()
def pay_once(marker: str) -> str:
    """As ``die_once``, but not marked idempotent or read-only: a payment that may have been made."""
    path = Path(marker)
    if not path.exists():
        path.write_text("paid")
        os._exit(3)
    return "paid again"


@app.tool()
def pay_and_die(marker: str) -> str:
    """A payment (not marked repeatable) whose server dies under every call: counts its calls in
    ``marker``."""
    path = Path(marker)
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
    os._exit(3)


@app.tool()
async def pay_then_hold(flag: str, marker: str, ctx: Context) -> str:
    """As ``hold``, but a payment (not marked read-only or idempotent): counts its calls in
    ``marker``, then waits for ``flag``."""
    path = anyio.Path(marker)
    await path.write_text(str(int(await path.read_text()) + 1 if await path.exists() else 1))
    await ctx.report_progress(1, 2, "paying")
    while not await anyio.Path(flag).exists():  # noqa: ASYNC110  (another process makes it)
        await anyio.sleep(0.02)
    return "paid"


@app.tool()
def call_key(ctx: Context) -> str:
    """The idempotency key the call carries in its ``_meta`` (``roost/idempotency_key``)."""
    meta: Any = ctx.request_context.meta
    if meta is not None and not isinstance(meta, dict):
        meta = meta.model_dump(by_alias=True)
    return str((meta or {}).get("roost/idempotency_key"))


@app.tool()
def sid_later(ctx: Context) -> str:
    """As ``session_id``, listed after ``count`` (a plan calls its tools in the listing's order)."""
    return session_id(ctx)


@app.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def hold(flag: str, ctx: Context) -> str:
    """Report progress, then wait until the file ``flag`` exists (read-only: it changes nothing)."""
    await ctx.report_progress(1, 2, "holding")
    while not await anyio.Path(flag).exists():  # noqa: ASYNC110  (another process makes it)
        await anyio.sleep(0.02)
    return "released"


class ExpireAfterOneCall:
    """ASGI middleware: a session's second ``tools/call`` is answered 404 (the session is gone)."""

    def __init__(self, inner: ASGIApp) -> None:
        self.inner = inner
        self.used: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.inner(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        sid = headers.get("mcp-session-id")
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            method = json.loads(body).get("method")
        except (ValueError, AttributeError):
            method = None
        if method == "tools/call" and sid is not None:
            if sid in self.used:
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b"session expired"})
                return
            self.used.add(sid)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.inner(scope, replay, send)


class RequireHeader:
    """``--require HEADER=VALUE``: every request without that header is answered 401."""

    def __init__(self, inner: ASGIApp, header: str, value: str) -> None:
        self.inner, self.header, self.value = inner, header.lower().encode(), value.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (self.header, self.value) not in scope["headers"]:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no token"})
            return
        await self.inner(scope, receive, send)


def main(argv: list[str]) -> None:
    global WAIT_FOR
    if "--wait-for" in argv:
        WAIT_FOR = Path(argv[argv.index("--wait-for") + 1])
    if argv[:1] == ["http"]:
        asgi: ASGIApp = app.streamable_http_app(session_idle_timeout=None)
        if "--expire" in argv:
            asgi = ExpireAfterOneCall(asgi)
        if "--require" in argv:
            header, _, value = argv[argv.index("--require") + 1].partition("=")
            asgi = RequireHeader(asgi, header, value)
        uvicorn.run(asgi, host="127.0.0.1", port=int(argv[1]), log_level="warning")
    else:
        app.run()


if __name__ == "__main__":
    main(sys.argv[1:])
