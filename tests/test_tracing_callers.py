"""A caller's W3C ``traceparent`` reaches what it starts (roost.transport.tracing): an agent run
started over HTTP or a WebSocket is in the caller's trace, and an MCP tool call's turn is a child of
its request's ``traceparent``; real sockets, OTel's in-memory exporter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from roost.examples.kinds import Counter
from roost.testing import connect, until
from roost.transport import create_app
from tests.agent_support import Docs
from tests.support import serve_in_process
from tests.test_tracing import PARENT, hex_trace, named, parent_id, traced

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
WS_TRACE = "c" * 32
MCP_TRACE = "d" * 32


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{PARENT}-01"


async def test_a_run_is_in_its_callers_trace_over_http_and_websocket(data_dir: Path) -> None:
    """Guarantee (roost.transport.tracing): an agent run started by ``POST .../rpc/turn`` with a
    ``traceparent``, or over a WebSocket whose handshake carried one, takes the caller's trace id as
    its ``trace_id``: its ``roost.agent.run`` span is in the caller's trace."""
    provider, exporter = traced()
    app = create_app([Docs], data_dir=data_dir, tracer_provider=provider)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        started = await http.post(
            "/agents/docs/h1/rpc/turn", json=["hello there"], headers={"traceparent": traceparent(TRACE)}
        )
        run: dict[str, Any] = started.json()["result"]
        await http.post("/agents/docs/h1/rpc/cancel", json=[run["turn_id"]])  # the run ends: its span too
        got = (await http.post("/agents/docs/h1/rpc/get_run", json=[run["run_id"]])).json()["result"]
        assert got["trace_id"] == TRACE
        async with connect(f"ws://{addr}/agents/docs/w1?traceparent={traceparent(WS_TRACE)}") as ws:
            assert (await ws.recv())["type"] == "welcome"
            over_ws = (await ws.rpc("turn", "hello again"))["result"]
            assert (await ws.rpc("cancel", over_ws["turn_id"]))["ok"]
            assert (await ws.rpc("get_run", over_ws["run_id"]))["result"]["trace_id"] == WS_TRACE
        await until(lambda: len(named(exporter.get_finished_spans(), "roost.agent.run")) == 2)
    runs = {
        str((s.attributes or {})["roost.run_id"]): hex_trace(s)
        for s in named(exporter.get_finished_spans(), "roost.agent.run")
    }
    assert runs == {run["run_id"]: TRACE, over_ws["run_id"]: WS_TRACE}


async def test_a_traceparent_is_the_parent_of_an_mcp_tool_calls_turn(data_dir: Path) -> None:
    """Guarantee (roost.transport.mcp): a ``tools/call`` on ``/mcp/{kind}/{name}`` whose request
    carries a ``traceparent`` has its turn's span in that trace, a child of the given span."""
    provider, exporter = traced()
    app = create_app([Counter], data_dir=data_dir, tracer_provider=provider)
    async with (
        serve_in_process(app) as addr,
        httpx2.AsyncClient(headers={"traceparent": traceparent(MCP_TRACE)}, timeout=20) as http,
        streamable_http_client(f"http://{addr}/mcp/counter/m1", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        result = await session.call_tool("increment", {"by": 2})
        assert result.structured_content == {"result": 2}
    turns = [
        s
        for s in named(exporter.get_finished_spans(), "roost.turn")
        if (s.attributes or {})["roost.method"] == "increment"
    ]
    assert len(turns) == 1
    assert hex_trace(turns[0]) == MCP_TRACE
    assert parent_id(turns[0]) == int(PARENT, 16)
