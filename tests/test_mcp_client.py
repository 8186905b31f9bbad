"""The MCP client: MCP servers' tools in an agent's catalog, run through the execution gate, with a
durable capability session per (run, server) (roost/agent/mcp_client.py, mcp_tools.py,
capabilities.py; docs/design.md, *MCP client and capability sessions*).

Every server is real: ``tests/mcp_servers/tools.py``, written with the SDK's ``MCPServer``, started
as a subprocess over stdio or over streamable HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from roost.actors import Actor, InvalidArguments, RpcError
from roost.agent import AgentConfig, mcp_tools
from roost.agent.agent import Agent
from roost.agent.capability_rows import gives_leave
from roost.agent.catalog import InvalidToolCall
from roost.agent.config import ConfigError, load_config
from roost.agent.mcp_agent import servers
from roost.agent.mcp_client import mcp_pool
from roost.agent.mcp_config import CapabilitySessions, McpServer
from roost.agent.mcp_tools import catalog_name, tools_of
from roost.storage import actor_path
from roost.testing import ActorKit, KitConnection, WsClient, connect
from roost.transport.admin import inspect_actor
from roost.workflows.runner import runner
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
            time.sleep(0.025)  # polled until the port answers (a readiness check, bounded)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)


def kind_of(
    kind: str, *servers: McpServer, reinit: bool = False, progress: bool = True, track: bool = True
) -> type[Agent]:
    """An agent kind whose tools are the servers' (a class per test: its catalog is its servers')."""
    config = AgentConfig(
        heartbeat_interval=0.5,
        lease_ttl=2.0,
        job_backoff=0.0,
        capability_sessions=CapabilitySessions(
            support_reinit_on_expiry=reinit, emit_progress_events=progress, track_session_ids=track
        ),
    )
    made: type[Agent] = type(
        f"Kind_{kind}", (Agent,), {"kind": kind, "config": config, "mcp_servers": servers}
    )
    return made


def finished(c: KitConnection) -> bool:
    return any(t in event_types(c) for t in ("turn_completed", "turn_failed"))


def payloads(c: KitConnection, event_type: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in events(c) if e["event_type"] == event_type]


def session_statuses(c: KitConnection) -> list[str]:
    return [p["status"] for p in payloads(c, "capability_session")]


def run_finished(c: KitConnection, run_id: str) -> bool:
    """Whether the run ``run_id`` ended (an earlier run's end on the same connection is not it)."""
    return any(
        e["event_type"] in ("turn_completed", "turn_failed") and e.get("run_id") == run_id for e in events(c)
    )


async def run_to_end(kit: ActorKit, c: KitConnection, text: str) -> dict[str, Any]:
    reply = await c.call("turn", text)
    await drive(kit, lambda: run_finished(c, reply["run_id"]), io_wait=IO)
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


@pytest.mark.parametrize(
    ("toml", "refusal"),
    [
        ('[agent.mcp_servers.t]\ncommand = "x"\nurl = "http://h/mcp"\n', "either command"),
        ("[agent.mcp_servers.t]\n", "either command"),
        ('[agent.mcp_servers.t]\ncommand = "x"\ntimeout = 3\n', "[agent.mcp_servers.t] timeout:"),
        ("[agent.capability_sessions]\nsupport_reinit = true\n", "[agent.capability_sessions] support_"),
        ('[agent.mcp_servers.t]\nurl = "ftp://h"\n', "url must be http"),
    ],
)
def test_mcp_settings_in_roost_toml_are_checked(tmp_path: Path, toml: str, refusal: str) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        load_config(cfg)


def test_mcp_servers_of_roost_toml_are_named_by_their_table(tmp_path: Path) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text(
        '[agent.mcp_servers.files]\ncommand = "python"\nargs = ["-m", "files"]\n'
        'approval_mode = "confirm_once"\n[agent.capability_sessions]\nsupport_reinit_on_expiry = true\n'
    )
    config = load_config(cfg)
    (server,) = servers((), config, cfg)
    assert (server.name, server.transport, server.args) == ("files", "stdio", ("-m", "files"))
    assert server.approval_mode == "confirm_once"
    assert config.capability_sessions.support_reinit_on_expiry is True
    with pytest.raises(ConfigError, match="two MCP servers of that name"):
        servers((McpServer(name="files", url="http://h/mcp"),), config, cfg)
    with pytest.raises(ConfigError, match="letters, digits"):
        servers((McpServer(name="a__b", url="http://h/mcp"),), AgentConfig(), cfg)


async def test_an_mcp_server_that_cannot_be_reached_leaves_the_kind_serving_without_its_tools(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kind = kind_of(
        "gone",
        McpServer(name="gone", url=f"http://127.0.0.1:{free_port()}/mcp", connect_timeout_s=3),
        stdio(),
    )
    with caplog.at_level(logging.ERROR, logger="roost.agent.mcp"):
        async with ActorKit([kind], data_dir) as kit:
            names = {t.name for t in kind.catalog()}
            assert "mcp__t__echo" in names  # the other server's tools are there
            assert not any(n.startswith("mcp__gone__") for n in names)
            c = kit.connect(kind.kind, "a")
            run = await run_to_end(kit, c, 'please mcp__t__echo {"text": "still here"}')
            assert run["status"] == "completed"
    assert any("gone" in r.getMessage() and "cannot list its tools" in r.getMessage() for r in caplog.records)


async def test_listing_mcp_tools_never_blocks_the_event_loop(data_dir: Path, tmp_path: Path) -> None:
    """The kind's MCP servers are asked for their tools when the registry starts, in a worker thread:
    this server answers only once a task on the loop has run, which a listing made on the loop (or
    waited for on it) would never let happen."""
    gate = tmp_path / "go"
    server = McpServer(
        name="t",
        command=sys.executable,
        args=(*SERVER, "stdio", "--wait-for", str(gate)),
        cwd=str(ROOT),
        connect_timeout_s=20,
    )

    async def open_gate() -> None:
        gate.touch()

    opener = asyncio.create_task(open_gate())
    kind = kind_of("waits", server)  # making the kit (the registry) lists nothing yet
    async with ActorKit([kind], data_dir) as kit:
        assert opener.done()
        assert "mcp__t__echo" in {t.name for t in kind.catalog()}
        c = kit.connect(kind.kind, "a")
        run = await run_to_end(kit, c, 'please mcp__t__echo {"text": "listed"}')
        assert run["status"] == "completed"


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


async def test_the_next_run_reuses_a_healthy_connection_of_an_ended_one(data_dir: Path) -> None:
    """Starting a stdio server costs seconds: a run that ends leaves its idle connection to the next
    run that needs the server (McpPool.release), which finds the same server process."""
    kind = kind_of("reuse", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        first = await run_to_end(kit, c, "please mcp__t__whoami")
        second = await run_to_end(kit, c, "please mcp__t__whoami")
        assert first["status"] == second["status"] == "completed"
        pids = [p["result"] for p in payloads(c, "tool_completed")]
        assert len(pids) == 2
        assert pids[0] == pids[1]
        assert [r["status"] for r in second["capability_sessions"]] == ["closed"]


async def test_another_actors_run_never_gets_an_idle_mcp_session(data_dir: Path) -> None:
    """A server may keep state per session: an idle connection waits only for the next run of the same
    actor, never for another actor's (its principal, its tenant may differ). Two actors, one server:
    two server processes."""
    kind = kind_of("owners", stdio())
    async with ActorKit([kind], data_dir) as kit:
        alice, bob = kit.connect(kind.kind, "alice"), kit.connect(kind.kind, "bob")
        assert (await run_to_end(kit, alice, "please mcp__t__whoami"))["status"] == "completed"
        assert (await run_to_end(kit, bob, "please mcp__t__whoami"))["status"] == "completed"
        assert (await run_to_end(kit, alice, "please mcp__t__whoami"))["status"] == "completed"
        (alices_first, alices_second) = [p["result"] for p in payloads(alice, "tool_completed")]
        (bobs,) = [p["result"] for p in payloads(bob, "tool_completed")]
        assert alices_first == alices_second  # her own idle session, reused
        assert bobs != alices_first


async def test_an_http_mcp_server_gets_the_headers_it_asks_for_from_the_environment(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``headers`` of a ``url`` server go with every request; ``${NAME}`` is read from the environment
    when a connection opens (the secret need not be in ``roost.toml``) and is never logged."""
    monkeypatch.setenv("ROOST_TEST_MCP_TOKEN", "s3cret-value")
    with http_server("--require", "Authorization=Bearer s3cret-value") as url:
        auth = {"Authorization": "Bearer ${ROOST_TEST_MCP_TOKEN}"}
        kind = kind_of("hdrs", McpServer(name="t", url=url, headers=auth))
        async with ActorKit([kind], data_dir) as kit:
            c = kit.connect(kind.kind, "a")
            run = await run_to_end(kit, c, 'please mcp__t__echo {"text": "with a token"}')
            assert run["status"] == "completed", run
        monkeypatch.delenv("ROOST_TEST_MCP_TOKEN")
        missing = kind_of("nohdrs", McpServer(name="t", url=url, headers=auth))
        with caplog.at_level(logging.ERROR, logger="roost.agent.mcp"):
            async with ActorKit([missing], data_dir / "2"):
                assert not any(t.name.startswith("mcp__t__") for t in missing.catalog())
        assert "names ${ROOST_TEST_MCP_TOKEN}, which is not set" in caplog.text
        bare = kind_of("bare", McpServer(name="t", url=url))
        with caplog.at_level(logging.ERROR, logger="roost.agent.mcp"):
            async with ActorKit([bare], data_dir / "3"):
                assert not any(t.name.startswith("mcp__t__") for t in bare.catalog())  # 401 without it
    assert "s3cret-value" not in caplog.text
    assert "s3cret-value" not in repr(McpServer(name="t", url=url, headers={"A": "s3cret-value"}))
    with pytest.raises(ValueError, match="headers are for a url"):
        McpServer(name="t", command="x", headers={"A": "b"})


def test_catalog_names_are_what_a_model_endpoint_takes() -> None:
    """``^[a-zA-Z0-9_-]{1,64}$`` (OpenAI's function names), whatever an MCP server names its tools;
    two tools never share one."""
    allowed = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
    assert catalog_name("files", "read") == "mcp__files__read"
    names = {catalog_name("files", t) for t in ("has space", "has_space", "a.b", "x" * 100, "y" * 100)}
    assert len(names) == 5
    assert all(allowed.match(n) for n in names)
    assert catalog_name("s" * 40, "t" * 40).startswith("mcp__" + "s" * 40 + "__")
    assert catalog_name("files", "read", {"mcp__files__read"}) != "mcp__files__read"


def test_a_tool_whose_input_schema_is_not_valid_is_left_out_of_the_catalog(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listed = [
        types.Tool(name="good", input_schema={"type": "object", "properties": {"x": {"type": "integer"}}}),
        types.Tool(name="bad", input_schema={"type": "wibble"}),
        types.Tool(name="not an object", input_schema={"type": "string"}),
    ]
    with caplog.at_level(logging.WARNING, logger="roost.agent.mcp"):
        made = tools_of(McpServer(name="s", url="http://127.0.0.1:1/mcp"), listed)
    assert [t.name for t in made] == ["mcp__s__good"]
    said = caplog.text
    assert "'bad' left out of the catalog: its input schema is not valid JSON Schema" in said
    assert "'not an object' left out of the catalog: its input schema is of 'string'" in said


# -- the execution gate --------------------------------------------------------------------------------
async def test_the_approval_mode_of_an_mcp_server_applies_to_its_tools(data_dir: Path) -> None:
    kind = kind_of("appr", stdio(approval_mode="mutating"))
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", 'mcp__t__echo {"text": "careful"}')
        await drive(kit, lambda: "approval_requested" in event_types(c), io_wait=IO)
        (asked,) = payloads(c, "approval_requested")
        assert asked["tool"] == "mcp__t__echo"
        assert asked["mode"] == "mutating"
        run = await c.call("get_run", reply["run_id"])
        assert run["waiting"] == "approval"
        (row,) = run["capability_sessions"]
        assert row["status"] == "waiting_for_approval"
        assert row["approval_state"] == {
            "status": "pending",
            "approval_id": asked["approval_id"],
            "item_id": row["approval_state"]["item_id"],
        }
        assert "tool_started" not in event_types(c)  # nothing reached the server
        await c.call("approve", asked["approval_id"], "grant")
        await drive(kit, lambda: finished(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed"
        assert run["capability_sessions"][0]["approval_state"]["status"] == "granted"
        assert session_statuses(c) == ["waiting_for_approval", "in_progress", "closed"]


async def test_a_secret_in_an_mcp_result_is_redacted_in_events(data_dir: Path) -> None:
    kind = kind_of("leak", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        run = await run_to_end(kit, c, "mcp__t__leak")
        assert run["status"] == "completed"
        (done,) = payloads(c, "tool_completed")
        assert "sk-live" not in str(done["result"])
        assert "abcdefghijklmnop0123" not in str(done["result"])
    frames = log_frames(data_dir, kind.kind, "a")
    assert not any("sk-live-0123456789abcdefghij" in f for f in frames)
    assert not any("abcdefghijklmnop0123" in f for f in frames)


@pytest.mark.parametrize("emit", [True, False])
async def test_mcp_progress_notifications_become_tool_progress_events(data_dir: Path, emit: bool) -> None:
    kind = kind_of(f"prog{int(emit)}", stdio(), progress=emit)
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        run = await run_to_end(kit, c, 'mcp__t__count {"steps": 3}')
        assert run["status"] == "completed"
        progress = [(p["done"], p["total"], p["message"]) for p in payloads(c, "tool_progress")]
        if emit:
            assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
            assert all(p["tool"] == "mcp__t__count" for p in payloads(c, "tool_progress"))
        else:
            assert progress == []
        assert payloads(c, "tool_completed")[0]["result"] == {"counted": 3}


async def test_fractional_mcp_progress_is_kept(data_dir: Path) -> None:
    kind = kind_of("fractions", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        run = await run_to_end(kit, c, "mcp__t__fractions")
        assert run["status"] == "completed"
        seen = [(p["done"], p["total"], p["percent"]) for p in payloads(c, "tool_progress")]
        assert seen == [(0.25, 1.0, 25.0), (0.5, 1.0, 50.0), (1.0, 1.0, 100.0)]


# -- elicitation ---------------------------------------------------------------------------------------
async def test_an_elicitation_pauses_the_run_until_provide_input_answers_it(data_dir: Path) -> None:
    kind = kind_of("elicit", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", "mcp__t__ask_colour", session_id="s1")
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        (asked,) = payloads(c, "input_requested")
        assert asked["question"] == "What is your favourite colour?"
        assert asked["server"] == "t"
        assert asked["requested_schema"]["properties"]["colour"]["type"] == "string"
        run = await c.call("get_run", reply["run_id"])
        assert run["waiting"] == "input"
        assert run["question"] == "What is your favourite colour?"
        (row,) = run["capability_sessions"]
        assert row["status"] == "waiting_for_input"
        assert row["elicitation"]["message"] == "What is your favourite colour?"
        assert run["jobs"][0]["status"] == "running"  # the worker holds the call open
        card = await c.call("session", "s1")
        assert card["capability_sessions"][0]["status"] == "waiting_for_input"
        # an answer that does not fit the requested schema is refused; the run keeps waiting
        with pytest.raises(RpcError, match="does not fit the requested schema") as refused:
            await c.call("provide_input", reply["run_id"], {"colour": 7})
        assert refused.value.code == InvalidArguments.code
        assert (await c.call("get_run", reply["run_id"]))["waiting"] == "input"
        await c.call("provide_input", reply["run_id"], {"colour": "teal"})
        await drive(kit, lambda: finished(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed", run
        assert payloads(c, "tool_completed")[0]["result"] == {"result": "colour: teal"}
        assert session_statuses(c) == ["in_progress", "waiting_for_input", "in_progress", "closed"]
        assert run["capability_sessions"][0]["initialized"] == 1  # the same session throughout


async def test_the_user_can_decline_a_servers_question(data_dir: Path) -> None:
    kind = kind_of("decline", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", "mcp__t__ask_colour")
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        await c.call("provide_input", reply["run_id"], {"action": "decline"})  # not checked: a refusal
        await drive(kit, lambda: finished(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed", run
        assert payloads(c, "tool_completed")[0]["result"] == {"result": "no colour (decline)"}


async def test_the_call_timeout_does_not_run_while_the_user_is_asked(data_dir: Path) -> None:
    """A person takes their time: an elicitation answered long after call_timeout_s still completes
    the call, once (the call timeout counts the server's time only)."""
    kind = kind_of("patient", stdio(call_timeout_s=0.3))
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", "mcp__t__ask_colour")
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        for _ in range(60):  # 60 driving steps of IO real seconds: well past the 0.3 s call timeout
            await drive(kit, lambda: True, io_wait=IO)
        assert (await c.call("get_run", reply["run_id"]))["waiting"] == "input"
        await c.call("provide_input", reply["run_id"], {"colour": "teal"})
        await drive(kit, lambda: finished(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed", run
        assert len(payloads(c, "input_requested")) == 1  # asked once: the call was not run again


async def test_a_call_that_times_out_fails_once_and_is_not_run_again(data_dir: Path, tmp_path: Path) -> None:
    """No answer within call_timeout_s: the step fails, not retried (the call may have had its effect)."""
    kind = kind_of("slow", stdio(call_timeout_s=0.3))
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        flag = tmp_path / "never"
        run = await run_to_end(kit, c, f'mcp__t__hold {{"flag": "{flag}"}}')
        assert run["status"] == "failed"
        assert not run["retryable"]
        assert "no answer within 0.3 s" in run["error"]
        assert len(payloads(c, "tool_started")) == 1  # one attempt


async def test_a_huge_answer_is_refused_and_the_run_keeps_waiting(data_dir: Path) -> None:
    kind = kind_of("hugeanswer", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", "mcp__t__ask_colour")
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        with pytest.raises(RpcError, match="an answer is at most 65536 bytes") as refused:
            await c.call("provide_input", reply["run_id"], {"colour": "x" * 100_000})
        assert refused.value.code == InvalidArguments.code
        run = await c.call("get_run", reply["run_id"])
        assert run["waiting"] == "input"
        assert run["capability_sessions"][0]["status"] == "waiting_for_input"
        await c.call("provide_input", reply["run_id"], {"colour": "red"})
        await drive(kit, lambda: finished(c), io_wait=IO)
        assert (await c.call("get_run", reply["run_id"]))["status"] == "completed"


async def test_cancel_while_a_server_asks_closes_its_session(data_dir: Path) -> None:
    kind = kind_of("cancelask", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", "mcp__t__ask_colour")
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        await c.call("cancel", reply["turn_id"])
        await drive(
            kit,
            lambda: not [t for t in asyncio.all_tasks() if t.get_name().startswith("agent.mcp")],
            io_wait=IO,
        )
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "cancelled"
        assert run["waiting"] is None
        assert run["capability_sessions"][0]["status"] == "closed"
        assert [j["status"] for j in run["jobs"]] == ["cancelled"]
        assert session_statuses(c)[-1] == "closed"


async def test_session_ids_are_not_kept_without_track_session_ids(data_dir: Path) -> None:
    with http_server() as url:
        kind = kind_of("notrack", McpServer(name="t", url=url), track=False)
        async with ActorKit([kind], data_dir) as kit:
            c = kit.connect(kind.kind, "a")
            run = await run_to_end(kit, c, 'mcp__t__echo {"text": "x"}')
            assert run["status"] == "completed"
            assert run["capability_sessions"][0]["resume_token"] is None


async def test_an_answered_elicitation_is_not_asked_twice(data_dir: Path) -> None:
    """The answer reaches the row while the worker that asked is out of reach (as when it runs in a
    process that died); that worker is lost; the next attempt's call asks the same question and gets
    the kept answer, without asking the user again."""
    kind = kind_of("kept", stdio(), reinit=True)  # the lost stdio session is replaced without asking
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", "mcp__t__ask_colour")
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        run_id = reply["run_id"]

        async def unreachable(actor: Actor) -> Any:
            assert isinstance(actor, Agent)
            pool = mcp_pool(actor.extension.process)
            (row,) = actor.orchestrator.capabilities.rows(run_id)
            return pool.waiters.pop(row["capability_session_id"])

        waiter = await kit.registry.run(kind.kind, "a", unreachable)
        await c.call("provide_input", run_id, {"colour": "teal"})
        assert not waiter.done()  # kept in the row, not delivered

        async def lose_worker(actor: Actor) -> None:  # what a process that died leaves behind
            assert isinstance(actor, Agent)
            (row,) = actor.orchestrator.capabilities.rows(run_id)
            mcp_pool(actor.extension.process).close(row["capability_session_id"])
            waiter.cancel()
            for task in list(runner(actor.extension.process).tasks.values()):
                task.cancel()

        await kit.registry.run(kind.kind, "a", lose_worker)
        await drive(kit, lambda: runner(kit.registry.process).leases_held == 0, step=0.0)
        advance(kit, kind.settings().lease_ttl)  # the lease's end: the attempt runs again (its next run)
        await drive(kit, lambda: finished(c), io_wait=IO)
        run = await c.call("get_run", run_id)
        assert run["status"] == "completed", run
        assert payloads(c, "tool_completed")[0]["result"] == {"result": "colour: teal"}
        assert len(payloads(c, "input_requested")) == 1  # asked once
        assert run["jobs"][0]["attempt"] == 2
        assert "resumable" in session_statuses(c)


async def test_a_huge_elicitation_is_refused_and_other_sessions_go_on(data_dir: Path) -> None:
    kind = kind_of("huge", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        other = kit.connect(kind.kind, "b")
        reply = await c.call("turn", "mcp__t__ask_huge")
        second = await other.call("turn", 'mcp__t__echo {"text": "unaffected"}')
        await drive(kit, lambda: finished(c) and finished(other), io_wait=IO)
        (refused,) = payloads(c, "elicitation_refused")
        assert refused["message_chars"] == 1_000_000
        assert "at most 4000" in refused["error"]
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "failed"
        assert run["waiting"] is None
        assert [j["attempt"] for j in run["jobs"]] == [1]  # the server's answer is final
        assert "input_requested" not in event_types(c)
        assert (await other.call("get_run", second["run_id"]))["status"] == "completed"
    assert max(len(f) for f in log_frames(data_dir, kind.kind, "a")) < 20_000  # nothing huge kept


# -- bad answers and dying servers -------------------------------------------------------------------
async def test_a_schema_violating_result_fails_the_step_without_retry(data_dir: Path) -> None:
    kind = kind_of("bad", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        other = kit.connect(kind.kind, "b")
        reply = await c.call("turn", "mcp__t__bad_result")
        second = await other.call("turn", 'mcp__t__echo {"text": "fine"}')
        await drive(kit, lambda: finished(c) and finished(other), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "failed"
        assert "Invalid structured content" in run["error"]
        assert [(j["attempt"], j["status"]) for j in run["jobs"]] == [(1, "failed")]
        (failed,) = payloads(c, "tool_failed")
        assert failed["will_retry"] is False
        assert (await other.call("get_run", second["run_id"]))["status"] == "completed"


async def test_an_error_result_fails_the_step_with_the_servers_reason(data_dir: Path) -> None:
    kind = kind_of("err", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        run = await run_to_end(kit, c, "mcp__t__fail")
        assert run["status"] == "failed"
        assert "Error executing tool fail" in run["error"]  # what the server said
        assert [j["attempt"] for j in run["jobs"]] == [1]


async def test_a_server_that_dies_mid_call_is_retried_on_a_new_connection(
    data_dir: Path, tmp_path: Path
) -> None:
    kind = kind_of("dies", stdio(), reinit=True)
    marker = tmp_path / "died"
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        run = await run_to_end(kit, c, f'mcp__t__die_once {{"marker": "{marker}"}}')
        assert marker.exists()
        assert run["status"] == "completed", run
        (lost,) = payloads(c, "tool_failed")
        assert lost["will_retry"] is True
        assert "connection ended under the call" in lost["error"]
        assert run["jobs"][0]["attempt"] == 2
        statuses = ["in_progress", "resumable", "reinitialize_required", "in_progress", "closed"]
        assert session_statuses(c) == statuses
        assert "does not outlive its process" in payloads(c, "capability_session")[2]["reason"]
        assert run["capability_sessions"][0]["initialized"] == 2


async def test_a_lost_stdio_session_is_not_replaced_without_leave(data_dir: Path, tmp_path: Path) -> None:
    """Without ``support_reinit_on_expiry``, the session of a stdio server that died under a call is
    not replaced silently: the run waits for input, saying why; ``provide_input`` allows the new
    session, and the call is run again on it."""
    kind = kind_of("diesasks", stdio())
    marker = tmp_path / "died"
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", f'mcp__t__die_once {{"marker": "{marker}"}}')
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["waiting"] == "input"
        assert "does not outlive its process" in run["question"]
        assert run["capability_sessions"][0]["status"] == "reinitialize_required"
        assert run["capability_sessions"][0]["initialized"] == 1
        await c.call("provide_input", reply["run_id"], "yes, start a new session")
        await drive(kit, lambda: finished(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed", run
        assert payloads(c, "tool_completed")[0]["result"] == {"result": "alive"}
        assert run["capability_sessions"][0]["initialized"] == 2


#: A run of three calls whose second waits for an approval: between them, the test breaks the
#: connection as a lost process would.
THREE_CALLS = 'mcp__t__session_id then mcp__t__count {"steps": 1} then mcp__t__sid_later'


async def break_the_connection(kit: ActorKit, kind: type[Agent], run_id: str, *, forget: bool) -> None:
    """The row's connection is no longer this process's, as after a lost process: left open
    (``forget`` False: the server still holds the session) or closed (the SDK's DELETE: the server
    forgets it)."""

    async def drop(actor: Actor) -> None:
        assert isinstance(actor, Agent)
        (row,) = actor.orchestrator.capabilities.rows(run_id)
        pool = mcp_pool(actor.extension.process)
        conn = pool.connections.pop(row["capability_session_id"])
        if forget:
            await conn.aclose()
        else:
            left.append(conn)

    await kit.registry.run(kind.kind, "a", drop)


left: list[Any] = []  # connections a test left open (closed by the test that left them)


async def test_a_lost_http_connection_rejoins_the_same_session(data_dir: Path) -> None:
    """The session of a streamable HTTP server outlives a lost connection: the next call rejoins it
    (its id from ``resume_token``, no new handshake), and the server sees both calls in one session."""
    with http_server() as url:
        kind = kind_of("rejoin", McpServer(name="t", url=url, tool_approval={"count": "mutating"}))
        async with ActorKit([kind], data_dir) as kit:
            c = kit.connect(kind.kind, "a")
            reply = await c.call("turn", THREE_CALLS)
            await drive(kit, lambda: "approval_requested" in event_types(c), io_wait=IO)
            await break_the_connection(kit, kind, reply["run_id"], forget=False)
            (asked,) = payloads(c, "approval_requested")
            await c.call("approve", asked["approval_id"], "grant")
            await drive(kit, lambda: finished(c), io_wait=IO)
            run = await c.call("get_run", reply["run_id"])
            assert run["status"] == "completed", run
            first, _, last = (p["result"].get("result") for p in payloads(c, "tool_completed"))
            assert first
            assert first == last  # one session for the three calls
            (row,) = run["capability_sessions"]
            assert row["initialized"] == 1
            assert row["calls"] == 3
            assert "rejoining the session" in [p["reason"] for p in payloads(c, "capability_session")]
        for conn in left:
            await conn.aclose()
        left.clear()


async def test_a_lost_http_session_whose_id_was_not_kept_is_not_replaced_without_leave(
    data_dir: Path,
) -> None:
    """Without ``track_session_ids`` there is nothing to rejoin: the row is ``reinitialize_required``
    and the run waits for leave."""
    with http_server() as url:
        server = McpServer(name="t", url=url, tool_approval={"count": "mutating"})
        kind = kind_of("untracked", server, track=False)
        async with ActorKit([kind], data_dir) as kit:
            c = kit.connect(kind.kind, "a")
            reply = await c.call("turn", THREE_CALLS)
            await drive(kit, lambda: "approval_requested" in event_types(c), io_wait=IO)
            await break_the_connection(kit, kind, reply["run_id"], forget=True)
            (asked,) = payloads(c, "approval_requested")
            await c.call("approve", asked["approval_id"], "grant")
            await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
            run = await c.call("get_run", reply["run_id"])
            assert run["waiting"] == "input"
            assert "its id was not kept" in run["question"]
            assert run["capability_sessions"][0]["initialized"] == 1


async def test_a_connection_that_ends_between_open_and_call_is_not_replaced_without_leave(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection the row's open chose to reuse ends before the call goes out: the row is opened
    again (a stdio session cannot be rejoined: ``reinitialize_required``, the run waits for leave),
    never given a new session on the spot."""
    real = mcp_tools._open

    def racing(actor: Any, ctx: Any, server: McpServer, repeatable: bool) -> Any:
        opened, settings, pool, owner = real(actor, ctx, server, repeatable)
        if opened.action == "reuse":
            pool.connections[opened.capability_session_id]._close.set()  # it ends now
        return opened, settings, pool, owner

    monkeypatch.setattr(mcp_tools, "_open", racing)
    kind = kind_of("racing", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", TWO_CALLS)
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        (row,) = run["capability_sessions"]
        assert (row["status"], row["initialized"], row["calls"]) == ("reinitialize_required", 1, 1)
        assert run["waiting"] == "input"


async def test_a_rejoined_session_the_server_forgot_is_not_replaced_without_leave(data_dir: Path) -> None:
    """A server that no longer knows the session answers the rejoined call 404: the row is
    ``reinitialize_required`` and, without ``support_reinit_on_expiry``, the run waits for leave
    (``provide_input``) before a new session is made."""
    with http_server() as url:
        kind = kind_of("forgot", McpServer(name="t", url=url, tool_approval={"count": "mutating"}))
        async with ActorKit([kind], data_dir) as kit:
            c = kit.connect(kind.kind, "a")
            reply = await c.call("turn", THREE_CALLS)
            await drive(kit, lambda: "approval_requested" in event_types(c), io_wait=IO)
            await break_the_connection(kit, kind, reply["run_id"], forget=True)
            (asked,) = payloads(c, "approval_requested")
            await c.call("approve", asked["approval_id"], "grant")
            await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
            run = await c.call("get_run", reply["run_id"])
            assert run["waiting"] == "input"
            assert run["capability_sessions"][0]["status"] == "reinitialize_required"
            assert "Session not found" in run["question"]  # what the SDK's server answers with its 404
            await c.call("provide_input", reply["run_id"], "yes, start a new session")
            await drive(kit, lambda: finished(c), io_wait=IO)
            run = await c.call("get_run", reply["run_id"])
            assert run["status"] == "completed", run
            first, _, last = (p["result"].get("result") for p in payloads(c, "tool_completed"))
            assert first != last  # a new session, made with leave
            assert run["capability_sessions"][0]["initialized"] == 2
            statuses = session_statuses(c)
            assert statuses[-4:] == ["in_progress", "reinitialize_required", "in_progress", "closed"]


async def test_a_call_that_may_have_had_its_effect_is_not_made_again_without_leave(
    data_dir: Path, tmp_path: Path
) -> None:
    """``pay_once`` (no annotations) kills its server under the call: the payment may have been made,
    so the run waits for input, saying so, and nothing is sent again; ``provide_input`` gives the
    leave, and the call is made again (``die_once``, marked ``idempotentHint``, is made again at
    once: the test above)."""
    kind = kind_of("pays", stdio(), reinit=True)
    marker = tmp_path / "paid"
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", f'mcp__t__pay_once {{"marker": "{marker}"}}')
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert marker.read_text() == "paid"  # the server got the call once
        assert run["waiting"] == "input"
        assert "may have had its effect" in run["question"]
        (row,) = run["capability_sessions"]
        assert (row["status"], row["resend"], row["in_flight"]) == ("resumable", "asked", True)
        await c.call("provide_input", reply["run_id"], {"resend": True})
        await drive(kit, lambda: finished(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed", run
        assert payloads(c, "tool_completed")[0]["result"] == {"result": "paid again"}
        (row,) = run["capability_sessions"]
        assert (row["resend"], row["in_flight"]) == (None, False)


async def test_any_other_answer_declines_and_the_call_is_not_made_again(
    data_dir: Path, tmp_path: Path
) -> None:
    kind = kind_of("declines", stdio(), reinit=True)
    marker = tmp_path / "paid"
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", f'mcp__t__pay_once {{"marker": "{marker}"}}')
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        await c.call("provide_input", reply["run_id"], "no, do not pay again")
        await drive(kit, lambda: finished(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "failed"
        assert "the user declined to make it again" in run["error"]
        assert marker.read_text() == "paid"  # once, and not "paid again"
        assert "tool_completed" not in event_types(c)


async def test_a_leave_is_for_one_call_and_a_second_loss_asks_again(data_dir: Path, tmp_path: Path) -> None:
    """``pay_and_die`` kills its server under every call: the leave after the first loss allows one
    call, which is lost too, and the run asks again rather than paying a third time."""
    kind = kind_of("twice", stdio(), reinit=True)
    marker = tmp_path / "paid"
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", f'mcp__t__pay_and_die {{"marker": "{marker}"}}')
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        await c.call("provide_input", reply["run_id"], True)
        await drive(kit, lambda: event_types(c).count("input_requested") == 2, io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["waiting"] == "input"
        assert "may have had its effect" in run["question"]
        assert marker.read_text() == "2"  # the first call and the one allowed


async def test_every_call_carries_its_steps_idempotency_key(data_dir: Path) -> None:
    kind = kind_of("keyed", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        run = await run_to_end(kit, c, "mcp__t__call_key")
        assert run["status"] == "completed", run
        (done,) = payloads(c, "tool_completed")
        job = run["jobs"][0]["job_id"]
        key = done["result"]["result"]
        assert key.startswith(f"{job}:")  # {workflow}:{nonce}:{generation}:{position}:{attempt}
        assert key.endswith(":1:0:1")  # the job's step, its first attempt


async def test_a_server_that_always_dies_fails_the_run_after_its_attempts(data_dir: Path) -> None:
    kind = kind_of("alwaysdies", stdio(), reinit=True)
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        run = await run_to_end(kit, c, "mcp__t__crash")
        assert run["status"] == "failed"
        assert run["retryable"] == 1  # continue_run may try again
        assert "attempt 3 of 3" in run["error"]
        assert run["capability_sessions"][0]["status"] == "closed"


# -- expiry ----------------------------------------------------------------------------------------------
TWO_CALLS = 'mcp__t__echo {"text": "first"} then mcp__t__count {"steps": 1}'


async def test_an_expired_session_is_reinitialised_when_support_reinit_on_expiry(data_dir: Path) -> None:
    with http_server("--expire") as url:
        kind = kind_of("reinit", McpServer(name="t", url=url), reinit=True)
        async with ActorKit([kind], data_dir) as kit:
            c = kit.connect(kind.kind, "a")
            run = await run_to_end(kit, c, TWO_CALLS)
            assert run["status"] == "completed", run
            assert session_statuses(c) == [
                "in_progress",
                "reinitialize_required",
                "in_progress",
                "closed",
            ]
            gone = payloads(c, "capability_session")[1]
            assert "Session terminated" in gone["reason"]
            (row,) = run["capability_sessions"]
            assert row["initialized"] == 2
            assert row["calls"] == 2
            assert [j["attempt"] for j in run["jobs"]] == [1, 1]  # re-initialised within the attempt


async def test_an_expired_session_waits_for_input_without_reinit(data_dir: Path) -> None:
    with http_server("--expire") as url:
        kind = kind_of("noreinit", McpServer(name="t", url=url), reinit=False)
        async with ActorKit([kind], data_dir) as kit:
            c = kit.connect(kind.kind, "a")
            reply = await c.call("turn", TWO_CALLS)
            await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
            run = await c.call("get_run", reply["run_id"])
            assert run["waiting"] == "input"
            assert "expired" in run["question"]
            assert run["capability_sessions"][0]["status"] == "reinitialize_required"
            await c.call("provide_input", reply["run_id"], "yes, start a new session")
            await drive(kit, lambda: finished(c), io_wait=IO)
            run = await c.call("get_run", reply["run_id"])
            assert run["status"] == "completed", run
            assert run["capability_sessions"][0]["initialized"] == 2
            assert "reinitialize_required" in session_statuses(c)


async def test_a_session_past_expires_at_is_reinitialize_required(data_dir: Path) -> None:
    kind = kind_of("ttl", stdio(session_ttl_s=30, tool_approval={"count": "mutating"}))
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        reply = await c.call("turn", TWO_CALLS)
        await drive(kit, lambda: "approval_requested" in event_types(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        (row,) = run["capability_sessions"]
        assert row["expires_at"] is not None
        advance(kit, 31)  # the session is unused for longer than session_ttl_s
        (asked,) = payloads(c, "approval_requested")
        await c.call("approve", asked["approval_id"], "grant")
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        run = await c.call("get_run", reply["run_id"])
        assert run["capability_sessions"][0]["status"] == "reinitialize_required"
        assert "expires_at passed" in run["capability_sessions"][0]["reason"]
        assert run["waiting"] == "input"


async def test_no_mcp_connection_outlives_the_pool(data_dir: Path) -> None:
    """The registry stops while a worker waits for an elicitation's answer on a live connection."""
    kind = kind_of("pool", stdio())
    async with ActorKit([kind], data_dir) as kit:
        c = kit.connect(kind.kind, "a")
        await c.call("turn", "mcp__t__ask_colour")
        await drive(kit, lambda: "input_requested" in event_types(c), io_wait=IO)
        assert [t for t in asyncio.all_tasks() if t.get_name().startswith("agent.mcp")]
    left = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("agent.mcp")]
    assert left == []


# -- a real server process, killed mid-call ------------------------------------------------------------
WAIT = 20.0


def has_event(kind: str) -> Any:
    return lambda f: f.get("type") == "event" and f["event"]["event_type"] == kind


def ws_events(peer: WsClient, event_type: str) -> list[dict[str, Any]]:
    return [
        f["event"]["payload"]
        for f in peer.frames
        if f.get("type") == "event" and f["event"]["event_type"] == event_type
    ]


def rows_in_file(data_dir: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(actor_path(data_dir, "mcpagent", "a"))
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM roost_agent_capability_sessions")]
    finally:
        conn.close()


@pytest.mark.slow
async def test_sigkill_mid_call_leaves_the_session_row_and_the_run_resumes(
    data_dir: Path, tmp_path: Path
) -> None:
    """SIGKILL of ``roost serve`` while an MCP call (streamable HTTP) is in flight: the capability
    session row is in the file; the restarted server finds the lease expired, marks the row
    ``resumable``, retries the call in the same MCP session (rejoined with the id the row kept: no
    new handshake), and the run completes; ``roost inspect`` and ``get_run`` show the row."""
    flag = tmp_path / "release"
    with http_server() as url:
        cfg = tmp_path / "roost.toml"
        cfg.write_text(
            f'[agent]\nheartbeat_interval = 0.25\nlease_ttl = 1.0\n[agent.mcp_servers.t]\nurl = "{url}"\n'
        )
        app = "tests.mcp_servers.app:app"
        with server_process(data_dir, "--config", str(cfg), app=app) as srv:
            async with connect(f"{srv.ws}/agents/mcpagent/a") as peer:
                await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
                reply = await peer.call("turn", f'mcp__t__hold {{"flag": "{flag}"}}', timeout=WAIT)
                await peer.wait_for(has_event("tool_progress"), WAIT)
                srv.kill()  # SIGKILL, mid-call
        (row,) = rows_in_file(data_dir)
        assert row["status"] == "in_progress"  # what it was when the process died
        assert row["run_id"] == reply["run_id"]
        assert row["resume_token"] is not None  # the HTTP session id was tracked
        first_token = row["resume_token"]
        report = inspect_actor(data_dir, "mcpagent", "a")
        (seen,) = report["capability_sessions"]
        assert seen["status"] == "in_progress"
        assert seen["run_id"] == reply["run_id"]
        assert seen["approval_state"]["status"] == "not_required"
        assert seen["transport"] == "streamable_http"
        flag.write_text("go")
        with server_process(data_dir, "--config", str(cfg), app=app) as srv:
            async with connect(f"{srv.ws}/agents/mcpagent/a?cursor=0") as peer:
                await peer.wait_for(has_event("turn_completed"), WAIT)
                run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
                statuses = [p["status"] for p in ws_events(peer, "capability_session")]
        assert statuses == ["in_progress", "resumable", "in_progress", "closed"]
        assert run["status"] == "completed"
        assert [(j["attempt"], j["status"]) for j in run["jobs"]] == [(2, "completed")]
        (card,) = run["capability_sessions"]
        assert card["status"] == "closed"
        assert card["initialized"] == 1  # the same MCP session after the restart
        assert "rejoining the session" in [p["reason"] for p in ws_events(peer, "capability_session")]
        (row,) = rows_in_file(data_dir)
        assert row["resume_token"] == first_token


@pytest.mark.slow
async def test_sigkill_mid_call_of_a_tool_not_marked_repeatable_waits_for_leave_to_make_it_again(
    data_dir: Path, tmp_path: Path
) -> None:
    """SIGKILL while a call of a tool the server does not mark read-only or idempotent is under way:
    the call may have had its effect, so after the restart the run waits for input and the server
    got the call once; with ``provide_input`` it is made again."""
    flag, marker = tmp_path / "release", tmp_path / "paid"
    with http_server() as url:
        cfg = tmp_path / "roost.toml"
        cfg.write_text(
            f'[agent]\nheartbeat_interval = 0.25\nlease_ttl = 1.0\n[agent.mcp_servers.t]\nurl = "{url}"\n'
        )
        app = "tests.mcp_servers.app:app"
        call = f'mcp__t__pay_then_hold {{"flag": "{flag}", "marker": "{marker}"}}'
        with server_process(data_dir, "--config", str(cfg), app=app) as srv:
            async with connect(f"{srv.ws}/agents/mcpagent/a") as peer:
                await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
                reply = await peer.call("turn", call, timeout=WAIT)
                await peer.wait_for(has_event("tool_progress"), WAIT)
                srv.kill()  # SIGKILL, mid-call
        flag.write_text("go")
        with server_process(data_dir, "--config", str(cfg), app=app) as srv:
            async with connect(f"{srv.ws}/agents/mcpagent/a?cursor=0") as peer:
                await peer.wait_for(has_event("input_requested"), WAIT)
                run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
                assert marker.read_text() == "1"  # the server got the call once
                assert run["waiting"] == "input"
                assert "may have had its effect" in run["question"]
                await peer.call("provide_input", reply["run_id"], {"resend": True}, timeout=WAIT)
                await peer.wait_for(has_event("turn_completed"), WAIT)
                run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
        assert run["status"] == "completed"
        assert marker.read_text() == "2"  # made again with leave, in the rejoined session
        assert run["capability_sessions"][0]["initialized"] == 1


@pytest.mark.slow
async def test_sigkill_while_a_server_asks_and_the_question_is_asked_again(
    data_dir: Path, tmp_path: Path
) -> None:
    """SIGKILL while the run waits for the answer to an MCP server's question: the row says
    ``waiting_for_input`` in the file; after the restart the lost worker's row is ``resumable``, the
    call is made again, the server asks again, and ``provide_input`` answers it."""
    with http_server() as url:
        cfg = tmp_path / "roost.toml"
        cfg.write_text(
            f'[agent]\nheartbeat_interval = 0.25\nlease_ttl = 1.0\n[agent.mcp_servers.t]\nurl = "{url}"\n'
        )
        app = "tests.mcp_servers.app:app"
        with server_process(data_dir, "--config", str(cfg), app=app) as srv:
            async with connect(f"{srv.ws}/agents/mcpagent/a") as peer:
                await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
                reply = await peer.call("turn", "mcp__t__ask_colour", timeout=WAIT)
                await peer.wait_for(has_event("input_requested"), WAIT)
                srv.kill()
        (row,) = rows_in_file(data_dir)
        assert row["status"] == "waiting_for_input"
        with server_process(data_dir, "--config", str(cfg), app=app) as srv:
            async with connect(f"{srv.ws}/agents/mcpagent/a?cursor=0") as peer:
                await peer.wait_for(lambda f: len(ws_events(peer, "input_requested")) == 2, WAIT)
                run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
                assert run["waiting"] == "input"
                assert run["capability_sessions"][0]["status"] == "waiting_for_input"
                await peer.call("provide_input", reply["run_id"], {"colour": "plum"}, timeout=WAIT)
                await peer.wait_for(has_event("turn_completed"), WAIT)
                run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
                statuses = [p["status"] for p in ws_events(peer, "capability_session")]
                done = ws_events(peer, "tool_completed")
        assert run["status"] == "completed"
        assert done[0]["result"] == {"result": "colour: plum"}
        assert statuses == [
            "in_progress",
            "waiting_for_input",
            "resumable",
            "in_progress",
            "waiting_for_input",
            "in_progress",
            "closed",
        ]


@pytest.mark.parametrize(
    ("answer", "leave"),
    [
        (True, True),
        ({"resend": True}, True),
        (1, False),
        ({"resend": 1}, False),
        ("yes", False),
        (None, False),
    ],
)
def test_only_an_explicit_true_gives_the_leave_to_make_a_call_again(answer: Any, leave: bool) -> None:
    assert gives_leave(answer) is leave
