"""The Cloudflare Agents dialect (``roost.transport.cloudflare``) over real sockets: what an unchanged
Cloudflare client (``AgentClient`` on ``PartySocket``) sends and expects, frame by frame. The same
against the real npm packages in Node: ``tests/test_cloudflare_clients.py``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import websockets

from roost.actors import Actor, Connection, RpcError, callable
from roost.examples.kinds import KINDS
from roost.scheduler import FakeClock
from roost.transport import RoostApp, create_app
from roost.transport.cloudflare import (
    CloudflareCursors,
    CloudflareSink,
    close_for_cloudflare,
    dialect_of,
    inbound,
    requested_dialect,
)
from roost.transport.limits import Limits
from roost.transport.security import claims_authorize, token_authenticate
from roost.transport.tokens import TokenSigner
from tests.support import serve_in_process

NO_RATES = Limits(conn_rate=None, principal_rate=None)
signer = TokenSigner("c" * 40)


class Board(Actor):
    """A kind that takes state from clients (Cloudflare's ``setState``), within a rule."""

    kind = "board"
    initial_state = {"items": []}
    seen: list[Any] = []

    @callable
    def set_state_from_client(self, state: Any) -> None:
        if not isinstance(state, dict) or not isinstance(state.get("items"), list):
            raise RpcError("invalid_state", "items must be a list")  # code and message reach the client
        self.set_state(state)

    @callable
    def note(self, text: str) -> int:
        self.emit({"note": text})
        return len(text)

    def on_message(self, conn: Connection, data: Any) -> None:
        type(self).seen.append(data)
        conn.send({"echo": data})


@pytest.fixture
async def addr(data_dir: Path) -> AsyncIterator[str]:
    app = create_app([*KINDS, Board], data_dir=data_dir, limits=NO_RATES)
    async with serve_in_process(app) as where:
        yield where
    await app.aclose()


def cf_url(addr: str, kind: str, name: str, pk: str | None = None, **query: str) -> str:
    """What PartySocket connects to: ``/agents/{party}/{room}?_pk=<its id>``."""
    params = "&".join(f"{k}={v}" for k, v in {"_pk": pk or uuid.uuid4().hex, **query}.items())
    return f"ws://{addr}/agents/{kind}/{name}?{params}"


async def frames(ws: Any, n: int) -> list[Any]:
    """The next ``n`` frames (JSON decoded where they are JSON)."""
    got = []
    for _ in range(n):
        async with asyncio.timeout(10):
            raw = await ws.recv()
        try:
            got.append(orjson.loads(raw))
        except orjson.JSONDecodeError:
            got.append(raw)
    return got


async def read_until_closed(ws: Any) -> None:
    """Read (at most ten seconds a frame) until the server closes."""
    while True:
        async with asyncio.timeout(10):
            await ws.recv()


async def send(ws: Any, frame: Any) -> None:
    """A text frame of JSON, as a Cloudflare client sends it."""
    await ws.send(orjson.dumps(frame).decode())


def test_the_dialect_is_cloudflares_for_a_partysocket_without_a_cursor() -> None:
    assert dialect_of(None, "pk", None) == "cf"
    assert dialect_of(None, "pk", 5) == "roost"  # a Roost client on PartySocket resumes with a cursor
    assert dialect_of(None, None, None) == "roost"
    assert dialect_of("roost", "pk", None) == "roost"
    assert dialect_of("cf", None, None) == "cf"


async def test_a_cloudflare_client_gets_identity_then_state_then_its_mcp_servers(addr: str) -> None:
    async with websockets.connect(cf_url(addr, "counter", "id1")) as ws:
        identity, state, mcp = await frames(ws, 3)
    assert identity == {"type": "cf_agent_identity", "name": "id1", "agent": "counter"}
    assert state == {"type": "cf_agent_state", "state": {"count": 0}}
    assert mcp["type"] == "cf_agent_mcp_servers"
    assert mcp["mcp"]["servers"] == {}


async def test_calls_are_answered_as_cloudflare_answers_them(addr: str) -> None:
    async with websockets.connect(cf_url(addr, "counter", "rpc1")) as ws:
        await frames(ws, 3)
        await send(ws, {"type": "rpc", "id": "a", "method": "increment", "args": [2]})
        state, result = await frames(ws, 2)
        assert state == {"type": "cf_agent_state", "state": {"count": 2}}
        assert result == {"type": "rpc", "id": "a", "success": True, "result": 2, "done": True}
        await send(ws, {"type": "rpc", "id": "b", "method": "count_to", "args": [2]})
        streamed = [f for f in await frames(ws, 5) if f["type"] == "rpc"]
        assert streamed == [
            {"type": "rpc", "id": "b", "success": True, "result": 3, "done": False},
            {"type": "rpc", "id": "b", "success": True, "result": 4, "done": False},
            {"type": "rpc", "id": "b", "success": True, "result": None, "done": True},
        ]
        await send(ws, {"type": "rpc", "id": "c", "method": "nope", "args": []})
        (failed,) = await frames(ws, 1)
        assert failed["success"] is False
        assert failed["error"].startswith("method_not_found: ")
        await send(ws, {"type": "rpc", "id": "d", "method": "increment", "args": ["x"]})
        (bad,) = await frames(ws, 1)
        assert bad["success"] is False
        assert bad["error"].startswith("invalid_arguments: ")


async def test_client_state_is_refused_unless_the_kind_takes_it(addr: str) -> None:
    async with websockets.connect(cf_url(addr, "counter", "st1")) as ws:
        await frames(ws, 3)
        await send(ws, {"type": "cf_agent_state", "state": {"count": 99}})
        (refused,) = await frames(ws, 1)
        assert refused == {
            "type": "cf_agent_state_error",
            "error": "state_refused: this actor takes no state from clients",
        }
        await send(ws, {"type": "rpc", "id": "g", "method": "get", "args": []})
        (got,) = await frames(ws, 1)
        assert got["result"] == 0  # unchanged
    async with (
        websockets.connect(cf_url(addr, "board", "b1")) as one,
        websockets.connect(cf_url(addr, "board", "b1")) as two,
    ):
        await frames(one, 3)
        await frames(two, 3)
        await send(one, {"type": "cf_agent_state", "state": {"items": ["milk"]}})
        assert await frames(two, 1) == [{"type": "cf_agent_state", "state": {"items": ["milk"]}}]
        await send(one, {"type": "cf_agent_state", "state": {"items": "milk"}})
        assert await frames(one, 2) == [
            {"type": "cf_agent_state", "state": {"items": ["milk"]}},  # the first, accepted
            {"type": "cf_agent_state_error", "error": "invalid_state: items must be a list"},
        ]


async def test_a_read_only_principal_cannot_set_state_from_a_cloudflare_client(data_dir: Path) -> None:
    app = create_app(
        [Board],
        data_dir=data_dir,
        authenticate=token_authenticate(signer),
        authorize=claims_authorize,
        limits=NO_RATES,
    )
    writer, reader = signer.issue("w", ttl=600), signer.issue("r", ttl=600, read_only=True)
    async with serve_in_process(app) as where:
        async with websockets.connect(cf_url(where, "board", "ro", token=writer)) as ws:
            await frames(ws, 3)
        async with websockets.connect(cf_url(where, "board", "ro", token=reader)) as ws:
            await frames(ws, 3)
            await send(ws, {"type": "cf_agent_state", "state": {"items": ["x"]}})
            (refused,) = await frames(ws, 1)
            assert refused["type"] == "cf_agent_state_error"
            assert refused["error"].startswith("forbidden: ")
    await app.aclose()


async def test_messages_go_both_ways_as_their_data(addr: str) -> None:
    Board.seen.clear()
    async with websockets.connect(cf_url(addr, "board", "m1")) as ws:
        await frames(ws, 3)
        await ws.send("hello, not JSON")
        await send(ws, {"type": "custom", "n": 1})
        got = await frames(ws, 2)
    assert Board.seen == ["hello, not JSON", {"type": "custom", "n": 1}]
    assert got == [{"echo": "hello, not JSON"}, {"echo": {"type": "custom", "n": 1}}]


@pytest.fixture
async def exact(data_dir: Path) -> AsyncIterator[tuple[str, RoostApp]]:
    """A server whose Cloudflare resume points count every frame the socket took (no grace)."""
    app = create_app([*KINDS, Board], data_dir=data_dir / "exact", limits=NO_RATES)
    app.cloudflare_cursors.grace = 0.0
    async with serve_in_process(app) as where:
        yield where, app
    await app.aclose()


async def test_a_reconnect_with_the_same_partysocket_id_resumes_after_what_it_was_sent(
    exact: tuple[str, RoostApp],
) -> None:
    addr, _ = exact
    pk = uuid.uuid4().hex
    async with websockets.connect(cf_url(addr, "board", "r1", pk)) as ws:
        await frames(ws, 3)
        await send(ws, {"type": "rpc", "id": "1", "method": "note", "args": ["one"]})
        event, _ = await frames(ws, 2)
        assert event["type"] == "roost_event"
        assert event["event"] == {"note": "one"}
        first_seq = event["seq"]
    async with websockets.connect(cf_url(addr, "board", "r1")) as other:  # another client writes meanwhile
        await frames(other, 3)
        await send(other, {"type": "rpc", "id": "2", "method": "note", "args": ["two"]})
        await frames(other, 2)
    async with websockets.connect(cf_url(addr, "board", "r1", pk)) as ws:
        identity, state, _mcp, missed = await frames(ws, 4)
        assert identity["type"] == "cf_agent_identity"
        assert state["type"] == "cf_agent_state"
        assert missed == {"type": "roost_event", "seq": first_seq + 1, "event": {"note": "two"}}


def test_a_replayed_state_older_than_the_welcomes_is_never_sent() -> None:
    sink = CloudflareSink(None, 10, 1 << 20)
    welcome = {"type": "welcome", "actor": {"kind": "k", "name": "n"}, "state": {"v": 3}, "cursor": 7}
    assert len(sink.translate(orjson.dumps(welcome).decode())) == 3
    assert sink.translate(orjson.dumps({"type": "state", "seq": 5, "state": {"v": 1}}).decode()) == []
    newer = sink.translate(orjson.dumps({"type": "state", "seq": 8, "state": {"v": 4}}).decode())
    assert [orjson.loads(t) for t in newer] == [{"type": "cf_agent_state", "state": {"v": 4}}]


def test_the_remembered_ids_are_bounded() -> None:
    cursors = CloudflareCursors(limit=3)
    for i in range(10):
        cursors.sent(("k", "n", str(i)), i)
    assert len(cursors) == 3
    assert cursors.get(("k", "n", "0")) is None
    assert cursors.get(("k", "n", "9")) == 9
    cursors.sent(("k", "n", "9"), 4)  # never moves back
    assert cursors.get(("k", "n", "9")) == 9


def test_bad_client_frames_become_messages_not_failures() -> None:
    assert orjson.loads(inbound("{not json") or "") == {"type": "message", "data": "{not json"}
    assert orjson.loads(inbound("[1, 2]") or "") == {"type": "message", "data": [1, 2]}
    assert orjson.loads(inbound('{"type": "cf_agent_state"}') or "")["args"] == [None]
    assert inbound(None) is None


@pytest.mark.parametrize("value", ["", "x" * 129])
async def test_a_bad_partysocket_id_is_a_bad_address(addr: str, value: str) -> None:
    async with websockets.connect(f"ws://{addr}/agents/counter/x?_pk={value}") as ws:
        (refused,) = await frames(ws, 1)
        assert refused["code"] == "bad_address"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4400  # terminal for Cloudflare's client too: it does not retry


async def test_a_client_that_closes_without_reading_gets_what_it_missed_on_its_next_connect(
    addr: str,
) -> None:
    """What a client that closes drops (as PartySocket's reconnect does) was written to its socket but
    never read: its next connection gets it again (a frame within the grace is a repeat, never a
    gap)."""
    pk = uuid.uuid4().hex
    away = await websockets.connect(cf_url(addr, "board", "gone1", pk))
    await frames(away, 3)
    async with websockets.connect(cf_url(addr, "board", "gone1")) as other:
        await frames(other, 3)
        for i in range(5):
            await send(other, {"type": "rpc", "id": str(i), "method": "note", "args": [f"n{i}"]})
        got = await frames(other, 10)  # its own five events and five answers: all committed
    written = [f["seq"] for f in got if f["type"] == "roost_event"]
    await away.close()  # without reading what came meanwhile
    async with websockets.connect(cf_url(addr, "board", "gone1", pk)) as back:
        replayed = await frames(back, 3 + len(written))
    assert [f["seq"] for f in replayed[3:]] == written


async def test_frames_a_slow_reader_never_took_are_sent_again() -> None:
    """A frame queued for a socket that stops taking them, then closed as a slow reader, was never
    written: the id resumes after the last one the socket took."""
    taken: list[str] = []

    async def send_some(message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            if len(taken) == 3:
                await asyncio.Event().wait()  # the client stops reading
            taken.append(message["text"])

    cursors = CloudflareCursors(grace=0.0)
    key = ("board", "slow", "pk")
    sink = CloudflareSink(send_some, 10, 1 << 20, cursors=cursors, key=key)
    sink.start()
    welcome = {"type": "welcome", "actor": {"kind": "board", "name": "slow"}, "state": {}, "cursor": 0}
    sink.send_text(orjson.dumps(welcome).decode())
    for seq in range(1, 51):
        sink.send_text(orjson.dumps({"type": "event", "seq": seq, "event": {"n": seq}}).decode())
    await asyncio.sleep(0)
    sink.overflow("slow consumer")
    await sink.finish()
    assert len(taken) == 3  # identity, state, mcp servers: no event reached the socket
    assert cursors.get(key) == 0  # not 50


async def test_a_cloudflare_client_is_told_when_it_cannot_resume_after_what_it_had(data_dir: Path) -> None:
    class Short(Board):
        kind = "shortlog"
        log_retention = 10

    app = create_app([Short], data_dir=data_dir, limits=NO_RATES)
    app.cloudflare_cursors.grace = 0.0
    pk = uuid.uuid4().hex
    async with serve_in_process(app) as where:
        async with websockets.connect(cf_url(where, "shortlog", "s", pk)) as ws:
            await frames(ws, 3)
        async with websockets.connect(cf_url(where, "shortlog", "s")) as other:
            await frames(other, 3)
            for i in range(30):
                await send(other, {"type": "rpc", "id": str(i), "method": "note", "args": ["x"]})
            await frames(other, 60)
        async with websockets.connect(cf_url(where, "shortlog", "s", pk)) as back:
            told = (await frames(back, 4))[3]
    await app.aclose()
    assert told["type"] == "roost_resume"
    assert told["reason"] == "cursor_expired"


async def test_an_expired_token_closes_a_cloudflare_connection_with_1000_so_it_reconnects(
    data_dir: Path,
) -> None:
    """Cloudflare's client takes 4401 as final: on an open connection a token's expiry closes with
    1000 (it reconnects, asking for a fresh token); at the handshake it is 4401 as for every client."""
    clock = FakeClock()
    app = create_app(
        [Board],
        data_dir=data_dir,
        clock=clock,
        authenticate=token_authenticate(signer, clock=clock.now),
        limits=NO_RATES,
    )
    token = signer.issue("ann", ttl=5, now=clock.now())
    async with serve_in_process(app) as where:
        async with websockets.connect(cf_url(where, "board", "exp", token=token)) as ws:
            await frames(ws, 3)
            clock.advance(6)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await read_until_closed(ws)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1000
        assert "fresh token" in closed.value.rcvd.reason
        async with websockets.connect(cf_url(where, "board", "exp", token=token)) as again:
            await frames(again, 1)
            with pytest.raises(websockets.ConnectionClosed) as refused:
                await again.recv()
        assert refused.value.rcvd is not None
        assert refused.value.rcvd.code == 4401
    await app.aclose()


@pytest.mark.parametrize(
    ("code", "welcomed", "sent"),
    [
        (1000, True, 4000),  # the actor was deleted, or closed the connection: do not come back
        (1009, True, 4009),  # a frame too big
        (4400, False, 4400),
        (4403, True, 4403),
        (4404, False, 4404),
        (4401, False, 4401),  # a bad token at the handshake
        (4401, True, 1000),  # a token that expired on an open connection: reconnect with a fresh one
        (1001, True, 1001),  # shutdown
        (1011, True, 1011),
        (1012, True, 1012),  # restart
        (1013, True, 1013),  # overloaded, a slow reader
    ],
)
def test_final_means_final_for_cloudflares_client_too(code: int, welcomed: bool, sent: int) -> None:
    """Cloudflare's client stops only after 1008 and 4000-4999: each of Roost's closes goes out with a
    code it takes as Roost's clients do (final: 1000, 1009, 4400-4499; else it reconnects)."""
    assert close_for_cloudflare(code, "why", welcomed)[0] == sent
    final_for_roost = code in (1000, 1009) or 4400 <= code <= 4499
    final_for_cloudflare = sent == 1008 or 4000 <= sent <= 4999
    assert final_for_cloudflare == (final_for_roost and not (code == 4401 and welcomed))


async def test_a_deleted_actors_cloudflare_connections_close_with_4000_so_the_client_stops(addr: str) -> None:
    async with websockets.connect(cf_url(addr, "counter", "del1")) as ws:
        await frames(ws, 3)
        async with httpx.AsyncClient() as http:
            deleted = await http.delete(f"http://{addr}/admin/actors/counter/del1")
        assert deleted.status_code == 200
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await read_until_closed(ws)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4000, "actor deleted")


async def test_a_frame_too_big_closes_a_cloudflare_connection_with_4009(data_dir: Path) -> None:
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATES, max_frame_bytes=1000)
    async with serve_in_process(app) as where, websockets.connect(cf_url(where, "counter", "big1")) as ws:
        await frames(ws, 3)
        await send(ws, {"type": "rpc", "id": "a", "method": "increment", "args": ["x" * 2000]})
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await read_until_closed(ws)
    await app.aclose()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4009


async def test_a_refused_cloudflare_connection_is_told_in_its_dialect(addr: str) -> None:
    async with websockets.connect(cf_url(addr, "no-such-kind", "x")) as ws:
        (told,) = await frames(ws, 1)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert told["type"] == "roost_error"
    assert told["code"] == "unknown_kind"
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4404
    assert requested_dialect(b"_pk=" + b"x" * 200) == "cf"  # a query refused as bad is still told so
    assert requested_dialect(b"_pk=a&cursor=3") == "roost"


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"args": "not a list"}, "bad_frame: rpc: args: must be a list"),
        ({"kwargs": [1]}, "bad_frame: rpc: kwargs: must be an object"),
        ({"method": ""}, "bad_frame: rpc: method: must be a string of 1 to 128 characters"),
    ],
)
async def test_every_call_is_answered_a_bad_frame_for_its_id(
    addr: str, bad: dict[str, Any], error: str
) -> None:
    """A call refused as a bad frame is answered as a failed ``rpc`` for its id: Cloudflare's client
    rejects that call at once with the reason (an answer without the id left it to its timeout)."""
    async with websockets.connect(cf_url(addr, "counter", "bad1")) as ws:
        await frames(ws, 3)
        await send(ws, {"type": "rpc", "id": "b1", "method": "increment", "args": [], **bad})
        (answer,) = await frames(ws, 1)
    assert answer == {"type": "rpc", "id": "b1", "success": False, "error": error}


async def test_every_call_is_answered_whatever_its_id_looks_like(addr: str) -> None:
    """A client's own call whose id starts as the server's state calls do is answered as any call;
    a ``cf_agent_state`` on the same connection is still told as Cloudflare tells it."""
    async with websockets.connect(cf_url(addr, "board", "ids1")) as ws:
        await frames(ws, 3)
        await send(ws, {"type": "rpc", "id": "cf-state-1", "method": "note", "args": ["hi"]})
        answered = [f for f in await frames(ws, 2) if f["type"] == "rpc"]
        assert answered == [{"type": "rpc", "id": "cf-state-1", "success": True, "result": 2, "done": True}]
        await send(ws, {"type": "rpc", "id": "cf-state-2", "method": "nope", "args": []})
        (failed,) = await frames(ws, 1)
        assert (failed["id"], failed["success"]) == ("cf-state-2", False)
        await send(ws, {"type": "cf_agent_state", "state": {"items": "no"}})
        (refused,) = await frames(ws, 1)
        assert refused == {"type": "cf_agent_state_error", "error": "invalid_state: items must be a list"}
