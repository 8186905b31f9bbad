"""Roost runs on other libraries' public APIs, with one documented, pinned exception.

- **No private asyncio or uvicorn names**: no module of ``roost`` imports a ``_private`` name from
  another package or names asyncio's task bookkeeping (``_enter_task``/``_leave_task``) or uvicorn's
  ``send_receive_event_to_app`` (the inline turns and the direct frame path that used them were worth
  under 10 % of durable RPC throughput: ``bench/RESULTS.md``).
- **The WebSocket protocol overrides only the asyncio.Protocol interface** of uvicorn's class
  (``connection_made``, ``data_received``: the answer to a handshake the parser refused).
- **No connection is offered the removed direct path**, and a call is answered over a real socket, in
  process and by ``roost serve``.
- **The pins hold what was tested**: the installed uvicorn and websockets are inside the ranges
  ``pyproject.toml`` pins (``roost.transport.uvicorn_ws`` documents what depends on them).
"""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest
import websockets
from packaging.requirements import Requirement
from starlette.requests import HTTPConnection
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from roost.actors import ANONYMOUS, Principal
from roost.examples.kinds import KINDS
from roost.testing import serve
from roost.transport import create_app, uvicorn_protocols
from roost.transport.uvicorn_ws import RoostWebSocketProtocol
from tests.conftest import NO_RATE_LIMITS
from tests.support import ServerProcess, serve_in_process

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("_enter_task", "_leave_task", "send_receive_event_to_app")


def private_uses(path: Path) -> list[str]:
    """``_private`` names imported from another package, and the forbidden names, in one module."""
    found: list[str] = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("roost"):
            found += [f"from {node.module} import {a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN:
            found.append(f".{node.attr}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN:
            found.append(node.id)
        elif isinstance(node, ast.FunctionDef) and node.name in FORBIDDEN:
            found.append(f"def {node.name}")
    return [f"{path.relative_to(ROOT)}: {f}" for f in found]


def test_no_module_of_roost_uses_private_asyncio_or_uvicorn_names() -> None:
    uses = [u for path in sorted((ROOT / "roost").rglob("*.py")) for u in private_uses(path)]
    assert uses == []


def test_the_websocket_protocol_overrides_only_the_asyncio_protocol_interface_of_uvicorns_class() -> None:
    overridden = {
        name
        for name in vars(RoostWebSocketProtocol)
        if hasattr(WebSocketsSansIOProtocol, name) and not name.startswith("__")
    }
    assert overridden == {"connection_made", "data_received"}
    assert all(hasattr(asyncio.Protocol, name) for name in overridden)


async def call_once(url: str) -> dict[str, Any]:
    async with websockets.connect(url) as ws:
        welcome = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
        assert welcome["type"] == "welcome"
        await ws.send(orjson.dumps({"type": "rpc", "id": "1", "method": "increment", "args": [2]}).decode())
        reply: dict[str, Any] = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
    return reply


async def test_no_connection_is_offered_the_removed_direct_path_and_a_call_is_answered_in_process(
    data_dir: Path,
) -> None:
    offered: list[bool] = []

    async def authenticate(conn: HTTPConnection) -> Principal:
        offered.append("roost.direct" in conn.scope.get("extensions", {}))
        return ANONYMOUS

    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATE_LIMITS, authenticate=authenticate)
    async with serve_in_process(app) as addr:
        reply = await call_once(f"ws://{addr}/agents/counter/public?subscribe=none")
    assert reply == {"type": "rpc_result", "id": "1", "ok": True, "result": 2}
    assert offered == [False]


@pytest.mark.slow
async def test_roost_serve_answers_a_call_over_a_real_socket(data_dir: Path) -> None:
    server = await asyncio.to_thread(ServerProcess(data_dir).start)
    try:
        reply = await call_once(f"{server.ws}/agents/counter/public?subscribe=none")
    finally:
        server.kill()
    assert reply == {"type": "rpc_result", "id": "1", "ok": True, "result": 2}


@pytest.mark.parametrize("package", ["uvicorn", "websockets"])
def test_the_installed_version_is_inside_the_pinned_range(package: str) -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == package]
    assert any(spec.operator == "<" for spec in req.specifier), f"{package} has no upper bound: {req}"
    assert req.specifier.contains(importlib.metadata.version(package)), (package, str(req.specifier))


def test_roosts_uvicorn_protocols_are_chosen_only_on_a_tested_uvicorn_else_uvicorns_own() -> None:
    """The documented exception (classes subclassing uvicorn's internal ones) is detected at start-up:
    on the installed, tested uvicorn Roost's classes are chosen; on another version, uvicorn's own."""
    chosen = uvicorn_protocols.choose()
    assert chosen == uvicorn_protocols.ROOST
    assert chosen.fallback is None
    low, high = uvicorn_protocols.TESTED_UVICORN
    assert req_of("uvicorn").specifier.contains(".".join(map(str, low)) + ".0")
    assert not req_of("uvicorn").specifier.contains(".".join(map(str, high)) + ".0")
    for other in ("0.53.9", "0.55.0", "1.0.0"):
        fallback = uvicorn_protocols.choose(other)
        assert (fallback.http, fallback.ws) == ("httptools", "websockets-sansio")
        assert fallback.fallback is not None
        assert other in fallback.fallback


async def test_the_fallback_uvicorns_own_protocol_serves_a_call_and_resumes(data_dir: Path) -> None:
    """On uvicorn's own WebSocket protocol (the fallback), a call is answered and a reconnect replays
    from its cursor: nothing of Roost's protocol class is needed for the guarantees."""
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve(app, ws="websockets-sansio") as addr:
        reply = await call_once(f"ws://{addr}/agents/counter/stock?subscribe=none")
        assert reply == {"type": "rpc_result", "id": "1", "ok": True, "result": 2}
        async with websockets.connect(f"ws://{addr}/agents/counter/stock?cursor=0") as ws:
            welcome = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            assert welcome["resume"] == "replay"
            replayed = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            assert (replayed["type"], replayed["seq"]) == ("state", 1)


def req_of(package: str) -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == package]
    return req
