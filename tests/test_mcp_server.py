"""Actors served as MCP servers (``roost.transport.mcp``), driven by the official Python SDK's client
over real sockets, and by raw HTTP where the SDK's client would hide what the server answered."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import httpx2
import mcp_types as types
import orjson
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from roost.actors import ANONYMOUS, Actor, callable, callables_of
from roost.examples.kinds import KINDS
from roost.scheduler.clock import FakeClock
from roost.testing import until
from roost.transport import RoostApp, create_app, mcp_asks
from roost.transport import mcp as mcp_module
from roost.transport.limits import Limits
from roost.transport.mcp import IDLE_S
from roost.transport.mcp_asks import MAX_ANSWER, MAX_ASKS, elicit, sample
from roost.transport.mcp_events import BINDING, ActorEventStore
from roost.transport.mcp_tools import RESOURCE_NOT_FOUND, Binding
from roost.transport.security import claims_authorize, token_authenticate
from roost.transport.tokens import TokenSigner
from tests.support import serve_in_process, server_process

SECRET = "m" * 40
signer = TokenSigner(SECRET)
NO_RATES = Limits(conn_rate=None, principal_rate=None)
ACCEPT = {"accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


class Point(BaseModel):
    x: int
    y: int


@contextlib.asynccontextmanager
async def mcp_session(url: str, token: str | None = None, **options: Any) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session on ``url`` (with a bearer token if given; ``options`` for
    the :class:`ClientSession`)."""
    headers = {"authorization": f"Bearer {token}"} if token else None
    async with (
        httpx2.AsyncClient(headers=headers, timeout=20) as http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(streams[0], streams[1], **options) as session,
    ):
        await session.initialize()
        yield session


def text_of(result: Any) -> str:
    text: str = result.content[0].text
    return text


def sse_messages(body: str) -> list[tuple[str | None, Any]]:
    """``(event id, JSON message or None for a priming event)`` of an SSE body."""
    events: list[tuple[str | None, Any]] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.removeprefix(" ")
        if "id" in fields or "data" in fields:
            data = fields.get("data", "")
            events.append((fields.get("id"), orjson.loads(data) if data.strip() else None))
    return events


async def open_raw(http: httpx.AsyncClient, url: str, **headers: str) -> str:
    """Initialize a session with raw requests; its session id."""
    opened = await http.post(url, json=INIT, headers={**ACCEPT, **headers})
    assert opened.status_code == 200, opened.text
    sid = opened.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    done = await http.post(url, json=note, headers={**ACCEPT, "mcp-session-id": sid, **headers})
    assert done.status_code == 202
    return sid


@pytest.fixture
async def mcp_app(data_dir: Path) -> RoostApp:
    return create_app(KINDS, data_dir=data_dir, limits=NO_RATES)


@pytest.fixture
async def addr(mcp_app: RoostApp) -> AsyncIterator[str]:
    async with serve_in_process(mcp_app) as where:
        yield where


def secured(data_dir: Path) -> RoostApp:
    return create_app(
        KINDS,
        data_dir=data_dir,
        authenticate=token_authenticate(signer),
        authorize=claims_authorize,
        limits=NO_RATES,
    )


async def test_a_tool_call_changes_the_actor_seen_over_http(addr: str) -> None:
    name = f"c-{uuid.uuid4().hex[:8]}"
    async with mcp_session(f"http://{addr}/mcp/counter/{name}") as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert {"increment", "get", "count_to", "increment_later", "schedules"} <= set(tools)
        assert tools["get"].annotations is not None
        assert tools["get"].annotations.read_only_hint is True
        assert tools["increment"].annotations is None
        schema = tools["increment"].input_schema
        assert schema["properties"]["by"] == {"type": "integer", "default": 1}
        assert schema["additionalProperties"] is False
        result = await mcp.call_tool("increment", {"by": 2})
        assert not result.is_error
        assert result.structured_content == {"result": 2}
        async with httpx.AsyncClient(timeout=10) as http:
            seen = (await http.get(f"http://{addr}/agents/counter/{name}")).json()
            assert seen["state"] == {"count": 2}
            called = await http.post(f"http://{addr}/agents/counter/{name}/rpc/increment", json=[5])
            assert called.json() == {"ok": True, "result": 7}
        state = await mcp.read_resource(f"roost://counter/{name}/state")
        assert orjson.loads(state.contents[0].text) == {"state": {"count": 7}, "cursor": 2}  # type: ignore[union-attr]


async def test_a_refused_call_is_an_error_result_and_writes_nothing(addr: str) -> None:
    name = f"c-{uuid.uuid4().hex[:8]}"
    async with mcp_session(f"http://{addr}/mcp/counter/{name}") as mcp:
        bad = await mcp.call_tool("increment", {"by": "two"})
        assert bad.is_error
        assert text_of(bad).startswith("invalid_arguments: increment: argument 'by'")
        with pytest.raises(MCPError) as unknown:
            await mcp.call_tool("no_such_tool", {})
        assert "unknown tool" in unknown.value.error.message
        streamed = await mcp.call_tool("count_to", {"n": 3})
        assert streamed.structured_content == {"result": None, "chunks": [1, 2, 3]}


async def test_opening_a_session_creates_its_actor_as_a_websocket_connect_does(addr: str) -> None:
    name = f"c-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(f"http://{addr}/agents/counter/{name}")).status_code == 404
    async with mcp_session(f"http://{addr}/mcp/counter/{name}") as mcp:
        state = await mcp.read_resource(f"roost://counter/{name}/state")
        assert orjson.loads(state.contents[0].text)["state"] == {"count": 0}  # type: ignore[union-attr]
        assert (await mcp.call_tool("get", {})).structured_content == {"result": 0}
        with pytest.raises(MCPError) as missing:  # another actor's state is no resource of this session
            await mcp.read_resource("roost://counter/someone-else/state")
        assert missing.value.error.code == RESOURCE_NOT_FOUND
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(f"http://{addr}/agents/counter/{name}")).json()["state"] == {"count": 0}
        assert (await http.get(f"http://{addr}/agents/counter/someone-else")).status_code == 404


async def test_a_read_only_principal_cannot_open_a_session_on_an_actor_never_created(data_dir: Path) -> None:
    app = secured(data_dir)
    reader = signer.issue("rita", ttl=600, read_only=True)
    headers = {**ACCEPT, "authorization": f"Bearer {reader}"}
    async with serve_in_process(app) as where, httpx.AsyncClient(timeout=10) as http:
        refused = await http.post(f"http://{where}/mcp/counter/never", json=INIT, headers=headers)
        assert refused.status_code == 403
        assert refused.json()["error"]["message"] == "forbidden: read-only principals cannot create actors"
        assert not app.registry.exists("counter", "never")
        per_session = await http.post(f"http://{where}/mcp/counter", json=INIT, headers=headers)
        assert per_session.status_code == 403
    await app.aclose()


async def test_each_session_on_the_kind_has_its_own_actor(addr: str) -> None:
    url = f"http://{addr}/mcp/counter"
    async with mcp_session(url) as one, mcp_session(url) as two:
        assert (await one.call_tool("increment", {})).structured_content == {"result": 1}
        assert (await two.call_tool("increment", {})).structured_content == {"result": 1}
        assert (await one.call_tool("increment", {"by": 4})).structured_content == {"result": 5}
        mine = [r.uri for r in (await one.list_resources()).resources if r.uri.startswith("roost://counter/")]
        theirs = [
            r.uri for r in (await two.list_resources()).resources if r.uri.startswith("roost://counter/")
        ]
        assert mine != theirs
        state = await one.read_resource(mine[0])
        assert orjson.loads(state.contents[0].text)["state"] == {"count": 5}  # type: ignore[union-attr]


async def test_tokens_tenants_and_read_only_principals_apply(data_dir: Path) -> None:
    app = secured(data_dir)
    async with serve_in_process(app) as where:
        url = f"http://{where}/mcp/counter/shared"
        async with httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(url, json=INIT, headers=ACCEPT)
            assert refused.status_code == 401
            assert refused.json()["error"]["message"].startswith("unauthenticated")
        ann = signer.issue("ann", ttl=600, tenant="t1")
        async with mcp_session(url, ann) as mcp:
            assert (await mcp.call_tool("increment", {"by": 3})).structured_content == {"result": 3}
        bob = signer.issue("bob", ttl=600, tenant="t2")  # another tenant: another actor of that name
        async with mcp_session(url, bob) as mcp:
            assert (await mcp.call_tool("increment", {})).structured_content == {"result": 1}
        reader = signer.issue("rita", ttl=600, tenant="t1", read_only=True)
        async with mcp_session(url, reader) as mcp:
            refused_call = await mcp.call_tool("increment", {})
            assert refused_call.is_error
            assert text_of(refused_call).startswith("forbidden: read-only")
            assert (await mcp.call_tool("get", {})).structured_content == {"result": 3}
        other_kind = signer.issue("cal", ttl=600, kinds=["room"])
        async with httpx.AsyncClient(timeout=10) as http:
            headers = {**ACCEPT, "authorization": f"Bearer {other_kind}"}
            assert (await http.post(url, json=INIT, headers=headers)).status_code == 403
    await app.aclose()


async def test_a_browser_origin_that_is_not_allowed_is_refused(addr: str, data_dir: Path) -> None:
    url = f"http://{addr}/mcp/counter/o1"
    async with httpx.AsyncClient(timeout=10) as http:
        evil = await http.post(url, json=INIT, headers={**ACCEPT, "origin": "http://evil.example.com"})
        assert evil.status_code == 403
        assert "origin_refused" in evil.json()["error"]["message"]
        rebound = await http.post(
            url,
            json=INIT,
            headers={**ACCEPT, "origin": "http://evil.example.com", "host": "evil.example.com"},
        )
        assert rebound.status_code == 403
        local = await http.post(url, json=INIT, headers={**ACCEPT, "origin": f"http://{addr}"})
        assert local.status_code == 200
    listed = create_app(KINDS, data_dir=data_dir / "listed", origins=["https://app.example"], limits=NO_RATES)
    async with serve_in_process(listed) as where, httpx.AsyncClient(timeout=10) as http:
        url = f"http://{where}/mcp/counter/o1"
        ok = await http.post(url, json=INIT, headers={**ACCEPT, "origin": "https://app.example"})
        assert ok.status_code == 200
        local = await http.post(url, json=INIT, headers={**ACCEPT, "origin": f"http://{where}"})
        assert local.status_code == 403  # with a list, the list alone decides
    await listed.aclose()


async def test_an_unknown_session_id_is_404_and_other_sessions_go_on(addr: str) -> None:
    url = f"http://{addr}/mcp/counter/s1"
    async with mcp_session(url) as mcp, httpx.AsyncClient(timeout=10) as http:
        await mcp.call_tool("increment", {})
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        answer = await http.post(url, json=listing, headers={**ACCEPT, "mcp-session-id": "no-such-session"})
        assert answer.status_code == 404
        assert answer.json()["error"]["message"] == "not_found: Session not found"
        assert (await mcp.call_tool("increment", {})).structured_content == {"result": 2}


async def test_a_session_answers_only_on_its_path_and_to_its_principal(data_dir: Path) -> None:
    app = secured(data_dir)
    ann, bob = signer.issue("ann", ttl=600), signer.issue("bob", ttl=600)
    async with serve_in_process(app) as where, httpx.AsyncClient(timeout=10) as http:
        base = f"http://{where}/mcp/counter"
        sid = await open_raw(http, f"{base}/a", authorization=f"Bearer {ann}")
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        own = {**ACCEPT, "mcp-session-id": sid, "authorization": f"Bearer {ann}"}
        assert (await http.post(f"{base}/a", json=listing, headers=own)).status_code == 200
        assert (await http.post(f"{base}/b", json=listing, headers=own)).status_code == 404
        theirs = {**own, "authorization": f"Bearer {bob}"}
        assert (await http.post(f"{base}/a", json=listing, headers=theirs)).status_code == 404
        assert (await http.post(f"{base}/a", json=listing, headers=own)).status_code == 200
    await app.aclose()


async def test_a_request_before_initialize_is_a_json_rpc_error(addr: str) -> None:
    url = f"http://{addr}/mcp/counter/early"
    async with httpx.AsyncClient(timeout=10) as http:
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "increment"}}
        early = await http.post(url, json=call, headers=ACCEPT)
        assert early.status_code == 400
        body = early.json()
        assert body["jsonrpc"] == "2.0"
        assert "Missing session ID" in body["error"]["message"]
        as_json = {**ACCEPT, "content-type": "application/json"}
        garbage = await http.post(url, content=b"{not json", headers=as_json)
        assert garbage.status_code == 400
        assert garbage.json()["error"]["code"] == -32700
        per_session = await http.post(f"http://{addr}/mcp/counter", json=call, headers=ACCEPT)
        assert per_session.status_code == 400
        drafted = await http.post(url, json=call, headers={**ACCEPT, "mcp-protocol-version": "2026-07-28"})
        assert drafted.status_code == 400
        assert "'2026-07-28' is not served" in drafted.json()["error"]["message"]
        big = await http.post(url, content=b" " * (2 << 20), headers=as_json)
        assert big.status_code == 413
    async with mcp_session(url) as mcp:  # the server goes on serving
        assert (await mcp.call_tool("increment", {})).structured_content == {"result": 1}
    async with httpx.AsyncClient(timeout=10) as http:  # and nothing was created by the early call
        assert (await http.get(f"http://{addr}/agents/counter/early")).json()["state"] == {"count": 1}


async def test_an_sse_stream_resumes_from_the_actors_own_file(mcp_app: RoostApp, addr: str) -> None:
    url = f"http://{addr}/mcp/counter/r1"
    async with httpx.AsyncClient(timeout=10) as http:
        sid = await open_raw(http, url)
        session = {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "increment", "arguments": {}},
        }
        answered = await http.post(url, json=call, headers=session)
        events = sse_messages(answered.text)
        assert events[0][1] is None
        assert events[0][0]
        assert events[-1][1]["id"] == 7
        assert mcp_app.mcp.events is not None
        stored = await mcp_app.mcp.events.count("counter", "r1")
        assert stored >= 3  # the answer to initialize, this call's priming event and its answer
        replay: list[tuple[str | None, Any]] = []
        resume = {"accept": "text/event-stream", "mcp-session-id": sid, "last-event-id": str(events[0][0])}
        async with http.stream("GET", url, headers=resume) as stream:
            assert stream.status_code == 200
            buffer = ""
            async for piece in stream.aiter_text():
                buffer += piece
                replay = [e for e in sse_messages(buffer) if e[1] is not None]
                if replay:
                    break
        assert replay[0][1] == events[-1][1]  # the answer, replayed once, from the actor's file


def binding(key: str, name: str = "ev") -> Binding:
    return Binding("counter", name, name, ANONYMOUS, f"/mcp/counter/{name}", key)


async def stored(store: ActorEventStore, bound: Binding, stream: str, method: str | None) -> str:
    """Store one event (a notification ``method``, or a priming event) as session ``bound``."""
    from mcp_types import JSONRPCNotification

    token = BINDING.set(bound)
    try:
        message = None if method is None else JSONRPCNotification(jsonrpc="2.0", method=method)
        return await store.store_event(stream, message)
    finally:
        BINDING.reset(token)


async def replayed(store: ActorEventStore, bound: Binding, after: str) -> tuple[str | None, list[str]]:
    """What a replay after ``after`` sends session ``bound``: (its stream, the methods)."""
    sent: list[str] = []

    async def collect(event: Any) -> None:
        sent.append(event.message.method)

    token = BINDING.set(bound)
    try:
        return await store.replay_events_after(after, collect), sent
    finally:
        BINDING.reset(token)


async def test_the_event_store_keeps_sessions_apart_and_outlives_a_restart(data_dir: Path) -> None:
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATES)
    await app.ensure_started()
    await app.registry.prepare("counter", "ev")
    store = ActorEventStore(app.registry)
    one, two = binding("one"), binding("two")
    first = await stored(store, one, "1", None)
    await stored(store, one, "1", "notifications/a")
    await stored(store, one, "2", "notifications/b")
    await stored(store, two, "1", "notifications/theirs")
    await app.aclose()
    again = create_app(KINDS, data_dir=data_dir, limits=NO_RATES)
    await again.ensure_started()
    reopened = ActorEventStore(again.registry)
    assert await replayed(reopened, two, first) == (None, [])  # another session's id
    assert await replayed(reopened, one, first.split(".")[0] + ".0" * 16) == (None, [])  # a guessed id
    assert await replayed(reopened, one, first) == ("1", ["notifications/a"])  # its own stream only
    await again.aclose()


async def test_the_event_store_never_brings_back_a_deleted_actor(data_dir: Path) -> None:
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATES)
    await app.ensure_started()
    store = ActorEventStore(app.registry)
    gone = binding("one", "gone")
    event_id = await stored(store, gone, "1", "notifications/a")
    assert event_id.startswith("0.")  # sent, not stored
    assert not app.registry.exists("counter", "gone")
    assert await replayed(store, gone, event_id) == (None, [])
    await app.aclose()


async def test_a_principals_request_rate_holds_over_mcp(data_dir: Path) -> None:
    app = create_app(
        KINDS,
        data_dir=data_dir,
        authenticate=token_authenticate(signer),
        limits=Limits(conn_rate=None, principal_rate=0.001, principal_burst=2),
    )
    token = signer.issue("ann", ttl=600)
    headers = {**ACCEPT, "authorization": f"Bearer {token}"}
    async with serve_in_process(app) as where, httpx.AsyncClient(timeout=10) as http:
        url = f"http://{where}/mcp/counter/rated"
        answers = [(await http.post(url, json=INIT, headers=headers)).status_code for _ in range(3)]
        assert answers == [200, 200, 429]
    await app.aclose()


class Shapes(Actor):
    kind = "shapes"

    @callable
    async def place(
        self,
        where: Point,
        label: str = "x",
        /,
        *rest: int,
        size: float = 1.0,
        near: Point | None = None,
        **tags: str,
    ) -> None:
        """Put a label at a point.

        More about it, left out of the description."""

    @callable(readonly=True)
    async def look(self) -> None:
        pass


def test_the_input_schema_follows_the_signature() -> None:
    schema = callables_of(Shapes)["place"].arguments.json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["where"]["required"] == ["x", "y"]  # the model's own schema
    assert schema["properties"]["label"] == {"type": "string", "default": "x"}
    assert schema["properties"]["size"] == {"type": "number", "default": 1.0}
    assert schema["properties"]["near"]["anyOf"][0] == {"$ref": "#/$defs/Point"}  # a model used in a union
    assert schema["$defs"]["Point"]["required"] == ["x", "y"]
    assert "rest" not in schema["properties"]  # *args have no name a caller could give
    assert schema["required"] == ["where"]
    assert schema["additionalProperties"] == {"type": "string"}  # **tags
    assert callables_of(Shapes)["look"].arguments.json_schema()["additionalProperties"] is False


async def test_tools_describe_themselves_and_take_positional_only_arguments_by_name(data_dir: Path) -> None:
    app = create_app([Shapes, *KINDS], data_dir=data_dir, limits=NO_RATES)
    async with serve_in_process(app) as where, mcp_session(f"http://{where}/mcp/shapes/s1") as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert tools["place"].description == "Put a label at a point."
        assert tools["look"].description == "Call look on the actor."
        placed = await mcp.call_tool("place", {"where": {"x": 1, "y": 2}, "label": "a", "size": 2.5})
        assert placed.structured_content == {"result": None}
        wrong = await mcp.call_tool("place", {"where": {"x": 1}})
        assert wrong.is_error
        assert "argument 'where.y'" in text_of(wrong)
    await app.aclose()


class Steps(Actor):
    kind = "steps"

    @callable
    async def work(self) -> AsyncIterator[Any]:
        """Reports progress and logs as it goes."""
        yield {"progress": 1, "total": 2, "message": "half"}
        yield {"log": "debug", "data": "below the session's level"}
        yield {"log": "warning", "data": "careful"}
        yield "a plain chunk"
        yield {"progress": 2, "total": 2}


@pytest.mark.filterwarnings(
    "ignore:resources/(un)?subscribe is removed:mcp.shared.exceptions.MCPDeprecationWarning"
)
async def test_progress_log_and_update_chunks_become_notifications_before_the_answer(data_dir: Path) -> None:
    app = create_app([Steps, *KINDS], data_dir=data_dir, limits=NO_RATES)
    logs: list[Any] = []
    reports: list[tuple[float, float | None, str | None]] = []
    notes: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append((params.level, params.data))

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async def on_message(message: Any) -> None:
        notes.append(message)

    async with serve_in_process(app) as where:
        async with mcp_session(f"http://{where}/mcp/steps/s1", logging_callback=on_log) as mcp:
            done = await mcp.call_tool("work", {}, progress_callback=on_progress)
            assert reports == [(1.0, 2.0, "half"), (2.0, 2.0, None)]
            assert logs == [("warning", "careful")]  # debug is below the default level, info
            assert done.structured_content == {"result": None, "chunks": ["a plain chunk"]}
        url = f"http://{where}/mcp/counter/watched"
        async with mcp_session(url, message_handler=on_message) as mcp:
            await mcp.subscribe_resource("roost://counter/watched/state")
            await mcp.call_tool("increment", {})
            updated = [n for n in notes if getattr(n, "method", "") == "notifications/resources/updated"]
            assert [n.params.uri for n in updated] == ["roost://counter/watched/state"]
            await mcp.call_tool("get", {})  # read-only: no update
            await mcp.unsubscribe_resource("roost://counter/watched/state")
            await mcp.call_tool("increment", {})
            updated = [n for n in notes if getattr(n, "method", "") == "notifications/resources/updated"]
            assert len(updated) == 1
    await app.aclose()


async def test_the_event_store_is_bounded_per_actor(data_dir: Path) -> None:
    clock = FakeClock()
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATES, clock=clock)
    await app.ensure_started()
    for name in ("old", "many", "big"):
        await app.registry.prepare("counter", name)
    old = ActorEventStore(app.registry, retention_s=10, prune_every=2)
    await stored(old, binding("s", "old"), "1", "notifications/a")  # the first write prunes (nothing yet)
    clock.advance(20)
    await stored(old, binding("s", "old"), "1", "notifications/a")
    assert await old.count("counter", "old") == 2
    await stored(old, binding("s", "old"), "1", "notifications/a")  # the third prunes: the first is too old
    assert await old.count("counter", "old") == 2
    many = ActorEventStore(app.registry, max_events=3, prune_every=1)
    for _ in range(10):
        await stored(many, binding("s", "many"), "1", "notifications/a")
    assert await many.count("counter", "many") == 3
    assert await many.count("counter", "old") == 2  # another actor's bounds are its own
    big = ActorEventStore(app.registry, max_bytes=200, prune_every=1000)
    for _ in range(3):
        await stored(big, binding("s", "big"), "1", "notifications/" + "x" * 70)
    assert await big.count("counter", "big") == 3  # no prune yet (every 1000 writes)
    await stored(big, binding("s", "big"), "1", "notifications/" + "x" * (64 << 10))  # a big one prunes
    assert await big.count("counter", "big") == 0  # it alone is over the bytes: nothing older is kept
    await app.aclose()


async def test_a_sessions_events_go_when_it_ends(mcp_app: RoostApp, addr: str) -> None:
    url = f"http://{addr}/mcp/counter/ends"
    async with httpx.AsyncClient(timeout=10) as http:
        kept, ended = await open_raw(http, url), await open_raw(http, url)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        for sid in (kept, ended):
            assert (
                await http.post(url, json=listing, headers={**ACCEPT, "mcp-session-id": sid})
            ).status_code == 200
        assert mcp_app.mcp.events is not None
        before = await mcp_app.mcp.events.count("counter", "ends")
        assert (await http.delete(url, headers={"mcp-session-id": ended})).status_code == 200
        after = await mcp_app.mcp.events.count("counter", "ends")
        assert 0 < after < before
        again = await http.post(url, json=listing, headers={**ACCEPT, "mcp-session-id": kept})
        assert again.status_code == 200


async def test_a_forgotten_session_is_refused_and_never_reaches_the_sdk(data_dir: Path) -> None:
    clock = FakeClock()
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATES, clock=clock)
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with serve_in_process(app) as where, httpx.AsyncClient(timeout=10) as http:
        url = f"http://{where}/mcp/counter/idle"
        old = await open_raw(http, url)
        clock.advance(IDLE_S * 2 + 1)  # idle (no request in flight) for twice the SDK's timeout
        new = await open_raw(http, url)  # a new session makes the service forget the idle ones
        assert old not in app.mcp.sessions
        answer = await http.post(url, json=listing, headers={**ACCEPT, "mcp-session-id": old})
        assert answer.status_code == 404  # refused at the gate, though the SDK may still hold it
        assert (
            await http.post(url, json=listing, headers={**ACCEPT, "mcp-session-id": new})
        ).status_code == 200
    await app.aclose()


@pytest.mark.slow
async def test_the_default_apps_counter_is_an_mcp_server(tmp_path: Path) -> None:
    with server_process(tmp_path / "data") as server:
        async with mcp_session(f"{server.http}/mcp/counter/default") as mcp:
            tools = {t.name for t in (await mcp.list_tools()).tools}
            assert {"increment", "get", "count_to"} <= tools
            assert (await mcp.call_tool("increment", {"by": 3})).structured_content == {"result": 3}
        async with httpx.AsyncClient(timeout=10) as http:
            seen = (await http.get(f"{server.http}/agents/counter/default")).json()
        assert seen["state"] == {"count": 3}


async def test_reading_the_state_resource_is_a_read_the_authorize_hook_decides(data_dir: Path) -> None:
    asked: list[str] = []

    def no_reads(principal: Any, kind: str, name: str, action: str) -> bool:
        asked.append(action)
        return action != "read"

    app = create_app(KINDS, data_dir=data_dir, authorize=no_reads, limits=NO_RATES)
    async with serve_in_process(app) as where, mcp_session(f"http://{where}/mcp/counter/hidden") as mcp:
        assert (await mcp.call_tool("increment", {})).structured_content == {"result": 1}
        with pytest.raises(MCPError) as refused:
            await mcp.read_resource("roost://counter/hidden/state")
        assert refused.value.error.message.startswith("forbidden: read")
    assert {"connect", "call:increment", "read"} <= set(asked)
    await app.aclose()


async def test_a_per_session_actor_goes_when_its_session_ends(data_dir: Path) -> None:
    """``/mcp/{kind}``: the session's own actor is deleted when the session ends, with an audit
    record; a session on a named actor leaves the actor (its events alone go)."""
    clock = FakeClock()
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATES, clock=clock)
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "increment", "arguments": {}},
    }
    async with serve_in_process(app) as where, httpx.AsyncClient(timeout=10) as http:
        url = f"http://{where}/mcp/counter"
        ended, idle = await open_raw(http, url), await open_raw(http, url)
        named = await open_raw(http, f"{url}/kept")
        for sid in (ended, idle):
            assert (
                await http.post(url, json=call, headers={**ACCEPT, "mcp-session-id": sid})
            ).status_code == 200
        own = {sid: app.mcp.sessions[sid].scoped for sid in (ended, idle)}
        assert all(app.registry.exists("counter", name) for name in own.values())
        assert (await http.delete(url, headers={"mcp-session-id": ended})).status_code == 200
        assert not app.registry.exists("counter", own[ended])
        assert app.registry.exists("counter", own[idle])
        audit = [orjson.loads(line) for line in (data_dir / "audit.log").read_bytes().splitlines()]
        assert [(r["name"], r["reason"]) for r in audit] == [(own[ended], "its MCP session ended")]
        assert (await http.delete(f"{url}/kept", headers={"mcp-session-id": named})).status_code == 200
        assert app.registry.exists("counter", "kept")
        clock.advance(IDLE_S * 2 + 1)
        await open_raw(http, url)  # a new session makes the service forget the idle ones
        await until(lambda: not app.registry.exists("counter", own[idle]), message="idle session's actor")
    await app.aclose()


async def test_per_session_actors_take_creation_tokens(data_dir: Path) -> None:
    limits = Limits(
        conn_rate=None, principal_rate=None, anonymous_creation_rate=0.001, anonymous_creation_burst=1
    )
    app = create_app(KINDS, data_dir=data_dir, limits=limits)
    async with serve_in_process(app) as where:
        url = f"http://{where}/mcp/counter"
        async with mcp_session(url) as first, httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(url, json=INIT, headers=ACCEPT)  # a second session, a second actor
            assert refused.status_code == 429
            assert refused.json()["error"]["message"].startswith("creation_limited")
            assert int(refused.headers["retry-after"]) > 0
            assert (await first.call_tool("increment", {})).structured_content == {"result": 1}
    await app.aclose()


async def test_one_principal_cannot_hold_every_session(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A principal's sessions are capped (MAX_SESSIONS_PER_PRINCIPAL): past it its new session is
    refused (429 rate_limited), while another principal still opens one."""
    monkeypatch.setattr(mcp_module, "MAX_SESSIONS_PER_PRINCIPAL", 2)
    app = secured(data_dir)
    mallory, alice = (
        signer.issue("mallory", ttl=600, tenant="t1"),
        signer.issue("alice", ttl=600, tenant="t2"),
    )
    async with serve_in_process(app) as where:
        url = f"http://{where}/mcp/counter/c1"
        async with mcp_session(url, mallory), mcp_session(url, mallory):
            async with httpx.AsyncClient(timeout=10) as http:
                headers = {**ACCEPT, "authorization": f"Bearer {mallory}"}
                third = await http.post(url, json=INIT, headers=headers)
                assert third.status_code == 429
                assert "holds 2 MCP sessions" in third.json()["error"]["message"]
            async with mcp_session(url, alice) as other:
                assert (await other.call_tool("increment", {})).structured_content == {"result": 1}
    await app.aclose()


# -- a tool that asks the client (roost.transport.mcp_asks) -----------------------------------------
class Asker(Actor):
    """Asks the client's user for a name, or the client's model for a word; keeps what it got."""

    kind = "asker"
    initial_state: ClassVar[dict[str, Any]] = {"got": [], "note": None}
    mcp_asks: ClassVar[dict[str, str]] = {
        "greet": "greeted",
        "word": "worded",
        "loop": "forever",
        "forever": "forever",
        "stray": "worded",
        "scribble": "worded",
    }

    @callable
    async def keep(self, note: Any) -> None:
        """Keeps any JSON note (a value another caller reads back)."""
        self.set_state({**self.state, "note": note})

    @callable(readonly=True)
    async def read(self) -> Any:
        """The note kept, as it was kept."""
        return self.state["note"]

    @callable
    async def scribble(self) -> dict[str, Any]:
        """Writes, then asks."""
        self.set_state({**self.state, "note": "scribbled"})
        return elicit("?", {"type": "object", "properties": {}}, then="worded")

    @callable
    async def stray(self) -> dict[str, Any]:
        """Asks, naming a continuation other than its declared one."""
        return elicit("?", {"type": "object", "properties": {}}, then="greeted")

    @callable
    async def greet(self) -> dict[str, Any]:
        """Asks the user's name."""
        schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        return elicit("Your name?", schema, then="greeted", carry={"asked": "name"})

    @callable
    async def greeted(self, answer: dict[str, Any], carry: Any = None) -> str:
        """Takes the answer to ``greet``."""
        self.set_state({**self.state, "got": [*self.state["got"], answer], "carried": carry})
        if answer.get("action") != "accept":
            return f"no name ({answer.get('action')})"
        return f"hello {answer['content']['name']}"

    @callable
    async def word(self) -> dict[str, Any]:
        """Asks the client's model for a word."""
        return sample([{"role": "user", "content": {"type": "text", "text": "a word"}}], 10, then="worded")

    @callable
    async def worded(self, answer: dict[str, Any], carry: Any = None) -> str:
        """Takes the model's word."""
        self.set_state({**self.state, "got": [*self.state["got"], answer]})
        return f"the model said {answer['content']['text']}"

    @callable
    async def loop(self) -> dict[str, Any]:
        """Asks, and asks again after every answer (``forever``)."""
        return elicit("again?", {"type": "object", "properties": {}}, then="forever")

    @callable
    async def forever(self, answer: Any = None, carry: Any = None) -> dict[str, Any]:
        """Asks again after every answer."""
        return elicit("again?", {"type": "object", "properties": {}}, then="forever")


class Peek(Asker):
    """An asker whose question a read-only principal may ask, but not answer (its continuation
    writes)."""

    kind = "peek"
    mcp_asks: ClassVar[dict[str, str]] = {"look": "greeted"}

    @callable(readonly=True)
    async def look(self) -> dict[str, Any]:
        """Asks, read-only."""
        return elicit("?", {"type": "object", "properties": {}}, then="greeted")


async def _accept(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def _sampled(context: Any, params: Any) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="kestrel"), model="fake"
    )


@pytest.fixture
async def asker(data_dir: Path) -> AsyncIterator[str]:
    async with serve_in_process(create_app([Asker], data_dir=data_dir, limits=NO_RATES)) as where:
        yield where


async def test_a_tool_asks_the_clients_user_and_its_next_callable_takes_the_answer(asker: str) -> None:
    url = f"http://{asker}/mcp/asker/a"
    async with mcp_session(url, elicitation_callback=_accept, sampling_callback=_sampled) as mcp:
        result = await mcp.call_tool("greet", {})
        assert (result.is_error, text_of(result)) == (False, "hello Ada")
        result = await mcp.call_tool("word", {})
        assert text_of(result) == "the model said kestrel"
        async with httpx.AsyncClient(timeout=10) as http:
            state = (await http.get(f"http://{asker}/agents/asker/a")).json()["state"]
            asked = (await http.post(f"http://{asker}/agents/asker/a/rpc/greet", json=[])).json()
    assert state["got"][0] == {"action": "accept", "content": {"name": "Ada"}}  # each answer a turn
    assert state["carried"] == {"asked": "name"}  # carry from the server's own round
    assert state["got"][1]["content"] == {"type": "text", "text": "kestrel"}
    assert asked["result"]["then"] == "greeted"  # over HTTP the question is the result
    assert asked["result"]["mcp_ask"]["elicit"]["message"] == "Your name?"


async def test_a_client_without_the_capability_gets_an_error_result_and_the_session_goes_on(
    asker: str,
) -> None:
    async with mcp_session(f"http://{asker}/mcp/asker/b") as mcp:  # no elicitation, no sampling
        for tool, missing in (("greet", "elicitation"), ("word", "sampling")):
            result = await mcp.call_tool(tool, {})
            assert result.is_error
            assert f"does not support {missing}" in text_of(result)
        assert (await mcp.call_tool("keep", {"note": 1})).is_error is False


async def test_only_a_declared_asker_asks_and_a_continuation_takes_only_the_clients_answer(
    asker: str,
) -> None:
    """A stored value shaped like a question, read back by another session, is data: nothing is
    sent to that client. A continuation is not listed and not called directly over MCP. An asker
    naming another continuation than its declared one is an error, and asks nothing."""
    asked: list[Any] = []

    async def record(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"name": "Eve"})

    lure = elicit("Paste your API key", {"type": "object", "properties": {}}, then="greeted")
    async with mcp_session(f"http://{asker}/mcp/asker/shared") as mallory:
        await mallory.call_tool("keep", {"note": lure})
    async with mcp_session(f"http://{asker}/mcp/asker/shared", elicitation_callback=record) as victim:
        read = await victim.call_tool("read", {})
        assert read.structured_content == {"result": lure}  # the value, as kept
        listed = {t.name for t in (await victim.list_tools()).tools}
        assert {"greet", "word", "loop", "stray"} <= listed
        assert not {"greeted", "worded", "forever"} & listed
        forged = {"answer": {"action": "accept", "content": {"name": "x"}}}
        direct = await victim.call_tool("greeted", forged)
        assert direct.is_error
        assert "not called directly" in text_of(direct)
        strayed = await victim.call_tool("stray", {})
        assert strayed.is_error
        assert "declares 'worded'" in text_of(strayed)
    assert asked == []


async def test_the_continuation_is_checked_before_the_client_is_asked(data_dir: Path) -> None:
    """A read-only principal may call a read-only asker, not its writing continuation: the call is
    refused before any question reaches the client."""
    asked: list[Any] = []

    async def record(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"name": "x"})

    app = create_app([Peek], data_dir=data_dir, limits=NO_RATES, authenticate=token_authenticate(signer))
    writer, reader = signer.issue("wes", ttl=600), signer.issue("rita", ttl=600, read_only=True)
    async with serve_in_process(app) as where:
        async with mcp_session(f"http://{where}/mcp/peek/p", writer) as mcp:
            await mcp.call_tool("keep", {"note": 0})  # the actor exists
        async with mcp_session(f"http://{where}/mcp/peek/p", reader, elicitation_callback=record) as mcp:
            result = await mcp.call_tool("look", {})
    assert result.is_error
    assert "forbidden" in text_of(result)
    assert asked == []


async def test_a_question_the_client_refuses_or_leaves_unanswered_ends_the_call(
    asker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(context: Any, params: Any) -> types.ErrorData:
        return types.ErrorData(code=-1, message="the user closed the dialog")

    async def never(context: Any, params: Any) -> types.ElicitResult:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    async with mcp_session(f"http://{asker}/mcp/asker/e", elicitation_callback=refuse) as mcp:
        result = await mcp.call_tool("greet", {})
        assert result.is_error
        assert "the client refused" in text_of(result)
    monkeypatch.setattr(mcp_asks, "ASK_TIMEOUT_S", 0.3)
    async with mcp_session(f"http://{asker}/mcp/asker/e", elicitation_callback=never) as mcp:
        result = await mcp.call_tool("greet", {})
        assert result.is_error
        assert "did not answer within 0.3 s" in text_of(result)
        assert (await mcp.call_tool("keep", {"note": 2})).is_error is False  # the session goes on


async def test_a_tool_asks_on_the_per_session_route_too(asker: str) -> None:
    async with mcp_session(f"http://{asker}/mcp/asker", elicitation_callback=_accept) as mcp:
        result = await mcp.call_tool("greet", {})
        assert (result.is_error, text_of(result)) == (False, "hello Ada")


async def test_a_tool_that_asks_without_end_is_stopped(asker: str) -> None:
    url = f"http://{asker}/mcp/asker/c"
    async with mcp_session(url, elicitation_callback=_accept) as mcp:
        result = await mcp.call_tool("loop", {})
        assert result.is_error
        assert f"more than {MAX_ASKS} times" in text_of(result)


async def test_an_answer_over_the_bound_is_refused(asker: str) -> None:
    async def huge(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "x" * (MAX_ANSWER + 1)})

    async with mcp_session(f"http://{asker}/mcp/asker/d", elicitation_callback=huge) as mcp:
        result = await mcp.call_tool("greet", {})
        assert result.is_error
        assert f"over {MAX_ANSWER} bytes" in text_of(result)
    async with httpx.AsyncClient(timeout=10) as http:
        state = (await http.get(f"http://{asker}/agents/asker/d")).json()["state"]
    assert state["got"] == []  # the answer reached no turn


async def test_frames_out_of_order_in_a_session_get_errors_and_the_session_goes_on(addr: str) -> None:
    """Within one session: a second ``initialize`` (answered again, as the SDK's server does, the
    session unchanged), a response to a request never sent (accepted and dropped), a method that does
    not exist (``-32601``): none breaks the session, whose next call works."""
    url = f"http://{addr}/mcp/counter/order"
    async with httpx.AsyncClient(timeout=10) as http:
        sid = await open_raw(http, url)
        headers = {**ACCEPT, "mcp-session-id": sid}

        async def answer(message: dict[str, Any]) -> dict[str, Any]:
            sent = await http.post(url, json=message, headers=headers)
            assert sent.status_code == 200, sent.text
            (found,) = [m for _, m in sse_messages(sent.text) if m and m.get("id") == message["id"]]
            answered: dict[str, Any] = found
            return answered

        again = await answer({**INIT, "id": 2})
        assert again["result"]["serverInfo"]["name"]
        stray = await http.post(url, json={"jsonrpc": "2.0", "id": 99, "result": {}}, headers=headers)
        assert stray.status_code == 202
        unknown = await answer({"jsonrpc": "2.0", "id": 3, "method": "tools/explode", "params": {}})
        assert unknown["error"]["code"] == -32601  # method not found
        call = {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "increment", "arguments": {}},
        }
        assert (await answer(call))["result"]["structuredContent"] == {"result": 1}


def test_a_kind_declaring_asks_of_what_it_does_not_have_is_refused_clearly() -> None:
    class Wrong(Actor):
        kind = "wrong"
        mcp_asks: ClassVar[dict[str, str]] = {"ask": "missing"}

        @callable
        async def ask(self) -> None:
            """Asks nothing."""

    class Unfit(Wrong):
        kind = "unfit"
        mcp_asks: ClassVar[dict[str, str]] = {"ask": "ask"}

    with pytest.raises(TypeError, match="'missing' is not a @callable"):
        mcp_asks.declared(Wrong, callables_of(Wrong))
    with pytest.raises(TypeError, match="must take answer and carry"):
        mcp_asks.declared(Unfit, callables_of(Unfit))


@pytest.mark.filterwarnings(
    "ignore:resources/(un)?subscribe is removed:mcp.shared.exceptions.MCPDeprecationWarning"
)
async def test_a_chain_that_wrote_says_so_even_when_its_question_fails(asker: str) -> None:
    """``scribble`` writes, then asks; the client refuses: the call is an error, and a subscriber
    of the state still hears that it changed (before the answer)."""
    notes: list[Any] = []

    async def on_message(message: Any) -> None:
        notes.append(message)

    async def refuse(context: Any, params: Any) -> types.ErrorData:
        return types.ErrorData(code=-1, message="no")

    url = f"http://{asker}/mcp/asker/w"
    async with mcp_session(url, message_handler=on_message, elicitation_callback=refuse) as mcp:
        await mcp.call_tool("keep", {"note": 0})
        await mcp.subscribe_resource("roost://asker/w/state")
        result = await mcp.call_tool("scribble", {})
        assert result.is_error
    updated = [n for n in notes if getattr(n, "method", "") == "notifications/resources/updated"]
    assert [n.params.uri for n in updated] == ["roost://asker/w/state"]


async def test_a_subclass_keeps_its_bases_continuations_hidden(data_dir: Path) -> None:
    app = create_app([Peek], data_dir=data_dir, limits=NO_RATES)
    async with serve_in_process(app) as where, mcp_session(f"http://{where}/mcp/peek/q") as mcp:
        listed = {t.name for t in (await mcp.list_tools()).tools}
        assert "look" in listed
        assert not {"greeted", "worded", "forever"} & listed  # Asker's, inherited
        forged = await mcp.call_tool("worded", {"answer": {"content": {"text": "x"}}})
        assert forged.is_error
        assert "not called directly" in text_of(forged)


def test_a_streaming_asker_or_one_nothing_can_start_is_refused() -> None:
    class Streams(Actor):
        kind = "streams"
        mcp_asks: ClassVar[dict[str, str]] = {"flow": "back"}

        @callable
        async def flow(self) -> AsyncIterator[int]:
            """Streams."""
            yield 1

        @callable
        async def back(self, answer: Any = None, carry: Any = None) -> None:
            """Takes an answer."""

    class Circle(Actor):
        kind = "circle"
        mcp_asks: ClassVar[dict[str, str]] = {"back": "back"}

        @callable
        async def back(self, answer: Any = None, carry: Any = None) -> None:
            """Takes an answer, and would ask again."""

    with pytest.raises(TypeError, match="a streaming method cannot ask"):
        mcp_asks.declared(Streams, callables_of(Streams))
    with pytest.raises(TypeError, match="continues only itself"):
        mcp_asks.declared(Circle, callables_of(Circle))
