"""Unit tests of roost.client's pure parts: no server, no network, no sleeps."""

from __future__ import annotations

import asyncio
import copy
import random
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.exceptions import InvalidURI

from roost.client import (
    TERMINAL_CLOSE_CODES,
    Backoff,
    CallStream,
    CallTimeout,
    Client,
    ClientClosed,
    ClientError,
    ConnectionLost,
    ProtocolViolation,
    ResumeMode,
    ResumeState,
    RpcError,
    TerminalClose,
    Updates,
    Welcome,
    actor_url,
    connect_url,
    is_terminal,
    parse_subscribe,
)
from roost.client.__main__ import main
from roost.client.calls import Chunk, PendingCall, Registry
from roost.client.dispatch import ERRORS_KEPT, Dispatcher
from roost.client.errors import close_code_for_http_status
from roost.client.frames import JSON, Frame, decode_frame, encode_frame
from roost.client.urls import format_subscribe

# -- helpers ---------------------------------------------------------------------------------


def welcome(
    resume: str = "fresh",
    cursor: int = 0,
    *,
    state: JSON = None,
    oldest: int | None = None,
    reason: str | None = None,
) -> Welcome:
    frame: Frame = {
        "type": "welcome",
        "protocol": 1,
        "connection_id": "conn-1",
        "actor": {"kind": "counter", "name": "c1"},
        "state": state,
        "cursor": cursor,
        "resume": resume,
        "oldest": 1 if oldest is None else oldest,
    }
    if reason is not None:
        frame["reason"] = reason
    return Welcome.parse(frame)


def state(seq: int, value: JSON = None) -> Frame:
    return {"type": "state", "seq": seq, "state": {"n": seq} if value is None else value}


def event(seq: int) -> Frame:
    return {"type": "event", "seq": seq, "event": {"e": seq}}


def delivered_seqs(resume: ResumeState, frames: list[Frame]) -> list[int]:
    return [f["seq"] for f in frames if resume.on_frame(f)]


# -- Backoff ---------------------------------------------------------------------------------


def test_backoff_ceiling_doubles_until_the_cap() -> None:
    backoff = Backoff(base=0.05, cap=5.0)
    assert [backoff.ceiling(a) for a in range(9)] == [
        0.05,
        0.1,
        0.2,
        0.4,
        0.8,
        1.6,
        3.2,
        5.0,
        5.0,
    ]


@pytest.mark.parametrize("attempt", [0, 1, 2, 5, 7, 20, 1000, 10**6])
def test_backoff_delay_is_full_jitter_within_bounds(attempt: int) -> None:
    backoff = Backoff()
    rng = random.Random(attempt)
    delays = [backoff.delay(attempt, rng) for _ in range(2000)]
    ceiling = min(5.0, 0.05 * 2 ** min(attempt, 64))
    assert all(0.0 <= d <= ceiling for d in delays)
    # Full jitter: spread over the whole interval, not clustered near the ceiling.
    assert min(delays) < 0.05 * ceiling
    assert max(delays) > 0.95 * ceiling


def test_backoff_is_deterministic_with_a_seeded_rng() -> None:
    backoff = Backoff(base=0.1, cap=2.0)
    first = [backoff.delay(a, rng) for rng in [random.Random(42)] for a in range(10)]
    second = [backoff.delay(a, rng) for rng in [random.Random(42)] for a in range(10)]
    assert first == second
    # Exactly one uniform draw per delay.
    reference = random.Random(42)
    assert first == [reference.uniform(0, min(2.0, 0.1 * 2**a)) for a in range(10)]


def test_backoff_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="base"):
        Backoff(base=-1)
    with pytest.raises(ValueError, match="cap"):
        Backoff(cap=float("nan"))
    with pytest.raises(ValueError, match="attempt"):
        Backoff().delay(-1, random.Random(0))


# -- URLs ------------------------------------------------------------------------------------

HOSTILE_NAMES = [
    "../../etc/passwd",
    "a/b",
    "..",
    ".",
    "café ☕ 名前",
    "a?b=c#d",
    "100%",
    " spaced name ",
    "a\\b",
    "x" * 256,
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_actor_url_encodes_the_name_as_one_segment(name: str) -> None:
    url = actor_url("ws://127.0.0.1:8000", "counter", name)
    parts = urlsplit(url)
    assert parts.scheme == "ws"
    assert parts.netloc == "127.0.0.1:8000"
    assert parts.query == ""
    assert parts.fragment == ""
    segments = parts.path.split("/")
    assert segments[:3] == ["", "agents", "counter"]
    assert len(segments) == 4
    assert unquote(segments[3], errors="strict") == name


def test_actor_url_exact_encodings() -> None:
    base = "ws://h:1"
    assert actor_url(base, "counter", "../../etc/passwd") == "ws://h:1/agents/counter/..%2F..%2Fetc%2Fpasswd"
    assert actor_url(base, "counter", "a/b") == "ws://h:1/agents/counter/a%2Fb"
    assert actor_url(base, "counter", "é") == "ws://h:1/agents/counter/%C3%A9"
    assert actor_url(base, "counter", "☕") == "ws://h:1/agents/counter/%E2%98%95"
    assert actor_url(base + "/", "chat_room", "x") == "ws://h:1/agents/chat_room/x"
    assert actor_url("wss://h/prefix/", "k", "x") == "wss://h/prefix/agents/k/x"


def test_actor_url_refuses_bad_bases_and_unencodable_names() -> None:
    with pytest.raises(ValueError, match="ws://"):
        actor_url("http://h", "k", "x")
    with pytest.raises(ValueError, match="query"):
        actor_url("ws://h?x=1", "k", "x")
    with pytest.raises(UnicodeEncodeError):
        actor_url("ws://h", "k", "\ud800")


def test_connect_url_sets_cursor_and_subscribe() -> None:
    url = "ws://h/agents/k/a%2Fb"
    assert connect_url(url, cursor=None, subscribe=None) == url
    assert connect_url(url, cursor=0, subscribe=None) == url + "?cursor=0"
    kinds = frozenset({"messages", "state"})
    assert connect_url(url, cursor=7, subscribe=kinds) == url + "?cursor=7&subscribe=state,messages"
    assert connect_url(url, cursor=None, subscribe=frozenset()) == url + "?subscribe=none"
    # Replaces the client's own parameters, keeps the others.
    assert (
        connect_url(url + "?v=1&cursor=3&subscribe=none", cursor=9, subscribe=None) == url + "?v=1&cursor=9"
    )
    with pytest.raises(ValueError, match="cursor"):
        connect_url(url, cursor=-1, subscribe=None)


@pytest.mark.parametrize(
    ("value", "kinds"),
    [
        ("state,events,messages", {"state", "events", "messages"}),
        ("events", {"events"}),
        ("messages, state", {"messages", "state"}),
        ("none", set()),
    ],
)
def test_parse_subscribe(value: str, kinds: set[str]) -> None:
    assert parse_subscribe(value) == kinds
    assert parse_subscribe(format_subscribe(frozenset(kinds))) == kinds


@pytest.mark.parametrize("value", ["", "state,", "event", "none,state", "all"])
def test_parse_subscribe_refuses(value: str) -> None:
    with pytest.raises(ValueError, match="subscribe"):
        parse_subscribe(value)


# -- errors and frames -------------------------------------------------------------------------


@pytest.mark.parametrize("code", [1000, 1009, 4400, 4401, 4403, 4404, 4499])
def test_terminal_close_codes(code: int) -> None:
    assert is_terminal(code)
    assert code in TERMINAL_CLOSE_CODES


@pytest.mark.parametrize("code", [None, 1001, 1002, 1006, 1011, 1013, 4000, 4399, 4500])
def test_transient_close_codes(code: int | None) -> None:
    assert not is_terminal(code)


def test_http_refusals_map_to_terminal_codes() -> None:
    assert close_code_for_http_status(404) == 4404
    assert close_code_for_http_status(403) == 4403
    assert close_code_for_http_status(429) is None
    assert close_code_for_http_status(503) is None


def test_errors_copy_with_their_fields() -> None:
    terminal = copy.copy(TerminalClose(4404, "unknown kind"))
    assert (terminal.code, terminal.reason) == (4404, "unknown kind")
    rpc = copy.copy(RpcError("handler_error", "ValueError: x"))
    assert (rpc.code, rpc.message, str(rpc)) == (
        "handler_error",
        "ValueError: x",
        "handler_error: ValueError: x",
    )
    assert isinstance(CallTimeout("t"), TimeoutError)


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", '"welcome"', b"\xff"])
def test_decode_frame_refuses_non_objects(raw: str | bytes) -> None:
    with pytest.raises(ProtocolViolation):
        decode_frame(raw)


def test_encode_frame_is_compact_text() -> None:
    assert encode_frame({"type": "rpc", "args": [1, "é"]}) == '{"type":"rpc","args":[1,"é"]}'


def test_welcome_parse() -> None:
    w = welcome("snapshot", 12, state={"n": 3}, oldest=5, reason="cursor_expired")
    assert (w.resume, w.cursor, w.oldest, w.reason, w.state) == (
        ResumeMode.SNAPSHOT,
        12,
        5,
        "cursor_expired",
        {"n": 3},
    )
    assert (w.kind, w.name, w.connection_id) == ("counter", "c1", "conn-1")


@pytest.mark.parametrize(
    "change",
    [
        {"type": "state"},
        {"protocol": 2},
        {"cursor": -1},
        {"cursor": True},
        {"cursor": "3"},
        {"resume": "rewind"},
        {"resume": ["replay"]},
        {"actor": {"kind": "counter"}},
        {"connection_id": 7},
        {"reason": 3},
        {"oldest": None},
    ],
)
def test_welcome_parse_refuses(change: Frame) -> None:
    frame = {**welcome().raw, **change}
    with pytest.raises(ProtocolViolation):
        Welcome.parse(frame)


def test_welcome_parse_requires_state() -> None:
    frame = dict(welcome().raw)
    del frame["state"]
    with pytest.raises(ProtocolViolation, match="state"):
        Welcome.parse(frame)


# -- ResumeState ---------------------------------------------------------------------------------


def test_fresh_starts_from_the_welcome() -> None:
    resume = ResumeState()
    assert resume.query_cursor() is None
    resume.on_welcome(welcome("fresh", 5, state={"n": 5}))
    assert (resume.last_seq, resume.state, resume.query_cursor()) == (5, {"n": 5}, 5)
    assert delivered_seqs(resume, [state(4), state(5), event(6), state(7)]) == [6, 7]
    assert resume.state == {"n": 7}
    assert resume.query_cursor() == 7


def test_replay_delivers_exactly_the_frames_after_the_cursor() -> None:
    resume = ResumeState(cursor=3)
    assert resume.query_cursor() == 3
    resume.on_welcome(welcome("replay", 6, state={"n": 6}))
    assert resume.replaying
    assert resume.last_seq == 3
    assert resume.state == {"n": 6}
    assert delivered_seqs(resume, [state(4), event(5), state(6), state(7)]) == [4, 5, 6, 7]
    assert not resume.replaying
    assert (resume.last_seq, resume.state, resume.state_seq) == (7, {"n": 7}, 7)


def test_replayed_state_frames_do_not_move_state_back_in_time() -> None:
    resume = ResumeState(cursor=1)
    resume.on_welcome(welcome("replay", 3, state={"n": 3}))
    assert resume.on_frame(state(2))
    assert resume.state == {"n": 3}
    assert resume.state_seq == 3
    assert resume.last_seq == 2


def test_duplicates_and_old_frames_are_dropped() -> None:
    resume = ResumeState()
    resume.on_welcome(welcome("fresh", 0))
    frames = [state(1), state(1), event(2), state(1), event(2), state(3), event(3)]
    assert delivered_seqs(resume, frames) == [1, 2, 3]


@pytest.mark.parametrize(("cursor", "reason"), [(2, "cursor_expired"), (50, "cursor_ahead")])
def test_snapshot_continues_from_the_welcome(cursor: int, reason: str) -> None:
    resume = ResumeState(cursor=cursor)
    resume.on_welcome(welcome("snapshot", 20, state={"n": 20}, oldest=10, reason=reason))
    assert (resume.last_seq, resume.state, resume.query_cursor()) == (20, {"n": 20}, 20)
    assert delivered_seqs(resume, [state(20), state(21)]) == [21]


def test_messages_are_always_delivered_after_the_welcome() -> None:
    resume = ResumeState()
    message: Frame = {"type": "message", "data": 1}
    with pytest.raises(ProtocolViolation, match="before the welcome"):
        resume.on_frame(message)
    resume.on_welcome(welcome())
    assert resume.on_frame(message)
    assert resume.on_frame(message)
    assert resume.last_seq == 0


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "state", "state": 1},
        {"type": "state", "seq": 0, "state": 1},
        {"type": "state", "seq": "1", "state": 1},
        {"type": "event", "seq": True, "event": 1},
        {"type": "state", "seq": 1},
        {"type": "event", "seq": 1},
    ],
)
def test_malformed_updates_are_violations(frame: Frame) -> None:
    resume = ResumeState()
    resume.on_welcome(welcome())
    with pytest.raises(ProtocolViolation):
        resume.on_frame(frame)


def test_on_frame_refuses_other_types() -> None:
    resume = ResumeState()
    resume.on_welcome(welcome())
    with pytest.raises(ValueError, match="update"):
        resume.on_frame({"type": "rpc_result", "id": "1"})


@pytest.mark.parametrize(
    ("cursor", "w"),
    [
        (None, {"resume": "replay", "cursor": 4}),  # a replay without a cursor
        (9, {"resume": "replay", "cursor": 4}),  # replay from beyond the actor's cursor
        (2, {"resume": "replay", "cursor": 40, "oldest": 10}),  # replay older than retention
    ],
)
def test_impossible_replays_are_violations(cursor: int | None, w: dict[str, int | str]) -> None:
    resume = ResumeState(cursor)
    with pytest.raises(ProtocolViolation, match="replay"):
        resume.on_welcome(welcome(str(w["resume"]), int(w["cursor"]), oldest=int(w.get("oldest", 1))))


def test_replay_at_the_oldest_boundary_is_allowed() -> None:
    resume = ResumeState(cursor=9)
    resume.on_welcome(welcome("replay", 40, oldest=10))
    assert delivered_seqs(resume, [state(s) for s in range(10, 41)]) == list(range(10, 41))


@settings(database=None, max_examples=300, deadline=None)
@given(
    connections=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=6),  # frames logged while disconnected
            st.integers(min_value=0, max_value=6),  # frames logged while connected
            st.integers(min_value=0, max_value=15),  # frames received before the drop
        ),
        min_size=1,
        max_size=8,
    ),
    duplicate=st.booleans(),
    retention=st.integers(min_value=1, max_value=60),
)
def test_reconnects_deliver_every_seq_once_and_in_order(
    connections: list[tuple[int, int, int]], duplicate: bool, retention: int
) -> None:
    """A model server following protocol.md, with connections dropping at random points.

    Delivered seqs always strictly increase; unless a cursor expired (``snapshot``), they are
    exactly the seqs after the first welcome's cursor, without a gap.
    """
    log: list[Frame] = []

    def append(count: int) -> None:
        for _ in range(count):
            seq = len(log) + 1
            log.append(state(seq) if seq % 2 else event(seq))

    resume = ResumeState()
    delivered: list[int] = []
    first_cursor: int | None = None
    snapshots = 0
    for offline, online, received in connections:
        append(offline)
        total = len(log)
        oldest = max(1, total - retention + 1)
        cursor = resume.query_cursor()
        if cursor is None:
            resume.on_welcome(welcome("fresh", total, oldest=oldest))
            start = total
        elif cursor < oldest - 1:
            resume.on_welcome(welcome("snapshot", total, oldest=oldest, reason="cursor_expired"))
            snapshots += 1
            start = total
        else:
            resume.on_welcome(welcome("replay", total, oldest=oldest))
            start = cursor
        if first_cursor is None:
            first_cursor = total
        append(online)
        sent = [f for f in log if f["seq"] > start][:received]  # replayed, then live frames
        if duplicate:
            sent += sent[:1]
        delivered += delivered_seqs(resume, sent)
    assert delivered == sorted(set(delivered))
    assert first_cursor is not None
    if snapshots == 0:
        assert delivered == list(range(first_cursor + 1, (resume.last_seq or 0) + 1))


def test_a_full_session_with_a_drop_loses_nothing() -> None:
    resume = ResumeState()
    resume.on_welcome(welcome("fresh", 2, state={"n": 2}))
    seen = delivered_seqs(resume, [state(3), event(4)])
    # Dropped; the actor moved on to 7 meanwhile; reconnect with cursor=4.
    assert resume.query_cursor() == 4
    resume.on_welcome(welcome("replay", 7, state={"n": 7}))
    seen += delivered_seqs(resume, [state(5), event(6), state(7), state(8)])
    assert seen == [3, 4, 5, 6, 7, 8]
    assert resume.state == {"n": 8}


# -- Updates, pending calls, Dispatcher ------------------------------------------------------------


async def test_updates_drop_the_oldest_when_full() -> None:
    updates = Updates(maxsize=3)
    for seq in range(1, 6):
        updates.put(state(seq))
    assert updates.dropped == 2
    assert len(updates) == 3
    updates.end()
    updates.put(state(6))  # ignored once ended
    assert [f["seq"] async for f in updates] == [3, 4, 5]


async def test_updates_close_unsubscribes() -> None:
    closed: list[Updates] = []
    updates = Updates(maxsize=10, on_close=closed.append)
    updates.put(state(1))
    updates.close()
    updates.close()
    assert closed == [updates]
    assert updates.get_nowait() is None
    assert [f async for f in updates] == []


def dispatcher_with_log() -> tuple[Dispatcher, list[tuple[str, JSON, int]]]:
    log: list[tuple[str, JSON, int]] = []

    def on_state(value: JSON, seq: int) -> None:
        log.append(("state", value, seq))

    def on_event(value: JSON, seq: int) -> None:
        if seq == 4:
            raise RuntimeError("a broken callback must not break the client")
        log.append(("event", value, seq))

    resume = ResumeState()
    resume.on_welcome(welcome("fresh", 0))
    return Dispatcher(resume, on_state=on_state, on_event=on_event, queue_size=100), log


async def test_dispatcher_delivers_deduplicated_updates_in_order() -> None:
    dispatcher, log = dispatcher_with_log()
    first, second = dispatcher.subscribe(), dispatcher.subscribe()
    registry: Registry = {}
    frames = [state(1), event(2), state(1), {"type": "message", "data": "hi"}, event(4), state(3)]
    for frame in frames:
        dispatcher.dispatch(registry, encode_frame(frame))
    dispatcher.end()
    expected = [1, 2, None, 4]
    assert [f.get("seq") async for f in first] == expected
    assert [f.get("seq") async for f in second] == expected
    assert log == [("state", {"n": 1}, 1), ("event", {"e": 2}, 2)]
    assert dispatcher.subscribe().ended


async def test_dispatcher_routes_replies_to_pending_calls() -> None:
    dispatcher, _ = dispatcher_with_log()
    registry: Registry = {}
    call = PendingCall("1", registry, want_chunks=False)
    stream = PendingCall("2", registry, want_chunks=True)
    replies: list[Frame] = [
        {"type": "rpc_chunk", "id": "1", "chunk": "ignored"},
        {"type": "rpc_chunk", "id": "2", "chunk": "a"},
        {"type": "rpc_result", "id": "1", "ok": True, "result": 42},
        {"type": "rpc_result", "id": "1", "ok": True, "result": "late duplicate, ignored"},
        {"type": "rpc_result", "id": "unknown", "ok": True, "result": 0},
        {"type": "rpc_result", "id": "2", "ok": False, "error": {"code": "boom", "message": "m"}},
    ]
    for frame in replies:
        dispatcher.dispatch(registry, encode_frame(frame))
    assert registry == {}
    assert await call.result() == 42
    chunk = await stream.next()
    assert isinstance(chunk, Chunk)
    assert chunk.value == "a"
    with pytest.raises(RpcError) as info:
        await stream.result()
    assert (info.value.code, info.value.message) == ("boom", "m")


async def test_dispatcher_keeps_the_last_error_frames() -> None:
    seen: list[Frame] = []
    resume = ResumeState()
    resume.on_welcome(welcome())
    dispatcher = Dispatcher(resume, on_error=seen.append)
    updates = dispatcher.subscribe()
    for i in range(ERRORS_KEPT + 5):
        dispatcher.dispatch({}, encode_frame({"type": "error", "code": "bad_frame", "message": str(i)}))
    dispatcher.dispatch({}, encode_frame({"type": "from_the_future"}))
    assert len(dispatcher.errors) == ERRORS_KEPT
    assert dispatcher.errors[0]["message"] == "5"
    assert len(seen) == ERRORS_KEPT + 5
    assert len(updates) == 0  # error frames are not updates
    with pytest.raises(ProtocolViolation, match="welcome"):
        dispatcher.dispatch({}, encode_frame(welcome().raw))


async def test_call_stream_yields_chunks_then_keeps_the_result() -> None:
    registry: Registry = {}

    async def opener() -> PendingCall:
        pending = PendingCall("7", registry, want_chunks=True)
        for chunk in ("a", "b"):
            pending.chunk(chunk)
        pending.resolve("done")
        return pending

    stream = CallStream(opener, timeout=5)
    assert [chunk async for chunk in stream] == ["a", "b"]
    assert (stream.done, stream.result) == (True, "done")
    assert registry == {}


async def test_call_stream_times_out_and_unregisters() -> None:
    registry: Registry = {}

    async def opener() -> PendingCall:
        return PendingCall("8", registry, want_chunks=True)

    with pytest.raises(CallTimeout):
        await anext(CallStream(opener, timeout=0))
    assert registry == {}


async def test_call_stream_raises_a_lost_connection() -> None:
    async def opener() -> PendingCall:
        pending = PendingCall("9", {}, want_chunks=True)
        pending.fail(ConnectionLost("gone"))
        return pending

    with pytest.raises(ConnectionLost, match="gone"):
        await anext(CallStream(opener, timeout=5))


# -- Client without a server ----------------------------------------------------------------------


async def test_client_refuses_calls_until_started_and_after_close() -> None:
    client = Client("ws://127.0.0.1:9/agents/counter/x", rng=random.Random(0))
    assert (client.connected, client.cursor, client.state, client.reconnects) == (False, None, None, 0)
    with pytest.raises(ClientError, match="not started"):
        await client.call("increment")
    await client.close()
    await client.close()  # idempotent
    assert isinstance(client.closed_reason, ClientClosed)
    with pytest.raises(ClientClosed):
        await client.call("increment")
    with pytest.raises(ClientClosed):
        await client.wait_connected(1)
    assert client.updates().ended
    assert not client.drop()
    with pytest.raises(RuntimeError):
        client.start()


def test_client_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="subscribe"):
        Client("ws://h/agents/k/x", subscribe="everything")
    with pytest.raises(ValueError, match="chaos"):
        Client("ws://h/agents/k/x", chaos=-1)
    with pytest.raises(ValueError, match="cursor"):
        Client("ws://h/agents/k/x", cursor=-1)
    with pytest.raises(InvalidURI):
        Client("http://h/agents/k/x")
    assert Client("ws://h/agents/k/x", subscribe="events,state").subscription == "state,events"


def test_terminal_close_is_a_client_error_not_a_connection_lost() -> None:
    assert issubclass(TerminalClose, ClientError)
    assert not issubclass(TerminalClose, ConnectionLost)


# -- command line ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--kind", "counter"],
        ["ws://h/agents/k/x", "--kind", "k", "--name", "x"],
        ["ws://h/agents/k/x", "--call", "m", "[1]", "extra"],
        ["ws://h/agents/k/x", "--call", "m", "{not json"],
        ["ws://h/agents/k/x", "--call", "m", "3"],
        ["ws://h/agents/k/x", "--subscribe", "all"],
        ["http://h/agents/k/x"],
        ["--kind", "k", "--name", "x", "--base", "http://h"],
    ],
)
def test_cli_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_a_client_can_be_built_outside_an_event_loop() -> None:
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    assert not Client("ws://h/agents/k/x").connected
