"""Who may connect: ``Reject`` from ``on_connect`` and the ``authenticate`` hook.

- ``Reject`` takes only close codes 4400-4499; a rejected connection is closed with its code and reason
  before any welcome, and ``roost.client`` stops (``TerminalClose``) instead of reconnecting.
- ``authenticate`` refuses with WebSocket close 4401 and HTTP 401 (a JSON body), creates nothing, and
  the principal it returns reaches the actor (``conn.principal``, ``self.principal``, ``self.caller``).
- With no hook configured (allow all) the server warns about authentication once at start-up.
- Mounted in FastAPI under a prefix, the app serves WebSocket and HTTP there, with the hook applied.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import websockets
from starlette.requests import HTTPConnection

from roost.actors import Actor, Connection, Principal, Reject, callable
from roost.client import Client, TerminalClose, actor_url
from roost.testing import connect
from roost.transport import create_app
from tests.support import serve_in_process


class Bouncer(Actor):
    kind = "bouncer"
    attempts: ClassVar[int] = 0

    def on_connect(self, conn: Connection) -> None:
        Bouncer.attempts += 1
        raise Reject("banned", 4450)


class Whoami(Actor):
    kind = "whoami"

    def on_connect(self, conn: Connection) -> None:
        turn = self.principal.id if self.principal is not None else None
        conn.send({"conn_principal": conn.principal.id, "turn_principal": turn})

    @callable
    def who(self) -> dict[str, Any]:
        return {
            "principal": self.principal.id if self.principal is not None else None,
            "caller": self.caller.principal.id if self.caller is not None else None,
        }


def token_auth(conn: HTTPConnection) -> Principal | None:
    return Principal(id="ann", tenant="t1") if conn.headers.get("x-token") == "ann-token" else None


# -- Reject ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [4001, 1000, 1013, 4399, 4500])
def test_reject_refuses_codes_outside_4400_to_4499(code: int) -> None:
    with pytest.raises(ValueError, match="4400-4499"):
        Reject(code=code)


async def test_a_reject_code_closes_the_connection_and_stops_the_client(data_dir: Path) -> None:
    Bouncer.attempts = 0
    app = create_app([Bouncer], data_dir=data_dir)
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/bouncer/door") as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()  # no welcome
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4450, "banned")

        async with Client(actor_url(f"ws://{addr}", "bouncer", "door"), rng=random.Random(3)) as client:
            with pytest.raises(TerminalClose) as stopped:
                await client.wait_connected(5)
            assert stopped.value.code == 4450
            assert isinstance(client.closed_reason, TerminalClose)
            assert client.reconnects == 0
            with pytest.raises(TerminalClose):
                await client.call("anything", timeout=5)
        assert Bouncer.attempts == 2, "the client came back after a terminal close"


# -- authenticate -------------------------------------------------------------------------------------------
async def test_authenticate_refuses_with_4401_and_401_and_its_principal_reaches_the_actor(
    data_dir: Path,
) -> None:
    app = create_app([Whoami], data_dir=data_dir, authenticate=token_auth)
    ann = {"x-token": "ann-token"}
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        async with connect(f"ws://{addr}/agents/whoami/w1") as ws:
            frame = await ws.recv()
            assert (frame["type"], frame["code"]) == ("error", "unauthenticated")
            assert await ws.close_code() == 4401
        for r in (await http.get("/agents/whoami/w1"), await http.post("/agents/whoami/w1/rpc/who")):
            assert r.status_code == 401
            assert r.headers["content-type"] == "application/json"
            assert r.json()["error"]["code"] == "unauthenticated"
        assert (await http.get("/agents/whoami/w1", headers=ann)).status_code == 404, "a refusal created it"

        async with connect(f"ws://{addr}/agents/whoami/w1", additional_headers=ann) as ws:
            assert (await ws.recv())["type"] == "welcome"
            assert await ws.recv() == {
                "type": "message",
                "data": {"conn_principal": "ann", "turn_principal": "ann"},
            }
            reply = await ws.rpc("who", id="1")
            assert reply["result"] == {"principal": "ann", "caller": "ann"}
        r = await http.post("/agents/whoami/w1/rpc/who", headers=ann)
        assert r.json() == {"ok": True, "result": {"principal": "ann", "caller": None}}


async def test_the_default_allow_all_warns_about_authentication_at_start_up(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def auth_warnings() -> list[logging.LogRecord]:
        return [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and "authentication" in r.getMessage().lower()
        ]

    async with serve_in_process(create_app([Whoami], data_dir=data_dir, authenticate=token_auth)):
        pass
    assert auth_warnings() == [], "warned although a hook was configured"
    async with serve_in_process(create_app([Whoami], data_dir=data_dir)):
        pass
    assert len(auth_warnings()) == 1


async def test_the_app_mounted_in_fastapi_serves_websocket_and_http_under_a_prefix(data_dir: Path) -> None:
    fastapi = pytest.importorskip("fastapi")
    roost = create_app([Whoami], data_dir=data_dir, authenticate=token_auth)
    parent = fastapi.FastAPI()
    parent.mount("/api", roost)
    ann = {"x-token": "ann-token"}
    async with serve_in_process(parent) as addr:
        async with connect(f"ws://{addr}/api/agents/whoami/f%2F1", additional_headers=ann) as ws:
            welcome = await ws.recv()
            assert welcome["actor"] == {"kind": "whoami", "name": "f/1"}
            await ws.recv()  # on_connect's message
            assert (await ws.rpc("who", id="1"))["result"] == {"principal": "ann", "caller": "ann"}
        async with httpx.AsyncClient(base_url=f"http://{addr}") as http:
            r = await http.post("/api/agents/whoami/f%2F1/rpc/who", headers=ann)
            assert r.json() == {"ok": True, "result": {"principal": "ann", "caller": None}}
            r = await http.get("/api/agents/whoami/f%2F1", headers=ann)
            assert r.json()["actor"] == {"kind": "whoami", "name": "f/1"}
            assert (await http.post("/api/agents/whoami/f%2F1/rpc/who")).status_code == 401
    await roost.aclose()
