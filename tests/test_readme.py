"""Every code block of the README runs as written.

Guarantee: the README's commands and code are the contract with a newcomer, so each block is executed
here: the clone and ``make demo`` in a fresh clone of this repository, ``roost serve`` with and
without the annotated ``myapp.py``, the connections example (``chat.py``, run as a script: state,
tags, ``on_connect`` and ``on_close``, ``self.caller``, the test kit), the agent (its first turn plans
and stops at the approval it promises), and the FastAPI mount with its lifespan, whose install line
names an extra that installs FastAPI. The only liberty taken: a server's ``--port 8000``
becomes ``--port 0`` (any free port), so that the test never collides with something on 8000.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.testing import ActorKit, connect, serve
from roost.transport import RoostApp
from tests.support import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent


def blocks(language: str) -> list[str]:
    """The README's fenced blocks of ``language`` ("" for the untagged shell blocks), in order."""
    return [
        m.group(2)
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", README, re.M | re.S)
        if m.group(1) == language
    ]


SHELL = blocks("")
PYTHON = blocks("python")


def python_block(first_line: str) -> str:
    """The README's Python block that starts with ``first_line``."""
    (block,) = [b for b in PYTHON if b.startswith(first_line)]
    return block


MYAPP = python_block("# myapp.py\n")
CLIENT = python_block("# client.py")
CHAT = python_block("# chat.py")
AGENT = python_block("from pydantic import BaseModel\n")
FASTAPI = python_block("# main.py, beside myapp.py\n")
WEATHER = python_block("# weather.py")
ASSISTANT = python_block("# assistant.py")
ASK = python_block("# ask.py")
MCP_CLIENT = python_block("# mcp_client.py")
SESSIONS = python_block("# sessions.py")
IDP_TOKENS = python_block("# idp_tokens.py")
CHECKPOINTS = python_block("# checkpoints.py")
WORKSPACE = python_block("# workspace.py")


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    assert len(SHELL) == 4, SHELL
    # the queue's and the workflows' are run by tests/test_readme_queue.py and test_readme_workflows.py
    assert len(PYTHON) == 15, [b.splitlines()[0] for b in PYTHON]
    assert PYTHON[0] == MYAPP


def served(command: str, cwd: Path) -> ServerProcess:
    """A README command line run as written, from ``cwd`` (``--port 8000`` → ``--port 0``)."""
    argv = shlex.split(command.replace("--port 8000", "--port 0"))
    assert argv[0] == ".venv/bin/roost"
    argv = [str(BIN / "roost"), *argv[1:]]
    if "--port" not in argv:
        argv += ["--port", "0"]
    return ServerProcess(cwd / "data", cwd=cwd, argv=argv).start(timeout=30)


def run_script(cwd: Path, filename: str, code: str, server: ServerProcess, timeout: float = 60) -> Any:
    """A README block saved as ``filename`` and run as a script against ``server`` (its
    ``127.0.0.1:8000`` replaced by the server's address), with this checkout's roost."""
    assert "127.0.0.1:8000" in code
    return run_block(cwd, filename, code.replace("127.0.0.1:8000", server.addr), timeout)


def run_block(cwd: Path, filename: str, code: str, timeout: float = 60) -> Any:
    """A README block saved as ``filename`` and run as a script, with this checkout's roost."""
    (cwd / filename).write_text(code)
    return subprocess.run(
        [sys.executable, filename],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def printed_in(section: str) -> list[str]:
    """The lines the README says a section's script prints (its "It prints `a`, `b` on a fresh")."""
    said = README.split(section, 1)[1].split("It prints ", 1)[1].split(" on a fresh", 1)[0]
    return re.findall(r"`([^`]+)`", said)


@pytest.mark.slow
def test_the_clone_and_make_demo_block_runs_in_a_fresh_clone(tmp_path: Path) -> None:
    lines = SHELL[0].strip().splitlines()
    assert lines == ["git clone <this repository> roost && cd roost", "make demo"]
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(tmp_path / "roost")], check=True, timeout=120)
    out = subprocess.run(
        ["make", "demo"],
        cwd=tmp_path / "roost",
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "PASS" in out.stdout, out.stdout[-2000:]


@pytest.mark.slow
async def test_roost_serve_with_the_example_kinds_serves_the_page_and_the_counter(tmp_path: Path) -> None:
    server = served(SHELL[1].strip(), tmp_path)
    try:
        async with httpx.AsyncClient() as http:
            page = await http.get(f"{server.http}/")
            assert page.status_code == 200
            assert "<html" in page.text.lower()
            r = await http.post(f"{server.http}/agents/counter/c1/rpc/increment", json=[2])
            assert r.json()["result"] == 2
    finally:
        server.terminate()
    assert (tmp_path / "data" / "directory.sqlite").exists()


@pytest.mark.slow
async def test_the_annotated_actor_serves_as_the_readme_says(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(MYAPP)
    server = served(SHELL[2].strip(), tmp_path)
    try:
        url = f"ws://{server.addr}/agents/counter/c1"
        async with connect(url) as ws:  # a welcome, then the state frame before the reply
            welcome = await ws.recv()
            assert welcome["type"] == "welcome"
            assert welcome["state"] == {"count": 0}
            assert await ws.call("increment", 2) == 2
            state = next(f for f in ws.frames if f["type"] == "state")
            assert state["seq"] == 1
            assert ws.frames.index(state) < len(ws.frames) - 1  # before the reply
            assert await ws.call("increment", 1) == 3
        async with connect(f"{url}?cursor=1") as ws:  # exactly what came after seq 1
            welcome = await ws.recv()
            assert welcome["resume"] == "replay"
            replayed = await ws.recv()
            assert (replayed["type"], replayed["seq"], replayed["state"]) == ("state", 2, {"count": 3})
            schedule_id = await ws.call("increment_later", 0.01, "k1")
            assert isinstance(schedule_id, str)
            assert await ws.call("increment_later", 0.01, "k1") == schedule_id  # one key, one wake-up
            frame = await ws.wait_for(lambda f: f.get("type") == "state" and f["state"]["count"] == 4)
            assert frame["seq"] == 3
    finally:
        server.terminate()


@pytest.mark.slow
def test_the_client_block_runs_against_the_annotated_actor_and_prints_what_the_readme_says(
    tmp_path: Path,
) -> None:
    (tmp_path / "myapp.py").write_text(MYAPP)
    server = served(SHELL[2].strip(), tmp_path)
    try:
        assert "ws://127.0.0.1:8000/agents/counter/c1" in CLIENT
        out = run_script(tmp_path, "client.py", CLIENT, server)
    finally:
        server.terminate()
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == printed_in("## A Python client"), out.stdout


def test_the_mcp_block_runs_against_the_annotated_actor_and_prints_what_the_readme_says(
    tmp_path: Path,
) -> None:
    (tmp_path / "myapp.py").write_text(MYAPP)
    server = served(SHELL[2].strip(), tmp_path)
    try:
        assert "http://127.0.0.1:8000/mcp/counter/c1" in MCP_CLIENT
        out = run_script(tmp_path, "mcp_client.py", MCP_CLIENT, server)
        seen = httpx.get(f"{server.http}/agents/counter/c1", timeout=10).json()
    finally:
        server.terminate()
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == printed_in("## Serving actors over MCP"), out.stdout
    assert seen["state"] == {"count": 2}


def openai_agents_section() -> str:
    return README.split("## OpenAI Agents SDK sessions", 1)[1].split("\n## ", 1)[0]


def test_the_openai_agents_section_installs_the_sdk_with_an_extra_that_exists() -> None:
    match = re.search(r"`\.venv/bin/pip install -e '\.\[([\w-]+)\]' && (.*?)`", openai_agents_section())
    assert match is not None
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert match.group(1) in extras
    assert "roost[openai-agents]" in extras["dev"]  # make test installs it too ...
    sdk = match.group(2).removeprefix(".venv/bin/pip install --no-deps ")
    assert f"OPENAI_AGENTS := {sdk}" in (ROOT / "Makefile").read_text()  # ... and the same SDK


@pytest.mark.slow
def test_the_openai_agents_block_keeps_its_session_across_a_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block run twice against the command the section gives, the server killed with SIGKILL and
    started again on the same data between the runs: the second run sees the first one's item."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the block's branch without a model
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the server imports this checkout's roost.integrations
    command = re.search(r"`(\.venv/bin/roost serve [^`]*)`", openai_agents_section())
    assert command is not None
    server = served(command.group(1), tmp_path)
    try:
        first = run_script(tmp_path, "sessions.py", SESSIONS, server)
    finally:
        server.kill()
    again = served(
        command.group(1).replace("--port 8000", f"--port {server.addr.rsplit(':', 1)[1]}"), tmp_path
    )
    try:
        second = run_script(tmp_path, "sessions.py", SESSIONS, again)
    finally:
        again.terminate()
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.splitlines() == printed_in("## OpenAI Agents SDK sessions")
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout.splitlines() == ["items 2"]


@pytest.mark.slow
def test_the_langgraph_block_resumes_its_interrupted_graph_across_a_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block run twice against the command its section gives, the server killed with SIGKILL and
    started again on the same data between the runs: the second run resumes the first one's graph."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the server imports this checkout's roost.integrations
    section = README.split("## LangGraph checkpoints on Roost", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"`(\.venv/bin/roost serve [^`]*)`", section)
    assert command is not None
    assert (
        "roost[langgraph]"
        in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    )
    server = served(command.group(1), tmp_path)
    try:
        first = run_script(tmp_path, "checkpoints.py", CHECKPOINTS, server)
    finally:
        server.kill()
    port = server.addr.rsplit(":", 1)[1]
    again = served(command.group(1).replace("--port 8000", f"--port {port}"), tmp_path)
    try:
        second = run_script(tmp_path, "checkpoints.py", CHECKPOINTS, again)
    finally:
        again.terminate()
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.splitlines() == printed_in("## LangGraph checkpoints on Roost")
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout.splitlines() == ["log: ['drafted', 'review: approved']"]


def test_the_connections_block_runs_as_a_script_and_says_ok(tmp_path: Path) -> None:
    assert CHAT.startswith("# chat.py: .venv/bin/python chat.py\n")
    out = run_block(tmp_path, "chat.py", CHAT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == "ok\n"


def test_the_identity_provider_block_runs_as_a_script_and_prints_what_the_readme_says(tmp_path: Path) -> None:
    out = run_block(tmp_path, "idp_tokens.py", IDP_TOKENS)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == printed_in("## Tokens from your identity provider"), out.stdout
    section = README.split("## Tokens from your identity provider", 1)[1]
    extra = re.search(r"`\.venv/bin/pip install -e '\.\[(\w+)\]'`", section)
    assert extra is not None
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("PyJWT[crypto]") for dep in extras[extra.group(1)])


def test_the_fastapi_section_says_how_to_install_fastapi_with_an_extra_that_does() -> None:
    section = README.split("## Mounting in FastAPI", 1)[1].split("```python", 1)[0]
    match = re.search(r"`\.venv/bin/pip install -e '\.\[(\w+)\]'`", section)
    assert match is not None, section
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("fastapi") for dep in extras[match.group(1)]), extras.get(match.group(1))


async def test_the_agent_block_plans_runs_and_asks_for_the_grant_it_promises(tmp_path: Path) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(AGENT, "README.md (agent)", "exec"), namespace)
    assert isinstance(namespace["app"], RoostApp)  # what `roost serve reporter:app` serves
    async with ActorKit([namespace["Reporter"]], tmp_path / "data") as kit:
        conn = kit.connect("reporter", "r1")
        turn = await conn.call("turn", "collect, analyze and make the report")
        assert turn["status"] == "in_progress"
        approval = await conn.wait_for(
            lambda f: f.get("type") == "event" and f["event"]["event_type"] == "approval_requested",
            timeout=30,
        )
    payloads: dict[str, list[Any]] = {}
    for frame in conn.frames:
        if frame.get("type") == "event":
            payloads.setdefault(frame["event"]["event_type"], []).append(frame["event"]["payload"])
    (plan,) = payloads["plan_ready"]
    assert [item["tool"] for item in plan["items"]] == ["collect", "analyze", "write_report"]
    assert [item["background"] for item in plan["items"]] == [False, True, False]
    # the tools without arguments ran, the background one reported its progress, and the mutating
    # step waits for a grant with its typed, defaulted arguments
    assert payloads["tool_completed"] == [
        {"tool": "collect", "result": {"documents": 3}},
        {"tool": "analyze", "result": {"findings": 2}},
    ]
    assert len(payloads["tool_progress"]) == 10
    assert approval["event"]["payload"]["tool"] == "write_report"
    assert approval["event"]["payload"]["args"] == {"title": "Weekly report"}


async def test_the_fastapi_block_mounts_roost_and_closes_it_at_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    (tmp_path / "myapp.py").write_text(MYAPP)  # beside it, as the README has it
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "myapp", raising=False)
    exec(compile(FASTAPI, "README.md (FastAPI)", "exec"), namespace)  # on its own
    api, roost = namespace["api"], namespace["actors"]
    async with serve(api) as addr:
        async with httpx.AsyncClient() as http:
            r = await http.post(f"http://{addr}/roost/agents/counter/c1/rpc/increment", json=[5])
            assert r.json()["result"] == 5
        async with connect(f"ws://{addr}/roost/agents/counter/c1") as ws:
            assert (await ws.recv())["state"] == {"count": 5}
        assert roost.registry.hosts  # live while serving
    assert not roost.registry.hosts  # the lifespan closed it: no actor left open
    assert (tmp_path / "data" / "directory.sqlite").exists()


@pytest.mark.slow
async def test_the_fastapi_app_runs_under_the_uvicorn_command_line_the_readme_gives(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(MYAPP)
    (tmp_path / "main.py").write_text(FASTAPI)
    argv = shlex.split(SHELL[3].strip().replace("--port 8000", "--port 0"))
    assert argv[:2] == [".venv/bin/uvicorn", "main:api"]
    assert "roost.transport.uvicorn_ws:RoostWebSocketProtocol" in argv
    server = ServerProcess(tmp_path / "data", cwd=tmp_path, argv=[str(BIN / "uvicorn"), *argv[1:]]).start(
        timeout=30
    )
    try:
        async with httpx.AsyncClient() as http:
            r = await http.post(f"{server.http}/roost/agents/counter/c1/rpc/increment", json=[5])
            assert r.json()["result"] == 5
        async with connect(f"ws://{server.addr}/roost/agents/counter/c1") as ws:
            assert (await ws.recv())["state"] == {"count": 5}
    finally:
        server.terminate()
    assert (tmp_path / "data" / "directory.sqlite").exists()


def test_the_streaming_chat_agent_block_is_short_and_answers_with_its_mcp_tool(tmp_path: Path) -> None:
    """The chat agent with one MCP tool: under 30 lines (the server and the agent), served as written,
    asked by the client block, which prints what the README says."""
    code = [ln for ln in (WEATHER + ASSISTANT).splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(code) < 30, len(code)
    (tmp_path / "weather.py").write_text(WEATHER)
    (tmp_path / "assistant.py").write_text(ASSISTANT)
    command = ASSISTANT.splitlines()[0].split(": ", 1)[1].split(",", 1)[0]
    server = served(command, tmp_path)
    try:
        out = run_script(tmp_path, "ask.py", ASK, server, timeout=90)
    finally:
        server.terminate()
    assert out.returncode == 0, out.stderr[-2000:]
    said = README.split("## A streaming chat agent with an MCP tool", 1)[1].split("It prints `", 1)[1]
    assert out.stdout.strip() == said.split("` (", 1)[0]


async def test_the_workspace_block_gives_each_run_a_workspace_its_step_writes_once(tmp_path: Path) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(WORKSPACE, "README.md (workspace)", "exec"), namespace)
    async with ActorKit([namespace["Notebook"]], tmp_path / "data") as kit:
        conn = kit.connect("notebook", "n1")
        turn = await conn.call("turn", 'note {"text": "hello"}')
        assert turn["waiting"] == "approval"  # add_note is mutating
        approval = next(
            f["event"]["payload"]
            for f in conn.frames
            if f.get("type") == "event" and f["event"]["event_type"] == "approval_requested"
        )
        done = await conn.call("approve", approval["approval_id"], "grant")
        assert done["status"] == "completed", done
        workspace = (await conn.call("get_run", turn["run_id"]))["workspace"]
    files = {e["path"]: e["size"] for e in workspace["entries"]}
    assert files == {"README.md": 8, "notes/log.md": 6}  # "hello\n", written once
    assert workspace["disposition"] == "resumable"
    assert workspace["permissions_profile"]["read_only"] == ["README.md"]
