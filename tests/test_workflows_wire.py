"""The workflow callables over the wire: ``send_event`` through a real WebSocket (``roost.client``),
events announced to subscribers, and a read-only principal refused every change (``forbidden``)
while it may read status and history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from roost.client import Client, actor_url
from roost.testing import connect, until
from roost.transport import create_app
from roost.transport.limits import Limits
from roost.transport.security import claims_authorize, token_authenticate
from roost.transport.tokens import TokenSigner
from tests.support import serve_in_process
from tests.workflow_kinds import Relay, Shop

signer = TokenSigner("w" * 40)


async def test_send_event_over_a_websocket(data_dir: Path) -> None:
    seen: list[Any] = []
    app = create_app([Shop, Relay], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        url = actor_url(f"ws://{addr}", "shop", "s1")
        async with Client(url, on_event=lambda event, seq: seen.append(event)) as client:
            status = await client.call("start_workflow", "paid", {}, "w1")
            assert status["status"] == "waiting"
            status = await client.call("send_event", "w1", "payment", {"amount": 12})
            assert status["status"] == "completed"
            assert status["result"] == {"amount": 12}
            await until(lambda: {"type": "workflow", "id": "w1", "status": "completed"} in seen)
            assert await client.call("effects") == {"invoice": 1, "settle": 1}


async def test_a_read_only_principal_reads_and_changes_nothing(data_dir: Path) -> None:
    app = create_app(
        [Shop],
        data_dir=data_dir,
        authenticate=token_authenticate(signer),
        authorize=claims_authorize,
        limits=Limits(conn_rate=None, principal_rate=None),
    )
    writer = {"Authorization": f"Bearer {signer.issue('boss', ttl=600)}"}
    reader = {"Authorization": f"Bearer {signer.issue('vic', ttl=600, read_only=True)}"}
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/shop/s1", additional_headers=writer) as ws:
            await ws.recv()
            assert (await ws.rpc("start_workflow", "gated", {}, "w1"))["result"]["status"] == "waiting"
        async with connect(f"ws://{addr}/agents/shop/s1", additional_headers=reader) as ws:
            await ws.recv()
            for method, args in (
                ("approve_step", ("w1", "manager")),
                ("send_event", ("w1", "x", None)),
                ("cancel_workflow", ("w1",)),
                ("pause_workflow", ("w1",)),
                ("restart_workflow", ("w1",)),
                ("start_workflow", ("gated", {}, "w2")),
            ):
                refused = await ws.rpc(method, *args)
                assert refused["error"]["code"] == "forbidden", method
            assert (await ws.rpc("workflow_status", "w1"))["result"]["status"] == "waiting"
            assert (await ws.rpc("workflow_history", "w1"))["ok"] is True
        async with httpx.AsyncClient() as http:
            r = await http.post(
                f"http://{addr}/agents/shop/s1/rpc/approve_step", json=["w1", "manager"], headers=reader
            )
            assert r.status_code == 403
            r = await http.post(
                f"http://{addr}/agents/shop/s1/rpc/approve_step", json=["w1", "manager"], headers=writer
            )
            assert r.json()["result"]["result"] == {"approved": True, "by": "boss", "note": None}
