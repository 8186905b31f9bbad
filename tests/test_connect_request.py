"""``on_connect`` sees the handshake (``conn.request``), and the arriving connection is one of
``self.connections`` while it runs.

Guarantees (``roost.actors.Request``, ``roost.transport.handshake``, ``roost.actors.handlers``):

- **The connection carries its request**: path, decoded query, headers and client address, from the
  handshake, in ``on_connect`` and every later hook.
- **No credential reaches the actor**: no ``token`` parameter in any spelling the server reads, no
  ``Authorization``, ``Proxy-Authorization`` or ``Cookie``, no ``roost.token.…`` subprotocol, no value
  holding a Roost token under another name, in its raw text or percent-decoded (once or more, any of
  its characters encoded, hex digits in either case).
- **Bounded**: a request over 16 KiB (credentials not counted) is refused ``bad_address``, 4400.
- **The arriving connection is in ``self.connections`` during ``on_connect``**; the state and events
  of its connect turn reach it once, through its welcome and replay; a broadcast reaches it after its
  welcome; a rejected ``on_connect`` removes it, and nobody saw what the turn broadcast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from roost.actors import (
    MAX_REQUEST_BYTES,
    Actor,
    Connection,
    Params,
    Principal,
    Reject,
    callable,
)
from roost.examples.kinds import Room
from roost.testing import connect
from roost.transport import create_app
from roost.transport.handshake import RequestTooLarge, connect_request
from roost.transport.security import token_authenticate
from roost.transport.tokens import TokenSigner
from tests.runtime_support import make_kit, of_type
from tests.support import serve_in_process

signer = TokenSigner("s" * 40)


class Greeter(Actor):
    """Sends its new connection what it sees of it and of the others; counts visits."""

    kind = "greeter"
    initial_state = {"visits": 0}

    def on_connect(self, conn: Connection) -> None:
        if conn.request.query.get("nick") == "mallory":
            self.broadcast({"joined": "mallory"})
            self.set_state({"visits": self.state["visits"] + 1})
            raise Reject("not you", 4403)
        self.set_state({"visits": self.state["visits"] + 1})
        self.emit({"visit": self.state["visits"]})
        conn.send(
            {
                "request": conn.request.to_json(),
                "me_among_them": conn in self.connections,
                "connections": len(self.connections),
            }
        )
        self.broadcast({"joined": conn.request.query.get("nick")})

    def on_close(self, conn: Connection, code: int) -> None:
        self.broadcast({"left": conn.request.query.get("nick")})

    @callable(readonly=True)
    async def nicks(self) -> list[str | None]:
        return [c.request.query.get("nick") for c in self.connections]


def _seen(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """The message on_connect sent with what it saw."""
    return next(f["data"] for f in frames if f["type"] == "message" and "request" in f["data"])


# -- the request --------------------------------------------------------------------------------------
async def test_the_connection_carries_its_request_path_query_headers_and_client(data_dir: Path) -> None:
    app = create_app([Greeter], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/greeter/g1?nick=%E5%90%8D+x&tag=a&tag=b&cursor=0"
        async with connect(url, additional_headers={"X-Team": "blue"}) as ws:
            await ws.wait_for(lambda f: f["type"] == "message" and "request" in f["data"])
            seen = _seen(ws.frames)
    request = seen["request"]
    assert request["path"] == "/agents/greeter/g1"
    assert ["nick", "名 x"] in request["query"], "percent-decoded as UTF-8, + is a space"
    assert [p for p in request["query"] if p[0] == "tag"] == [["tag", "a"], ["tag", "b"]]
    assert ["x-team", "blue"] in request["headers"], "header names in lower case"
    assert request["client"][0] == "127.0.0.1"
    assert isinstance(request["client"][1], int)


def test_params_give_the_last_value_and_every_value_in_order() -> None:
    params = Params([("tag", "a"), ("nick", "ann"), ("tag", "b")])
    assert params["tag"] == "b"
    assert params.get("missing") is None
    assert params.getlist("tag") == ["a", "b"]
    assert params.multi_items() == [("tag", "a"), ("nick", "ann"), ("tag", "b")]
    assert dict(params) == {"tag": "b", "nick": "ann"}


# -- no credential --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spelling",
    [
        "token={t}",
        "tok%65n={t}",
        "%74%6F%6B%65%6E={t}",
        "token={dots}",
        "access={t}",
        "x=1&tok%65n={dots}",
        "token=%72{t1}",
        "next=%2572{t1}",
    ],
)
async def test_no_credential_reaches_the_request(data_dir: Path, spelling: str) -> None:
    """Every place a token can travel, at once, and a token under another name: none is in the
    request the actor sees, and the connection is the token's principal (the token was read)."""
    token = signer.issue("ann", ttl=600)
    other = signer.issue("bob", ttl=600)
    query = spelling.format(t=token, dots=token.replace(".", "%2E"), t1=token[1:])
    app = create_app([Greeter], data_dir=data_dir, authenticate=token_authenticate(signer))
    headers = {
        "Authorization": f"Bearer {other}",
        "Proxy-Authorization": "Basic c2VjcmV0",
        "Cookie": "session=s3cret-cookie",
        "X-Forwarded-Token": f"Bearer {other}",
        "X-Auth": "%72" + other[1:],  # the prefix's first letter percent-encoded
        "Referer": f"https://example.com/chat?token=%72{other[1:]}",
    }
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/greeter/g1?nick=ann&{query}"
        async with connect(
            url, additional_headers=headers, subprotocols=["roost", f"roost.token.{other}"]
        ) as ws:
            await ws.wait_for(lambda f: f["type"] == "message" and "request" in f["data"])
            seen = _seen(ws.frames)
    text = orjson.dumps(seen).decode()
    for secret in (token, other, token[1:], other[1:], "roost1", "c2VjcmV0", "s3cret-cookie", "%2E"):
        assert secret not in text, (secret, text)
    names = [name for name, _ in seen["request"]["headers"]]
    for name in ("authorization", "proxy-authorization", "cookie", "x-forwarded-token", "x-auth", "referer"):
        assert name not in names
    assert ["sec-websocket-protocol", "roost"] in seen["request"]["headers"], "the rest is kept"
    assert ["nick", "ann"] in seen["request"]["query"]


def test_no_credential_reaches_the_request_made_from_a_scope() -> None:
    token = signer.issue("ann", ttl=600)
    dots = token.replace(".", "%2E")
    scope = {
        "path": "/agents/greeter/g1",
        "query_string": f"tok%65n={token}&token={token}&%74oken=x&nick=ann&t={dots}".encode(),
        "headers": [
            (b"authorization", f"Bearer {token}".encode()),
            (b"cookie", b"a=b"),
            (b"sec-websocket-protocol", f"roost.token.{token}".encode()),
            (b"user-agent", b"test"),
        ],
        "client": ("10.0.0.1", 5000),
    }
    request = connect_request(scope)
    assert request.query.multi_items() == [("nick", "ann")]
    assert request.headers.multi_items() == [("user-agent", "test")]
    assert request.client == ("10.0.0.1", 5000)


def _encodings(token: str) -> dict[str, str]:
    """A token as a value may carry it: raw, with any character percent-encoded (hex in either case),
    encoded twice or three times over, inside a URL, with its prefix in capitals."""
    once = "%72" + token[1:]
    return {
        "raw": token,
        "bearer": f"Bearer {token}",
        "first letter encoded": once,
        "lower-case hex": token.replace(".", "%2e"),
        "every prefix letter encoded": "%72%6F%6f%73%74%31%2E" + token[7:],
        "twice": once.replace("%", "%25"),
        "three times": once.replace("%", "%2525"),
        "dots encoded twice": token.replace(".", "%252E"),
        "in a URL": f"https://example.com/chat?next=/x&token={once}",
        "in an encoded URL": "https%3A%2F%2Fexample.com%2F%3Ftoken%3D" + once.replace("%", "%25"),
        "capital prefix": "ROOST1" + token[6:],
        "capital prefix encoded": "%52OOST1" + token[6:],
    }


@pytest.mark.parametrize("form", list(_encodings("roost1.a.b")))
def test_no_value_holding_a_token_raw_or_percent_decoded_reaches_the_request(form: str) -> None:
    """A header, or a query value, that holds a token in its raw or percent-decoded text is left out,
    whatever is encoded and however many times (up to three); the values beside it are kept."""
    token = signer.issue("ann", ttl=600)
    value = _encodings(token)[form]
    query = "&".join(
        f"{name}={quote(value, safe='')}" for name in ("next", "state")
    )  # the query parser decodes one round of this
    scope = {
        "path": "/agents/greeter/g1",
        "query_string": f"nick=ann&{query}{'' if '&' in value else '&raw=' + value}".encode(),
        "headers": [(b"x-auth", value.encode()), (b"referer", value.encode()), (b"user-agent", b"t")],
    }
    request = connect_request(scope)
    assert request.query.multi_items() == [("nick", "ann")], form
    assert request.headers.multi_items() == [("user-agent", "t")], form


def test_a_percent_encoded_value_without_a_token_is_kept() -> None:
    """Percent-encoded values that hold no token are kept as they came (a query value decoded once, by
    the query parser; a header as it is)."""
    plain = "https%3A%2F%2Fexample.com%2F%3Fq%3Droost%2B1"
    scope = {"path": "/", "query_string": f"next={plain}".encode(), "headers": [(b"referer", plain.encode())]}
    request = connect_request(scope)
    assert request.query.multi_items() == [("next", "https://example.com/?q=roost+1")]
    assert request.headers.multi_items() == [("referer", plain)]


# -- bounded ----------------------------------------------------------------------------------------------
def test_a_request_over_16_kib_is_refused_but_credentials_do_not_count() -> None:
    big = "x" * MAX_REQUEST_BYTES
    with pytest.raises(RequestTooLarge, match="at most 16384"):
        connect_request({"path": "/", "query_string": b"", "headers": [(b"x-big", big.encode())]})
    with pytest.raises(RequestTooLarge):
        connect_request({"path": "/", "query_string": f"q={big}".encode(), "headers": []})
    fine = connect_request({"path": "/", "query_string": b"", "headers": [(b"cookie", big.encode())]})
    assert len(fine.headers) == 0


async def test_a_handshake_whose_request_is_over_16_kib_is_refused_with_4400(data_dir: Path) -> None:
    app = create_app([Greeter], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        big = {"X-Big": "y" * (MAX_REQUEST_BYTES + 1)}
        async with connect(f"ws://{addr}/agents/greeter/g1", additional_headers=big) as ws:
            frames, code = await ws.read_until_closed(timeout=10)
        assert code == 4400
        assert [(f["type"], f["code"]) for f in frames] == [("error", "bad_address")]
        async with connect(f"ws://{addr}/agents/greeter/g1?nick=ok") as ws:  # the server goes on
            assert (await ws.recv())["type"] == "welcome"


# -- self.connections during on_connect ------------------------------------------------------------------
async def test_the_arriving_connection_is_in_self_connections_during_on_connect(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Greeter)
    async with kit:
        ann = kit.connect("greeter", "g1", query={"nick": "ann"})
        bob = kit.connect("greeter", "g1", query={"nick": "bob"})
        await kit.settle()
        assert (_seen(ann.frames)["me_among_them"], _seen(ann.frames)["connections"]) == (True, 1)
        assert (_seen(bob.frames)["me_among_them"], _seen(bob.frames)["connections"]) == (True, 2)
        assert await ann.call("nicks") == ["ann", "bob"]


async def test_the_state_and_events_of_its_connect_turn_reach_the_arriving_connection_once(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Greeter)
    async with kit:
        ann = kit.connect("greeter", "g1", query={"nick": "ann"})  # seq 1 (state), 2 (event)
        await kit.settle()
        bob = kit.connect("greeter", "g1", cursor=2, query={"nick": "bob"})  # seq 3, 4 in its turn
        carl = kit.connect("greeter", "g1", query={"nick": "carl"})  # seq 5, 6; no cursor
        await kit.settle()
        # bob: the welcome after his on_connect, the replay of his own turn's frames, once each
        assert bob.frames[0]["type"] == "welcome"
        assert (bob.frames[0]["cursor"], bob.frames[0]["state"]) == (4, {"visits": 2})
        assert [f["seq"] for f in bob.frames if "seq" in f] == [3, 4, 5, 6]
        # carl (fresh): the welcome holds his turn's state; no frame of his own turn comes after it
        assert (carl.frames[0]["cursor"], carl.frames[0]["state"]) == (6, {"visits": 3})
        assert [f for f in carl.frames if "seq" in f] == []
        # ann sees every turn's frames as live frames, once
        assert [f["seq"] for f in ann.frames if "seq" in f] == [3, 4, 5, 6]


async def test_a_broadcast_from_on_connect_reaches_the_arriving_connection_after_its_welcome(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Greeter)
    async with kit:
        ann = kit.connect("greeter", "g1", query={"nick": "ann"})
        await kit.settle()
        bob = kit.connect("greeter", "g1", query={"nick": "bob"})
        await kit.settle()
        assert bob.frames[0]["type"] == "welcome"
        assert {"joined": "bob"} in [f["data"] for f in of_type(bob, "message")]
        assert [f["data"] for f in of_type(ann, "message")][-1] == {"joined": "bob"}


async def test_a_rejected_connection_leaves_self_connections_and_nobody_saw_its_broadcasts(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Greeter)
    async with kit:
        ann = kit.connect("greeter", "g1", query={"nick": "ann"})
        await kit.settle()
        mallory = kit.connect("greeter", "g1", query={"nick": "mallory"}, principal=Principal("m"))
        assert await mallory.sink.wait_closed() == (4403, "not you")
        bob = kit.connect("greeter", "g1", query={"nick": "bob"})
        await kit.settle()
        assert mallory.frames == []
        assert {"joined": "mallory"} not in [f["data"] for f in of_type(ann, "message")]
        assert {"left": "mallory"} not in [f["data"] for f in of_type(ann, "message")], "on_close ran"
        assert await bob.call("nicks") == ["ann", "bob"]
        assert _seen(bob.frames)["connections"] == 2
        assert bob.frames[0]["state"] == {"visits": 2}, "mallory's write was rolled back"


async def test_the_room_example_counts_its_members_without_adding_one_and_reads_the_nick(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Room)
    async with kit:
        ann = kit.connect("room", "r1", query={"nick": "ann"})
        await kit.settle()
        assert ann.frames[0]["state"]["members"] == 1
        assert ann.conn.state == {"nick": "ann"}
        bob = kit.connect("room", "r1")
        await kit.settle()
        assert bob.frames[0]["state"]["members"] == 2
        assert bob.conn.state == {"nick": "anonymous"}, "without ?nick=, the principal's id"
        bob.disconnect()
        await kit.settle()
        assert of_type(ann, "state")[-1]["state"]["members"] == 1
