"""The OpenAI Agents SDK's edges for the session tests: a scripted ``Model`` (the SDK's public
``agents.models.interface.Model``; the one fake, at the LLM's edge) and one way to run an agent by
``Runner.run`` or ``Runner.run_streamed``, tracing off (no exporter reaches the network)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, RunConfig, Runner, RunResult, RunResultStreaming, TResponseInputItem, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam

#: The two ways of running an agent the ported tests take (``run_sync`` is left out: see the tests).
RUNNER_METHODS = ("run", "run_streamed")


def message(text: str) -> ResponseOutputMessage:
    """An assistant message saying ``text``, as a model's output."""
    return ResponseOutputMessage(
        id="msg_scripted",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """Answers each turn with the next scripted text (``script``) and records the input it was given
    (``inputs``: one list of items per turn, ``last_input``: the latest)."""

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.inputs: list[list[TResponseInputItem]] = []

    def script(self, *texts: str) -> None:
        self.replies.extend(texts)

    @property
    def last_input(self) -> list[TResponseInputItem]:
        return self.inputs[-1]

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        given: list[TResponseInputItem] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else [dict(i) for i in input]  # type: ignore[misc]
        )
        self.inputs.append(given)
        assert self.replies, "the model was called more often than scripted"
        return ModelResponse(output=[message(self.replies.pop(0))], usage=Usage(), response_id=None)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        got = await self.get_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        response = Response(
            id="resp_scripted",
            created_at=0,
            model="scripted",
            object="response",
            output=got.output,
            tool_choice="none",
            tools=[],
            parallel_tool_calls=False,
        )
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)


def agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="test", model=model)


async def run(
    method: str, model: ScriptedModel, input: str | list[TResponseInputItem], **kwargs: Any
) -> RunResult | RunResultStreaming:
    """One run of an agent on ``model`` by ``Runner.<method>``, to its end; ``kwargs`` as ``Runner``'s
    (``session=``, ``run_config=``), tracing off."""
    config = kwargs.pop("run_config", None) or RunConfig()
    kwargs["run_config"] = dataclasses.replace(config, tracing_disabled=True)
    if method == "run":
        return await Runner.run(agent(model), input, **kwargs)
    assert method == "run_streamed", method
    result = Runner.run_streamed(agent(model), input, **kwargs)
    async for _ in result.stream_events():
        pass
    return result
