"""The OpenAI Agents SDK's edges for the session tests: the SDK's own scripted test model
(``agents.testing.ScriptedModel``; the one fake, at the LLM's edge) with the two helpers these tests
use, and one way to run an agent by ``Runner.run`` or ``Runner.run_streamed``, tracing off (no
exporter reaches the network)."""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import Agent, RunConfig, Runner, RunResult, RunResultStreaming, TResponseInputItem
from agents.testing import ScriptedModel as SdkScriptedModel
from agents.testing import assistant_message

#: The two ways of running an agent the ported tests take (``run_sync`` is left out: see the tests).
RUNNER_METHODS = ("run", "run_streamed")


class ScriptedModel(SdkScriptedModel):
    """The SDK's scripted model: ``script(*texts)`` queues one assistant answer per model call, and
    ``inputs`` are the items each call was given (``last_input``: the latest), from its recorded
    calls."""

    def script(self, *texts: str) -> None:
        self.extend([[assistant_message(text)] for text in texts])

    @property
    def inputs(self) -> list[list[TResponseInputItem]]:
        return [
            [{"role": "user", "content": c.input}] if isinstance(c.input, str) else [dict(i) for i in c.input]  # type: ignore[misc]
            for c in self.calls
        ]

    @property
    def last_input(self) -> list[TResponseInputItem]:
        return self.inputs[-1]


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
