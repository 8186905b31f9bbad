"""What an MCP session on an actor offers: its ``@callable`` methods as tools, its state as a resource,
and the prompts and other resources the app adds (:class:`McpExtras`).

Built on the SDK's low-level :class:`mcp.server.lowlevel.Server`: :func:`build_server` registers one
handler per MCP method; each finds the actor the session is bound to (:class:`Binding`, put in the
request's scope by :mod:`roost.transport.mcp`) and goes through the registry as the HTTP call route
does, with the session's principal.

Tools (``tools/list``): one per ``@callable`` of the kind: its name, its docstring's first paragraph
as the description, ``inputSchema`` from its signature
(:meth:`roost.actors.CallableInfo.arguments`' ``json_schema``), ``annotations.readOnlyHint`` for a
``@callable(readonly=True)``. A call (``tools/call``) passes the arguments by name and answers:

- the result as JSON text, and as ``structuredContent`` ``{"result": …}`` (with ``"chunks"`` for a
  streaming method);
- a result that is an object with a ``content`` list of MCP content blocks (``text``, ``image``,
  ``audio``, ``resource``, ``resource_link``) as those blocks (and its ``isError``);
- a streaming method's chunks of the form ``{"progress": n, "total": t, "message": m}`` as
  ``notifications/progress`` (when the request asked for progress), and ``{"log": level, "data": d}``
  as ``notifications/message`` (at or above the session's ``logging/setLevel``, ``info`` by
  default), in order, before the result (they are sent once the turn committed: a tool's
  notifications follow its turn, they do not interleave with it); the other chunks go into
  ``structuredContent``, and when the last of them is an object with a ``content`` list, that is
  the answer;
- a result of a declared asker (the kind's ``mcp_asks``) that asks the client
  (:func:`roost.transport.mcp_asks.elicit`, ``sample``): the question sent to the client on the
  call's stream, its answer to the declared continuation, whose result is the call's; the
  continuations are not listed and not called directly (:mod:`roost.transport.mcp_asks`);
- an error (``invalid_arguments``, ``handler_error``, ``forbidden``, …) as ``isError: true`` with the
  text ``code: message`` (the same code and message as over HTTP); an unknown tool as the JSON-RPC
  error ``-32602``.

Who may call what: a read-only principal only read-only methods; ``authorize(principal, kind, name,
"call:<method>")``; a call that would create the actor takes a creation token; a read-only method on
an actor never created answers ``not_found`` and creates nothing (as over HTTP).

Resources: ``roost://{kind}/{name}/state`` (``application/json``: ``{"state": …, "cursor": seq}``),
read as ``GET /agents/{kind}/{name}`` is (``authorize(…, "read")``, else ``-32602`` ``forbidden``);
reading it before the actor exists is the JSON-RPC error ``-32002`` (resource not found), creating
nothing. ``resources/subscribe`` to it: a ``notifications/resources/updated`` comes before the answer
of every tool call of that session that may have changed it (one not ``readonly``).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from roost.actors import ActorNotFound, CallableInfo, Principal, RpcError, callables_of
from roost.transport.mcp_asks import MAX_ASKS, AskFailed, ask_client, asked, declared

if TYPE_CHECKING:
    from roost.transport.interfaces import Runtime

__all__ = [
    "RESOURCE_NOT_FOUND",
    "TRACE_SCOPE",
    "Binding",
    "McpExtras",
    "Prompt",
    "ResourceTemplate",
    "StaticResource",
    "build_server",
    "state_uri",
]

#: The JSON-RPC error code of a resource that does not exist (MCP, *Resources*).
RESOURCE_NOT_FOUND = -32002
_CONTENT_TYPES = frozenset({"text", "image", "audio", "resource", "resource_link"})
_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


#: Where :mod:`roost.transport.mcp` leaves a request's trace context (its ``traceparent``) in the
#: ASGI scope, when tracing is on: the parent of its tool call's turn.
TRACE_SCOPE = "roost.trace"


@dataclass(slots=True)
class Binding:
    """The actor one MCP session (or one stateless request) is bound to, and by whom."""

    kind: str
    name: str  #: the name as the client sees it
    scoped: str  #: the name in the principal's tenant (what the registry addresses)
    principal: Principal
    path: str  #: the URL path the session belongs to
    key: str  #: the session's key (its events, a per-session actor's name)
    client: str | None = None
    own: bool = False  #: the actor is the session's own (``/mcp/{kind}``): it goes when the session ends
    level: str = "info"
    subscriptions: set[str] = field(default_factory=set)
    last_used: float = 0.0  #: on the runtime's clock, when its last request ended
    in_flight: int = 0  #: its requests being served (an open GET stream is one)


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt the app offers on every MCP session: ``render(arguments)`` gives its messages (MCP
    ``PromptMessage`` objects, as JSON)."""

    name: str
    description: str
    render: Callable[[dict[str, str]], list[dict[str, Any]]]
    arguments: tuple[tuple[str, str, bool], ...] = ()  #: (name, description, required)


@dataclass(frozen=True, slots=True)
class StaticResource:
    """A resource the app offers on every session; ``read()`` gives its contents item (JSON, with
    ``text`` or ``blob``; ``uri`` and ``mimeType`` are filled in)."""

    uri: str
    name: str
    read: Callable[[], dict[str, Any]]
    mime_type: str = "text/plain"
    description: str = ""


@dataclass(frozen=True, slots=True)
class ResourceTemplate:
    """A resource template (``test://items/{id}``): ``read(values)`` gets the template's variables."""

    uri_template: str
    name: str
    read: Callable[[dict[str, str]], dict[str, Any]]
    mime_type: str = "text/plain"
    description: str = ""

    def match(self, uri: str) -> dict[str, str] | None:
        parts = re.split(r"\{(\w+)\}", self.uri_template)
        pattern = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>[^/]+)" for i, p in enumerate(parts))
        found = re.fullmatch(pattern, uri)
        return found.groupdict() if found else None


@dataclass(slots=True)
class McpExtras:
    """Prompts, resources and argument completions the app adds to every MCP session
    (``app.mcp.extras``); the actor's own tools and state resource need none of it."""

    prompts: list[Prompt] = field(default_factory=list)
    resources: list[StaticResource] = field(default_factory=list)
    templates: list[ResourceTemplate] = field(default_factory=list)
    #: ``complete(ref, argument name, partial value) -> values`` for ``completion/complete``
    complete: Callable[[dict[str, Any], str, str], list[str]] | None = None


def state_uri(kind: str, name: str) -> str:
    """The URI of an actor's state resource."""
    return f"roost://{kind}/{name}/state"


def build_server(runtime: Runtime, extras: McpExtras, version: str) -> Server[Any]:
    """The SDK server whose handlers serve the session's actor (module doc)."""
    registry = runtime.registry

    def binding(ctx: ServerRequestContext[Any, Any]) -> Binding:
        request = ctx.request
        bound = request.scope.get("roost.mcp") if request is not None else None
        if not isinstance(bound, Binding):  # every request reaches the SDK through the gate
            raise MCPError(INVALID_PARAMS, "no actor is bound to this request")
        return bound

    tools: dict[str, dict[str, CallableInfo]] = {}  # by kind, built once (the registry's own are too)
    asks: dict[str, dict[str, str]] = {}  # by kind: asker -> continuation (mcp_asks.declared)

    def tools_of(kind: str) -> dict[str, CallableInfo]:
        found = tools.get(kind)
        if found is None:
            found = callables_of(registry.kind_of(kind))
            asks[kind] = declared(registry.kind_of(kind), found)
            tools[kind] = found
        return found

    for kind in registry.kinds:  # a wrong mcp_asks fails here, when the app's MCP server is made
        tools_of(kind)

    def asks_of(kind: str) -> dict[str, str]:
        tools_of(kind)
        return asks[kind]

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        bound = binding(ctx)
        cls = registry.kind_of(bound.kind)
        hidden = set(asks_of(bound.kind).values())  # continuations take the client's answers only
        listed = [_tool(cls, info) for name, info in tools_of(bound.kind).items() if name not in hidden]
        return {"tools": listed}

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        bound = binding(ctx)
        info = tools_of(bound.kind).get(params.name)
        if info is None:
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}")
        flow = asks_of(bound.kind)
        if params.name in flow.values():
            return _error_result(
                "forbidden",
                f"{params.name} takes the answer to a question of this tool set; it is not called directly",
            )
        refused = await _refusal(runtime, bound, info)
        if refused is not None:
            return _error_result(*refused)
        args, kwargs = _split(info, dict(params.arguments or {}))
        wrote = [False]  # a turn of this call committed that may have changed the state resource
        answer = await chain(ctx, bound, info, args, kwargs, wrote)
        uri = state_uri(bound.kind, bound.name)
        if wrote[0] and uri in bound.subscriptions:  # on this call's stream, before its answer
            updated = types.ResourceUpdatedNotification(
                params=types.ResourceUpdatedNotificationParams(uri=uri)
            )
            await ctx.session.send_notification(updated, related_request_id=ctx.request_id)
        return answer

    async def chain(
        ctx: ServerRequestContext[Any, Any],
        bound: Binding,
        info: CallableInfo,
        args: list[Any],
        kwargs: dict[str, Any],
        wrote: list[bool],
    ) -> dict[str, Any]:
        """The tool's turn, then, while it is a declared asker whose result asks the client, the
        question and its continuation's turn (mcp_asks): the last result, as the call's answer."""
        trace = ctx.request.scope.get(TRACE_SCOPE) if ctx.request is not None else None
        flow = asks_of(bound.kind)
        try:
            result, chunks = await registry.call(
                bound.kind, bound.scoped, info.name, args, kwargs, principal=bound.principal, trace=trace
            )
            wrote[0] = not info.readonly
            for _ in range(MAX_ASKS):
                question = asked(result) if info.name in flow else None
                if question is None:
                    break
                if question.then != flow[info.name]:
                    why = f"{info.name} asked for {question.then!r}, but declares {flow[info.name]!r}"
                    return _error_result("handler_error", why)
                then = tools_of(bound.kind)[question.then]
                refused = await _refusal(runtime, bound, then)  # before the client is asked
                if refused is None:
                    answer = await ask_client(ctx, question)
                    refused = await _refusal(runtime, bound, then)  # and after the wait
                if refused is not None:
                    return _error_result(*refused)
                info = then
                result, chunks = await registry.call(
                    bound.kind,
                    bound.scoped,
                    then.name,
                    [],
                    {"answer": answer, "carry": question.carry},
                    principal=bound.principal,
                    trace=trace,
                )
                wrote[0] = wrote[0] or not info.readonly
            else:
                if info.name in flow and asked(result) is not None:
                    return _error_result(
                        "handler_error", f"the tool asked the client more than {MAX_ASKS} times"
                    )
        except RpcError as exc:
            return _error_result(exc.code, exc.message)
        except AskFailed as exc:
            return _error_result("handler_error", str(exc))
        rest = await _notify_chunks(ctx, bound, chunks)
        if info.streaming and rest and _is_content(rest[-1]):
            return _result(rest[-1], None)
        return _result(result, rest if info.streaming else None)

    async def list_resources(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        bound = binding(ctx)
        own = {
            "uri": state_uri(bound.kind, bound.name),
            "name": f"{bound.kind}/{bound.name} state",
            "description": "The actor's committed state and its cursor",
            "mimeType": "application/json",
        }
        others = [
            _drop_none(uri=r.uri, name=r.name, description=r.description or None, mimeType=r.mime_type)
            for r in extras.resources
        ]
        return {"resources": [own, *others]}

    async def list_templates(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        binding(ctx)
        return {
            "resourceTemplates": [
                _drop_none(
                    uriTemplate=t.uri_template,
                    name=t.name,
                    description=t.description or None,
                    mimeType=t.mime_type,
                )
                for t in extras.templates
            ]
        }

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> Any:
        bound = binding(ctx)
        uri = str(params.uri)
        if uri == state_uri(bound.kind, bound.name):
            if not await runtime.access.allowed(bound.principal, bound.kind, bound.name, "read"):
                raise MCPError(INVALID_PARAMS, f"forbidden: read on {bound.kind}/{bound.name} is not allowed")
            try:
                state, seq = await registry.snapshot(bound.kind, bound.scoped)
            except ActorNotFound as exc:
                raise MCPError(RESOURCE_NOT_FOUND, f"resource not found: {exc}") from None
            except RpcError as exc:
                raise MCPError(types.INTERNAL_ERROR, f"{exc.code}: {exc.message}") from None
            text = orjson.dumps({"state": state, "cursor": seq}).decode()
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}
        for resource in extras.resources:
            if resource.uri == uri:
                return {"contents": [{"uri": uri, "mimeType": resource.mime_type, **resource.read()}]}
        for template in extras.templates:
            values = template.match(uri)
            if values is not None:
                return {"contents": [{"uri": uri, "mimeType": template.mime_type, **template.read(values)}]}
        raise MCPError(RESOURCE_NOT_FOUND, f"resource not found: {uri}")

    async def subscribe(ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> Any:
        binding(ctx).subscriptions.add(str(params.uri))
        return {}

    async def unsubscribe(ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams) -> Any:
        binding(ctx).subscriptions.discard(str(params.uri))
        return {}

    async def list_prompts(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        binding(ctx)
        return {
            "prompts": [
                {
                    "name": p.name,
                    "description": p.description,
                    "arguments": [{"name": n, "description": d, "required": r} for n, d, r in p.arguments],
                }
                for p in extras.prompts
            ]
        }

    async def get_prompt(ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams) -> Any:
        binding(ctx)
        for prompt in extras.prompts:
            if prompt.name == params.name:
                given = dict(params.arguments or {})
                missing = [n for n, _, required in prompt.arguments if required and n not in given]
                if missing:
                    raise MCPError(INVALID_PARAMS, f"prompt {prompt.name!r}: missing argument(s) {missing}")
                return {"description": prompt.description, "messages": prompt.render(given)}
        raise MCPError(INVALID_PARAMS, f"unknown prompt {params.name!r}")

    async def complete(ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams) -> Any:
        binding(ctx)
        ref = params.ref.model_dump(by_alias=True, mode="json", exclude_none=True)
        values = extras.complete(ref, params.argument.name, params.argument.value) if extras.complete else []
        return {"completion": {"values": values[:100], "total": len(values), "hasMore": len(values) > 100}}

    async def set_level(ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> Any:
        binding(ctx).level = params.level
        return {}

    server: Server[Any] = Server(
        "roost",
        version=version,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
    )
    # the constructor's on_set_logging_level warns that the 2026 protocol drops logging; the 2025
    # protocols this server speaks have it
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    return server


def _tool(cls: type, info: CallableInfo) -> dict[str, Any]:
    doc = inspect.getdoc(getattr(cls, info.name)) or ""
    description = doc.split("\n\n")[0].strip() or f"Call {info.name} on the actor."
    tool: dict[str, Any] = {
        "name": info.name,
        "description": description,
        "inputSchema": info.arguments.json_schema(),
    }
    if info.readonly:
        tool["annotations"] = {"readOnlyHint": True}
    return tool


def _split(info: CallableInfo, arguments: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """MCP arguments come by name: positional-only parameters are passed by position (up to the
    first one not given), every other by name."""
    args: list[Any] = []
    for param in info.arguments.signature.parameters.values():
        if param.kind is not inspect.Parameter.POSITIONAL_ONLY or param.name not in arguments:
            break
        args.append(arguments.pop(param.name))
    return args, arguments


async def _refusal(runtime: Runtime, bound: Binding, info: CallableInfo) -> tuple[str, str] | None:
    """Why the session's principal may not call ``info`` on its actor now, as ``(code, message)``."""
    registry, access, principal = runtime.registry, runtime.access, bound.principal
    if principal.claims.get("read_only"):
        if not info.readonly:
            return "forbidden", f"read-only: {info.name} is not a read-only method"
        if not registry.exists(bound.kind, bound.scoped):
            return "forbidden", "read-only principals cannot create actors"
    if not await access.allowed(principal, bound.kind, bound.name, f"call:{info.name}"):
        return "forbidden", f"call:{info.name} on {bound.kind}/{bound.name} is not allowed"
    if not info.readonly and not principal.claims.get("read_only"):
        refused = access.creation(principal, bound.kind, bound.scoped, bound.client)
        if refused is not None:
            return refused.code, refused.message
    return None


async def _notify_chunks(ctx: ServerRequestContext[Any, Any], bound: Binding, chunks: list[Any]) -> list[Any]:
    """Send the progress and log chunks as notifications, in order; the others, returned."""
    rest: list[Any] = []
    floor = _LEVELS.index(bound.level) if bound.level in _LEVELS else 1
    for chunk in chunks:
        if isinstance(chunk, Mapping) and isinstance(chunk.get("progress"), int | float):
            total, message = chunk.get("total"), chunk.get("message")
            await ctx.session.report_progress(
                float(chunk["progress"]),
                float(total) if isinstance(total, int | float) else None,
                message if isinstance(message, str) else None,
            )
        elif isinstance(chunk, Mapping) and chunk.get("log") in _LEVELS:
            if _LEVELS.index(chunk["log"]) >= floor:
                note = types.LoggingMessageNotification(
                    params=types.LoggingMessageNotificationParams(level=chunk["log"], data=chunk.get("data"))
                )
                await ctx.session.send_notification(note, related_request_id=ctx.request_id)
        else:
            rest.append(chunk)
    return rest


def _is_content(value: Any) -> bool:
    """Whether ``value`` is an object with a ``content`` list of MCP content blocks."""
    content = value.get("content") if isinstance(value, Mapping) else None
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, Mapping) and b.get("type") in _CONTENT_TYPES for b in content)
    )


def _result(result: Any, chunks: list[Any] | None) -> dict[str, Any]:
    if _is_content(result):
        return {"content": result["content"], "isError": bool(result.get("isError", False))}
    text = result if isinstance(result, str) else orjson.dumps(result).decode()
    structured: dict[str, Any] = {"result": result}
    if chunks is not None:
        structured["chunks"] = chunks
    return {"content": [{"type": "text", "text": text}], "structuredContent": structured, "isError": False}


def _error_result(code: str, message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"{code}: {message}"}], "isError": True}


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}
