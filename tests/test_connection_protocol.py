"""The connection's rules (``Admission``, then ``ConnectionProtocol``), without a socket and without an
event loop.

Every test is a plain function: events go in (the scope and the answers admission asks for; a frame and
the time, the welcome, a close), actions come out. The rules are the ones ``docs/protocol.md`` states
(*Client frames*, *Connection rules*, *Errors*).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roost.actors import (
    ANONYMOUS,
    Connection,
    Params,
    Principal,
    Registry,
    Request,
    RuntimeConfig,
    Subscriptions,
)
from roost.actors.errors import InvalidActorAddress, UnknownKind
from roost.actors.host import Call, Connect, Deliver, Disconnect, Message
from roost.examples.kinds import KINDS
from roost.protocol import frames
from roost.protocol.codes import CloseCode
from roost.storage import MAX_NAME_CHARS
from roost.transport.access import Access, Admitted, Refused
from roost.transport.admission import (
    Accept,
    Admission,
    AdmissionError,
    AdmissionState,
    NeedCreation,
    NeedExists,
    NeedSlot,
    NeedValidate,
    NeedVerdict,
    Refuse,
    Step,
)
from roost.transport.auth import allow_all
from roost.transport.limits import Limits, TokenBucket
from roost.transport.protocol import (
    HOLD,
    Close,
    ConnectionProtocol,
    ConnectionState,
    Reply,
    RpcFrame,
    Verify,
    refusal,
)
from roost.transport.security import scoped_name
from tests.protocol_support import NO_LIMITS, PING, Clock, Recorder, delivered, make, reply, rpc, run

#: Decodes (orjson takes 1,024 levels of nesting) but could not be encoded again (about 255 levels).
NESTED = "[" * 1000 + "]" * 1000

# -- the connection's life ---------------------------------------------------------------------------


def test_a_connection_moves_from_handshake_to_closed_and_tells_the_actor_it_is_gone(tmp_path: Path) -> None:
    registry = Registry(KINDS, RuntimeConfig(data_dir=tmp_path / "data"))
    access = Access(registry, allow_all, None, None, NO_LIMITS)
    conn = Connection("c1", Recorder())
    protocol = ConnectionProtocol(
        conn, access.frame_gate(ANONYMOUS, "counter", "x"), 42, max_frame_bytes=1000, max_in_flight=4
    )
    seen = [protocol.state]
    connect = protocol.accept()
    assert isinstance(connect, Connect)
    assert (connect.conn, connect.cursor) == (conn, 42)
    seen.append(protocol.state)
    protocol.welcomed()
    seen.append(protocol.state)
    protocol.closing()
    seen.append(protocol.state)
    gone = protocol.disconnected(1000)
    assert isinstance(gone, Disconnect)
    assert (gone.conn, gone.code) == (conn, 1000)
    seen.append(protocol.state)
    assert seen == list(ConnectionState)  # HANDSHAKE, AWAITING_WELCOME, OPEN, CLOSING, CLOSED


def test_a_connection_the_actor_never_took_gets_an_error_frame_its_close_code_and_no_disconnect(
    tmp_path: Path,
) -> None:
    protocol = make(tmp_path, welcomed=False)
    close = protocol.connect_failed("overloaded", "too many actors", "overloaded")
    assert (close.code, close.reason) == (CloseCode.TRY_AGAIN_LATER, "overloaded")
    assert close.frame == frames.error("overloaded", "too many actors")
    assert protocol.receive_text(rpc(), 0.0) is None
    assert protocol.disconnected(1006) is None
    assert protocol.connect_failed("bad_address", "name too long").code == CloseCode.BAD_ADDRESS


@pytest.mark.parametrize(
    ("code", "close"),
    [
        ("bad_address", 4400),
        ("unknown_kind", 4404),
        ("unauthenticated", 4401),
        ("forbidden", 4403),
        ("origin_refused", 4403),
        ("too_many_connections", 1013),
    ],
)
def test_a_refused_connection_gets_one_error_frame_then_the_failure_tables_close_code(
    code: str, close: int
) -> None:
    refused = refusal(code, "why " * 100)
    assert refused.code == close
    assert refused.reason == ("why " * 100)[:120]  # a close reason is at most 123 bytes
    assert refused.frame == frames.error(code, "why " * 100)


# -- frames become the actor's inputs ----------------------------------------------------------------


def test_a_call_is_the_actors_call_input_itself_counted_in_flight(tmp_path: Path) -> None:
    protocol = make(tmp_path)
    action = protocol.receive_text(rpc("c-1", "increment", 5), 0.0)
    assert type(action) is Call  # the action is the input: nothing else is allocated per call
    assert (action.method, action.args, action.kwargs, action.id) == ("increment", [5], {}, "c-1")
    assert action.conn is protocol.connection
    assert protocol.connection.in_flight == 1


def test_a_message_is_the_actors_message_input_counted_in_flight(tmp_path: Path) -> None:
    protocol = make(tmp_path)
    action = protocol.receive_text('{"type":"message","data":{"hi":[1]}}', 0.0)
    assert type(action) is Message
    assert (action.conn, action.data) == (protocol.connection, {"hi": [1]})
    assert protocol.connection.in_flight == 1


@pytest.mark.parametrize("welcomed", [False, True])
def test_a_ping_is_a_pong_queued_at_the_actor_behind_earlier_inputs(tmp_path: Path, welcomed: bool) -> None:
    protocol = make(tmp_path, welcomed=welcomed)
    assert delivered(protocol.receive_text(PING, 0.0)) == {"type": "pong", "id": 7}
    assert protocol.connection.in_flight == 1


def test_a_subscribe_frame_changes_the_subscriptions_at_once_and_omitted_fields_keep_theirs(
    tmp_path: Path,
) -> None:
    protocol = make(tmp_path)
    subs = protocol.connection.subscriptions
    assert protocol.receive_text('{"type":"subscribe","state":false}', 0.0) is None
    assert (subs.state, subs.events, subs.messages) == (False, True, True)
    assert protocol.receive_text('{"type":"subscribe","events":false,"messages":false}', 0.0) is None
    assert (subs.state, subs.events, subs.messages) == (False, False, False)
    assert protocol.receive_text('{"type":"subscribe","state":true}', 0.0) is None
    assert (subs.state, subs.events, subs.messages) == (True, False, False)
    assert protocol.connection.in_flight == 0


# -- answers of the transport's own -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("not json", "bad_frame"),
        ("[1]", "bad_frame"),
        ('{"type":"rpc","id":1,"method":"m"}', "bad_frame"),
        ('{"type":"nope"}', "unknown_type"),
        (None, "bad_frame"),
        # ids nested deeper than a reply can echo (the id rule): refused, never a pong that cannot encode
        pytest.param('{"type":"ping","id":' + NESTED + "}", "bad_frame", id="nested ping id"),
        pytest.param('{"type":"rpc","id":' + NESTED + ',"method":"get"}', "bad_frame", id="nested rpc id"),
        pytest.param('{"type":"auth","token":"t","id":' + NESTED + "}", "bad_frame", id="nested auth id"),
    ],
)
def test_a_bad_frame_is_answered_at_once_once_welcomed_and_nothing_reaches_the_actor(
    tmp_path: Path, text: str | None, code: str
) -> None:
    protocol = make(tmp_path)
    answer = reply(protocol.receive_text(text, 0.0))
    assert (answer["type"], answer["code"]) == ("error", code)
    assert protocol.connection.in_flight == 0
    assert protocol.state is ConnectionState.OPEN


def test_an_answer_before_the_welcome_queues_behind_it_and_too_many_close_1013(tmp_path: Path) -> None:
    protocol = make(tmp_path, welcomed=False, max_in_flight=2)
    assert delivered(protocol.receive_text("bad", 0.0))["code"] == "bad_frame"
    assert delivered(protocol.receive_text(None, 0.0))["code"] == "bad_frame"
    assert protocol.connection.in_flight == 2
    close = protocol.receive_text("bad", 0.0)
    assert close == Close(CloseCode.TRY_AGAIN_LATER, "too many frames before the welcome")
    assert protocol.state is ConnectionState.CLOSING


@pytest.mark.parametrize(
    ("frame", "call_id"),
    [
        ({"id": "c1", "method": "increment", "args": "x"}, "c1"),
        ({"id": "c2", "method": "increment", "kwargs": [1]}, "c2"),
        ({"id": "c3", "method": "", "args": []}, "c3"),
        ({"id": "c4", "method": "increment", "idempotency_key": ""}, "c4"),
        ({"id": 5, "method": "increment", "args": "x"}, None),  # a bad id is no caller's answer
    ],
)
def test_a_bad_rpc_frame_whose_id_is_good_is_answered_with_that_id(
    tmp_path: Path, frame: dict[str, Any], call_id: str | None
) -> None:
    """The client can fail that call at once, instead of waiting for its timeout."""
    protocol = make(tmp_path)
    answer = reply(protocol.receive_text(orjson.dumps({"type": "rpc", **frame}).decode(), 0.0))
    assert (answer["type"], answer["code"], answer.get("id")) == ("error", "bad_frame", call_id)


def test_a_binary_frame_is_a_bad_frame(tmp_path: Path) -> None:
    protocol = make(tmp_path)
    assert reply(protocol.receive_text(None, 0.0))["message"] == "binary frames are not accepted; send text"


# -- the frame size limit ----------------------------------------------------------------------------


def test_a_frame_over_the_limit_in_utf8_bytes_closes_1009_and_nothing_after_it_is_acted_on(
    tmp_path: Path,
) -> None:
    limit = 100
    protocol = make(tmp_path, max_frame_bytes=limit)
    base = '{"type":"message","data":""}'
    fits = base.replace('""', '"' + "é" * ((limit - len(base)) // 2) + '"')  # é is two bytes
    assert len(fits.encode()) <= limit < len(fits) * 4
    assert type(protocol.receive_text(fits, 0.0)) is Message
    over = fits.replace('"é', '"éé')
    assert len(over) <= limit < len(over.encode())  # over in bytes, not in characters
    assert protocol.receive_text(over, 0.0) == Close(
        CloseCode.MESSAGE_TOO_BIG, f"frame larger than {limit} bytes"
    )
    assert protocol.state is ConnectionState.CLOSING
    assert protocol.receive_text(rpc(), 0.0) is None
    assert protocol.connection.in_flight == 1


def test_nothing_is_acted_on_once_the_server_closes_the_connection(tmp_path: Path) -> None:
    protocol = make(tmp_path)
    protocol.closing()
    for text in (rpc(), PING, "bad", None, '{"type":"subscribe","state":false}'):
        assert protocol.receive_text(text, 0.0) is None
    assert protocol.connection.in_flight == 0
    assert protocol.connection.subscriptions.state is True


# -- rate limits (the time is an argument) -----------------------------------------------------------


def test_a_frame_without_a_token_is_answered_rate_limited_and_the_bucket_refills_with_time(
    tmp_path: Path,
) -> None:
    clock = Clock()
    protocol = make(tmp_path, limits=Limits(conn_rate=2, conn_burst=2, principal_rate=None), clock=clock)
    t = clock.now
    assert type(protocol.receive_text(rpc("1"), t)) is Call
    assert type(protocol.receive_text(rpc("2"), t)) is Call
    refused = reply(protocol.receive_text(rpc("3"), t))  # a call gets its failed rpc_result
    assert (refused["type"], refused["id"], refused["error"]["code"]) == ("rpc_result", "3", "rate_limited")
    assert reply(protocol.receive_text(PING, t + 0.49))["code"] == "rate_limited"  # others: an error frame
    assert type(protocol.receive_text(rpc("4"), t + 0.5)) is Call  # half a second: one token at 2/s
    assert protocol.connection.in_flight == 3
    assert protocol.state is ConnectionState.OPEN  # a rate-limited connection goes on


def test_bad_frames_take_tokens_and_a_rate_limit_is_answered_before_a_parse_error(tmp_path: Path) -> None:
    clock = Clock()
    protocol = make(tmp_path, limits=Limits(conn_rate=1, conn_burst=1, principal_rate=None), clock=clock)
    assert reply(protocol.receive_text("bad", clock.now))["code"] == "bad_frame"
    assert reply(protocol.receive_text("bad", clock.now))["code"] == "rate_limited"
    assert reply(protocol.receive_text(rpc(), clock.now))["error"]["code"] == "rate_limited"


def test_a_principal_shares_one_bucket_over_its_connections(tmp_path: Path) -> None:
    clock = Clock()
    registry = Registry(KINDS, RuntimeConfig(data_dir=tmp_path / "data"))
    limits = Limits(conn_rate=None, principal_rate=1, principal_burst=3)
    access = Access(registry, allow_all, None, None, limits, clock=clock)
    alice = Principal("alice")
    one = make(tmp_path, access=access, principal=alice)
    two = make(tmp_path, access=access, principal=alice)
    other = make(tmp_path, access=access, principal=Principal("bob"))
    assert type(one.receive_text(rpc("1"), clock.now)) is Call
    assert type(two.receive_text(rpc("2"), clock.now)) is Call
    assert type(one.receive_text(rpc("3"), clock.now)) is Call
    assert reply(two.receive_text(rpc("4"), clock.now))["error"]["code"] == "rate_limited"
    assert type(other.receive_text(rpc("5"), clock.now)) is Call


def test_a_bucket_reading_older_than_its_last_adds_nothing() -> None:
    bucket = TokenBucket(rate=10, burst=1, clock=lambda: 50.0)
    assert bucket.take(50.0)
    assert not bucket.take(10.0)  # a reading from the past does not refill (nor drain) the bucket
    assert not bucket.take(50.05)
    assert bucket.take(50.1)


# -- the in-flight bound and the gate ----------------------------------------------------------------


def test_calls_messages_and_pings_over_the_in_flight_bound_are_answered_overloaded(tmp_path: Path) -> None:
    protocol = make(tmp_path, max_in_flight=2)
    conn = protocol.connection
    assert type(protocol.receive_text(rpc("1"), 0.0)) is Call
    assert type(protocol.receive_text('{"type":"message","data":1}', 0.0)) is Message
    call = reply(protocol.receive_text(rpc("3"), 0.0))
    assert (call["id"], call["error"]["code"]) == ("3", "overloaded")
    assert call["error"]["message"] == "more than 2 calls and messages in flight on this connection"
    message = reply(protocol.receive_text('{"type":"message","data":2}', 0.0))
    assert (message["type"], message["code"]) == ("error", "overloaded")
    assert reply(protocol.receive_text(PING, 0.0))["message"] == "more than 2 frames in flight"
    assert conn.in_flight == 2
    conn.in_flight -= 1  # the actor handled one (ActorHost counts its inputs down)
    assert type(protocol.receive_text(rpc("4"), 0.0)) is Call


def test_a_read_only_principal_may_call_read_only_methods_only_and_send_no_messages(tmp_path: Path) -> None:
    protocol = make(tmp_path, principal=Principal("r", claims={"read_only": True}))
    assert type(protocol.receive_text(rpc("1", "get"), 0.0)) is Call
    refused = reply(protocol.receive_text(rpc("2", "increment"), 0.0))
    assert refused["error"] == {
        "code": "forbidden",
        "message": "read-only: increment is not a read-only method",
    }
    assert reply(protocol.receive_text('{"type":"message","data":1}', 0.0))["code"] == "forbidden"
    assert type(protocol.receive_text(rpc("3", "no_such_method"), 0.0)) is Call  # the actor answers it
    assert protocol.connection.in_flight == 2


def test_authorize_saying_no_answers_forbidden_and_nothing_reaches_the_actor(tmp_path: Path) -> None:
    asked: list[str] = []

    def authorize(principal: Principal, kind: str, name: str, action: str) -> bool:
        asked.append(action)
        return action == "call:get"

    protocol = make(tmp_path, authorize=authorize)
    assert reply(protocol.receive_text(rpc("1", "increment"), 0.0))["error"]["code"] == "forbidden"
    assert reply(protocol.receive_text('{"type":"message","data":1}', 0.0))["code"] == "forbidden"
    assert type(protocol.receive_text(rpc("2", "get"), 0.0)) is Call
    assert asked == ["call:increment", "message", "call:get"]
    assert protocol.connection.in_flight == 1


def async_authorize(allowed: set[str]) -> Callable[[Principal, str, str, str], Awaitable[bool]]:
    async def authorize(principal: Principal, kind: str, name: str, action: str) -> bool:
        return action in allowed

    return authorize


def test_an_asynchronous_verdict_holds_every_later_frame_until_it_is_in(tmp_path: Path) -> None:
    protocol = make(tmp_path, authorize=async_authorize({"call:increment"}))
    pending = protocol.receive_text(rpc("1"), 0.0)
    assert isinstance(pending, Verify)
    assert protocol.connection.in_flight == 0  # counted when it goes to the actor
    for text in (rpc("2"), PING, "bad", None):
        assert protocol.receive_text(text, 0.0) is HOLD
    action = protocol.verdict(pending, run(pending.pending))
    assert type(action) is Call
    assert action.id == "1"
    assert protocol.connection.in_flight == 1
    again = protocol.receive_text(rpc("2"), 0.0)  # held frames come again, in order
    assert isinstance(again, Verify)
    assert isinstance(again.frame, RpcFrame)
    assert again.frame.id == "2"
    run(again.pending)


def test_an_asynchronous_refusal_answers_the_frame_it_held(tmp_path: Path) -> None:
    protocol = make(tmp_path, authorize=async_authorize(set()))
    pending = protocol.receive_text(rpc("9"), 0.0)
    assert isinstance(pending, Verify)
    verdict = run(pending.pending)
    assert verdict == Refused("forbidden", "call:increment is not allowed")
    answer = reply(protocol.verdict(pending, verdict))
    assert (answer["id"], answer["error"]["code"]) == ("9", "forbidden")
    assert protocol.connection.in_flight == 0
    message = protocol.receive_text('{"type":"message","data":1}', 0.0)
    assert isinstance(message, Verify)
    assert reply(protocol.verdict(message, run(message.pending)))["code"] == "forbidden"


def test_a_verdict_that_comes_after_the_server_closed_is_not_acted_on(tmp_path: Path) -> None:
    protocol = make(tmp_path, authorize=async_authorize({"call:increment"}))
    pending = protocol.receive_text(rpc("1"), 0.0)
    assert isinstance(pending, Verify)
    protocol.closing()
    assert protocol.verdict(pending, run(pending.pending)) is None
    assert protocol.connection.in_flight == 0


# -- inputs the actor refuses ------------------------------------------------------------------------


def test_an_input_the_actors_full_mailbox_refuses_is_answered_overloaded_and_uncounted(
    tmp_path: Path,
) -> None:
    protocol = make(tmp_path)
    call = protocol.receive_text(rpc("5"), 0.0)
    assert type(call) is Call
    answer = reply(protocol.refused(call, "overloaded", "mailbox is full"))
    assert (answer["id"], answer["error"]) == ("5", {"code": "overloaded", "message": "mailbox is full"})
    message = protocol.receive_text('{"type":"message","data":1}', 0.0)
    assert type(message) is Message
    assert reply(protocol.refused(message, "overloaded", "mailbox is full"))["type"] == "error"
    assert protocol.connection.in_flight == 0
    assert protocol.state is ConnectionState.OPEN


def test_an_actor_that_is_stopping_closes_the_connection_1013_with_an_error_frame(tmp_path: Path) -> None:
    protocol = make(tmp_path)
    call = protocol.receive_text(rpc(), 0.0)
    assert type(call) is Call
    close = protocol.refused(call, "actor_unavailable", "actor is stopping")
    assert close == Close(
        CloseCode.TRY_AGAIN_LATER, "actor restarting", frames.error("actor_unavailable", "actor is stopping")
    )
    assert protocol.connection.in_flight == 0
    assert protocol.receive_text(rpc(), 0.0) is None


# -- whatever arrives --------------------------------------------------------------------------------

ANY_FRAME = st.one_of(
    st.none(),
    st.text(max_size=200),
    st.builds(
        lambda obj: orjson.dumps(obj).decode(),
        st.dictionaries(
            st.sampled_from(["type", "id", "method", "args", "kwargs", "data", "state", "events"]),
            st.one_of(
                st.sampled_from(["rpc", "message", "subscribe", "ping", "x"]),
                st.integers(-(2**63), 2**63 - 1),
                st.booleans(),
                st.none(),
                st.lists(st.integers(0, 9), max_size=3),
                st.text(max_size=5),
            ),
        ),
    ),
)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.tuples(ANY_FRAME, st.floats(0, 10)), max_size=30), welcomed=st.booleans())
def test_receive_text_never_raises_and_keeps_the_in_flight_count_within_its_bound(
    tmp_path_factory: pytest.TempPathFactory, texts: list[tuple[str | None, float]], welcomed: bool
) -> None:
    limits = Limits(conn_rate=5, conn_burst=5, principal_rate=None)
    protocol = make(tmp_path_factory.mktemp("p"), limits=limits, max_in_flight=4, welcomed=welcomed)
    for text, now in sorted(texts, key=lambda item: item[1]):
        action = protocol.receive_text(text, 100.0 + now)
        assert action is None or isinstance(action, Call | Message | Deliver | Reply | Close)
        assert 0 <= protocol.connection.in_flight <= 4
        if isinstance(action, Close):
            assert action.code in (CloseCode.TRY_AGAIN_LATER, CloseCode.MESSAGE_TOO_BIG)
            assert protocol.state is ConnectionState.CLOSING


# -- admission ---------------------------------------------------------------------------------------

READ_ONLY = Principal("reader", claims={"read_only": True})
TENANT = Principal("alice", tenant="t1")


def admit(
    path: str,
    query: bytes = b"",
    *,
    principal: Principal = ANONYMOUS,
    verdict: Refused | None = None,
    exists: bool = True,
    creation: Refused | None = None,
    slot: bool = True,
    routed: tuple[str, str] | None = None,
) -> list[Step]:
    """Every step of one admission: the endpoint's loop, with a real registry's ``validate`` and the
    given answers from the access gate (Admitted for ``principal`` unless ``verdict``), the registry's
    ``exists`` and the connection slots. ``path`` is the raw (percent-encoded) path; ``routed`` is what
    the router matched, by default what it matches on the decoded path."""
    registry = Registry(KINDS, RuntimeConfig(data_dir=Path("unused")))
    if routed is None:
        kind, _, name = unquote(path).removeprefix("/agents/").partition("/")
        routed = (kind, name)
    scope: dict[str, Any] = {"path": unquote(path), "raw_path": path.encode(), "query_string": query}
    scope["path_params"] = {"kind": routed[0], "name": routed[1]}
    admission = Admission()
    steps = [admission.connect(scope)]
    while True:
        match steps[-1]:
            case NeedValidate(kind, name):
                try:
                    registry.validate(kind, name)
                    error = None
                except (UnknownKind, InvalidActorAddress) as exc:
                    error = exc
                steps.append(admission.validated(error))
            case NeedVerdict(kind, name):
                steps.append(admission.verdict(verdict or Admitted(principal, scoped_name(principal, name))))
            case NeedExists():
                steps.append(admission.exists(exists))
            case NeedCreation():
                steps.append(admission.creation(creation))
            case NeedSlot():
                steps.append(admission.slot(slot))
            case _:
                assert admission.state is AdmissionState.DONE
                return steps


def refused_with(steps: list[Step], code: str, close: int) -> Refuse:
    """The last step refuses with ``code``: one error frame of that code, then ``close``."""
    last = steps[-1]
    assert isinstance(last, Refuse), steps
    assert last.code == code
    assert last.close == refusal(code, last.message)
    assert last.close.code == close
    assert last.close.frame is not None
    assert orjson.loads(last.close.frame) == {"type": "error", "code": code, "message": last.message}
    return last


def test_admission_checks_the_address_the_verdict_the_tenant_name_the_creation_then_takes_a_slot() -> None:
    steps = admit("/agents/counter/x", b"cursor=5&subscribe=state")
    assert steps == [
        NeedValidate("counter", "x"),
        NeedVerdict("counter", "x"),
        NeedValidate("counter", "x"),
        NeedCreation(ANONYMOUS, "counter", "x"),
        NeedSlot(ANONYMOUS, "counter", "x"),
        Accept(
            ANONYMOUS,
            "counter",
            "x",
            "x",
            5,
            Subscriptions(True, False, False),
            Request("/agents/counter/x", Params([("cursor", "5"), ("subscribe", "state")])),
        ),
    ]


def test_an_admitted_connection_addresses_the_name_within_its_tenant_and_keeps_the_asked_name() -> None:
    steps = admit("/agents/counter/a%2Fb", principal=TENANT)
    assert steps[1] == NeedVerdict("counter", "a/b")  # the gate sees the name as asked
    assert steps[2:] == [
        NeedValidate("counter", "t1\x00a/b"),
        NeedCreation(TENANT, "counter", "t1\x00a/b"),
        NeedSlot(TENANT, "counter", "t1\x00a/b"),
        Accept(TENANT, "counter", "a/b", "t1\x00a/b", None, Subscriptions(), Request("/agents/counter/a/b")),
    ]


@pytest.mark.parametrize(
    ("path", "query", "routed"),
    [
        ("/agents/counter/%FF", b"", None),  # not UTF-8
        ("/agents/counter/x/counter/y", b"", ("counter", "x/counter/y")),  # not one segment
        ("/agents/counter/x", b"cursor=-1", None),
        ("/agents/counter/x", b"cursor=abc", None),
        ("/agents/counter/x", b"cursor=%d" % (1 << 63), None),
        ("/agents/counter/x", b"subscribe=bogus", None),
        ("/agents/counter/x", b"subscribe=", None),
    ],
)
def test_an_address_that_does_not_parse_is_refused_bad_address_before_the_registry_is_asked(
    path: str, query: bytes, routed: tuple[str, str] | None
) -> None:
    steps = admit(path, query, routed=routed)
    assert len(steps) == 1
    refused_with(steps, "bad_address", CloseCode.BAD_ADDRESS)


def test_a_bad_query_is_refused_bad_address_even_for_an_unknown_kind() -> None:
    steps = admit("/agents/nosuchkind/x", b"cursor=abc")
    assert len(steps) == 1
    assert "cursor" in refused_with(steps, "bad_address", 4400).message


def test_an_unknown_kind_is_refused_unknown_kind_before_the_access_gate_is_asked() -> None:
    steps = admit("/agents/nosuchkind/x")
    assert steps[0] == NeedValidate("nosuchkind", "x")
    assert len(steps) == 2
    refused_with(steps, "unknown_kind", CloseCode.UNKNOWN_KIND)


def test_a_name_the_registry_refuses_is_refused_bad_address_before_the_access_gate_is_asked() -> None:
    steps = admit("/agents/counter/" + "n" * (MAX_NAME_CHARS + 1))
    assert len(steps) == 2
    refused_with(steps, "bad_address", CloseCode.BAD_ADDRESS)


@pytest.mark.parametrize(
    ("code", "close"),
    [
        ("bad_address", 4400),  # a NUL in the name
        ("origin_refused", 4403),
        ("unauthenticated", 4401),
        ("forbidden", 4403),
    ],
)
def test_the_access_gates_refusal_is_the_connections_refusal_and_no_slot_is_taken(
    code: str, close: int
) -> None:
    steps = admit("/agents/counter/x", verdict=Refused(code, "why"))
    assert steps[:2] == [NeedValidate("counter", "x"), NeedVerdict("counter", "x")]
    assert len(steps) == 3
    assert refused_with(steps, code, close).message == "why"


def test_a_name_has_the_documented_length_limit_within_its_tenant_too() -> None:
    """256 characters, as docs/protocol.md says, whether or not the principal has a tenant (the
    stored ``tenant NUL name`` is longer; before, a tenant's names were cut short by its prefix)."""
    name = "n" * MAX_NAME_CHARS
    assert isinstance(admit(f"/agents/counter/{name}")[-1], Accept)
    steps = admit(f"/agents/counter/{name}", principal=TENANT)
    assert steps[1:3] == [NeedVerdict("counter", name), NeedValidate("counter", f"t1\x00{name}")]
    assert isinstance(steps[-1], Accept)
    steps = admit(f"/agents/counter/{name}n", principal=TENANT)
    refused_with(steps, "bad_address", CloseCode.BAD_ADDRESS)


def test_a_read_only_principal_may_not_create_an_actor_and_takes_no_slot_trying() -> None:
    steps = admit("/agents/counter/x", principal=READ_ONLY, exists=False)
    assert steps[2:4] == [NeedValidate("counter", "x"), NeedExists("counter", "x")]
    assert len(steps) == 5
    refused_with(steps, "forbidden", CloseCode.FORBIDDEN)


def test_a_read_only_principal_connects_to_an_actor_that_exists() -> None:
    steps = admit("/agents/counter/x", principal=READ_ONLY, exists=True)
    assert steps[3:] == [
        NeedExists("counter", "x"),
        NeedSlot(READ_ONLY, "counter", "x"),
        Accept(READ_ONLY, "counter", "x", "x", None, Subscriptions(), Request("/agents/counter/x")),
    ]


def test_only_read_only_principals_are_asked_whether_the_actor_exists() -> None:
    for principal in (ANONYMOUS, TENANT, Principal("writer", claims={"read_only": False})):
        steps = admit("/agents/counter/x", principal=principal, exists=False)
        assert not any(isinstance(step, NeedExists) for step in steps)
        assert isinstance(steps[-1], Accept)


def test_only_principals_that_may_write_are_asked_whether_they_may_create_the_actor() -> None:
    steps = admit("/agents/counter/x", principal=READ_ONLY, exists=True)
    assert not any(isinstance(step, NeedCreation) for step in steps)


def test_a_refused_creation_is_refused_creation_limited_1013_and_takes_no_slot() -> None:
    steps = admit("/agents/counter/x", creation=Refused("creation_limited", "retry in 3 s", 3))
    assert steps[-2] == NeedCreation(ANONYMOUS, "counter", "x")
    assert not any(isinstance(step, NeedSlot) for step in steps)
    assert refused_with(steps, "creation_limited", CloseCode.TRY_AGAIN_LATER).message == "retry in 3 s"


def test_without_a_free_connection_slot_the_connection_is_refused_too_many_connections_1013() -> None:
    steps = admit("/agents/counter/x", slot=False)
    assert steps[-2] == NeedSlot(ANONYMOUS, "counter", "x")
    refused_with(steps, "too_many_connections", CloseCode.TRY_AGAIN_LATER)


def _documented_admission_steps() -> list[set[str]]:
    """The numbered steps of *Admission* in ``docs/protocol.md``, each as the codes its arrows name."""
    text = (Path(__file__).parent.parent / "docs" / "protocol.md").read_text()
    section = text.split("**Admission**", 1)[1].split("**States:**", 1)[0]
    items = re.split(r"^\d+\. ", section, flags=re.MULTILINE)[1:]
    return [set(re.findall(r"(?:→|/)\s+`([a-z_]+)`", item)) for item in items]


def test_the_documented_admission_steps_are_the_machines_in_their_order() -> None:
    """``docs/protocol.md`` lists the admission steps as the machine takes them: each documented step
    names exactly the codes the machine refuses with at that step, the steps in the machine's order."""
    gate = ("bad_address", "origin_refused", "unauthenticated", "forbidden")  # the access gate's codes
    refused_at = [  # per step, in the machine's order (the tests above): admissions refused there
        [admit("/agents/counter/x", b"cursor=abc"), admit("/agents/nosuchkind/x")],
        [admit("/agents/counter/x", verdict=Refused(code, "why")) for code in gate],
        [admit("/agents/counter/x", principal=Principal("mallory", tenant="\ud800"))],  # not Unicode
        [admit("/agents/counter/x", principal=READ_ONLY, exists=False)],
        [admit("/agents/counter/x", creation=Refused("creation_limited", "retry", 3))],
        [admit("/agents/counter/x", slot=False)],
    ]
    observed = []
    for admissions in refused_at:
        last = [steps[-1] for steps in admissions]
        assert all(isinstance(step, Refuse) for step in last), last
        observed.append({step.code for step in last if isinstance(step, Refuse)})
    assert _documented_admission_steps() == observed


def test_an_event_that_does_not_answer_the_pending_action_is_an_admission_error() -> None:
    admission = Admission()
    with pytest.raises(AdmissionError):
        admission.verdict(Admitted(ANONYMOUS, "x"))  # before connect
    assert admission.connect({"path": "/agents/counter/x"}) == NeedValidate("counter", "x")
    with pytest.raises(AdmissionError):
        admission.slot(True)  # the registry's check is pending
    with pytest.raises(AdmissionError):
        admission.connect({"path": "/agents/counter/x"})
    admission.validated(None)
    with pytest.raises(AdmissionError):
        admission.validated(None)  # the verdict is pending
    assert isinstance(admission.verdict(Refused("forbidden", "no")), Refuse)
    with pytest.raises(AdmissionError):
        admission.validated(None)  # decided: nothing more is accepted


@settings(max_examples=300, deadline=None)
@given(path=st.binary(max_size=64), query=st.binary(max_size=64))
def test_admission_never_raises_for_any_raw_path_or_query(path: bytes, query: bytes) -> None:
    step = Admission().connect({"path": "/", "raw_path": b"/agents/" + path, "query_string": query})
    assert isinstance(step, NeedValidate) or (isinstance(step, Refuse) and step.code == "bad_address")
