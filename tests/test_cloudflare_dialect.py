"""The Cloudflare Agents dialect (``roost.transport.cloudflare``) over real sockets: what an unchanged
Cloudflare client (``AgentClient`` on ``PartySocket``) sends and expects, frame by frame. The same
against the real npm packages in Node: ``tests/test_cloudflare_clients.py``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import websockets

from roost.actors import Actor, Connection, RpcError, callable
from roost.examples.kinds import KINDS
from roost.transport import create_app
from roost.transport.cloudflare import CloudflareCursors, CloudflareSink, dialect_of, inbound
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


async def test_a_reconnect_with_the_same_partysocket_id_resumes_after_what_it_was_sent(addr: str) -> None:
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
