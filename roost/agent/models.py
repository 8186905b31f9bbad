"""Models: one step of reasoning, behind a small protocol.

A model step sees a :class:`ModelRequest` (the request, memory, the catalog, the steps done so far) and
returns a :class:`ModelStep`: tool calls to make, a question for the user (``ask``), or the final text.
Requests and steps are plain JSON so that a step can run as a background job and be recorded.

- :class:`DeterministicPlanner` is the embedded default: no network, no keys. It builds the whole plan
  from the catalog on the first step (tools whose keywords appear in the request, with the tools they
  require, in catalog order) and writes a summary of the results on the next one.
- :class:`~roost.agent.openai.OpenAICompatibleModel` (in :mod:`roost.agent.openai`) calls any
  chat-completions endpoint with tool calls (httpx), streaming or not. Its failures are
  :class:`ModelError`, each marked retryable or not (the table in that module's doc). The runtime
  turns either into a failed step, never a crash.

**Streaming.** A model that can stream also has ``stream(request)``, an async iterator of
:data:`ModelChunk`: :class:`TextDelta` pieces of the answer's text and :class:`ToolCallDelta` pieces
of its tool calls as they arrive, then one :class:`StreamEnd` carrying the assembled
:class:`ModelStep` (and the :class:`Usage` when the endpoint reports it). A stream that fails raises
:class:`ModelError` like ``step`` does, whatever it yielded before. ``request.partial`` is the text of
this answer already delivered before an interruption: a model asked to continue goes on from it (its
deltas are what follows, not a repeat). :func:`is_streaming` tells a streaming model; :func:`collect`
folds a stream into its step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

import orjson
from pydantic import BaseModel, Field

from roost.agent.catalog import Catalog
from roost.agent.status import ItemStatus

__all__ = [
    "DeterministicPlanner",
    "Model",
    "ModelChunk",
    "ModelError",
    "ModelRequest",
    "ModelStep",
    "StreamEnd",
    "StreamingModel",
    "SummaryMessage",
    "SummaryRequest",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "arguments_in",
    "collect",
    "deterministic_summary",
    "is_streaming",
]


class ToolCall(BaseModel):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class StepRecord(BaseModel):
    item_id: str
    tool: str
    args: dict[str, Any]
    status: str
    result: Any = None


class ModelRequest(BaseModel):
    text: str
    inputs: list[Any] = Field(default_factory=list)
    summary: str = ""
    recent_turns: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[StepRecord] = Field(default_factory=list)
    #: The run's older steps, summarised by a compaction of its steps (``[agent.context.run]``):
    #: ``steps`` are then only those after them.
    steps_summary: str = ""
    hop: int = 0
    #: Text of this answer already streamed before an interruption (continue from it, do not repeat).
    partial: str = ""


class SummaryMessage(BaseModel):
    """One message of the history a summary replaces: a turn's request (``user``) or answer."""

    role: str
    content: str
    turn_id: str


class SummaryRequest(BaseModel):
    """What a summariser sees (docs/design.md, *Compaction and reset*): the summary before (empty
    for a reset), the messages it replaces (after the payload policy), its prompt and its bound."""

    prompt: str
    previous: str = ""
    messages: list[SummaryMessage] = Field(default_factory=list)
    max_chars: int = 2000
    #: The operation's id, the same for every attempt of it (empty: none): a model behind the network
    #: sends it as the call's ``Idempotency-Key``, so an endpoint that keeps keys answers a call redone
    #: after a lost process from the first.
    idempotency_key: str = ""


#: Words of each message the deterministic summary keeps.
SUMMARY_WORDS = 12


def deterministic_summary(request: SummaryRequest) -> str:
    """The deterministic model's summary, exact so tests can assert it: the previous summary's lines,
    then one line per message, ``role: `` and its first :data:`SUMMARY_WORDS` words (``…`` when there
    were more); at most ``max_chars`` characters, the oldest lines dropped first."""
    lines = request.previous.splitlines() if request.previous else []
    for m in request.messages:
        words = m.content.split()
        line = f"{m.role}: {' '.join(words[:SUMMARY_WORDS])}{'…' if len(words) > SUMMARY_WORDS else ''}"
        lines.append(line)
    while lines and len("\n".join(lines)) > request.max_chars:
        if len(lines) == 1:
            return lines[0][: request.max_chars]
        lines.pop(0)
    return "\n".join(lines)


class Usage(BaseModel):
    """Tokens a model call used, as the endpoint reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ModelStep(BaseModel):
    tool_calls: list[ToolCall] = Field(default_factory=list)
    text: str | None = None
    ask: str | None = None
    usage: Usage | None = None


# The deltas of a stream are plain slotted dataclasses, not pydantic models: a stream makes one per
# delta, and a validated model cost ~2 µs each, a tenth of a batch's CPU at 64 deltas a batch. The
# stream's reader checks what it relies on (``text`` a str) and fails the step otherwise.


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer's text, in order."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of tool call ``index``: its id and name come once (usually first), ``arguments`` is the
    next fragment of its JSON arguments."""

    index: int = 0
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class StreamEnd(BaseModel):
    """The stream's last chunk: the whole step, as ``step`` would have answered it (one per stream: a
    pydantic model, so ``step`` may be given as a dict)."""

    step: ModelStep


ModelChunk = TextDelta | ToolCallDelta | StreamEnd


class ModelError(Exception):
    """A model step that failed; ``retryable`` says whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class Model(Protocol):
    #: True when a step is instant and needs no I/O: it runs inside the turn. Otherwise it is a job.
    inline: bool

    async def step(self, request: ModelRequest) -> ModelStep: ...


class StreamingModel(Model, Protocol):
    def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """The step as it is produced (see the module doc); the last chunk is a :class:`StreamEnd`."""


def is_streaming(model: Model) -> TypeGuard[StreamingModel]:
    """True when ``model`` can stream (it has a ``stream`` method)."""
    return callable(getattr(model, "stream", None))


async def collect(chunks: AsyncIterator[ModelChunk]) -> ModelStep:
    """The step a stream ends with; :class:`ModelError` if it ends without one."""
    async for chunk in chunks:
        if isinstance(chunk, StreamEnd):
            return chunk.step
    raise ModelError("the model's stream ended without its step", retryable=True)


class DeterministicPlanner:
    """Plans from the catalog by keywords; asks when nothing matches. No network.

    It streams too: its text word by word, one word every ``pace`` seconds (slept with ``sleep``, the
    process clock's in an agent, so tests control it), its tool calls whole. It is ``inline`` (a step
    runs inside the turn) unless it streams at a pace: then each step is a background job.
    """

    inline = True
    #: Its summaries need no I/O: they are made inside the turn (roost.agent.compaction).
    summarizes_inline = True

    def __init__(
        self,
        catalog: Catalog,
        *,
        pace: float = 0.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        streams: bool = False,
    ) -> None:
        self.catalog = catalog
        self.pace = pace
        self._sleep = sleep
        self.inline = not streams

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        step = await self.step(request)
        for index, call in enumerate(step.tool_calls):
            args = orjson.dumps(call.args).decode()
            yield ToolCallDelta(index=index, id=f"call_{index}", name=call.name, arguments=args)
        text = step.text or step.ask or ""
        if text.startswith(request.partial):  # continue after what was already delivered
            text = text[len(request.partial) :]
        words = text.split(" ") if text else []
        for i, word in enumerate(words):
            if self.pace:
                await self._sleep(self.pace)
            yield TextDelta(text=word if i == len(words) - 1 else word + " ")
        yield StreamEnd(step=step)

    async def summarize(self, request: SummaryRequest) -> str:
        """:func:`deterministic_summary` (no network)."""
        return deterministic_summary(request)

    async def step(self, request: ModelRequest) -> ModelStep:
        if request.steps or request.steps_summary:
            return ModelStep(text=self._summary(request))
        original = " ".join([request.text, *(_as_text(i) for i in request.inputs)])
        text = original.lower()
        wanted: set[str] = set()
        for t in self.catalog:
            if any(k in text for k in t.keywords):
                self._with_requirements(t.name, wanted)
        if not wanted:
            if request.inputs:
                return ModelStep(text="I have no tool for that request.")
            offer = "; ".join(f"{t.name}: {t.description.splitlines()[0]}" for t in self.catalog)
            return ModelStep(ask=f"What should I do? I can {offer}")
        calls = []
        for t in self.catalog:
            if t.name in wanted:
                args = t.plan_args(original) if t.plan_args else arguments_in(original, t.name, *t.keywords)
                calls.append(ToolCall(name=t.name, args=args))
        return ModelStep(tool_calls=calls)

    def _with_requirements(self, name: str, into: set[str]) -> None:
        if name in into:
            return
        into.add(name)
        for dep in self.catalog.get(name).requires:
            self._with_requirements(dep, into)

    @staticmethod
    def _summary(request: ModelRequest) -> str:
        parts = []
        for s in request.steps:
            if s.status != ItemStatus.COMPLETED:
                outcome = s.status
            elif isinstance(s.result, dict) and isinstance(s.result.get("summary"), str):
                outcome = s.result["summary"]
            else:
                outcome = _short(s.result)
            parts.append(f"{s.tool}: {outcome}")
        if request.steps_summary:  # the steps a compaction summarised come first
            parts.insert(0, f"earlier steps ({len(request.steps_summary.splitlines())} summarised)")
        return "Done. " + "; ".join(parts) + "."


def arguments_in(text: str, *names: str) -> dict[str, Any]:
    """The JSON object that follows the first of ``names`` (a tool's name, then its keywords) in
    ``text`` that has one — how the deterministic planner reads a tool's arguments from a request
    (``forecast {"city": "Paris"}``); empty when none does."""
    lowered = text.lower()
    for name in names:
        at = lowered.find(name.lower())
        if at < 0:
            continue
        try:
            found, _ = _DECODER.raw_decode(text[at + len(name) :].lstrip())
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {}


_DECODER = json.JSONDecoder()


def _as_text(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(str(v) for v in value.values())
    return str(value)


def _short(value: Any, limit: int = 160) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"
