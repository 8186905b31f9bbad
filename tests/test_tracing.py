"""OpenTelemetry spans (roost.transport.tracing, roost.agent.tracing) of real calls to a real server,
collected with OTel's in-memory exporter: an HTTP call with a ``traceparent``, a WebSocket connection
and its calls, an agent run with its tool calls and job attempts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from roost.examples.kinds import Counter
from roost.scheduler import FakeClock
from roost.testing import ActorKit, connect, until
from roost.transport import create_app
from roost.transport.tracing import Tracing
from tests.agent_support import Docs, drive, event_types, events
from tests.support import serve_in_process
from tests.test_mcp_client import kind_of, run_to_end, stdio

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"


def traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def attr(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {}).get(key)


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_a_traceparent_is_the_parent_of_an_http_call(data_dir: Path) -> None:
    """Guarantee (roost.transport.tracing): ``POST .../rpc/increment`` with a ``traceparent`` makes a
    ``roost.call`` span in that trace, a child of the given span, with the turn and its commit under it."""
    provider, exporter = traced()
    app = create_app([Counter], data_dir=data_dir, tracer_provider=provider)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        r = await http.post("/agents/counter/c1/rpc/increment", json=[], headers={"traceparent": TRACEPARENT})
        assert r.json() == {"ok": True, "result": 1}
        await until(lambda: named(exporter.get_finished_spans(), "roost.commit"))
    spans = exporter.get_finished_spans()
    [call] = named(spans, "roost.call")
    assert call.context is not None
    assert format(call.context.trace_id, "032x") == TRACE
    assert parent_id(call) == int(PARENT, 16)
    assert call.attributes is not None
    assert call.attributes["roost.method"] == "increment"
    turns = [
        t for t in named(spans, "roost.turn") if t.attributes and t.attributes["roost.method"] == "increment"
    ]
    assert len(turns) == 1
    assert turns[0].context is not None
    assert turns[0].context.trace_id == call.context.trace_id
    assert parent_id(turns[0]) == call.context.span_id
    commits = [
        c for c in named(spans, "roost.commit") if c.context and c.context.trace_id == call.context.trace_id
    ]
    assert commits
    assert commits[0].attributes is not None
    assert attr(commits[0], "roost.batch.turns") >= 1


async def test_a_websocket_connection_is_a_span_with_its_turns_under_it(data_dir: Path) -> None:
    """Guarantee (roost.transport.tracing): a WebSocket connection whose handshake carries a
    ``traceparent`` (here the query parameter, as a browser sends it) is one ``roost.connection`` span,
    a child of it, ended at close with the close code; its connect turn and calls are its children."""
    provider, exporter = traced()
    app = create_app([Counter], data_dir=data_dir, tracer_provider=provider)
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/counter/c2?traceparent={TRACEPARENT}") as ws:
            assert (await ws.recv())["type"] == "welcome"
            assert (await ws.rpc("increment"))["ok"]
            assert (await ws.rpc("increment", 2))["ok"]
        await until(lambda: named(exporter.get_finished_spans(), "roost.connection"))
    spans = exporter.get_finished_spans()
    [conn] = named(spans, "roost.connection")
    assert conn.context is not None
    assert format(conn.context.trace_id, "032x") == TRACE
    assert parent_id(conn) == int(PARENT, 16)
    assert conn.attributes is not None
    assert conn.attributes["roost.close_code"] == 1000
    children = [t for t in named(spans, "roost.turn") if parent_id(t) == conn.context.span_id]
    methods = [t.attributes["roost.method"] for t in children if t.attributes]
    assert methods.count("increment") == 2
    assert len(children) >= 3  # the connect turn too


async def test_a_malformed_traceparent_starts_a_trace_of_its_own(data_dir: Path) -> None:
    """A ``traceparent`` that does not parse is ignored, never refused: the call is served, in a new trace."""
    provider, exporter = traced()
    app = create_app([Counter], data_dir=data_dir, tracer_provider=provider)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        r = await http.post(
            "/agents/counter/c3/rpc/increment", json=[], headers={"traceparent": "00-zz-yy-01"}
        )
        assert r.json()["ok"]
    [call] = named(exporter.get_finished_spans(), "roost.call")
    assert call.parent is None


async def test_an_agent_run_is_one_trace(data_dir: Path) -> None:
    """Guarantee (roost.agent.tracing): a run's span, its tool calls' spans and its jobs' attempts
    share the run's ``trace_id`` as their trace id; the tools and attempts are children of the run."""
    provider, exporter = traced()
    async with ActorKit([Docs], data_dir) as kit:
        kit.registry.observer = Tracing(provider)
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", "analyze the documents and make a report", session_id="s1")
        await drive(kit, lambda: "approval_requested" in event_types(c))
        approval = [e for e in events(c) if e["event_type"] == "approval_requested"][-1]["payload"]
        result = await c.call("approve", approval["approval_id"], "grant")
        assert result["status"] == "completed"
        await kit.settle()
        trace_id = next(e["trace_id"] for e in events(c) if e["run_id"] == reply["run_id"])
    spans = exporter.get_finished_spans()
    [run] = named(spans, "roost.agent.run")
    assert run.context is not None
    assert format(run.context.trace_id, "032x") == trace_id
    tools = named(spans, "roost.agent.tool")
    assert len(tools) >= 3  # collect, analyze, generate
    jobs = named(spans, "roost.agent.job")
    assert jobs
    for span in (*tools, *jobs):
        assert span.context is not None
        assert span.context.trace_id == run.context.trace_id
    assert all(parent_id(t) == run.context.span_id for t in tools)
    assert all(attr(j, "roost.job.attempt") >= 1 for j in jobs)


async def test_an_mcp_call_is_a_span_of_its_job_attempt(data_dir: Path) -> None:
    """Guarantee (roost.agent.tracing): a call of an MCP server's tool is a ``roost.mcp.call`` span,
    a child of the job attempt that makes it, in the run's trace."""
    provider, exporter = traced()
    kind = kind_of("traced", stdio())
    async with ActorKit([kind], data_dir) as kit:
        kit.registry.observer = Tracing(provider)
        c = kit.connect(kind.kind, "a")
        run = await run_to_end(kit, c, 'please mcp__t__echo {"text": "traced"}')
        assert run["status"] == "completed", run
    spans = exporter.get_finished_spans()
    [call] = named(spans, "roost.mcp.call")
    assert attr(call, "roost.mcp.tool") == "echo"
    assert attr(call, "roost.mcp.server") == "t"
    assert call.context is not None
    assert format(call.context.trace_id, "032x") == run["trace_id"]
    [job] = [j for j in named(spans, "roost.agent.job") if j.context and j.context.span_id == parent_id(call)]
    assert attr(job, "roost.job.tool") == "mcp__t__echo"


async def test_a_wakeup_is_a_span_with_its_lateness(data_dir: Path) -> None:
    """Guarantee (roost.transport.tracing): a fired wake-up is a ``roost.wakeup`` span of its fire
    turn, with how late it ran (``roost.lateness_s``, on the runtime's clock)."""
    provider, exporter = traced()
    clock = FakeClock()
    app = create_app([Counter], data_dir=data_dir, clock=clock, tracer_provider=provider)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        assert (await http.post("/agents/counter/w1/rpc/increment_later", json=[5])).json()["ok"]
        clock.advance(7)
        await until(lambda: named(exporter.get_finished_spans(), "roost.wakeup"))
    [wake] = named(exporter.get_finished_spans(), "roost.wakeup")
    assert attr(wake, "roost.kind") == "counter"
    assert attr(wake, "roost.lateness_s") >= 2.0
