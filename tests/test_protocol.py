"""The sans-I/O wire protocol (``transport/protocol.py``), close codes and subscriptions, without a loop.

Every expectation here comes from ``docs/protocol.md`` or from a guarantee in a module docstring.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roost.actors.connection import Subscriptions
from roost.protocol.codes import CloseCode, is_terminal
from roost.transport.protocol import (
    ClientFrame,
    MessageFrame,
    PingFrame,
    ProtocolError,
    RpcFrame,
    SubscribeFrame,
    parse_actor_path,
    parse_client_frame,
    parse_connect_query,
)

FRAME_MODELS = (RpcFrame, MessageFrame, SubscribeFrame, PingFrame)
KNOWN_TYPES = ("rpc", "message", "subscribe", "ping")


def outcome(data: str | bytes) -> ClientFrame | ProtocolError:
    """The parsed frame, or the ``ProtocolError`` it raised (any other exception propagates)."""
    try:
        return parse_client_frame(data)
    except ProtocolError as exc:
        return exc


def protocol_error(data: str | bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_client_frame(data)
    return info.value


# -- parse_client_frame: valid frames ------------------------------------------------------------------


def test_rpc_frame_without_args_or_kwargs_defaults_to_empty() -> None:
    frame = parse_client_frame('{"type":"rpc","id":"1","method":"increment"}')
    assert isinstance(frame, RpcFrame)
    assert (frame.id, frame.method, frame.args, frame.kwargs) == ("1", "increment", [], {})


def test_rpc_frame_carries_args_and_kwargs_exactly() -> None:
    text = (
        '{"type":"rpc","id":"c-7","method":"add",'
        '"args":[1,"two",null,[3]],"kwargs":{"by":2.5,"x":{"y":true}}}'
    )
    frame = parse_client_frame(text)
    assert isinstance(frame, RpcFrame)
    assert frame.id == "c-7"
    assert frame.method == "add"
    assert frame.args == [1, "two", None, [3]]
    assert frame.kwargs == {"by": 2.5, "x": {"y": True}}


def test_rpc_frame_id_of_exactly_128_chars_is_accepted() -> None:
    frame = parse_client_frame(json.dumps({"type": "rpc", "id": "é" * 128, "method": "m"}))
    assert isinstance(frame, RpcFrame)
    assert frame.id == "é" * 128


def test_message_frame_carries_any_json_data() -> None:
    frame = parse_client_frame('{"type":"message","data":{"text":"hi","n":[1,2]}}')
    assert isinstance(frame, MessageFrame)
    assert frame.data == {"text": "hi", "n": [1, 2]}


def test_message_frame_without_data_has_data_none() -> None:
    frame = parse_client_frame('{"type":"message"}')
    assert isinstance(frame, MessageFrame)
    assert frame.data is None


def test_subscribe_frame_omitted_fields_stay_none_so_they_keep_their_value() -> None:
    frame = parse_client_frame('{"type":"subscribe","state":false,"messages":true}')
    assert isinstance(frame, SubscribeFrame)
    assert (frame.state, frame.events, frame.messages) == (False, None, True)


@pytest.mark.parametrize("ping_id", [None, 0, -7, 2**64 - 1, 1.5, "", "abc", "é" * 128])
def test_a_ping_id_is_absent_a_number_or_a_string_of_at_most_128_characters(ping_id: Any) -> None:
    frame = parse_client_frame(json.dumps({"type": "ping", "id": ping_id}))
    assert isinstance(frame, PingFrame)
    assert frame.id == ping_id
    assert type(frame.id) is type(ping_id)


def test_a_ping_without_an_id_has_id_none() -> None:
    frame = parse_client_frame('{"type":"ping"}')
    assert isinstance(frame, PingFrame)
    assert frame.id is None


@pytest.mark.parametrize(
    "ping_id",  # as JSON text
    [
        '[1,{"a":2}]',
        '{"k":"v"}',
        "[]",
        "true",
        "false",
        pytest.param('"' + "x" * 129 + '"', id="129 characters"),
        pytest.param("[" * 1000 + "]" * 1000, id="nested 1000 deep"),
    ],
)
def test_a_ping_id_that_is_not_a_short_scalar_is_bad_frame(ping_id: str) -> None:
    """The id rule (docs/protocol.md, *Client frames*): the pong echoes the id, so it must encode."""
    error = protocol_error('{"type":"ping","id":' + ping_id + "}")
    assert error.code == "bad_frame"
    assert error.message.startswith("ping: id:")


def test_unknown_fields_in_client_frames_are_ignored() -> None:
    frame = parse_client_frame('{"type":"ping","id":3,"future_field":{"x":1},"v":2}')
    assert frame == PingFrame(type="ping", id=3)
    rpc = parse_client_frame('{"type":"rpc","id":"1","method":"m","trace":"abc"}')
    assert isinstance(rpc, RpcFrame)
    assert rpc.method == "m"


def test_bytes_input_is_decoded_as_utf8() -> None:
    frame = parse_client_frame('{"type":"message","data":"日本語 🦜"}'.encode())
    assert isinstance(frame, MessageFrame)
    assert frame.data == "日本語 🦜"


# -- parse_client_frame: errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        "",
        "not json",
        "{",
        '{"type":"ping"',
        "NaN",
        b"\xff\xfe",
        b'{"type":"message","data":"\xff"}',
        "\ud800",
    ],
)
def test_input_that_is_not_json_is_bad_frame(data: str | bytes) -> None:
    assert protocol_error(data).code == "bad_frame"


@pytest.mark.parametrize("data", ["[]", '[{"type":"ping"}]', "42", "1.5", '"ping"', "null", "true"])
def test_json_that_is_not_an_object_is_bad_frame(data: str) -> None:
    assert protocol_error(data).code == "bad_frame"


@pytest.mark.parametrize(
    "data",
    [
        "{}",
        '{"id":"1","method":"m"}',
        '{"type":"RPC","id":"1","method":"m"}',
        '{"type":"call"}',
        '{"type":""}',
        '{"type":null}',
        '{"type":5}',
        '{"type":["rpc"]}',
        '{"type":{"rpc":1}}',
    ],
)
def test_missing_or_unknown_type_is_unknown_type(data: str) -> None:
    assert protocol_error(data).code == "unknown_type"


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "rpc", "method": "m"},
        {"type": "rpc", "id": 1, "method": "m"},
        {"type": "rpc", "id": None, "method": "m"},
        {"type": "rpc", "id": ["1"], "method": "m"},
        {"type": "rpc", "id": "", "method": "m"},
        {"type": "rpc", "id": "x" * 129, "method": "m"},
        {"type": "rpc", "id": "1"},
        {"type": "rpc", "id": "1", "method": 5},
        {"type": "rpc", "id": "1", "method": ""},
        {"type": "rpc", "id": "1", "method": "m", "args": "a"},
        {"type": "rpc", "id": "1", "method": "m", "args": {"a": 1}},
        {"type": "rpc", "id": "1", "method": "m", "args": None},
        {"type": "rpc", "id": "1", "method": "m", "kwargs": [1]},
        {"type": "rpc", "id": "1", "method": "m", "kwargs": "k"},
        {"type": "rpc", "id": "1", "method": "m", "kwargs": 3},
        {"type": "subscribe", "state": "yes"},
        {"type": "subscribe", "events": 1},
    ],
)
def test_fields_of_the_wrong_type_are_bad_frame(frame: dict[str, Any]) -> None:
    error = protocol_error(json.dumps(frame))
    assert error.code == "bad_frame"
    assert error.message


# -- parse_client_frame: never anything but ProtocolError ----------------------------------------------


def json_like(*, strict: bool) -> st.SearchStrategy[Any]:
    """JSON-ish values; ``strict`` ones always encode to valid JSON (no NaN/inf, no lone surrogates)."""
    chars = st.characters(codec="utf-8") if strict else st.characters(exclude_categories=())
    floats = st.floats(allow_nan=False, allow_infinity=False) if strict else st.floats()
    return st.recursive(
        st.none() | st.booleans() | st.integers() | floats | st.text(chars, max_size=20),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(chars, max_size=8), children, max_size=4)
        ),
        max_leaves=12,
    )


def frame_like(values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects that look like client frames: known field names, right and wrong value types."""
    return st.dictionaries(
        st.sampled_from(["type", "id", "method", "args", "kwargs", "data", "state", "events", "messages"]),
        values,
        max_size=6,
    ) | st.fixed_dictionaries(
        {"type": st.sampled_from(KNOWN_TYPES) | values},
        optional={
            "id": st.text(max_size=130) | values,
            "method": st.text(max_size=5) | values,
            "args": st.lists(values, max_size=3) | values,
            "kwargs": st.dictionaries(st.text(max_size=5), values, max_size=3) | values,
            "data": values,
            "state": st.booleans() | values,
        },
    )


json_values = json_like(strict=False)
frame_like_objects = frame_like(json_values)
strict_frame_like_objects = frame_like(json_like(strict=True))


def _encode(value: Any, ascii_only: bool) -> str:
    # json (not orjson) so that huge integers, NaN and lone surrogates reach the parser too
    return json.dumps(value, ensure_ascii=ascii_only)


@settings(max_examples=300, deadline=None, database=None)
@given(
    data=st.text(st.characters(exclude_categories=()))
    | st.binary()
    | st.builds(_encode, json_values, st.booleans())
    | st.builds(_encode, frame_like_objects, st.booleans())
    | st.builds(lambda v: _encode(v, True).encode(), frame_like_objects),
)
def test_parse_client_frame_only_ever_raises_protocol_error(data: str | bytes) -> None:
    result = outcome(data)
    if isinstance(result, ProtocolError):
        assert result.code in {"bad_frame", "unknown_type"}
    else:
        assert isinstance(result, FRAME_MODELS)


@settings(max_examples=300, deadline=None, database=None)
@given(obj=strict_frame_like_objects)
def test_unknown_type_is_reported_exactly_when_type_is_not_a_known_string(obj: dict[str, Any]) -> None:
    known = isinstance(obj.get("type"), str) and obj["type"] in KNOWN_TYPES
    result = outcome(json.dumps(obj))
    if isinstance(result, ProtocolError):
        assert result.code == ("bad_frame" if known else "unknown_type")
    else:
        assert known
        assert result.type == obj["type"]


# -- parse_actor_path ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        (b"/agents/counter/a%2Fb", "a/b"),
        (b"/agents/counter/a%2fb", "a/b"),
        (b"/agents/counter/..", ".."),
        (b"/agents/counter/.", "."),
        (b"/agents/counter/%2E%2E", ".."),
        (b"/agents/counter/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "../../etc/passwd"),
        (b"/agents/counter/%00", "\x00"),
        (b"/agents/counter/a%00b", "a\x00b"),
        (b"/agents/counter/a+b", "a+b"),
        (b"/agents/counter/a%20b", "a b"),
        (b"/agents/counter/%252F", "%2F"),
        (b"/agents/counter/" + quote("日本語").encode(), "日本語"),
        (b"/agents/counter/" + quote("🦜").encode(), "🦜"),
        (b"/agents/counter/" + quote("e\u0301").encode(), "e\u0301"),
    ],
)
def test_actor_path_names_decode_exactly_as_encoded(raw: bytes, name: str) -> None:
    assert parse_actor_path(raw) == ("counter", name)


@settings(max_examples=200, deadline=None, database=None)
@given(name=st.text(min_size=1, max_size=256))
def test_any_percent_encoded_name_round_trips(name: str) -> None:
    raw = b"/agents/counter/" + quote(name, safe="").encode()
    assert parse_actor_path(raw) == ("counter", name)
    assert parse_actor_path(raw + b"/rpc/get", trailing=2) == ("counter", name)


@pytest.mark.parametrize(
    "raw",
    [
        b"/agents/counter/%FF",
        b"/agents/counter/a%FFb",
        b"/agents/counter/%C0%AF",  # overlong "/"
        b"/agents/counter/%ED%A0%80",  # an encoded surrogate
        b"/agents/counter/\xff",
        b"/agents/%FF/x",
    ],
)
def test_actor_path_that_is_not_utf8_is_bad_address(raw: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_actor_path(raw)
    assert info.value.code == "bad_address"


def test_actor_path_too_short_is_bad_address() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_actor_path(b"/x")
    assert info.value.code == "bad_address"


def test_actor_path_skips_trailing_rpc_segments() -> None:
    assert parse_actor_path(b"/agents/counter/x/rpc/get", trailing=2) == ("counter", "x")
    assert parse_actor_path(b"/agents/counter/a%2Fb/rpc/get", trailing=2) == ("counter", "a/b")


def test_actor_path_ignores_the_query_string() -> None:
    assert parse_actor_path(b"/agents/counter/x?cursor=5&subscribe=none") == ("counter", "x")
    assert parse_actor_path(b"/agents/counter/x/rpc/get?a=/b/c", trailing=2) == ("counter", "x")
    assert parse_actor_path(b"/agents/counter/a%3Fb?q=1") == ("counter", "a?b")


def test_actor_path_works_under_a_mount_prefix() -> None:
    assert parse_actor_path(b"/prefix/agents/counter/x") == ("counter", "x")
    assert parse_actor_path(b"/a/b/prefix/agents/chat/room%201/rpc/send", trailing=2) == ("chat", "room 1")


# -- parse_connect_query -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "cursor"),
    [
        (b"", None),
        (b"subscribe=state", None),
        (b"cursor=0", 0),
        (b"cursor=5", 5),
        ("cursor=5", 5),
        (b"cursor=007", 7),
        (b"cursor=9223372036854775807", 2**63 - 1),
        (b"cursor=1&cursor=2", 2),
    ],
)
def test_connect_query_cursor_is_a_non_negative_integer_or_none(
    query: bytes | str, cursor: int | None
) -> None:
    assert parse_connect_query(query).cursor == cursor


@pytest.mark.parametrize(
    "query",
    [
        b"cursor=-1",
        b"cursor=abc",
        b"cursor=",
        b"cursor=1.5",
        b"cursor=1e3",
        b"cursor=+5",
        b"cursor=%205",
        b"cursor=0x10",
        b"cursor=" + b"9" * 30,
        b"cursor=" + str(10**100).encode(),
    ],
)
def test_connect_query_bad_cursor_is_bad_address(query: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_connect_query(query)
    assert info.value.code == "bad_address"


@pytest.mark.parametrize(
    "query",
    [
        b"cursor=%C2%B2",  # "²": str.isdigit() is True, int() refuses it
        b"cursor=\xb2",  # the same character as a raw latin-1 byte
        b"cursor=1%E2%82%82",  # "1₂"
    ],
)
def test_connect_query_non_ascii_digit_cursor_is_bad_address(query: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_connect_query(query)
    assert info.value.code == "bad_address"


@pytest.mark.parametrize(
    ("query", "subscribe"),
    [
        (b"", None),
        (b"cursor=3", None),
        (b"subscribe=none", "none"),
        (b"subscribe=state,events", "state,events"),
        (b"subscribe=state%2Cmessages", "state,messages"),
        (b"subscribe=", ""),
        (b"cursor=1&subscribe=events", "events"),
    ],
)
def test_connect_query_subscribe_is_passed_through(query: bytes, subscribe: str | None) -> None:
    assert parse_connect_query(query).subscribe == subscribe


# -- close codes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (1000, "NORMAL"),
        (1001, "GOING_AWAY"),
        (1009, "MESSAGE_TOO_BIG"),
        (1011, "INTERNAL_ERROR"),
        (1013, "TRY_AGAIN_LATER"),
        (4400, "BAD_ADDRESS"),
        (4401, "UNAUTHENTICATED"),
        (4403, "FORBIDDEN"),
        (4404, "UNKNOWN_KIND"),
    ],
)
def test_close_code_names_match_the_documented_table(code: int, name: str) -> None:
    assert CloseCode[name] == code
    assert CloseCode(code).name == name


@pytest.mark.parametrize("code", [1000, 1009, 4400, 4401, 4403, 4404])
def test_documented_stop_codes_are_terminal(code: int) -> None:
    assert is_terminal(code)
    assert is_terminal(CloseCode(code))


@pytest.mark.parametrize("code", [1001, 1006, 1011, 1013])
def test_documented_reconnect_codes_are_not_terminal(code: int) -> None:
    assert not is_terminal(code)


@pytest.mark.parametrize("code", [1003, 1007, 1008])
def test_close_codes_not_in_the_documented_table_are_transient(code: int) -> None:
    # docs/protocol.md: "Any close not listed (1006 abnormal closure, network errors) is transient";
    # roost.client.errors.is_terminal follows that and reconnects after these codes.
    assert not is_terminal(code)


# -- Subscriptions.parse -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, (True, True, True)),
        ("none", (False, False, False)),
        ("state", (True, False, False)),
        ("events", (False, True, False)),
        ("messages", (False, False, True)),
        ("state,events", (True, True, False)),
        (" state , messages ", (True, False, True)),
        ("state,events,messages", (True, True, True)),
        ("events,events", (False, True, False)),
    ],
)
def test_subscriptions_parse_selects_the_listed_broadcasts(
    text: str | None, expected: tuple[bool, bool, bool]
) -> None:
    subs = Subscriptions.parse(text)
    assert (subs.state, subs.events, subs.messages) == expected
    assert (subs.wants("state"), subs.wants("event"), subs.wants("message")) == expected


@pytest.mark.parametrize("text", ["bogus", "State", "state,bogus", "none,state", "", ","])
def test_subscriptions_parse_refuses_unknown_values(text: str) -> None:
    with pytest.raises(ValueError, match="subscribe"):
        Subscriptions.parse(text)
