"""A token's expiry and its renewal on an open connection, without a socket and without an event loop.

The rules are ``docs/protocol.md``'s (*Client frames*: ``auth``; *Connection rules*; *Token expiry and
renewal*): the connection closes with 4401 at its principal's deadline and not before, an ``auth``
frame's verdict moves the deadline and puts the new claims in force for later frames, and a renewal
that names another subject or tenant closes the connection with 4403.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from roost.actors import Principal
from roost.actors.host import Call
from roost.protocol import frames
from roost.protocol.codes import CloseCode
from roost.transport.access import Refused
from roost.transport.limits import Limits
from roost.transport.protocol import HOLD, Close, ConnectionProtocol, Renew, token_deadline
from tests.protocol_support import PING, Clock, delivered, make, reply, rpc

ALICE = Principal("alice", tenant="acme", claims={"exp": 1_060.0})


def auth(token: str = "new-token", auth_id: Any = "a1") -> str:
    return orjson.dumps({"type": "auth", "token": token, "id": auth_id}).decode()


def alice(**claims: Any) -> Principal:
    return Principal("alice", tenant="acme", claims={"exp": 1_100.0, **claims})


def renewal(protocol: ConnectionProtocol, now: float) -> Renew:
    action = protocol.receive_text(auth(), now)
    assert isinstance(action, Renew), action
    assert action.frame.token == "new-token"
    return action


def expired(action: object) -> None:
    assert isinstance(action, Close), action
    assert (action.code, action.reason) == (CloseCode.UNAUTHENTICATED, "token expired")
    assert action.frame == frames.error("unauthenticated", "token expired")


# -- expiry ------------------------------------------------------------------------------------------


def test_a_connection_is_closed_with_4401_at_its_tokens_expiry_and_not_before(tmp_path: Path) -> None:
    protocol = make(tmp_path, principal=ALICE, expires=160.0)
    assert protocol.deadline == 160.0
    assert protocol.tick(159.99) is None
    assert isinstance(protocol.receive_text(rpc("1"), 159.99), Call)  # a write just before: it goes on
    expired(protocol.tick(160.0))  # exactly at the deadline
    assert protocol.receive_text(rpc("2"), 160.0) is None  # closing: nothing more is acted on
    assert protocol.tick(161.0) is None  # closed once


def test_a_frame_at_or_after_the_deadline_closes_with_4401_and_is_not_acted_on(tmp_path: Path) -> None:
    """Whether or not the timer has fired yet, nothing a client sends after the expiry reaches the
    actor."""
    for text in (rpc(), '{"type":"message","data":1}', PING, "not json"):
        protocol = make(tmp_path, principal=ALICE, expires=160.0)
        expired(protocol.receive_text(text, 160.5))
        assert protocol.connection.in_flight == 0


def test_a_connection_without_a_deadline_never_expires(tmp_path: Path) -> None:
    protocol = make(tmp_path)
    assert protocol.deadline is None
    assert protocol.tick(1e12) is None
    assert isinstance(protocol.receive_text(rpc(), 1e12), Call)


def test_an_expiry_before_the_welcome_closes_with_4401_too(tmp_path: Path) -> None:
    protocol = make(tmp_path, principal=ALICE, expires=160.0, welcomed=False)
    expired(protocol.tick(160.0))


def test_the_deadline_is_the_tokens_exp_on_the_clock_of_frames() -> None:
    """``exp`` is wall time (seconds since the epoch); frames are timed on a monotonic clock: the
    deadline is as far from ``now`` as ``exp`` is from the wall time read with it."""
    assert token_deadline(Principal("a", claims={"exp": 1_000.0}), wall=990.0, now=5.0) == 15.0
    assert token_deadline(Principal("a", claims={"exp": 980}), wall=990.0, now=5.0) == -5.0  # already due
    assert token_deadline(Principal("a"), wall=990.0, now=5.0) is None  # no exp: never
    assert token_deadline(Principal("a", claims={"exp": True}), wall=990.0, now=5.0) is None
    assert token_deadline(Principal("a", claims={"exp": "soon"}), wall=990.0, now=5.0) is None


# -- renewal -----------------------------------------------------------------------------------------


def test_a_renewal_moves_the_deadline_and_is_answered_with_the_new_exp(tmp_path: Path) -> None:
    protocol = make(tmp_path, principal=ALICE, expires=160.0)
    pending = renewal(protocol, 150.0)
    assert protocol.receive_text(rpc("held"), 150.5) is HOLD  # later frames wait for the verdict
    renewed = alice()
    answer = reply(protocol.renewed(pending, renewed, 200.0))
    assert answer == {"type": "auth_result", "id": "a1", "ok": True, "exp": 1_100.0}
    assert protocol.deadline == 200.0
    assert protocol.connection.principal is renewed
    assert protocol.tick(160.0) is None  # the old deadline passes
    assert isinstance(protocol.receive_text(rpc("held"), 170.0), Call)
    assert isinstance(protocol.receive_text(rpc("late"), 199.9), Call)
    expired(protocol.tick(200.0))


def test_a_renewal_to_a_read_only_token_makes_later_writes_forbidden(tmp_path: Path) -> None:
    protocol = make(tmp_path, principal=ALICE, expires=160.0)
    assert isinstance(protocol.receive_text(rpc("w1", "increment"), 150.0), Call)
    pending = renewal(protocol, 150.0)
    assert reply(protocol.renewed(pending, alice(read_only=True), 200.0))["ok"] is True
    refused = reply(protocol.receive_text(rpc("w2", "increment"), 151.0))
    assert (refused["id"], refused["error"]["code"]) == ("w2", "forbidden")
    assert reply(protocol.receive_text('{"type":"message","data":1}', 151.0))["code"] == "forbidden"
    assert isinstance(protocol.receive_text(rpc("r1", "get"), 151.0), Call)  # reads go on
    assert protocol.connection.principal.claims["read_only"] is True  # what the actor's turns see
    # and back: a renewal to a writer's token lets writes through again
    pending = renewal(protocol, 152.0)
    reply(protocol.renewed(pending, alice(), 200.0))
    assert isinstance(protocol.receive_text(rpc("w3", "increment"), 152.0), Call)


def test_a_renewal_for_another_subject_or_tenant_closes_with_4403(tmp_path: Path) -> None:
    for other in (
        Principal("mallory", tenant="acme", claims={"exp": 1_100.0}),
        Principal("alice", tenant="other", claims={"exp": 1_100.0}),
        Principal("alice", claims={"exp": 1_100.0}),
    ):
        protocol = make(tmp_path, principal=ALICE, expires=160.0)
        pending = renewal(protocol, 150.0)
        close = protocol.renewed(pending, other, 200.0)
        assert isinstance(close, Close)
        assert close.code == CloseCode.FORBIDDEN
        assert orjson.loads(close.frame or "")["code"] == "forbidden"
        assert protocol.connection.principal is ALICE  # nothing of the other principal was taken
        assert protocol.receive_text(rpc(), 151.0) is None


def test_a_renewal_whose_token_is_refused_is_answered_and_changes_nothing(tmp_path: Path) -> None:
    """An expired, forged or malformed token says nothing about who is there: the connection goes on
    with the token it had, until that one expires."""
    protocol = make(tmp_path, principal=ALICE, expires=160.0)
    pending = renewal(protocol, 150.0)
    answer = reply(protocol.renewed(pending, Refused("unauthenticated", "the renewal's token was refused")))
    assert answer == {
        "type": "auth_result",
        "id": "a1",
        "ok": False,
        "error": {"code": "unauthenticated", "message": "the renewal's token was refused"},
    }
    assert (protocol.deadline, protocol.connection.principal) == (160.0, ALICE)
    assert isinstance(protocol.receive_text(rpc(), 151.0), Call)
    expired(protocol.tick(160.0))


def test_a_renewal_that_authorize_refuses_closes_with_4403(tmp_path: Path) -> None:
    """A valid token of the same subject whose claims no longer allow this actor ends the connection."""
    protocol = make(tmp_path, principal=ALICE, expires=160.0)
    pending = renewal(protocol, 150.0)
    close = protocol.renewed(pending, Refused("forbidden", "connect on counter/x is not allowed"))
    assert isinstance(close, Close)
    assert close.code == CloseCode.FORBIDDEN
    assert protocol.receive_text(rpc(), 151.0) is None


def test_an_auth_frame_is_checked_and_rate_limited_like_every_frame(tmp_path: Path) -> None:
    protocol = make(tmp_path, principal=ALICE, expires=160.0)
    for bad in ('{"type":"auth"}', '{"type":"auth","token":""}', '{"type":"auth","token":7}'):
        assert reply(protocol.receive_text(bad, 150.0))["code"] == "bad_frame"
    limited = make(
        tmp_path,
        principal=ALICE,
        expires=160.0,
        limits=Limits(conn_rate=1, conn_burst=1, principal_rate=None),
        clock=Clock(),
    )
    limited.renewed(renewal(limited, 150.0), alice(), 200.0)
    answer = reply(limited.receive_text(auth(auth_id=2), 150.0))  # a failed auth_result, with its id
    assert (answer["type"], answer["id"], answer["error"]["code"]) == ("auth_result", 2, "rate_limited")


def test_a_renewal_before_the_welcome_is_answered_behind_it(tmp_path: Path) -> None:
    protocol = make(tmp_path, principal=ALICE, expires=160.0, welcomed=False)
    pending = renewal(protocol, 150.0)
    assert delivered(protocol.renewed(pending, alice(), 200.0))["type"] == "auth_result"


def test_a_verdict_that_arrives_after_the_close_is_dropped(tmp_path: Path) -> None:
    protocol = make(tmp_path, principal=ALICE, expires=160.0)
    pending = renewal(protocol, 150.0)
    expired(protocol.tick(160.0))  # the timer fires while the renewal is being verified
    assert protocol.renewed(pending, alice(), 200.0) is None
    assert protocol.deadline == 160.0
