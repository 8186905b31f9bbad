"""``roost serve --metrics`` and ``roost serve --otel`` in a real server process: the scrape parses
with ``prometheus_client``'s parser; the spans reach an OTLP/HTTP collector (a real one on 127.0.0.1
that keeps what it is sent) at ``$OTEL_EXPORTER_OTLP_ENDPOINT``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from roost.testing import until
from tests.support import ServerProcess, serve_in_process

pytestmark = pytest.mark.slow


async def test_serve_metrics_serves_the_scrape_to_this_host(tmp_path: Path) -> None:
    """``--metrics``: ``GET /metrics`` answers this host's command line with the exposition, which
    counts the calls made; without the flag the route answers 404."""
    server = await asyncio.to_thread(ServerProcess(tmp_path / "data", "--metrics").start)
    try:
        async with httpx.AsyncClient(base_url=server.http) as http:
            for _ in range(3):
                assert (await http.post("/agents/counter/m1/rpc/increment", json=[])).json()["ok"]
            r = await http.get("/metrics")
            assert r.status_code == 200
            families = {f.name: f for f in text_string_to_metric_families(r.text)}
            [turns] = [s for s in families["roost_turns"].samples if s.labels == {"kind": "counter"}]
            assert turns.value >= 3
            assert families["roost_actors_live"].samples[0].value == 1
    finally:
        server.kill()
    plain = await asyncio.to_thread(ServerProcess(tmp_path / "plain").start)
    try:
        async with httpx.AsyncClient(base_url=plain.http) as http:
            assert (await http.get("/metrics")).status_code == 404
    finally:
        plain.kill()


async def test_serve_otel_exports_spans_over_otlp(tmp_path: Path) -> None:
    """``--otel``: the spans of a call with a ``traceparent`` are exported over OTLP/HTTP to
    ``$OTEL_EXPORTER_OTLP_ENDPOINT``, in the caller's trace."""
    received: list[bytes] = []

    async def traces(request: Request) -> Response:
        received.append(await request.body())
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with serve_in_process(collector) as addr:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{addr}", "OTEL_BSP_SCHEDULE_DELAY": "50"}
        server = await asyncio.to_thread(ServerProcess(tmp_path / "data", "--otel", env=env).start)
        try:
            async with httpx.AsyncClient(base_url=server.http) as http:
                r = await http.post(
                    "/agents/counter/o1/rpc/increment",
                    json=[],
                    headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
                )
                assert r.json()["ok"]
            # both spans, each maybe in a batch of its own (the call's ends after the turn's)
            await until(lambda: all(name in b"".join(received) for name in (b"roost.turn", b"roost.call")),
                        timeout=20)  # fmt: skip
        finally:
            server.kill()
    body = b"".join(received)
    assert b"roost.call" in body
    assert bytes.fromhex(trace_id) in body  # the caller's trace id, as OTLP's protobuf carries it
