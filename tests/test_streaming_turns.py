"""A streaming call that never awaits anything slow does not hold the server (issue 13, point 3).

- **A stream yields to the loop between chunks**: while ``counter.count_to(n)`` streams, other
  clients are served (``/healthz`` and another actor's call answer long before the stream ends).
- **``turn_timeout`` cuts a stream**: when the runtime's clock passes the turn's deadline the stream
  stops, the caller gets ``timeout``, and what the chunks before reported stays committed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets

from roost.actors import RuntimeConfig
from roost.examples.kinds import KINDS
from roost.scheduler import FakeClock
from roost.testing import rpc_frame, serve
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS

N = 200_000  # seconds of work if the loop were held for the whole stream


async def next_frame(ws: Any) -> dict[str, Any]:
    frame: dict[str, Any] = orjson.loads(await ws.recv())
    return frame


async def test_a_long_stream_lets_others_be_served_and_is_cut_at_turn_timeout(data_dir: Path) -> None:
    clock = FakeClock()
    config = RuntimeConfig(data_dir=data_dir, turn_timeout=5.0)
    app = create_app(KINDS, config=config, clock=clock, limits=NO_RATE_LIMITS)
    async with serve(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}", timeout=30) as http:
        async with websockets.connect(f"ws://{addr}/agents/counter/stream?subscribe=none") as ws:
            assert (await next_frame(ws))["type"] == "welcome"
            await ws.send(rpc_frame("s", "count_to", N))
            first = await next_frame(ws)
            assert (first["type"], first["chunk"]) == ("rpc_chunk", 1)
            # others are served while it streams
            assert (await http.get("/healthz")).json()["ok"] is True
            other = await http.post("/agents/counter/bystander/rpc/increment", json=[1])
            assert other.json() == {"ok": True, "result": 1}
            # only now does the clock pass turn_timeout: a stream cut by it was still running while
            # the others were served (held loop: they would be answered only after its last chunk)
            clock.advance(6.0)
            last = first["chunk"]
            while True:
                frame = await next_frame(ws)
                if frame["type"] != "rpc_chunk":
                    break
                last = frame["chunk"]
            assert frame["type"] == "rpc_result"
            assert frame["ok"] is False
            assert frame["error"]["code"] == "timeout"
        after = (await http.get("/agents/counter/stream")).json()["state"]["count"]
    assert last <= after < N, "the chunks reported before the cut stay committed"
