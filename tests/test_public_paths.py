"""What holds on uvicorn's own protocols and on the versions Roost is pinned to.

- **Roost's protocol overrides only what it documents** of uvicorn's class: the ``asyncio.Protocol``
  interface (``connection_made``, ``data_received``: the answer to a handshake the parser refused) and
  the direct frame path's two methods (``handle_connect``, ``send_receive_event_to_app``), and nothing
  else (``tests/test_fast_paths.py`` has the rest of the exception).
- **The pins hold what was tested**: the installed uvicorn and websockets are inside the ranges
  ``pyproject.toml`` pins (``roost.transport.uvicorn_ws`` documents what depends on them).
- **Roost's classes are chosen only on a tested uvicorn**, else uvicorn's own, which serve a call and a
  resume by replay (the public path), as ``roost serve`` does over a real socket.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest
import websockets
from packaging.requirements import Requirement
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from roost.examples.kinds import KINDS
from roost.testing import serve
from roost.transport import create_app, uvicorn_protocols
from roost.transport.uvicorn_http import RoostHttpToolsProtocol
from roost.transport.uvicorn_ws import RoostWebSocketProtocol
from tests.conftest import NO_RATE_LIMITS
from tests.support import ServerProcess

ROOT = Path(__file__).resolve().parent.parent


def overridden(cls: type, base: type) -> set[str]:
    return {name for name in vars(cls) if hasattr(base, name) and not name.startswith("__")}


def test_roosts_websocket_protocol_overrides_only_what_it_documents_of_uvicorns_class() -> None:
    assert overridden(RoostWebSocketProtocol, WebSocketsSansIOProtocol) == {
        "connection_made",
        "data_received",
        "handle_connect",
        "send_receive_event_to_app",
        "send",
        "keepalive_timeout",
    }


@pytest.mark.parametrize("which", ["http", "ws"])
def test_start_up_detection_checks_every_method_roosts_protocols_override(which: str) -> None:
    """``choose`` falls back when one of them is missing, so it must know all of them."""
    needs = {f"{module}.{cls}": set(methods) for module, cls, methods in uvicorn_protocols._NEEDS}
    roost_cls = RoostHttpToolsProtocol if which == "http" else RoostWebSocketProtocol
    (base,) = roost_cls.__bases__
    assert overridden(roost_cls, base) == needs[f"{base.__module__}.{base.__name__}"]


FALLBACK_SITE = """
import importlib.abc, importlib.metadata, sys

_version = importlib.metadata.version
importlib.metadata.version = lambda name: "0.99.0" if name == "uvicorn" else _version(name)


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "roost.transport.uvicorn_http":
            raise ImportError("Roost's HTTP protocol is not to be used on the fallback")
        return None


sys.meta_path.insert(0, _Absent())
"""


@pytest.mark.slow
async def test_roost_serve_on_an_untested_uvicorn_falls_back_to_its_own_protocols_and_serves(
    data_dir: Path, tmp_path: Path
) -> None:
    """On a uvicorn version outside the pin, ``roost serve`` says so, runs uvicorn's own classes
    without loading Roost's (whose module imports uvicorn internals), and answers a call."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FALLBACK_SITE)
    env = {"PYTHONPATH": f"{site}:{ROOT}", "ROOST_FAST_PATHS": "1"}
    server = await asyncio.to_thread(ServerProcess(data_dir, env=env).start)
    try:
        reply = await call_once(f"{server.ws}/agents/counter/fallback?subscribe=none")
    finally:
        server.kill()
    assert reply == {"type": "rpc_result", "id": "1", "ok": True, "result": 2}
    log = "".join(server.log)
    assert "uvicorn 0.99.0 is not a tested version" in log
    assert "direct frames off (uvicorn 0.99.0 is not a tested version)" in log


async def call_once(url: str) -> dict[str, Any]:
    async with websockets.connect(url) as ws:
        welcome = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
        assert welcome["type"] == "welcome"
        await ws.send(orjson.dumps({"type": "rpc", "id": "1", "method": "increment", "args": [2]}).decode())
        reply: dict[str, Any] = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
    return reply


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
