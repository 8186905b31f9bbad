"""How ``roost.client`` connects, without a server: backoff with full jitter, actor URLs (a name is one
encoded segment), which close codes are terminal, and the frames it parses (the welcome, decode and
encode).
"""

from __future__ import annotations

import copy
import random
from urllib.parse import unquote, urlsplit

import pytest

from roost.client import (
    TERMINAL_CLOSE_CODES,
    Backoff,
    CallTimeout,
    ProtocolViolation,
    ResumeMode,
    RpcError,
    TerminalClose,
    Welcome,
    actor_url,
    connect_url,
    is_terminal,
    parse_subscribe,
)
from roost.client.errors import close_code_for_http_status
from roost.client.frames import Frame, decode_frame, encode_frame
from roost.client.urls import format_subscribe
from tests.client_frames import welcome

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
