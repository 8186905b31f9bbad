"""Streamed model output: deltas batched into commits, gap-free resume, redaction across deltas,
cancellation, and an interrupted stream taken up by ``continue_run`` (roost/agent/streaming.py for
the turn's side, roost/agent/stream_buffer.py for the worker's)."""

from __future__ import annotations

import asyncio
import base64
import random
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
from pydantic import BaseModel

from roost.actors import RpcError
from roost.agent import (
    AgentConfig,
    ChatAgent,
    ModelError,
    ModelRequest,
    ModelStep,
    StreamEnd,
    TextDelta,
    ToolContext,
    tool,
)
from roost.agent.agent import Agent
from roost.agent.chat import DeterministicChat
from roost.agent.models import DeterministicPlanner, Model, ModelChunk
from roost.agent.openai import OpenAICompatibleModel
from roost.agent.payloads import redact_text
from roost.agent.stream_buffer import (
    _OPEN_QUOTE,
    _PEM_END,
    _TOKEN_CHARS,
    _WAITING,
    MAX_BATCH,
    MAX_HELD,
    MAX_PEM,
    StreamBuffer,
    _open_pem,
    safe_cut,
    secret_cut,
    stream_step,
)
from roost.agent.streaming import STREAM_MIGRATIONS
from roost.scheduler import FakeClock
from roost.storage.migrations import apply_migrations
from roost.testing import ActorKit, KitConnection
from tests.agent_support import drive, events, file_text, reassemble
from tests.fake_llm import DONE, Event, FakeLLM, Reply, finish
from tests.fake_llm import text as fake_text
from tests.fake_llm import tool_call as fake_tool_call

STREAMING = AgentConfig(
    heartbeat_interval=0.5,
    lease_ttl=2.0,
    job_backoff=0.5,
    stream_batch_count=4,
    stream_batch_interval=0.05,
    stream_pace=0.01,
)


class Scripted:
    """The model's edge: a stream of given deltas, failing after ``fail_after`` of them once."""

    inline = False
    script: ClassVar[list[str]] = []
    fail_after: ClassVar[int | None] = None
    requests: ClassVar[list[ModelRequest]] = []

    async def step(self, request: ModelRequest) -> ModelStep:
        return ModelStep(text="".join(self.script))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        type(self).requests.append(request)
        whole = "".join(self.script)
        rest = whole[len(request.partial) :] if whole.startswith(request.partial) else whole
        pieces = self.script if not request.partial else [rest]
        for i, piece in enumerate(pieces):
            if type(self).fail_after is not None and i == type(self).fail_after:
                type(self).fail_after = None
                raise ModelError("the connection dropped mid-stream", retryable=True)
            yield TextDelta(text=piece)
        yield StreamEnd(step=ModelStep(text=whole))


class Streamer(Agent):
    """Streams the deterministic chat model's answers."""

    kind = "streamer"
    config = STREAMING
    streams = True

    planner = DeterministicChat


class ScriptedStreamer(Agent):
    kind = "scripted"
    config = STREAMING
    streams = True

    def make_model(self) -> Model:
        return Scripted()


class OneByOne(ScriptedStreamer):
    """The scripted stream, each delta its own batch."""

    kind = "onebyone"
    config = STREAMING.model_copy(update={"stream_batch_count": 1})


class Restarting(ScriptedStreamer):
    kind = "restarting"
    config = STREAMING.model_copy(update={"stream_resume": "restart", "stream_batch_count": 1})


def deltas(conn: KitConnection) -> list[dict[str, Any]]:
    return [e["payload"] for e in events(conn) if e["event_type"] == "model_delta"]


def text_of(conn: KitConnection) -> str:
    return reassemble(deltas(conn))


def ended(conn: KitConnection) -> bool:
    return any(e["event_type"] in ("turn_completed", "turn_failed") for e in events(conn))


# -- the buffer ---------------------------------------------------------------------------------------
def test_safe_cut_holds_back_what_may_be_the_start_of_a_credential() -> None:
    assert safe_cut("hello wor") == len("hello ")
    assert safe_cut("my key is sk-abc") == len("my key is ")
    assert safe_cut("the password: ") == len("the ")
    assert safe_cut("use Bearer ") == len("use ")
    assert safe_cut('password="two words ') == 0
    assert safe_cut("ok\n-----BEGIN RSA PRIVATE KEY-----\nMIIE abc ") == len("ok\n")
    assert safe_cut("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY----- done ") > 40


def whole_text_cut(text: str) -> int:
    """:func:`safe_cut` as a search of the whole text for every pattern spells it (the reference)."""
    pem = _open_pem(text)
    if pem is not None and len(text) - pem[0] <= MAX_PEM:
        text = text[: pem[0]]
    floor = max((m.end() for m in _PEM_END.finditer(text)), default=0)
    cut = len(text)
    while cut > floor and text[cut - 1] in _TOKEN_CHARS:
        cut -= 1
    head = text[:cut]
    for pattern in (_OPEN_QUOTE, _WAITING):
        m = pattern.search(head)
        if m is not None:
            return m.start()
    return cut


def test_where_a_batch_may_end_is_found_from_its_tail() -> None:
    pieces = ["password", "PassWd", "pwd", "secret", "token", "api_key", "api-key", "access_key"]
    pieces += ["client_secret", "client-secret", "Bearer", "basic", "\u212a", "=", ":", " ", "\n", "\t"]
    pieces += ["\u3000", '"', "'", "x", "-", "-----BEGIN", "-----BEGIN RSA PRIVATE KEY-----", "B"]
    pieces += ["-----END RSA PRIVATE KEY-----", ".", ",", "é", "你", "_", "sk-abc"]
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert safe_cut(text) == whole_text_cut(text), text
    # a keyword then a long run of whitespace: a search of the whole text backtracks quadratically
    # (seconds for this one); read from the tail it is a few characters
    spaced = "password" + " " * 50_000 + "!"
    started = time.perf_counter()
    assert safe_cut(spaced) == len(spaced)
    assert time.perf_counter() - started < 1.0


async def test_batches_go_by_count_and_by_interval_on_the_clock() -> None:
    clock = FakeClock()
    sent: list[str] = []

    async def flush(text: str) -> None:
        sent.append(text)

    buf = StreamBuffer(flush, count=3, interval=0.5, clock=clock)
    for word in ("one ", "two ", "three "):
        await buf.add(word)
    assert sent == ["one two three "]  # by count, at once
    await buf.add("four ")
    for _ in range(3):
        await asyncio.sleep(0)  # the batch's timer starts sleeping
    assert sent == ["one two three "]
    clock.advance(0.5)
    for _ in range(5):
        await asyncio.sleep(0)
    assert sent == ["one two three ", "four "]  # by interval
    await buf.add("fi")
    await buf.close()
    assert "".join(sent) == "one two three four fi"


async def test_a_delta_costs_no_coroutine_push_says_when_its_batch_is_due() -> None:
    sent: list[str] = []

    async def flush(text: str) -> None:
        sent.append(text)

    buf = StreamBuffer(flush, count=3, interval=10, clock=FakeClock())
    assert buf.push("one ") is False
    assert buf.push("") is False  # nothing to send
    assert buf.push("two ") is False
    assert sent == []  # push never sends: it only says when
    assert buf.push("three ") is True  # by count
    await buf.send()
    assert sent == ["one two three "]
    assert buf.push("x" * MAX_BATCH) is True  # by size
    await buf.send()
    await buf.close()
    assert "".join(sent) == "one two three " + "x" * MAX_BATCH


async def flushed(deltas: list[str], *, count: int = 1) -> list[str]:
    """The batches a buffer sends for ``deltas``, each redacted as the turn redacts it."""
    out: list[str] = []

    async def flush(text: str) -> None:
        out.append(redact_text(text))

    buf = StreamBuffer(flush, count=count, interval=10, clock=FakeClock())
    for d in deltas:
        await buf.add(d)
    await buf.close()
    return out


def pem_key(size: int) -> tuple[str, list[str]]:
    body = base64.b64encode(bytes(range(256)) * (size // 256 + 1))[: size * 4 // 3].decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    joined = "\n".join(lines)
    return f"Here:\n-----BEGIN RSA PRIVATE KEY-----\n{joined}\n-----END RSA PRIVATE KEY-----\nDone. ", lines


@pytest.mark.parametrize("count", [1, 4, 64])
async def test_a_private_key_whose_header_is_split_into_tokens_is_redacted(count: int) -> None:
    text, lines = pem_key(1200)
    tokens = re.findall(r"\s*\S{1,6}", text)  # as a model's tokenizer splits it: -----B, EGIN, ...
    shown = "".join(await flushed(tokens, count=count))
    assert not any(line in shown for line in lines)
    assert shown.endswith("Done.")  # what follows the block is not held back


async def test_a_private_key_longer_than_a_batch_is_redacted_whole() -> None:
    text, lines = pem_key(4700)  # 6.3 KB: more than one batch
    batches = await flushed(list(text))
    assert not any(line in "".join(batches) for line in lines)


async def test_text_without_spaces_streams_before_the_end() -> None:
    sent: list[str] = []

    async def flush(text: str) -> None:
        sent.append(text)

    buf = StreamBuffer(flush, count=2, interval=10, clock=FakeClock())
    for ch in "你好，世界。这是一个没有空格的回答。":
        await buf.add(ch)
    assert len("".join(sent)) > 10  # sent by count, not held until close
    await buf.close()


async def test_a_delta_added_while_a_timed_batch_commits_gets_its_own_timer() -> None:
    clock = FakeClock()
    sent: list[str] = []
    gate = asyncio.Event()

    async def slow(text: str) -> None:
        sent.append(text)
        await gate.wait()

    buf = StreamBuffer(slow, count=100, interval=0.5, clock=clock)
    await buf.add("hello ")
    for _ in range(3):
        await asyncio.sleep(0)
    clock.advance(0.5)
    for _ in range(5):
        await asyncio.sleep(0)
    assert sent == ["hello "]  # the timed batch is being committed
    await buf.add("world ")  # arrives meanwhile
    gate.set()
    for _ in range(5):
        await asyncio.sleep(0)
    clock.advance(0.5)
    for _ in range(5):
        await asyncio.sleep(0)
    assert sent == ["hello ", "world "]  # due one interval later, without waiting for another delta
    await buf.close()


async def test_a_batch_is_bounded_however_large_the_deltas() -> None:
    sent: list[str] = []

    async def flush(text: str) -> None:
        sent.append(text)

    buf = StreamBuffer(flush, count=100, interval=10, clock=FakeClock())
    words = "word " * 3000  # one delta of 15,000 characters
    await buf.add(words)
    await buf.close()
    assert "".join(sent) == words
    assert max(len(s) for s in sent) <= MAX_BATCH
    assert all(s.endswith(" ") for s in sent)  # each ends where no word is cut


async def test_a_word_longer_than_the_hold_limit_is_sent_anyway() -> None:
    sent: list[str] = []

    async def flush(text: str) -> None:
        sent.append(text)

    buf = StreamBuffer(flush, count=1, interval=10, clock=FakeClock())
    await buf.add("x" * (MAX_HELD + 1))
    assert "".join(sent) == "x" * (MAX_HELD + 1)  # not held for a whitespace that never comes
    await buf.close()


# -- the runtime ---------------------------------------------------------------------------------------
async def test_streamed_text_reaches_the_log_in_batches_with_contiguous_offsets(data_dir: Path) -> None:
    async with ActorKit([Streamer], data_dir) as kit:
        c = kit.connect("streamer", "s")
        reply = await c.call("turn", "hello there, how are you today?")
        await drive(kit, lambda: ended(c), step=0.01)
        ds = deltas(c)
        text = reassemble(ds)
        card = await c.call("get_run", reply["run_id"])
        assert card["status"] == "completed"
        assert text == card["output"]
        words = len(text.split(" "))
        assert 1 < len(ds) < words  # batched, but more than one commit
        assert {d["message_id"] for d in ds} == {f"{reply['run_id']}.0"}
        (message,) = card["messages"]
        assert message["status"] == "completed"
        assert message["text"] == text
        assert message["chars"] == len(text)


async def test_a_streamed_batchs_turn_reads_no_whole_row(data_dir: Path) -> None:
    Scripted.script = [f"word{i} " for i in range(12)]  # three batches of four
    Scripted.fail_after = None
    statements: list[str] = []

    async def trace(actor: Agent) -> None:
        actor.extension.connection().set_trace_callback(statements.append)

    async with ActorKit([ScriptedStreamer], data_dir) as kit:
        c = kit.connect("scripted", "t")
        await kit.registry.run("scripted", "t", trace)  # type: ignore[arg-type]
        await c.call("turn", "go")
        await drive(kit, lambda: ended(c), step=0.01)
    assert text_of(c) == "".join(Scripted.script)
    batches = [i for i, s in enumerate(statements) if s.startswith("INSERT INTO roost_agent_stream_chunks")]
    assert len(batches) == 3
    # from the first batch's write to the last's: no job, run or message row read whole (SELECT *)
    later = statements[batches[0] : batches[-1]]
    assert [s for s in later if s.startswith("SELECT *")] == []
    # and what never changes is read by the attempt's first batch only: not the run, not the job's
    # arguments (a JSON column), each later batch reads the fence alone
    assert [s for s in later if "FROM roost_agent_runs" in s] == []
    assert [s for s in later if "args" in s] == []
    # nor rewrites a row: its batch is the one row it writes besides the log's
    assert [s for s in later if s.startswith("UPDATE roost_agent_streams")] == []
    # each later batch reads the attempt's fence alone: one read of the workflow core's few columns
    assert [s for s in later if "FROM roost_agent_jobs" in s] == []
    fences = [s for s in later if "FROM roost_wf w JOIN roost_wf_steps" in s]
    assert len(fences) == 2


def test_a_file_whose_batches_were_kept_in_a_without_rowid_table_keeps_them_after_its_upgrade(
    tmp_path: Path,
) -> None:
    conn = sqlite3.connect(tmp_path / "old.sqlite", isolation_level=None)
    try:
        conn.execute("BEGIN")
        apply_migrations(conn, "stream", STREAM_MIGRATIONS[:2])
        conn.execute(
            "INSERT INTO roost_agent_streams (message_id, run_id, turn_id, hop, chars, status, created_at,"
            " updated_at) VALUES ('r.0', 'r', 't', 0, 11, 'completed', 0, 0)"
        )
        conn.executemany(
            "INSERT INTO roost_agent_stream_chunks (message_id, start, text) VALUES ('r.0', ?, ?)",
            [(6, "world"), (0, "hello ")],
        )
        conn.execute("COMMIT")
        conn.execute("BEGIN")
        assert apply_migrations(conn, "stream", STREAM_MIGRATIONS) == [3]
        conn.execute("COMMIT")
        (ddl,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'roost_agent_stream_chunks'"
        ).fetchone()
        assert "WITHOUT ROWID" not in ddl.upper()
        joined = conn.execute(
            "SELECT group_concat(text, '') FROM (SELECT text FROM roost_agent_stream_chunks"
            " WHERE message_id = 'r.0' ORDER BY start)"
        ).fetchone()[0]
        assert joined == "hello world"
        stops = conn.execute("SELECT start, stop FROM roost_agent_stream_chunks ORDER BY start").fetchall()
        assert stops == [(0, 6), (6, 11)]  # each batch ends where the next begins, the last at chars
        with pytest.raises(sqlite3.IntegrityError):  # still one batch per offset
            conn.execute("INSERT INTO roost_agent_stream_chunks VALUES ('r.0', 0, 5, 'again')")
    finally:
        conn.close()


async def test_a_reader_that_drops_mid_stream_gets_exactly_the_missed_deltas(data_dir: Path) -> None:
    async with ActorKit([Streamer], data_dir) as kit:
        a = kit.connect("streamer", "s")
        await a.call("turn", "say something long enough to stream in several batches of words please")
        await drive(kit, lambda: len(deltas(a)) >= 2, step=0.01)
        cursor = max(f["seq"] for f in a.frames if "seq" in f)
        a.disconnect()
        # more deltas are committed while nobody reads
        b_probe = kit.connect("streamer", "s")
        await drive(kit, lambda: len(deltas(b_probe)) > 0, step=0.01)
        b_probe.disconnect()
        b = kit.connect("streamer", "s", cursor=cursor)
        await drive(kit, lambda: ended(b), step=0.01)
        before = deltas(a)
        after = deltas(b)
        assert after
        assert after[0]["offset"] == len(reassemble(before))
        whole = reassemble(before + after)
        run = next(e for e in events(b) if e["event_type"] == "turn_completed")
        assert whole == run["payload"]["output"]


async def test_a_secret_split_across_two_deltas_is_redacted(data_dir: Path) -> None:
    Scripted.script = ["your key is sk-abcdefgh", "ijklmnopqrstuvwx and ", "that is all"]
    Scripted.fail_after = None
    async with ActorKit([OneByOne], data_dir) as kit:
        c = kit.connect("onebyone", "s")
        await c.call("turn", "tell me")
        await drive(kit, lambda: ended(c), step=0.01)
        ds = deltas(c)
        assert len(ds) >= 2
        joined = reassemble(ds)
        assert "sk-abcdefgh" not in joined
        assert "ijklmnop" not in joined
        assert all("sk-" not in d["text"] for d in ds)
        assert joined == "your key is [redacted] and that is all"


async def test_cancel_mid_stream_stops_the_stream_and_keeps_what_was_committed(data_dir: Path) -> None:
    async with ActorKit([Streamer], data_dir) as kit:
        c = kit.connect("streamer", "s")
        reply = await c.call("turn", "a request with many words to answer slowly one after the other")
        await drive(kit, lambda: len(deltas(c)) >= 1, step=0.01)
        (streaming,) = (await c.call("get_run", reply["run_id"]))["messages"]
        assert streaming["status"] == "streaming"
        assert streaming["chars"] == len(streaming["text"]) > 0  # counted from its batches
        await c.call("cancel", reply["turn_id"])
        shown = text_of(c)
        await drive(kit, lambda: True, step=0.01)
        for _ in range(20):
            await drive(kit, lambda: True, step=0.05)
        assert text_of(c) == shown  # nothing after the cancel
        card = await c.call("get_run", reply["run_id"])
        assert card["status"] == "cancelled"
        (message,) = card["messages"]
        assert message["status"] == "cancelled"
        assert message["text"] == shown
        assert message["chars"] == len(shown)  # counted from its batches as it left streaming


async def test_offsets_count_every_character_of_a_batch_a_nul_too(data_dir: Path) -> None:
    Scripted.script = ["\x00ab ", "c\x00d ", "ef"]  # SQLite's length() stops at a NUL
    Scripted.fail_after = None
    async with ActorKit([OneByOne], data_dir) as kit:
        c = kit.connect("onebyone", "s")
        reply = await c.call("turn", "go")
        await drive(kit, lambda: ended(c), step=0.01)
        assert [d["offset"] for d in deltas(c)] == [0, 4, 8]
        card = await c.call("get_run", reply["run_id"])
        assert card["status"] == "completed"
        (message,) = card["messages"]
        assert message["text"] == reassemble(deltas(c)) == "".join(Scripted.script)
        assert message["chars"] == 10


async def test_a_stream_broken_after_text_interrupts_the_run_and_continue_run_goes_on_after_it(
    data_dir: Path,
) -> None:
    Scripted.script = ["one ", "two ", "three ", "four ", "five ", "six"]
    Scripted.fail_after = 3
    Scripted.requests = []
    async with ActorKit([OneByOne], data_dir) as kit:
        c = kit.connect("onebyone", "s")
        reply = await c.call("turn", "count")
        await drive(kit, lambda: ended(c), step=0.01)
        interrupted = [e for e in events(c) if e["event_type"] == "model_stream_interrupted"]
        assert len(interrupted) == 1
        assert interrupted[0]["payload"]["chars"] == len("one two three ")
        card = await c.call("get_run", reply["run_id"])
        assert card["status"] == "failed"
        assert card["retryable"]
        assert card["messages"][0]["status"] == "interrupted"
        assert card["messages"][0]["text"] == "one two three "
        assert card["messages"][0]["chars"] == len("one two three ")
        await c.call("continue_run", reply["run_id"])
        await drive(kit, lambda: "turn_completed" in [e["event_type"] for e in events(c)], step=0.01)
        assert Scripted.requests[-1].partial == "one two three "
        assert reassemble(deltas(c)) == "one two three four five six"
        offsets = [d["offset"] for d in deltas(c)]
        assert offsets == sorted(set(offsets))  # no delta twice
        done = await c.call("get_run", reply["run_id"])
        assert done["output"] == "one two three four five six"


async def test_restart_policy_streams_an_interrupted_step_again_from_offset_zero(data_dir: Path) -> None:
    Scripted.script = ["alpha ", "beta ", "gamma"]
    Scripted.fail_after = 2
    Scripted.requests = []
    async with ActorKit([Restarting], data_dir) as kit:
        c = kit.connect("restarting", "s")
        reply = await c.call("turn", "go")
        await drive(kit, lambda: ended(c), step=0.01)
        await c.call("continue_run", reply["run_id"])
        await drive(kit, lambda: "turn_completed" in [e["event_type"] for e in events(c)], step=0.01)
        restarted = [e for e in events(c) if e["event_type"] == "model_stream_restarted"]
        assert len(restarted) == 1
        assert restarted[0]["payload"]["discarded"] > 0
        assert Scripted.requests[-1].partial == ""
        zero = [i for i, d in enumerate(deltas(c)) if d["offset"] == 0]
        assert len(zero) == 2  # the first attempt and the restart
        assert reassemble(deltas(c)[zero[1] :]) == "alpha beta gamma"


@pytest.mark.parametrize("pace", [0.0])
async def test_the_deterministic_model_streams_word_by_word(pace: float) -> None:
    planner = DeterministicPlanner(Streamer.catalog(), pace=pace, streams=True)
    assert not planner.inline
    chunks = [c async for c in planner.stream(ModelRequest(text="hello"))]
    texts = [c.text for c in chunks if isinstance(c, TextDelta)]
    end = chunks[-1]
    assert isinstance(end, StreamEnd)
    assert "".join(texts) == (end.step.text or end.step.ask)
    assert len(texts) > 3


# -- the HTTP model, against a scripted chat-completions endpoint --------------------------------------
class HttpStreamer(Agent):
    kind = "httpstreamer"
    config = STREAMING
    streams = True
    base_url: ClassVar[str] = ""

    def make_model(self) -> Model:
        return OpenAICompatibleModel(self.base_url, api_key="sk-test-key-000000000000", timeout=5.0)


async def test_an_http_models_stream_reaches_the_log_as_deltas(data_dir: Path) -> None:
    async with FakeLLM() as llm:
        llm.script(Reply(events=[*fake_text("Streams ", "from ", "the ", "endpoint."), finish(), DONE]))
        HttpStreamer.base_url = llm.url
        async with ActorKit([HttpStreamer], data_dir) as kit:
            c = kit.connect("httpstreamer", "s")
            reply = await c.call("turn", "hello")
            await drive(kit, lambda: ended(c), step=0.01, io_wait=0.005)
            card = await c.call("get_run", reply["run_id"])
        assert card["status"] == "completed"
        assert reassemble(deltas(c)) == "Streams from the endpoint." == card["output"]
        assert llm.requests[0].body["stream"] is True


async def test_tool_call_arguments_that_are_not_json_fail_the_run_naming_the_tool(data_dir: Path) -> None:
    async with FakeLLM() as llm:
        llm.script(
            Reply(events=[*fake_tool_call(0, "call_1", "lookup", '{"q": '), finish("tool_calls"), DONE])
        )
        HttpStreamer.base_url = llm.url
        async with ActorKit([HttpStreamer], data_dir) as kit:
            c = kit.connect("httpstreamer", "s")
            reply = await c.call("turn", "hello")
            await drive(kit, lambda: ended(c), step=0.01, io_wait=0.005)
            card = await c.call("get_run", reply["run_id"])
        assert card["status"] == "failed"
        assert not card["retryable"]
        assert "lookup" in card["error"]
        assert [e["event_type"] for e in events(c)].count("model_step_failed") == 1
        assert card["messages"][0]["status"] == "failed"  # not left "streaming"; it showed no text


async def test_continue_run_of_an_answer_waits_while_another_streams(data_dir: Path) -> None:
    Scripted.script = ["one ", "two ", "three ", "four"]
    Scripted.fail_after = 2
    cfg = STREAMING.model_copy(update={"stream_batch_count": 1})

    class ChatBreaking(ChatAgent):
        kind = "chatbreaking"
        config = cfg

        def make_model(self) -> Model:
            return Scripted()

    async with ActorKit([ChatBreaking], data_dir) as kit:
        c = kit.connect("chatbreaking", "s")
        first = await c.call("send", "go")
        await drive(kit, lambda: ended(c), step=0.01)
        second = await c.call("send", "and then")  # the interrupted answer ended: this one starts
        assert second["status"] == "streaming"
        with pytest.raises(RpcError):  # one answer at a time
            await c.call("continue_run", first["run_id"])
        await drive(kit, lambda: [e["event_type"] for e in events(c)].count("turn_completed") == 1, step=0.01)
        reply = await c.call("continue_run", first["run_id"])
        assert reply["status"] == "in_progress"
        page = await c.call("messages")
        assert next(m for m in page["messages"] if m["message_id"] == first["message_id"])["status"] == (
            "streaming"
        )


async def test_a_stream_that_fails_for_good_after_text_is_not_retryable(data_dir: Path) -> None:
    async with FakeLLM() as llm:
        broken = fake_tool_call(0, "call_1", "lookup", '{"q": ')
        llm.script(Reply(events=[*fake_text("Looking ", "it ", "up. "), *broken, finish("tool_calls"), DONE]))
        HttpStreamer.base_url = llm.url

        class EachDelta(HttpStreamer):
            kind = "eachdelta"
            config = STREAMING.model_copy(update={"stream_batch_count": 1})

        async with ActorKit([EachDelta], data_dir) as kit:
            c = kit.connect("eachdelta", "s")
            reply = await c.call("turn", "hello")
            await drive(kit, lambda: ended(c), step=0.01, io_wait=0.005)
            card = await c.call("get_run", reply["run_id"])
        assert card["status"] == "failed"
        assert not card["retryable"]
        assert card["messages"][0]["status"] == "interrupted"
        assert card["messages"][0]["text"] == "Looking it up. "
        assert "model_stream_interrupted" in [e["event_type"] for e in events(c)]


async def test_a_stream_longer_than_max_stream_chars_fails_not_retryable(data_dir: Path) -> None:
    Scripted.script = ["word "] * 50
    Scripted.fail_after = None

    class Bounded(ScriptedStreamer):
        kind = "bounded"
        config = STREAMING.model_copy(update={"max_stream_chars": 100, "stream_batch_count": 1})

    async with ActorKit([Bounded], data_dir) as kit:
        c = kit.connect("bounded", "s")
        reply = await c.call("turn", "go")
        await drive(kit, lambda: ended(c), step=0.01)
        card = await c.call("get_run", reply["run_id"])
    assert card["status"] == "failed"
    assert not card["retryable"]
    assert "100 characters" in card["error"]
    assert len(reassemble(deltas(c))) <= 100


class Odd:
    """A model whose stream yields ``chunk`` after one good delta."""

    inline = False

    def __init__(self, chunk: Any) -> None:
        self.chunk = chunk

    async def step(self, request: ModelRequest) -> ModelStep:
        return ModelStep(text="")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        yield TextDelta(text="fine ")
        yield self.chunk
        yield StreamEnd(step=ModelStep(text="fine "))


@pytest.mark.parametrize("chunk", [TextDelta(text=7), "text", {"text": "x"}, None])  # type: ignore[arg-type]
async def test_a_stream_yielding_what_is_not_a_chunk_fails_its_step_not_retryable(chunk: Any) -> None:
    """Deltas are plain dataclasses (no validation per delta): the stream's reader checks what it
    relies on, and a model that yields anything else fails the step with a ModelError that is not
    retryable, after what it streamed before."""
    sent: list[str] = []

    async def flush(text: str) -> None:
        sent.append(text)

    with pytest.raises(ModelError) as failed:
        await stream_step(Odd(chunk), ModelRequest(text="go"), flush, FakeClock(), STREAMING)
    assert not failed.value.retryable


class Restless:
    """A model whose stream yields empty deltas for ever and never waits."""

    inline = False

    async def step(self, request: ModelRequest) -> ModelStep:
        return ModelStep(text="")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        while True:
            yield TextDelta(text="")


async def test_a_model_that_never_waits_shares_the_loop() -> None:
    """Empty deltas count no characters, and a model that never awaits would keep the loop (and its
    own timeout) from running: the stream's reader yields to the loop every ``YIELD_EVERY`` chunks, so
    another task runs meanwhile and the stream ends at ``model_stream_timeout``, not retryable."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def flush(text: str) -> None:
        raise AssertionError("nothing to send")

    cfg = STREAMING.model_copy(update={"model_stream_timeout": 0.2})
    other = asyncio.ensure_future(ticker())
    try:
        async with asyncio.timeout(30):  # bounds a failure only: the stream's own timeout ends it
            with pytest.raises(ModelError) as failed:
                await stream_step(Restless(), ModelRequest(text="go"), flush, FakeClock(), cfg)
    finally:
        other.cancel()
    assert "ran past 0.2 s" in str(failed.value)
    assert not failed.value.retryable
    assert ticks > 1


def test_a_batch_never_ends_inside_one_of_the_runs_secrets() -> None:
    """Whatever a secret holds (a space, ``&``), no cut falls inside it, nor inside what may still
    become it at the end of the text; text that only looks like its start is not held."""
    secret = "Tr0ub4dor&3xyz"
    assert secret_cut("Done: Tr0ub4dor&", 16, [secret]) == 6  # its start, at the end: held
    assert secret_cut("Done: Tr0ub4dor&3xyz is set.", 16, [secret]) == 6  # across the cut: whole later
    assert secret_cut("Done: Tr0ub4dor! no", 16, [secret]) == 16  # not it after all
    assert secret_cut("correct horse battery", 21, ["correct horse battery staple"]) == 0
    assert secret_cut("say ab", 6, ["b c", "ab x"]) == 4  # the move puts another across: moved again
    assert secret_cut("anything", 8, []) == 8


class Login(BaseModel):
    password: str


LOGINS: list[str] = []


@tool(approval_mode="safe_readonly")
async def login(ctx: ToolContext, args: Login) -> str:
    """Log in with a password."""
    LOGINS.append(args.password)
    return "logged in"


class SecretStreamer(HttpStreamer):
    kind = "secretstreamer"
    config = STREAMING.model_copy(update={"stream_batch_count": 1})
    tools = (login,)


@pytest.mark.parametrize(
    ("secret", "half"),
    [("Tr0ub4dor&3xyz", 10), ("correct horse battery staple", 14)],  # split after the & and a space
)
async def test_a_secret_the_run_was_given_is_redacted_when_the_stream_splits_it(
    data_dir: Path, secret: str, half: int
) -> None:
    """The run hands its tool a password; the model's answer then streams it in two pieces, the
    second only after the first was committed: neither delta, nor the stored message, nor the file
    holds it (it was shown whole as ``[redacted]``)."""
    async with FakeLLM() as llm:
        args = orjson.dumps({"password": secret}).decode()
        llm.script(
            Reply(events=[*fake_tool_call(0, "call_1", "login", args), finish("tool_calls"), DONE]),
            Reply(
                events=[
                    *fake_text(f"Done: {secret[:half]}"),
                    Event(gate=True),
                    *fake_text(f"{secret[half:]} is set."),
                    finish(),
                    DONE,
                ]
            ),
        )
        SecretStreamer.base_url = llm.url
        async with ActorKit([SecretStreamer], data_dir) as kit:
            c = kit.connect("secretstreamer", "s")
            reply = await c.call("turn", "log in please")
            await drive(kit, lambda: llm.waiting > 0, step=0.01, io_wait=0.005)
            await drive(kit, lambda: True, step=0.05, io_wait=0.02)  # the first piece's batch goes
            llm.release()
            await drive(kit, lambda: ended(c), step=0.01, io_wait=0.005)
            card = await c.call("get_run", reply["run_id"])
    assert LOGINS[-1] == secret  # the tool had the real value
    texts = [d["text"] for d in deltas(c)]
    assert reassemble(deltas(c)) == "Done: [redacted] is set."
    assert not any(secret[:half] in t or secret[half:] in t for t in texts), texts
    assert card["messages"][-1]["text"] == "Done: [redacted] is set."
    assert secret not in file_text(data_dir, "secretstreamer", "s", skip=("roost_agent_secrets",))
