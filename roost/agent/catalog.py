"""The tool catalog: what an agent can do, with typed arguments and an approval mode per tool.

A tool is an ``async`` function at the edge, taking a :class:`ToolContext` and its arguments as a
pydantic model::

    class Analyze(BaseModel):
        scope: str = "all"

    @tool(approval_mode="safe_readonly", background=True, heavy=True, keywords=("analy",))
    async def analyze_documents(ctx: ToolContext, args: Analyze) -> dict[str, Any]:
        for i, doc in enumerate(docs):
            await ctx.progress(i, len(docs))     # a tool_progress event; raises if cancelled
            ...
        return {"documents": len(docs)}

- ``approval_mode``: ``safe_readonly`` runs without asking; ``confirm_once`` and ``mutating`` need a
  grant that covers the call (see :mod:`roost.agent.policy`).
- ``background``: runs as a job (:mod:`roost.agent.jobs`, a step of the workflow core), outside the
  agent's mailbox, with a lease, progress, retries and an idempotency key (an exception whose
  ``retryable`` attribute is False fails the step at once, without a retry). Otherwise the tool
  runs inside a turn and must be quick.
- ``heavy``: one heavy operation per project at a time.
- ``keywords`` and ``requires`` drive the deterministic planner.

The orchestrator sees tools only through :class:`Catalog`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError

if TYPE_CHECKING:
    from roost.agent.sandbox import Workspace

__all__ = [
    "APPROVAL_MODES",
    "ApprovalMode",
    "Catalog",
    "InvalidToolCall",
    "NeedInput",
    "NoArgs",
    "Tool",
    "ToolCancelled",
    "ToolContext",
    "defined_tools",
    "tool",
]

ApprovalMode = Literal["safe_readonly", "confirm_once", "mutating"]
APPROVAL_MODES: tuple[ApprovalMode, ...] = ("safe_readonly", "confirm_once", "mutating")


class NoArgs(BaseModel):
    """The arguments of a tool that takes none (``args: BaseModel``): anything given is refused."""

    model_config = ConfigDict(extra="forbid")


class InvalidToolCall(ValueError):
    """An unknown tool, or arguments that do not fit the tool's model."""


class NeedInput(Exception):
    """Raised by a tool that cannot go on without the user: the run pauses ``waiting_for_input``."""

    def __init__(self, prompt: str) -> None:
        super().__init__(prompt)
        self.prompt = prompt


class ToolCancelled(Exception):
    """Raised inside a background tool (by ``ctx.progress``/``ctx.check``) when its job was cancelled."""


async def _no_progress(done: float, total: float, message: str, checkpoint: Any) -> None:
    return None


async def _no_sleep(seconds: float) -> None:
    return None


async def _no_stream(text: str) -> None:
    return None


async def _no_turn(fn: Callable[[Any], Awaitable[Any]]) -> Any:
    raise RuntimeError("ctx.turn is only bound in a background job")


@dataclass(slots=True)
class ToolContext:
    """What a tool may know and do: ids, its settings, the data directory, progress and sleep."""

    agent: str
    run_id: str
    turn_id: str
    item_id: str | None
    trace_id: str
    data_dir: Path
    settings: dict[str, Any] = field(default_factory=dict)
    inputs: list[Any] = field(default_factory=list)
    #: Results of this run's completed steps, by tool name (the latest if a tool ran twice).
    results: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1
    #: What the previous attempt of this background job saved with ``progress(..., checkpoint=…)``.
    checkpoint: Any = None
    #: The step's idempotency key (its step's id and attempt on the workflow core, the same for
    #: every run of an attempt after a lost process): hand it to the system the effect goes to. A
    #: background job's is its job step's; an inline call's, the run's in-turn step it runs in (None
    #: for a run begun by an earlier release, on its old state machine).
    idempotency_key: str | None = None
    #: The run's sandbox workspace (:class:`roost.agent.sandbox.Workspace`) when the agent declares
    #: one (``sandbox = SandboxSpec(...)``), else None: what the step writes there commits with it.
    workspace: Workspace | None = None
    _progress: Callable[[float, float, str, Any], Awaitable[None]] = _no_progress
    _sleep: Callable[[float], Awaitable[None]] = _no_sleep
    _stream: Callable[[str], Awaitable[None]] = _no_stream
    _turn: Callable[[Callable[[Any], Awaitable[Any]]], Awaitable[Any]] = _no_turn

    def bind(
        self,
        progress: Callable[[float, float, str, Any], Awaitable[None]],
        sleep: Callable[[float], Awaitable[None]],
        turn: Callable[[Callable[[Any], Awaitable[Any]]], Awaitable[Any]] | None = None,
        stream: Callable[[str], Awaitable[None]] = _no_stream,
    ) -> None:
        """Called by the job runner: ``progress``, ``sleep``, ``turn`` and ``stream`` of a background
        job's worker."""
        self._progress = progress
        self._sleep = sleep
        if turn is not None:
            self._turn = turn
        self._stream = stream

    async def stream(self, text: str) -> None:
        """Commit a batch of a streamed model step's text (a ``model_delta`` event), renewing the lease.
        Raises :class:`ToolCancelled` if the job was cancelled or lost its lease."""
        await self._stream(text)

    async def progress(self, done: float, total: float, message: str = "", *, checkpoint: Any = None) -> None:
        """Report progress (a ``tool_progress`` event) and renew the job's lease. ``checkpoint``
        (JSON) is kept with the job: a later attempt finds it in ``ctx.checkpoint`` and can go on
        from there. Raises :class:`ToolCancelled` if the job was cancelled or lost its lease."""
        await self._progress(done, total, message, checkpoint)

    async def sleep(self, seconds: float) -> None:
        """Sleep on the runtime's clock (a fake clock in tests)."""
        await self._sleep(seconds)

    async def turn(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(agent)`` (a function, or a coroutine function) as a turn of this tool's agent
        (background jobs only): how a runtime tool such as an MCP call (:mod:`roost.agent.mcp_tools`)
        records what happens during it. Its result after the commit."""

        async def run(actor: Any) -> Any:
            out = fn(actor)
            return await out if inspect.isawaitable(out) else out

        return await self._turn(run)


ToolFn = Callable[[ToolContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    fn: ToolFn
    args_model: type[BaseModel]
    description: str
    approval_mode: ApprovalMode = "safe_readonly"
    background: bool = False
    heavy: bool = False
    keywords: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    plan_args: Callable[[str], dict[str, Any]] | None = None
    #: The keys of its ``[agent.tools.NAME]`` table in ``roost.toml`` (``ctx.settings``): any other is
    #: refused (:func:`roost.agent.config.check_tools`).
    settings: tuple[str, ...] = ()

    def validate(self, args: Mapping[str, Any]) -> BaseModel:
        try:
            return self.args_model.model_validate(dict(args))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "arguments"
            raise InvalidToolCall(f"{self.name}: {where}: {first['msg']}") from None

    def spec(self) -> dict[str, Any]:
        """The tool as a model sees it (OpenAI function-calling shape)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.args_model.model_json_schema(),
            },
        }


def tool(
    *,
    approval_mode: ApprovalMode = "safe_readonly",
    background: bool = False,
    heavy: bool = False,
    keywords: Iterable[str] = (),
    requires: Iterable[str] = (),
    plan_args: Callable[[str], dict[str, Any]] | None = None,
    name: str | None = None,
    settings: Iterable[str] = (),
) -> Callable[[ToolFn], Tool]:
    """Make a :class:`Tool` of ``async def fn(ctx, args: SomeModel)``; the model is read from the hint.

    ``args: BaseModel`` (the base class itself) is a tool without arguments (:class:`NoArgs`); any other
    annotation that is not a pydantic model is refused here, when the tool is defined. ``settings``:
    the keys the tool reads from ``ctx.settings`` (its ``[agent.tools.NAME]`` table in ``roost.toml``;
    another key there is refused when the agent kind is registered)."""
    if approval_mode not in APPROVAL_MODES:
        raise ValueError(f"approval_mode must be one of {APPROVAL_MODES}")

    def make(fn: ToolFn) -> Tool:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"tool {fn.__name__!r} must be an async function")
        params = list(inspect.signature(fn).parameters)
        if len(params) != 2:
            raise TypeError(f"tool {fn.__name__!r} must take (ctx, args)")
        model = get_type_hints(fn).get(params[1])
        if model is BaseModel:  # ``args: BaseModel`` says "no arguments of its own"
            model = NoArgs
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(
                f"tool {fn.__name__!r}: annotate args with a pydantic model (a BaseModel subclass, "
                f"or BaseModel itself for a tool without arguments), not {model!r}"
            )
        made = Tool(
            name=name or fn.__name__,
            fn=fn,
            args_model=model,
            description=inspect.cleandoc(fn.__doc__ or fn.__name__),
            approval_mode=approval_mode,
            background=background,
            heavy=heavy,
            keywords=tuple(k.lower() for k in keywords),
            requires=tuple(requires),
            plan_args=plan_args,
            settings=tuple(settings),
        )
        declared = _DEFINED.setdefault(made.name, set())
        declared.update(made.settings)
        return made

    return make


#: Every tool defined in this process, by name, with the settings its definitions declare (a
#: ``[agent.tools.NAME]`` table may configure any of them: one agent's table is not another's typo).
_DEFINED: dict[str, set[str]] = {}


def defined_tools() -> dict[str, frozenset[str]]:
    """The tools defined (with :func:`tool`) so far, by name, and the settings each declares."""
    return {name: frozenset(keys) for name, keys in _DEFINED.items()}


class Catalog:
    """The tools of one agent kind, in declaration order."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self.tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self.tools:
                raise ValueError(f"two tools named {t.name!r}")
            self.tools[t.name] = t
        for t in self.tools.values():
            for dep in t.requires:
                if dep not in self.tools:
                    raise ValueError(f"tool {t.name!r} requires unknown tool {dep!r}")

    def __iter__(self) -> Any:
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)

    def get(self, name: str) -> Tool:
        try:
            return self.tools[name]
        except KeyError:
            raise InvalidToolCall(f"no tool named {name!r}") from None

    def check(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validated arguments of a call, as JSON (defaults filled in)."""
        validated: dict[str, Any] = self.get(name).validate(args).model_dump(mode="json")
        return validated

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.tools.values()]
