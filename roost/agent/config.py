"""The agent runtime's settings, from the ``[agent]`` table of ``roost.toml``.

::

    [agent]
    max_tool_hops = 8          # model steps that request tools, per run
    heartbeat_interval = 1.0   # seconds between the worker process's presence beats (roost workers)
    lease_ttl = 5.0            # a job attempt whose process is gone is run again after this
    job_max_attempts = 3
    job_backoff = 1.0          # seconds before the first retry of a failed job (doubles, capped)
    approval_ttl_s = 86400     # default lifetime of a grant
    max_input_chars = 4000
    blob_threshold = 8192      # strings longer than this go to the blob store
    payload_limit = 65536      # a payload larger than this once encoded goes to the blob store whole
    recent_turns = 5           # turns handed to the model as memory
    model = "planner"          # or "openai" (OpenAICompatibleModel, settings from the environment)
    model_timeout = 30.0
    model_stream_idle_timeout = 30.0   # a stream silent this long has stalled (default: model_timeout)
    stream_batch_count = 64    # streamed deltas per commit (one model_delta event) at most
    stream_batch_interval = 0.02  # seconds a streamed delta waits for its batch at most
    stream_pace = 0.03         # seconds per word of the deterministic model when it streams
    stream_resume = "continue" # an interrupted stream: "continue" after what was shown, or "restart"
    max_stream_chars = 200000  # a streamed answer longer than this fails (not retryable)
    model_stream_timeout = 600.0  # seconds (wall clock) a streamed model step may take at most

    [agent.context]                   # compaction and reset of a session's context
    keep_recent = 2            # turns left visible after a compaction
    summary_chars = 2000       # a summary's bound
    summary_prompt = "…"       # what the HTTP model is asked to summarise with
    [agent.context.compact]           # budgets (each optional): past one, the context is compacted
    messages = 40              # visible requests and answers
    tokens = 8000              # estimated: characters / 4
    hops = 20                  # model steps that requested tools
    [agent.context.reset]             # the same budgets: past one, the context is reset (checked first)

    [agent.tools.analyze_documents]   # settings handed to one tool (ctx.settings)
    delay_s = 0.5

    [agent.mcp_servers.files]         # MCP servers and their sessions: see roost.agent.mcp_config
    command = "python"

Unknown keys are refused (a typo would otherwise silently keep a default), with the close match when
there is one (``max_tool_hop``: did you mean ``max_tool_hops``?). So are a ``[agent.tools.NAME]``
table for which no ``@tool`` is named ``NAME`` and a key the tool does not declare
(``@tool(settings=("delay_s",))``): :func:`check_tools`, when an agent kind is registered
(``create_app``, so ``roost serve`` refuses it at start).
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from roost.agent.mcp_config import CapabilitySessions, McpServer

__all__ = [
    "TABLES",
    "AgentConfig",
    "Budget",
    "ConfigError",
    "ContextConfig",
    "check_tools",
    "config_source",
    "load_config",
]


class Budget(BaseModel):
    """When a session's visible context has grown too much (docs/design.md, *Compaction and reset*):
    past any bound set here, the operation whose table this is runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages: int | None = Field(None, ge=1)
    tokens: int | None = Field(None, ge=1)
    hops: int | None = Field(None, ge=1)


DEFAULT_SUMMARY_PROMPT = (
    "Summarise this conversation for the assistant that continues it: the user's goals, the decisions "
    "made, the facts learned and the open questions. Be brief; keep names, numbers and ids exact."
)


class ContextConfig(BaseModel):
    """``[agent.context]``: the budgets of compaction and reset, and how a summary is made."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compact: Budget | None = None
    reset: Budget | None = None
    keep_recent: int = Field(2, ge=0, le=100)
    #: ``[agent.context.run]``: the budget of one run's own steps (its tool calls and results, as the
    #: model sees them: two messages each; ``hops``: model steps since the run's last compaction);
    #: past it, the run's older steps are compacted before its next model step.
    run: Budget | None = None
    #: Steps of a run the model keeps seeing whole after a compaction of the run's steps.
    keep_recent_steps: int = Field(2, ge=0, le=100)
    summary_chars: int = Field(2000, ge=100, le=100_000)
    summary_prompt: str = Field(DEFAULT_SUMMARY_PROMPT, min_length=1, max_length=4000)


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tool_hops: int = Field(8, ge=1, le=100)
    heartbeat_interval: float = Field(1.0, gt=0)
    lease_ttl: float = Field(5.0, gt=0)
    job_max_attempts: int = Field(3, ge=1, le=100)
    job_backoff: float = Field(1.0, ge=0)
    job_backoff_cap: float = Field(60.0, ge=0)
    approval_ttl_s: float = Field(86_400.0, gt=0)
    max_input_chars: int = Field(4000, ge=1)
    blob_threshold: int = Field(8192, ge=64)
    payload_limit: int = Field(65_536, ge=1024)
    recent_turns: int = Field(5, ge=0, le=100)
    model: Literal["planner", "openai"] = "planner"
    model_timeout: float = Field(30.0, gt=0)
    #: Seconds a streaming HTTP model may send nothing mid-stream before the step fails "stalled"
    #: (retryable); None: ``model_timeout``.
    model_stream_idle_timeout: float | None = Field(None, gt=0)
    stream_batch_count: int = Field(64, ge=1, le=10_000)
    stream_batch_interval: float = Field(0.02, gt=0, le=10)
    stream_pace: float = Field(0.03, ge=0, le=10)
    stream_resume: Literal["continue", "restart"] = "continue"
    max_stream_chars: int = Field(200_000, ge=1)
    model_stream_timeout: float = Field(600.0, gt=0)
    tools: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: ``[agent.mcp_servers.NAME]`` and ``[agent.capability_sessions]`` (:mod:`roost.agent.mcp_config`).
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)
    capability_sessions: CapabilitySessions = Field(default_factory=CapabilitySessions)
    #: ``[agent.context]``: compaction and reset (:mod:`roost.agent.compaction`).
    context: ContextConfig = Field(default_factory=ContextConfig)

    @model_validator(mode="after")
    def _lease_outlives_heartbeats(self) -> AgentConfig:
        if self.lease_ttl < 2 * self.heartbeat_interval:
            raise ValueError("lease_ttl must be at least two heartbeat intervals")
        if self.max_input_chars > self.blob_threshold:
            raise ValueError("max_input_chars must not exceed blob_threshold (a request stays text)")
        return self

    def tool_settings(self, tool: str) -> dict[str, Any]:
        return dict(self.tools.get(tool, {}))


class ConfigError(ValueError):
    """``roost.toml`` cannot be used: missing, not TOML, an unknown table or key, a value of the wrong
    type. The message names the file and what is wrong, in one line."""


#: The tables ``roost.toml`` may have (an unknown one is refused: a misspelt ``[agnet]`` would be
#: ignored otherwise).
TABLES = frozenset({"agent"})


def load_config(path: str | Path | None = None) -> AgentConfig:
    """Settings from ``path``, else ``$ROOST_CONFIG``, else ``./roost.toml`` if it exists, else defaults.
    Raises :class:`ConfigError` for a file that cannot be used (``roost serve`` checks it at
    start-up, so a bad file stops the server there rather than failing every agent's first turn)."""
    chosen = config_source(path)
    if chosen is None:
        return AgentConfig()
    try:
        with open(chosen, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{chosen}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{chosen}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{chosen}: not TOML: {exc}") from None
    unknown = sorted(set(data) - TABLES)
    keys = [k for k in unknown if not isinstance(data[k], dict)]
    if keys:  # `model = "openai"` at the top: a setting of [agent] written outside it
        inside = [k for k in keys if k in AgentConfig.model_fields]
        hint = f"; {', '.join(inside)} belong{'s' if len(inside) == 1 else ''} in [agent]" if inside else ""
        raise ConfigError(
            f"{chosen}: {', '.join(keys)}: a setting outside any table{hint} "
            "(write [agent] on the line before it)"
        )
    if unknown:
        raise ConfigError(f"{chosen}: unknown table {', '.join(f'[{t}]' for t in unknown)} (known: [agent])")
    try:
        return AgentConfig.model_validate(data.get("agent", {}))
    except ValidationError as exc:
        wrong = "; ".join(_where(e["loc"]) + f"{e['msg']}{_close_match(e)}" for e in exc.errors())
        raise ConfigError(f"{chosen}: {wrong}") from None


def config_source(path: str | Path | None = None) -> str | Path | None:
    """The file :func:`load_config` reads: ``path``, else ``$ROOST_CONFIG``, else ``./roost.toml`` if it
    exists; None: none (the defaults)."""
    chosen = path or os.environ.get("ROOST_CONFIG")
    if chosen is None and Path("roost.toml").is_file():
        chosen = "roost.toml"
    return chosen


def _suggest(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the close match of ``word`` among ``known``; empty if none."""
    match = difflib.get_close_matches(word, sorted(known), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _where(loc: Sequence[Any]) -> str:
    """``[agent.context] keep_recent: `` for an error at ``("context", "keep_recent")``: the table the
    key is written in, then the key."""
    *table, key = [str(p) for p in loc] or ["agent"]
    return f"[{'.'.join(['agent', *table])}] {key}: " if loc else "[agent] "


def _model_at(path: Sequence[Any]) -> type[BaseModel] | None:
    """The settings model of the table at ``path`` under ``[agent]`` (None: not a model's table)."""
    model: type[BaseModel] = AgentConfig
    for part in path:
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        found = [a for a in (field.annotation, *get_args(field.annotation)) if isinstance(a, type)]
        models = [a for a in found if issubclass(a, BaseModel)]
        if not models:
            return None
        model = models[0]
    return model


def _close_match(error: Any) -> str:
    """The key an unknown one was probably meant to be, in its own table (``[agent.context]`` too)."""
    if error["type"] != "extra_forbidden" or not error["loc"]:
        return ""
    *table, key = error["loc"]
    model = _model_at(table)
    return _suggest(str(key), model.model_fields) if model is not None else ""


def check_tools(config: AgentConfig, tools: Mapping[str, Iterable[str]], source: str | Path | None) -> None:
    """Refuse (:class:`ConfigError`, one line naming ``source``, the table and the key) a
    ``[agent.tools.NAME]`` table of a tool not in ``tools`` (name -> the settings it declares), and a
    key of a known tool's table that the tool does not declare."""
    where = source or "roost.toml"
    for name, settings in config.tools.items():
        if name not in tools:
            raise ConfigError(
                f"{where}: [agent.tools.{name}]: no tool is named {name!r}{_suggest(name, tools)}"
            )
        declared = frozenset(tools[name])
        for key in settings:
            if key not in declared:
                known = f"it declares {', '.join(sorted(declared))}" if declared else "it declares none"
                raise ConfigError(
                    f"{where}: [agent.tools.{name}] {key}: not a setting of tool {name!r}"
                    f"{_suggest(key, declared)} ({known}: @tool(settings=...))"
                )
