"""An address that cannot be served is refused with ``bad_address`` (or 404/414), creates nothing, and
is never shown to the authentication hook as if it named a different actor.

- A path where the router and the raw path disagree on the actor is refused before authentication.
- Long handshakes (a 10 KB name, a 40 KB request line) get an answer from a real server.
- A call to a missing method of a new actor creates no actor, no directory row, no file.
- A name may hold any character but NUL: one with a newline or a carriage return reaches its actor over
  HTTP, WebSocket and the admin endpoints; one with NUL is refused ``bad_address`` (400, 4400) there.
"""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import quote

import httpx
import orjson
import pytest
from starlette.requests import HTTPConnection
from websockets.sync.client import connect as connect_sync

from roost.actors import Principal
from roost.examples.kinds import KINDS
from roost.storage import actor_path
from roost.testing import close_code_sync, connect
from roost.transport import create_app
from tests.support import serve_in_process, server_process

CONFUSED_WS = ["/agents/counter/mallory/counter/alice%2Fprivate", "/agents/room/mallory/counter/alice"]
CONFUSED_HTTP = [
    ("GET", "/agents/counter/mallory/counter/alice%2Fprivate"),
    ("GET", "/agents/room/mallory/counter/alice"),
    ("POST", "/agents/counter/mallory/counter/alice%2Fprivate/rpc/increment"),
    ("POST", "/agents/counter/mallory/rpc/increment/counter/alice/rpc/increment"),
]


def actor_files(data_dir: Path) -> list[Path]:
    actors = data_dir / "actors"
    return sorted(actors.rglob("*.sqlite")) if actors.exists() else []


async def test_a_path_that_names_two_actors_is_refused_before_authentication(data_dir: Path) -> None:
    """The hook approves addresses; a path where the router and the raw path disagree on the actor is
    refused before the hook is asked, so an approval never serves a different actor."""
    seen: list[tuple[str, str]] = []

    def authenticate(conn: HTTPConnection) -> Principal:
        seen.append((conn.path_params["kind"], conn.path_params["name"]))
        return Principal(id="mallory")

    app = create_app(KINDS, data_dir=data_dir, authenticate=authenticate)
    async with serve_in_process(app) as addr:
        for path in CONFUSED_WS:
            async with connect(f"ws://{addr}{path}") as ws:
                frame = await ws.recv()
                assert (frame["type"], frame["code"]) == ("error", "bad_address"), path
                assert await ws.close_code() == 4400, path
        async with httpx.AsyncClient(base_url=f"http://{addr}") as http:
            for method, path in CONFUSED_HTTP:
                r = await http.request(method, path, content=b"[]" if method == "POST" else None)
                assert r.status_code == 400, path
                assert r.json()["error"]["code"] == "bad_address", path
        assert seen == [], "the hook was asked to approve an address that is refused anyway"
        assert app.registry.hosts == {}
        assert actor_files(data_dir) == [], "a refused address created an actor"

        async with connect(f"ws://{addr}/agents/counter/alice%2Fprivate") as ws:
            welcome = await ws.recv()
        assert welcome["actor"] == {"kind": "counter", "name": "alice/private"}
        assert seen == [("counter", "alice/private")], "the hook approved exactly the actor served"


@pytest.mark.slow
def test_long_handshakes_get_an_answer_from_a_real_server(data_dir: Path) -> None:
    with server_process(data_dir) as server:
        with connect_sync(f"{server.ws}/agents/counter/{'n' * 10_240}", open_timeout=5) as ws:
            frame = orjson.loads(ws.recv(timeout=5))
            assert (frame["type"], frame["code"]) == ("error", "bad_address")
            assert close_code_sync(ws, 5) == 4400

        host, port = server.addr.rsplit(":", 1)
        request = (
            f"GET /agents/counter/{'p' * 40_960} HTTP/1.1\r\nHost: {server.addr}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        with socket.create_connection((host, int(port)), timeout=3) as sock:
            sock.sendall(request)
            answer = b""
            while b"\r\n" not in answer:
                chunk = sock.recv(4096)  # a hang raises socket.timeout after 3 s
                if not chunk:
                    break
                answer += chunk
        assert answer.split(b"\r\n", 1)[0].startswith(b"HTTP/1.1 414"), answer[:200]

        with connect_sync(f"{server.ws}/agents/counter/after-long", open_timeout=5) as ws:
            assert orjson.loads(ws.recv(timeout=5))["type"] == "welcome"


async def test_a_call_to_a_missing_method_of_a_new_actor_creates_nothing(data_dir: Path) -> None:
    app = create_app(KINDS, data_dir=data_dir)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        r = await http.post("/agents/counter/never-made/rpc/nope")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "method_not_found"
        r = await http.get("/agents/counter/never-made")
        assert r.status_code == 404
        assert app.registry.directory is not None
        assert app.registry.directory.get("counter", "never-made") is None
    assert not actor_path(data_dir, "counter", "never-made").exists()


async def test_a_tenants_client_sees_its_names_as_it_sent_them_with_the_documented_length(
    data_dir: Path,
) -> None:
    """Inside a tenant, a 404 names the actor as the client sent it (not ``tenant NUL name``), and a
    name may be 256 characters long, as docs/protocol.md says, not 256 minus the tenant's length."""
    from roost.transport.security import claims_authorize, token_authenticate
    from roost.transport.tokens import TokenSigner

    signer = TokenSigner("s" * 40)
    token = signer.issue("ann", ttl=600, tenant="acme")
    app = create_app(
        KINDS, data_dir=data_dir, authenticate=token_authenticate(signer), authorize=claims_authorize
    )
    headers = {"Authorization": f"Bearer {token}"}
    long_name = "n" * 256
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        missing = await http.get("/agents/counter/pub-never", headers=headers)
        assert missing.status_code == 404
        assert "'pub-never'" in missing.json()["error"]["message"]
        assert "\x00" not in missing.text
        assert "acme" not in missing.json()["error"]["message"]
        made = await http.post(f"/agents/counter/{long_name}/rpc/increment", json=[], headers=headers)
        assert made.status_code == 200, made.text
        assert made.json()["result"] == 1
        too_long = await http.post(f"/agents/counter/{long_name}n/rpc/increment", json=[], headers=headers)
        assert too_long.status_code == 400
        async with connect(f"ws://{addr}/agents/counter/{long_name}?token={token}") as ws:
            welcome = await ws.recv()
        assert welcome["type"] == "welcome"
        assert welcome["actor"]["name"] == long_name


LINE_BREAKS = ["a\nb", "a\rb", "\n", "trailing\n", "crlf\r\nname", "\r"]


async def test_a_name_holding_a_newline_or_a_carriage_return_reaches_its_actor(data_dir: Path) -> None:
    """docs/protocol.md: a name is any string of 1 to 256 characters but NUL. Starlette's ``path``
    convertor (``.*``) does not match ``\\n``: such a name answered a plain 404 over HTTP and a 403
    handshake over WebSocket, with no JSON error."""
    app = create_app(KINDS, data_dir=data_dir)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        for name in LINE_BREAKS:
            path = f"/agents/counter/{quote(name, safe='')}"
            made = await http.post(f"{path}/rpc/increment", json=[])
            assert made.status_code == 200, (name, made.text)
            assert made.json()["result"] == 1, name
            read = await http.get(path)
            assert read.status_code == 200, (name, read.text)
            assert read.json()["actor"] == {"kind": "counter", "name": name}
            async with connect(f"ws://{addr}{path}") as ws:
                welcome = await ws.recv()
            assert welcome["type"] == "welcome", (name, welcome)
            assert welcome["actor"] == {"kind": "counter", "name": name}
            assert welcome["state"] == {"count": 1}, name
            inspected = await http.get(f"/admin/actors/counter/{quote(name, safe='')}")
            assert inspected.status_code == 200, (name, inspected.text)
        assert sorted(e.name for e in app.registry.directory.list("counter")) == sorted(LINE_BREAKS)  # type: ignore[union-attr]


async def test_a_name_holding_nul_is_refused_bad_address_over_http_and_websocket(data_dir: Path) -> None:
    app = create_app(KINDS, data_dir=data_dir)
    path = f"/agents/counter/{quote('a' + chr(0) + 'b', safe='')}"
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        for answer in (await http.post(f"{path}/rpc/increment", json=[]), await http.get(path)):
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["code"] == "bad_address"
        async with connect(f"ws://{addr}{path}") as ws:
            frame = await ws.recv()
            assert (frame["type"], frame["code"]) == ("error", "bad_address")
            assert await ws.close_code() == 4400
    assert actor_files(data_dir) == []
