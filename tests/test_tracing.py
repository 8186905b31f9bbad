"""OpenTelemetry spans (roost.transport.tracing, roost.agent.tracing) of real calls to a real server,
collected with OTel's in-memory exporter: an HTTP call with a ``traceparent``, a WebSocket connection
and its calls, an agent run with its tool calls and job attempts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from roost.actors import Call, Wake
from roost.agent.tracing import RunSpans
from roost.examples.kinds import Counter, Room
from roost.scheduler import FakeClock
from roost.testing import ActorKit, connect, until
from roost.transport import create_app
from roost.transport.tracing import Tracing, parent_context
from tests.agent_support import Docs, drive, event_types, events
from tests.conftest import NO_RATE_LIMITS
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


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


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
    models = named(spans, "roost.agent.model")  # the deterministic planner's steps, in the turn
    assert len(models) >= 2  # the plan, then the summary of the results
    assert all(parent_id(m) == run.context.span_id for m in models)


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


async def test_a_commit_is_in_its_actors_trace_when_two_actors_interleave(data_dir: Path) -> None:
    """Guarantee (roost.transport.tracing): two connections in two traces, each sending 200 calls to
    its own actor at once, so that the two actors' turns and commits interleave on the loop: every
    ``roost.commit`` span of each actor from then on (its close turn's included) is in its own
    connection's trace."""
    provider, exporter = traced()
    app = create_app([Counter, Room], data_dir=data_dir, tracer_provider=provider, limits=NO_RATE_LIMITS)
    traces = {"counter": "a" * 32, "room": "b" * 32}
    welcomed: list[str] = []
    both = asyncio.Event()
    before: list[int] = []  # spans finished before the calls: the actors' activations

    async def drive(path: str, trace_id: str, method: str, args: list[Any]) -> None:
        async with connect(f"ws://{addr}{path}?traceparent=00-{trace_id}-{PARENT}-01") as ws:
            assert (await ws.recv())["type"] == "welcome"
            welcomed.append(path)
            if len(welcomed) == 2:
                before.append(len(exporter.get_finished_spans()))
                both.set()
            await both.wait()
            for i in range(200):
                await ws.send({"type": "rpc", "id": str(i), "method": method, "args": args})
            answered = 0
            while answered < 200:
                answered += (await ws.recv())["type"] == "rpc_result"

    async with serve_in_process(app) as addr:
        await asyncio.gather(
            drive("/agents/counter/c1", traces["counter"], "increment", []),
            drive("/agents/room/r1", traces["room"], "say", ["x"]),
        )
        await until(lambda: len(named(exporter.get_finished_spans(), "roost.connection")) == 2)
        await until(lambda: len(named(exporter.get_finished_spans()[before[0] :], "roost.turn")) >= 402)
    commits = named(exporter.get_finished_spans()[before[0] :], "roost.commit")
    assert {attr(c, "roost.kind") for c in commits} == {"counter", "room"}
    placed = [(attr(c, "roost.kind"), format(c.context.trace_id, "032x")) for c in commits if c.context]
    assert [(kind, trace_id) for kind, trace_id in placed if traces[kind] != trace_id] == []


async def test_a_commit_is_in_its_actors_trace_whatever_the_order_of_two_actors_hooks(data_dir: Path) -> None:
    """Guarantee (roost.transport.tracing): the hooks of two actors' hosts, called as their turns and
    commits interleave on the loop (A's turn, B's turn, A's commit, B's commit; then a wake-up of A
    with B's turn between its lateness and its fire turn), keep each commit under its own last turn's
    parent and each wake-up's lateness its own."""
    provider, exporter = traced()
    one, two = (f"00-{c * 32}-{PARENT}-01" for c in "ab")
    async with ActorKit([Counter, Room], data_dir) as kit:
        kit.registry.observer = Tracing(provider)
        await kit.connect("counter", "a").call("increment")  # both live: their hosts made with the observer
        await kit.connect("room", "b").call("say", "x")
        a = kit.registry.get("counter", "a").observer
        b = kit.registry.get("room", "b").observer
        assert a is not None
        assert b is not None
        exporter.clear()
        a.turn("counter", 0.001, Call("increment", [], {}, trace=parent_context({"traceparent": one})))
        b.turn("room", 0.001, Call("say", ["x"], {}, trace=parent_context({"traceparent": two})))
        a.commit("counter", 1, 0.001)
        b.commit("room", 1, 0.001)
        a.wake("counter", 3.0)
        b.wake("room", 0.0)
        b.turn("room", 0.001, Wake())
        a.turn("counter", 0.001, Wake())
    spans = exporter.get_finished_spans()
    commits = {
        attr(c, "roost.kind"): format(c.context.trace_id, "032x") for c in named(spans, "roost.commit")
    }
    assert commits == {"counter": "a" * 32, "room": "b" * 32}
    lateness = {attr(w, "roost.kind"): attr(w, "roost.lateness_s") for w in named(spans, "roost.wakeup")}
    assert lateness == {"counter": 3.0, "room": 0.0}


def test_open_spans_are_bounded_runs_and_tools_whose_end_never_comes() -> None:
    """Guarantee (roost.agent.tracing): runs and tool calls that start in this process and never end
    here keep at most ``most`` spans open each; the oldest are ended, marked ``roost.incomplete``."""
    provider, exporter = traced()
    spans = RunSpans(provider.get_tracer("t"), most=3)
    for n in range(5):
        run = {"run_id": f"run-{n}", "turn_id": f"turn-{n}", "trace_id": "e" * 32}
        spans.event("turn_started", run, None)
        spans.event("tool_started", run, f"tool-{n}")
    assert list(spans.runs) == ["run-2", "run-3", "run-4"]
    assert list(spans.tools) == ["tool-2", "tool-3", "tool-4"]
    ended = exporter.get_finished_spans()
    assert sorted(attr(s, "roost.run_id") for s in named(ended, "roost.agent.run")) == ["run-0", "run-1"]
    assert len(named(ended, "roost.agent.tool")) == 2
    assert all(attr(s, "roost.incomplete") is True for s in ended)
    spans.event("turn_completed", {"run_id": "run-4"}, None)  # one that ends is ended as ever
    assert "run-4" not in spans.runs
