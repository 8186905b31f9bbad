"""``GET /metrics`` (roost.transport.metrics) scraped from a real server with real traffic, parsed with
``prometheus_client``'s own parser; and the observer hooks' cost when off (roost.actors.observe)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets
from prometheus_client.parser import text_string_to_metric_families

from roost.examples.kinds import Counter
from roost.scheduler import FakeClock
from roost.testing import connect, until
from roost.transport import create_app
from roost.transport.limits import Limits
from tests.agent_support import Flaky
from tests.conftest import NO_RATE_LIMITS
from tests.support import serve_in_process


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of an exposition."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def scrape(http: httpx.AsyncClient, **kw: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = await http.get("/metrics", **kw)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


async def test_scraped_counts_are_the_servers(data_dir: Path) -> None:
    """Guarantee (roost.transport.metrics): after real calls over HTTP and WebSocket, a refused
    connection, a rate-limited frame and a fired wake-up, the scrape shows each of them."""
    clock = FakeClock()
    app = create_app(
        [Counter],
        data_dir=data_dir,
        clock=clock,
        metrics=True,
        origins=["https://app.example"],
        limits=Limits(conn_rate=0.001, conn_burst=3),
    )
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        for _ in range(5):
            r = await http.post("/agents/counter/c1/rpc/increment", json=[])
            assert r.json()["ok"]
        url = f"ws://{addr}/agents/counter/c1"
        async with connect(url) as ws:
            assert (await ws.recv())["type"] == "welcome"
            assert (await ws.rpc("increment"))["ok"]
            assert (await ws.rpc("increment_later", 5))["ok"]
            answers = [await ws.rpc("get") for _ in range(3)]  # the burst of 3 is spent by now
            assert any(not a["ok"] and a["error"]["code"] == "rate_limited" for a in answers)
            during = await scrape(http)
            assert during[("roost_connections", ())] == 1
        try:
            async with connect(url, origin="https://evil.example") as refused:
                await refused.recv()
        except websockets.InvalidStatus:
            pass
        except websockets.ConnectionClosed:
            pass
        clock.advance(10)
        await until(lambda: app.registry.dispatcher is not None and app.registry.dispatcher.wakes >= 1)
        await until(lambda: app.registry.dispatcher is not None and not app.registry.dispatcher.busy)
        got = await scrape(http)

    assert got[("roost_actors_live", ())] == 1
    assert got[("roost_activations_total", ())] == 1
    turns = got[("roost_turns_total", (("kind", "counter"),))]
    assert turns >= 5 + 1 + 1 + 1  # 5 HTTP calls, 2 WS calls, the fire (connect turns too)
    assert got[("roost_turn_seconds_count", ())] == turns
    assert got[("roost_turn_seconds_bucket", (("le", "+Inf"),))] == turns
    assert got[("roost_commit_batch_turns_count", ())] >= 1
    assert got[("roost_commit_batch_turns_sum", ())] >= 8
    assert got[("roost_output_hold_seconds_count", ())] == got[("roost_commit_batch_turns_count", ())]
    assert got[("roost_wakeup_lateness_seconds_count", ())] == 1
    assert got[("roost_wakeups_total", ())] >= 1
    assert got[("roost_leases_held", ())] == 0
    assert got[("roost_connections", ())] == 0
    assert got[("roost_frames_limited_total", ())] >= 1
    assert got[("roost_refused_total", (("code", "origin_refused"),))] == 1
    assert ("roost_actors_dormant", ()) in got
    assert ("roost_replay_bytes_total", ()) in got


async def test_only_an_admin_scrapes(data_dir: Path) -> None:
    """Guarantee (roost.transport.metrics): without authentication only this host's command line
    scrapes — a request through a proxy or from a browser is refused 403; metrics off: 404."""
    app = create_app([Counter], data_dir=data_dir, metrics=True)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        assert (await http.get("/metrics")).status_code == 200
        proxied = await http.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9"})
        assert proxied.status_code == 403
        browser = await http.get("/metrics", headers={"Origin": f"http://{addr}"})
        assert browser.status_code == 403
    off = create_app([Counter], data_dir=data_dir / "off")
    async with serve_in_process(off) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        assert (await http.get("/metrics")).status_code == 404


async def test_unobserved_turns_pay_a_check(data_dir: Path) -> None:
    """Guarantee (roost.actors.observe): without metrics (or traces) the registry has no observer and
    its hosts none, so no hook runs."""
    app = create_app([Counter], data_dir=data_dir)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        assert (await http.post("/agents/counter/c1/rpc/increment", json=[])).json()["ok"]
        assert app.registry.observer is None
        assert all(host.observer is None for host in app.registry.hosts.values())


def test_import_roost_loads_neither_library() -> None:
    """Guarantee (README, *Metrics and traces*): ``import roost`` (and making an app with both off)
    imports neither ``prometheus_client`` nor the OpenTelemetry SDK."""
    code = (
        "import sys, roost\n"
        "from roost.examples.kinds import Counter\n"
        "roost.create_app([Counter], data_dir='unused')\n"
        "print(sorted(m for m in sys.modules if m.startswith(('prometheus_client', 'opentelemetry.sdk'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_dormant_actors_and_replayed_bytes_are_the_servers(data_dir: Path) -> None:
    """Guarantee (roost.transport.metrics): an actor that went dormant (idle past ``idle_timeout``,
    swept) is counted by ``roost_actors_dormant``, and ``roost_replay_bytes_total`` grows by the
    bytes of the frames a resuming client was replayed."""
    clock = FakeClock()
    app = create_app([Counter], data_dir=data_dir, clock=clock, metrics=True, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        for name in ("c1", "c2", "c2", "c2"):
            assert (await http.post(f"/agents/counter/{name}/rpc/increment", json=[])).json()["ok"]
        clock.advance(30)
        assert (await http.post("/agents/counter/c2/rpc/increment", json=[])).json()["ok"]
        clock.advance(31)  # c1 idle for 61 s, c2 for 31
        assert app.registry.sweep() == 1
        got = await scrape(http)
        assert got[("roost_actors_live", ())] == 1
        assert got[("roost_actors_dormant", ())] == 1
        assert got[("roost_replay_bytes_total", ())] == 0
        async with websockets.connect(f"ws://{addr}/agents/counter/c2?cursor=0") as ws:
            welcome = orjson.loads(await ws.recv())
            assert welcome["type"] == "welcome"
            replayed = [await ws.recv() for _ in range(welcome["cursor"])]  # seq 1..4, each a frame
        assert [orjson.loads(f)["seq"] for f in replayed] == [1, 2, 3, 4]
        got = await scrape(http)
        assert got[("roost_replay_bytes_total", ())] == sum(len(_bytes(f)) for f in replayed)


def _bytes(frame: str | bytes) -> bytes:
    return frame.encode() if isinstance(frame, str) else frame


async def test_leases_held_counts_a_running_background_job(data_dir: Path) -> None:
    """Guarantee (roost.transport.metrics): ``roost_leases_held`` counts the lease of an agent's
    background job running in this process (its job runner's), and drops back when it ends. (The
    clock stands still: no wake-up is due, so the dispatcher holds no lease of its own meanwhile.)"""
    app = create_app([Flaky], data_dir=data_dir, clock=FakeClock(), metrics=True)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        assert (await scrape(http))[("roost_leases_held", ())] == 0
        started = (await http.post("/agents/flaky/f1/rpc/turn", json=["quiet please"])).json()["result"]

        async def held() -> bool:
            return (await scrape(http))[("roost_leases_held", ())] == 1

        await until(held, message="the job's lease counted")
        assert app.registry.dispatcher is None or app.registry.dispatcher.leases_held == 0
        cancelled = await http.post("/agents/flaky/f1/rpc/cancel", json=[started["turn_id"]])
        assert cancelled.json()["ok"]

        async def released() -> bool:
            return (await scrape(http))[("roost_leases_held", ())] == 0

        await until(released, message="the lease released with the job")
