"""The MCP client: MCP servers' tools in an agent's catalog, run through the execution gate, with a
durable capability session per (run, server) (roost/agent/mcp_client.py, mcp_tools.py,
capabilities.py; docs/design.md, *MCP client and capability sessions*).

Every server is real: ``tests/mcp_servers/tools.py``, written with the SDK's ``MCPServer``, started
as a subprocess over stdio or over streamable HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from roost.actors import InvalidArguments
from roost.agent import AgentConfig
from roost.agent.agent import Agent
from roost.agent.catalog import InvalidToolCall
from roost.agent.config import ConfigError
from roost.agent.mcp_config import CapabilitySessions, McpServer
from roost.storage import actor_path
from roost.testing import ActorKit, KitConnection, WsClient, connect, until
from tests.agent_support import advance, drive, event_types, events, log_frames
from tests.support import server_process

ROOT = Path(__file__).resolve().parent.parent
SERVER = ["-m", "tests.mcp_servers.tools"]
IO = 0.02  # real seconds per driving step: the servers are real processes


def stdio(name: str = "t", **kw: Any) -> McpServer:
    return McpServer(name=name, command=sys.executable, args=(*SERVER, "stdio"), cwd=str(ROOT), **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def http_server(*flags: str) -> Iterator[str]:
    """The test server over streamable HTTP; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, *SERVER, "http", str(port), *flags],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(400):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
                break
            if proc.poll() is not None:
                raise RuntimeError("the MCP test server did not start")
            subprocess.run(["sleep", "0.025"], check=True)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)


def kind_of(kind: str, *servers: McpServer, reinit: bool = False, progress: bool = True) -> type[Agent]:
    """An agent kind whose tools are the servers' (a class per test: its catalog is its servers')."""
    config = AgentConfig(
        heartbeat_interval=0.5,
        lease_ttl=2.0,
        job_backoff=0.0,
        capability_sessions=CapabilitySessions(support_reinit_on_expiry=reinit, emit_progress_events=progress),
    )
    made: type[Agent] = type(f"Kind_{kind}", (Agent,), {"kind": kind, "config": config, "mcp_servers": servers})
    return made


def finished(c: KitConnection) -> bool:
    return any(t in event_types(c) for t in ("turn_completed", "turn_failed"))


def payloads(c: KitConnection, event_type: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in events(c) if e["event_type"] == event_type]


def session_statuses(c: KitConnection) -> list[str]:
    return [p["status"] for p in payloads(c, "capability_session")]


async def run_to_end(kit: ActorKit, c: KitConnection, text: str) -> dict[str, Any]:
    reply = await c.call("turn", text)
    await drive(kit, lambda: finished(c), io_wait=IO)
    run: dict[str, Any] = await c.call("get_run", reply["run_id"])
    return run


# -- the catalog --------------------------------------------------------------------------------------
async def test_mcp_tools_enter_the_catalog_typed_by_their_input_schema(data_dir: Path) -> None:
    kind = kind_of("cat", stdio())
    async with ActorKit([kind], data_dir):
        catalog = kind.catalog()
        echo = catalog.get("mcp__t__echo")
        assert echo.background is True
        assert echo.spec()["function"]["parameters"]["properties"]["text"]["type"] == "string"
        assert catalog.check("mcp__t__echo", {"text": "hi"}) == {"text": "hi"}
        with pytest.raises(InvalidToolCall, match="not of type 'string'"):
            catalog.check("mcp__t__echo", {"text": 3})
        with pytest.raises(InvalidToolCall, match="'text' is a required property"):
            catalog.check("mcp__t__echo", {})


async def test_an_mcp_server_that_cannot_be_reached_refuses_the_kind(data_dir: Path) -> None:
    kind = kind_of("gone", McpServer(name="gone", url=f"http://127.0.0.1:{free_port()}/mcp", connect_timeout_s=3))
    with pytest.raises(ConfigError, match=r"\[agent.mcp_servers.gone\].*cannot list its tools"):
        async with ActorKit([kind], data_dir):
            pass


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_mcp_tool_call_completes_and_its_session_is_a_row(data_dir: Path, transport: str) -> None:
    with http_server() as url:
        server = stdio() if transport == "stdio" else McpServer(name="t", url=url)
        kind = kind_of(f"plain{transport}", server)
        async with ActorKit([kind], data_dir) as kit:
            c = kit.connect(kind.kind, "a")
            run = await run_to_end(kit, c, 'please mcp__t__echo {"text": "hello there"}')
            assert run["status"] == "completed", run
            done = payloads(c, "tool_completed")
            assert done[0]["tool"] == "mcp__t__echo"
            assert done[0]["result"] == {"result": "hello there"}  # the structured content
            (row,) = run["capability_sessions"]
            assert row["server"] == "t"
            assert row["run_id"] == run["run_id"]
            assert row["trace_id"] == run["trace_id"]
            assert row["status"] == "closed"
            assert row["transport"] == ("stdio" if transport == "stdio" else "streamable_http")
            assert row["calls"] == 1
            assert row["initialized"] == 1
            # over HTTP the server's session id is tracked (shown as a digest), over stdio there is none
            assert (row["resume_token"] is not None) == (transport == "http")
        assert session_statuses(c) == ["in_progress", "closed"]
