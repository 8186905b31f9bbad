"""Streaming models: the HTTP model's stream against a real fake chat-completions server
(``tests/fake_llm.py``), the sans-I/O parts of its stream without a network, and the deterministic
planner's stream on a fake clock.

Each test is named after a guarantee of :mod:`roost.agent.openai` (its module doc's table of outcomes)
or of :class:`roost.agent.models.DeterministicPlanner`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from roost.agent import (
    DeterministicPlanner,
    ModelError,
    ModelRequest,
    OpenAICompatibleModel,
    StreamEnd,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from roost.agent.models import ModelChunk, StepRecord, collect
from roost.agent.openai import ChatStream, SseDecoder
from roost.examples.docs_agent import DocsAgent
from roost.scheduler.clock import FakeClock
from roost.testing import until
from tests.fake_llm import DONE, Event, FakeLLM, Reply, answer, chunk, finish, text, tool_call, usage
from tests.support import ROOT

KEY = "sk-test-secret-key-0123456789"


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as server:
        yield server


def model_for(llm: FakeLLM, **options: Any) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(llm.url, api_key=KEY, model="fake", **{"timeout": 5.0, **options})


def streamed(*events: Event | list[Event], end: bool = True) -> Reply:
    """A stream of these events, then (``end``) the finish, the usage event and ``[DONE]``."""
    flat = [e for item in events for e in (item if isinstance(item, list) else [item])]
    return Reply(events=flat + ([finish(), usage(11, 7), DONE] if end else []))


async def run(
    model: OpenAICompatibleModel, request: ModelRequest | None = None
) -> tuple[list[ModelChunk], ModelError | None]:
    """Every chunk the stream yielded, and the error it ended with (``None``: it ended well)."""
    chunks: list[ModelChunk] = []
    try:
        async for c in model.stream(request or ModelRequest(text="hi")):
            chunks.append(c)
    except ModelError as exc:
        return chunks, exc
    return chunks, None


def texts(chunks: list[ModelChunk]) -> list[str]:
    return [c.text for c in chunks if isinstance(c, TextDelta)]


# -- the sans-I/O parts ---------------------------------------------------------------------------------
def test_sse_events_split_anywhere_over_the_network_decode_whole() -> None:
    """Fed one byte at a time (a UTF-8 character split too), the decoder gives each event's data once,
    whole; comments, keep-alives, other fields and blank lines are skipped; CRLF ends a line too."""
    stream = (
        ": keep-alive\n\n"
        'data: {"a": "héllo"}\r\n\r\n'
        "event: message\nid: 7\nretry: 10\n"
        "data: line one\ndata:line two\n\n"
        "\n\n:\n"
        "data: [DONE]\n\n"
    ).encode()
    whole = SseDecoder().feed(stream)
    decoder, pieces = SseDecoder(), []
    for i in range(len(stream)):
        pieces += decoder.feed(stream[i : i + 1])
    assert pieces == whole == ['{"a": "héllo"}', "line one\nline two", "[DONE]"]
    assert decoder.close() == []


def test_an_event_the_stream_ended_without_its_blank_line_is_still_read() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: [DONE]\ndata: half a li") == []
    assert decoder.close() == ["[DONE]"]  # the unfinished line is dropped


def test_a_line_longer_than_the_bound_is_malformed() -> None:
    decoder = SseDecoder(max_line=1000)
    decoder.feed(b"data: " + b"x" * 900)
    with pytest.raises(ModelError, match="longer than 1000 bytes") as err:
        decoder.feed(b"x" * 200)
    assert not err.value.retryable


def test_tool_call_deltas_assemble_by_index_first_id_and_name_arguments_concatenated() -> None:
    state = ChatStream()
    deltas = [
        {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "second", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "first", "arguments": '{"n"'}}]},
        {"tool_calls": [{"index": 1, "function": {"name": "second", "arguments": '{"m": 2}'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
    ]
    for d in deltas:
        state.feed(orjson.dumps({"choices": [{"index": 0, "delta": d}]}).decode())
    state.feed("[DONE]")
    assert state.end().tool_calls == [
        ToolCall(name="first", args={"n": 1}),
        ToolCall(name="second", args={"m": 2}),
    ]


# -- the HTTP model's stream ----------------------------------------------------------------------------
async def test_a_full_stream_reassembles_text_tool_calls_and_usage(llm: FakeLLM) -> None:
    """Text deltas in order, tool-call deltas as sent, then one StreamEnd whose step holds the text (or
    the assembled tool calls) and the usage; comments, keep-alives and a line split over two writes on
    the way do not matter."""
    llm.script(
        streamed(
            Event(raw=": keep-alive\n\n"),
            text("Hello", ", wor"),
            Event(raw='data: {"choices": [{"index": 0, "delta": {"cont'),
            Event(raw='ent": "ld"}}]}\n\n', delay=0.05),
            Event(raw="\n"),
        ),
        streamed(
            tool_call(0, "call_a", "collect_documents", '{"fol', 'der": "d', 'ocs"}'),
            tool_call(1, "call_b", "generate_report"),
        ),
    )
    model = model_for(llm)
    chunks, error = await run(model)
    assert error is None
    assert texts(chunks) == ["Hello", ", wor", "ld"]
    assert chunks[-1] == StreamEnd(
        step={"text": "Hello, world", "usage": Usage(prompt_tokens=11, completion_tokens=7, total_tokens=18)}
    )

    chunks, error = await run(model)
    assert error is None
    assert [c for c in chunks if isinstance(c, ToolCallDelta)] == [
        ToolCallDelta(index=0, id="call_a", name="collect_documents", arguments=""),
        ToolCallDelta(index=0, arguments='{"fol'),
        ToolCallDelta(index=0, arguments='der": "d'),
        ToolCallDelta(index=0, arguments='ocs"}'),
        ToolCallDelta(index=1, id="call_b", name="generate_report", arguments=""),
    ]
    end = chunks[-1]
    assert isinstance(end, StreamEnd)
    assert end.step.tool_calls == [
        ToolCall(name="collect_documents", args={"folder": "docs"}),
        ToolCall(name="generate_report", args={}),
    ]
    assert end.step.usage is not None
    assert end.step.usage.total_tokens == 18


async def test_deltas_arrive_before_the_stream_ends(llm: FakeLLM) -> None:
    """Incremental, not buffered: the first delta is yielded while the server still holds the rest."""
    llm.script(streamed(text("first "), chunk({"content": "second"}, gate=True)))
    stream = model_for(llm).stream(ModelRequest(text="hi"))
    async with asyncio.timeout(5):
        first = await anext(stream)
    assert first == TextDelta(text="first ")
    await until(lambda: llm.waiting == 1, timeout=5)  # the rest is held at the gate, unsent
    llm.release()
    rest = [c async for c in stream]
    assert texts(rest) == ["second"]
    assert isinstance(rest[-1], StreamEnd)


async def test_the_request_carries_stream_true_and_the_partial_text(llm: FakeLLM) -> None:
    """The body asks for a stream with usage and ends with the partial answer as an assistant message;
    the deltas are only what follows it, the step holds the whole answer; the key goes in the header."""
    llm.script(streamed(text(" world", ".")))
    chunks, error = await run(model_for(llm), ModelRequest(text="greet", partial="Hello,"))
    assert error is None
    body = llm.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["model"] == "fake"
    assert body["messages"][-2:] == [
        {"role": "user", "content": "greet"},
        {"role": "assistant", "content": "Hello,"},
    ]
    assert llm.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert texts(chunks) == [" world", "."]
    end = chunks[-1]
    assert isinstance(end, StreamEnd)
    assert end.step.text == "Hello, world."


async def test_an_endpoint_repeating_the_partial_text_has_the_repeat_dropped(llm: FakeLLM) -> None:
    llm.script(streamed(text("Hel", "lo,", " world")), streamed(text("Hel", "p!")))
    chunks, _ = await run(model_for(llm), ModelRequest(text="greet", partial="Hello,"))
    assert texts(chunks) == [" world"]
    chunks, _ = await run(model_for(llm), ModelRequest(text="greet", partial="Hello,"))
    assert texts(chunks) == ["Help!"]  # not a repeat after all: all of it, once it is clear
    end = chunks[-1]
    assert isinstance(end, StreamEnd)
    assert end.step.text == "Hello,Help!"


async def test_a_connection_lost_mid_stream_is_retryable_after_the_deltas_before_it(llm: FakeLLM) -> None:
    reply = streamed(text("one ", "two "), text("never"))
    reply.drop_after = 2
    llm.script(reply)
    chunks, error = await run(model_for(llm))
    assert texts(chunks) == ["one ", "two "]
    assert error is not None
    assert error.retryable
    assert "lost mid-stream" in str(error)


@pytest.mark.parametrize(
    ("status", "retryable"), [(429, True), (500, True), (503, True), (400, False), (404, False)]
)
async def test_http_status_before_the_stream_429_and_5xx_retryable_other_4xx_not(
    llm: FakeLLM, status: int, retryable: bool
) -> None:
    llm.script(Reply(status=status, body={"error": {"message": "nope", "type": "x"}}))
    chunks, error = await run(model_for(llm))
    assert chunks == []
    assert error is not None
    assert error.retryable is retryable
    assert f"HTTP {status}: nope" in str(error)


async def test_no_connection_or_no_response_head_in_time_is_retryable(llm: FakeLLM) -> None:
    chunks, error = await run(OpenAICompatibleModel("http://127.0.0.1:9/v1", timeout=2))  # refused
    assert error is not None
    assert error.retryable
    assert "unreachable" in str(error)
    llm.script(Reply(delay=30, events=[DONE]))  # the head comes late (never, in this test)
    chunks, error = await asyncio.wait_for(run(model_for(llm, timeout=0.2)), 5)
    assert chunks == []
    assert error is not None
    assert error.retryable
    assert "timed out after 0.2 s" in str(error)


async def test_the_api_key_never_appears_in_an_error(llm: FakeLLM) -> None:
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error"}}
    llm.script(Reply(status=401, body=echo), Reply(events=[Event(chunk=echo)]), Reply(status=401, body=echo))
    model = model_for(llm)
    for _ in range(2):
        _, error = await run(model)
        assert error is not None
        assert "Incorrect API key provided: ***" in str(error)
        assert KEY not in str(error)
    with pytest.raises(ModelError) as err:
        await model.step(ModelRequest(text="hi"))
    assert KEY not in str(err.value)


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        ({"message": "try later", "type": "server_error"}, True),
        ({"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}, True),
        ({"message": "busy", "type": "overloaded_error"}, True),
        ({"message": "upstream", "code": 503}, True),
        ({"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}, False),
        ("a bare string", False),
    ],
)
async def test_an_error_event_mid_stream_is_retryable_only_when_server_side_or_rate_limit(
    llm: FakeLLM, error: Any, retryable: bool
) -> None:
    llm.script(Reply(events=[*text("partial "), Event(chunk={"error": error}), DONE]))
    chunks, exc = await run(model_for(llm))
    assert texts(chunks) == ["partial "]
    assert exc is not None
    assert exc.retryable is retryable
    assert "the model reported an error" in str(exc)


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        (Event(raw="data: {not json\n\n"), "not JSON"),
        (Event(raw="data: [1, 2]\n\n"), "not a JSON object"),
        (Event(chunk={"id": "chatcmpl-1", "object": "chat.completion.chunk"}), "no choices"),
        (Event(chunk={"choices": [{"index": 0, "delta": {"content": 7}}]}), "content is not text"),
        (Event(chunk={"choices": [{"index": 0, "delta": {"tool_calls": ["x"]}}]}), "tool call delta"),
    ],
)
async def test_a_malformed_event_is_not_retryable_and_names_the_problem(
    llm: FakeLLM, event: Event, problem: str
) -> None:
    llm.script(streamed(text("ok "), event))
    chunks, error = await run(model_for(llm))
    assert texts(chunks) == ["ok "]
    assert error is not None
    assert not error.retryable
    assert "malformed model stream" in str(error)
    assert problem in str(error)


async def test_tool_arguments_not_a_json_object_at_the_end_are_not_retryable_and_name_the_tool(
    llm: FakeLLM,
) -> None:
    llm.script(
        streamed(tool_call(0, "c1", "collect_documents", '{"folder": "do')),
        streamed(tool_call(0, "c1", "generate_report", "[1]")),
    )
    for name in ("collect_documents", "generate_report"):
        chunks, error = await run(model_for(llm))
        assert any(isinstance(c, ToolCallDelta) for c in chunks)
        assert error is not None
        assert not error.retryable
        assert f"arguments for tool {name!r} are not a JSON object" in str(error)


async def test_a_stalled_stream_is_retryable_within_about_the_idle_timeout(llm: FakeLLM) -> None:
    """No byte for ``stream_idle_timeout`` seconds (the server holds the stream open, sending
    nothing): a retryable "stalled" error after the deltas before it, about that long after them."""
    reply = streamed(text("still ", "here"))
    reply.stall_after = 1
    llm.script(reply)
    stream = model_for(llm, stream_idle_timeout=0.2).stream(ModelRequest(text="hi"))
    first = await anext(stream)
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"stalled: no data for 0\.2 s") as err:
        await asyncio.wait_for(anext(stream), 5)
    elapsed = time.monotonic() - started
    assert err.value.retryable
    assert first == TextDelta(text="still ")
    assert 0.15 <= elapsed < 5.0  # the idle timeout, not the 5 s head timeout or a hang


async def test_a_stream_that_ends_without_done_or_finish_reason_is_retryable(llm: FakeLLM) -> None:
    llm.script(
        streamed(text("cut ", "short"), end=False),
        Reply(events=[*text("whole"), finish()]),  # a finish_reason without [DONE] is a proper end
    )
    chunks, error = await run(model_for(llm))
    assert texts(chunks) == ["cut ", "short"]
    assert error is not None
    assert error.retryable
    assert "no [DONE]" in str(error)
    chunks, error = await run(model_for(llm))
    assert error is None
    assert chunks[-1] == StreamEnd(step={"text": "whole"})


async def test_a_json_answer_to_a_stream_request_is_not_retryable(llm: FakeLLM) -> None:
    llm.script(answer("whole"))
    _, error = await run(model_for(llm))
    assert error is not None
    assert not error.retryable
    assert "not an event stream" in str(error)


async def test_step_still_asks_for_the_whole_answer_and_reports_its_usage(llm: FakeLLM) -> None:
    reply = answer("All at once.")
    reply.body["usage"] = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    llm.script(reply)
    step = await model_for(llm).step(ModelRequest(text="hi"))
    assert step.text == "All at once."
    assert step.usage == Usage(prompt_tokens=3, completion_tokens=4, total_tokens=7)
    assert "stream" not in llm.requests[0].body


async def test_the_fake_server_runs_as_its_own_process(tmp_path: Path) -> None:
    """``python -m tests.fake_llm --port 0 --script FILE`` serves the script's replies and reports
    what it received over HTTP."""
    script = tmp_path / "replies.json"
    script.write_bytes(orjson.dumps([streamed(text("from a process")).model_dump()]))
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tests.fake_llm", "--port", "0", "--script", str(script)],
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        url = line.decode().split(" on ", 1)[1].strip()
        step = await collect(OpenAICompatibleModel(url, timeout=5).stream(ModelRequest(text="hi")))
        assert step.text == "from a process"
        async with httpx.AsyncClient() as client:
            seen = (await client.get(url.removesuffix("/v1") + "/_fake/requests")).json()
        assert [r["body"]["stream"] for r in seen] == [True]
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 10) == 0  # it stops cleanly on SIGTERM


# -- the deterministic planner's stream -----------------------------------------------------------------
DONE_STEPS = [StepRecord(item_id="i1", tool="count", args={}, status="completed", result={"summary": "six"})]


async def test_the_planner_streams_its_text_word_by_word_at_its_pace() -> None:
    """One word per ``pace`` seconds, slept on the sleep it is given; the words make the step's text."""
    clock = FakeClock()
    planner = DeterministicPlanner(DocsAgent.catalog(), pace=0.5, sleep=clock.sleep, streams=True)
    chunks: list[ModelChunk] = []

    async def consume() -> None:
        async for c in planner.stream(ModelRequest(text="go", steps=DONE_STEPS)):
            chunks.append(c)

    task = asyncio.create_task(consume())
    for words in range(3):  # "Done. ", "count: ", "six."
        await until(lambda: clock.sleepers == 1, timeout=5)
        assert len(chunks) == words  # nothing before its time
        clock.advance(0.5)
    await asyncio.wait_for(task, 5)
    assert texts(chunks) == ["Done. ", "count: ", "six."]
    assert chunks[-1] == StreamEnd(step={"text": "Done. count: six."})


async def test_the_planner_continues_after_the_partial_text_without_repeating_it() -> None:
    planner = DeterministicPlanner(DocsAgent.catalog())
    request = ModelRequest(text="go", steps=DONE_STEPS, partial="Done. cou")
    chunks = [c async for c in planner.stream(request)]
    assert "".join(texts(chunks)) == "nt: six."
    assert chunks[-1] == StreamEnd(step={"text": "Done. count: six."})


async def test_the_planner_streams_its_tool_calls_whole() -> None:
    planner = DeterministicPlanner(DocsAgent.catalog())
    chunks = [c async for c in planner.stream(ModelRequest(text="how many documents are there?"))]
    end = chunks[-1]
    assert isinstance(end, StreamEnd)
    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert [d.name for d in deltas] == [c.name for c in end.step.tool_calls] != []
    assert [orjson.loads(d.arguments) for d in deltas] == [c.args for c in end.step.tool_calls]
