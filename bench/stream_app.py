"""The server of section ``streams``: ``roost serve bench.stream_app:app``.

Kind ``bchat`` is a chat agent whose model emits ``tokens`` text deltas as fast as it can (no pace,
no I/O), or at a pace (words a second, the second word of the message). Each delta is one word, the
nanoseconds of the wall clock at the moment the model yields it, so the client can tell, per word,
how long it took from the model to the reader (a paced word: the time it was due, so that a loop
too busy to wake the model on time counts in its lag, as it would for a hosted model's tokens). The
answer's length is in the message: ``send("2000")`` asks for 2,000 words, ``send("300 50")`` for
300 at 50 words a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from roost.agent import AgentConfig, ChatAgent, ModelRequest, ModelStep, StreamEnd, TextDelta
from roost.agent.models import Model, ModelChunk
from roost.transport import create_app

__all__ = ["FastModel", "app"]


class FastModel:
    """Streams as many words as the request asks for, each its own yield time; waits only to keep a
    pace when the request gives one."""

    inline = False

    async def step(self, request: ModelRequest) -> ModelStep:
        return ModelStep(text="")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        words = request.text.split()
        n = int(words[0])
        pace = float(words[1]) if len(words) > 1 else 0.0  # words a second (0: as fast as it can)
        if not pace:
            for _ in range(n):
                yield TextDelta(text=f"{time.time_ns()} ")
        else:  # each word stamped with the time it is due, as a hosted model's token arrives then
            start, start_ns = time.monotonic(), time.time_ns()  # whether or not the loop is late
            for i in range(n):
                await asyncio.sleep(max(0.0, start + i / pace - time.monotonic()))
                yield TextDelta(text=f"{start_ns + int(i * 1e9 / pace)} ")
        yield StreamEnd(step=ModelStep(text=""))


class BenchChat(ChatAgent):
    kind = "bchat"
    config = AgentConfig(max_input_chars=64)  # the default batching: what the figures are about

    def make_model(self) -> Model:
        return FastModel()


app = create_app([BenchChat])
