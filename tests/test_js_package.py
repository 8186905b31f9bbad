"""Roost's JS client as an npm package (``roost-client``, from ``roost/client/web``), used as a
package user would: ``npm pack`` gives a tarball of the package's own files; a fresh project installs
it (``npm install ./roost-client-X.tgz``); TypeScript (``tsc --noEmit``) accepts a program's use of
the declarations and refuses wrong uses, each with its error; Node 22 imports the installed package
and calls a real ``roost serve`` (state, results, errors, events), at the root and under a mount
prefix (``actorUrl``), connects once a server started after it listens and reconnects after that
server is SIGKILLed and started again (Node's ``WebSocket`` reports a refused connection with an
``error`` and no ``close``); and a React app built with Vite from the installed ``roost-client/react``
runs in Chromium: ``useRoost`` shows the counter's state and the connection's status, calls
``increment`` from a button, keeps the newest events it was told to, reconnects by itself after the
server is SIGKILLed and started again on the same port, and closes its connection when the actor's
name changes.

Node 22, TypeScript, Vite and React are installed with ``npm ci`` from ``tests/js/locks/js-package``
(each package pinned, the whole tree locked) into ``.cache/js-package`` at the repository's root
(ignored by git), once; the project is a fresh
directory inside it (so that it finds them there, as a project finds its own ``node_modules``), removed
after the tests. Without ``npm``, or when the install fails (no network), the tests fail under
``make test`` and CI, and are skipped elsewhere, saying why (``tests/support.py``, ``node_unavailable``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import queue
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from playwright.async_api import Browser, expect
from starlette.applications import Starlette
from starlette.routing import Mount

from roost.client import MessageText
from roost.examples.demo import free_port
from roost.examples.kinds import KINDS
from roost.testing import until
from roost.transport import create_app
from tests.support import ROOT, ServerProcess, get_json, npm_installed, serve_in_process
from tests.test_cloudflare_clients import readme_js

pytestmark = pytest.mark.slow

CACHE = ROOT / ".cache" / "js-package"
WEB = ROOT / "roost" / "client" / "web"
FILES = ROOT / "tests" / "js" / "roost_package"
#: What the tarball holds: the client, the hook and their declarations; not the demo page's files.
SHIPPED = {"package.json", "roost.js", "roost.d.ts", "react.js", "react.d.ts"}


@dataclass(frozen=True)
class Project:
    """A fresh npm project that installed the packed tarball."""

    dir: Path
    node: Path
    tarball: Path

    @property
    def env(self) -> dict[str, str]:
        """npm and the tools run on Node 22 (the package's `engines`)."""
        return {**os.environ, "PATH": f"{self.node.parent}{os.pathsep}{os.environ['PATH']}"}

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def node_json(self, script: str, *args: str) -> Any:
        """Run ``script`` (in the project) with Node 22: the one JSON line it prints."""
        done = self.run(str(self.node), script, *args, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return orjson.loads(done.stdout)

    def tool(self, package: str, entry: str) -> str:
        return str(CACHE / "node_modules" / package / entry)


@pytest.fixture(scope="module")
def project() -> Iterator[Project]:
    binary = npm_installed(CACHE, "js-package", "TypeScript, Vite and React")
    npm = shutil.which("npm")
    assert npm is not None  # npm_installed skipped or failed otherwise
    work = Path(tempfile.mkdtemp(prefix="project-", dir=CACHE))
    try:
        made = Project(work, binary, work)  # the tarball is known once packed
        packed = made.run(npm, "pack", str(WEB), "--pack-destination", str(work))
        assert packed.returncode == 0, packed.stderr
        (tarball,) = work.glob("roost-client-*.tgz")
        (work / "package.json").write_text('{"name": "app", "private": true, "type": "module"}\n')
        done = made.run(npm, "install", "--no-audit", "--no-fund", f"./{tarball.name}")
        assert done.returncode == 0, done.stderr
        for file in FILES.iterdir():
            shutil.copyfile(file, work / file.name)
        yield Project(work, binary, tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_npm_pack_gives_a_tarball_of_the_package_files_at_roosts_version(project: Project) -> None:
    with tarfile.open(project.tarball) as tar:
        names = {m.name.removeprefix("package/") for m in tar.getmembers()}
    assert names == SHIPPED
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert project.tarball.name == f"roost-client-{version}.tgz"
    installed = orjson.loads((project.dir / "node_modules" / "roost-client" / "package.json").read_bytes())
    assert installed["version"] == version
    assert installed["type"] == "module"
    assert set(installed["exports"]) == {".", "./react", "./package.json"}
    assert not (project.dir / "node_modules" / "react").exists(), "react is an optional peer: not installed"


def test_the_declarations_typecheck_a_programs_use_of_the_client_the_frames_and_the_hook(
    project: Project,
) -> None:
    done = project.run(str(project.node), project.tool("typescript", "bin/tsc"), "-p", "tsconfig.json")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_use_of_the_package_fails_to_typecheck_where_it_is_wrong(project: Project) -> None:
    source = (project.dir / "wrong.ts").read_text().splitlines()
    expected = {
        (n, m.group(1)) for n, line in enumerate(source, 1) if (m := re.search(r"error (TS\d+)", line))
    }
    assert len(expected) == 10
    config = orjson.loads((project.dir / "tsconfig.json").read_bytes())
    (project.dir / "tsconfig.wrong.json").write_bytes(orjson.dumps({**config, "files": ["wrong.ts"]}))
    done = project.run(str(project.node), project.tool("typescript", "bin/tsc"), "-p", "tsconfig.wrong.json")
    assert done.returncode != 0
    found = {
        (int(line), code)
        for line, code in re.findall(r"^wrong\.ts\((\d+),\d+\): error (TS\d+)", done.stdout, re.M)
    }
    assert found == expected, done.stdout


def test_node_imports_the_installed_package_and_calls_roost_serve(project: Project, data_dir: Path) -> None:
    server = ServerProcess(data_dir).start()
    try:
        seen = project.node_json("node_client.mjs", server.addr, "", "n1")
    finally:
        server.kill()
    assert seen["counterUrl"] == f"ws://{server.addr}/agents/counter/n1"
    assert seen["welcome"] == {"actor": {"kind": "counter", "name": "n1"}, "state": {"count": 0}}
    assert seen["result"] == 2
    assert seen["state"] == seen["clientState"] == {"count": 2}
    assert seen["failed"] == "method_not_found"
    assert seen["event"] == {
        "seq": seen["said"],
        "event": {"kind": "said", "author": "node", "text": "hello from node"},
    }
    assert seen["status"] == "closed"


def test_actor_url_honours_a_mount_prefix(project: Project) -> None:
    """``actorUrl(base, kind, name, prefix)`` from the package in Node: a base as a string or a URL,
    the prefix with or without its slashes, wss: for https: and wss:, the name one encoded segment."""
    assert project.node_json("urls.mjs") == {
        "root": "ws://127.0.0.1:8000/agents/counter/c1",
        "rootEmpty": "ws://127.0.0.1:8000/agents/counter/c1",
        "mount": "ws://127.0.0.1:8000/roost/agents/counter/c1",
        "mountSlashes": "ws://127.0.0.1:8000/roost/agents/counter/c1",
        "mountBare": "ws://127.0.0.1:8000/roost/agents/counter/c1",
        "mountDeep": "wss://example.com/api/v1/roost/agents/counter/c1",
        "mountFromBase": "wss://example.com/roost/agents/counter/c1",
        "urlObject": "ws://127.0.0.1:8000/roost/agents/counter/a%2Fb%20c",
        "wss": "wss://example.com/roost/agents/counter/c1",
    }


def _delta(mid: str, offset: int, text: str) -> dict[str, Any]:
    return {"event_type": "model_delta", "payload": {"message_id": mid, "offset": offset, "text": text}}


#: Deltas as a reader may get them: in order, a repeat after a resume (overlapping), a gap (one
#: skipped), a restart of the stream, characters outside the BMP (offsets count code points), two
#: messages interleaved, and events that are not deltas.
FED = [
    _delta("m1", 0, "Hel"),
    _delta("m1", 3, "lo 🦅"),
    _delta("m1", 2, "llo 🦅 w"),  # overlaps: only " w" is new
    _delta("m2", 0, "other"),
    _delta("m1", 12, "far"),  # beyond what is held: a gap, nothing appended
    _delta("m1", 9, "orld"),
    {"event_type": "tool_started", "payload": {"tool": "t"}},
    {"event_type": "model_stream_restarted", "payload": {"message_id": "m2"}},
    _delta("m2", 0, "again"),
]


def test_the_js_message_text_reassembles_as_the_python_one(project: Project) -> None:
    """``MessageText`` of the package and ``roost.client.MessageText`` give the same text from the
    same events: each character once, an overlap trimmed, a gap counted and not appended, a restart
    emptying its message, offsets in code points."""
    seen = project.node_json("message_text.mjs", orjson.dumps(FED).decode())
    python = MessageText()
    added = [python.feed(ev) for ev in FED]
    assert seen["added"] == added
    assert seen["texts"] == {"m1": python.text("m1"), "m2": python.text("m2")}
    assert seen["texts"] == {"m1": "Hello 🦅 world", "m2": "again"}
    assert (seen["gaps"], seen["duplicates"]) == (python.gaps, python.duplicates) == (1, 1)


def test_the_client_streams_a_streaming_method_with_no_idempotency_key(
    project: Project, data_dir: Path
) -> None:
    """``stream`` (an async iterator, as the Python client's) and ``call`` with ``onChunk`` get every
    chunk in order, then the result; neither sends an idempotency key (the server refuses a streaming
    call with one); a loop left early forgets its call; a streaming call given a key is a TypeError.
    And a call with bad arguments fails at once with ``bad_frame`` (the error frame names its id)."""
    server = ServerProcess(data_dir).start()
    try:
        seen = project.node_json("node_stream.mjs", server.addr, "s1")
    finally:
        server.kill()
    assert seen["iterated"] == [1, 2, 3]
    assert (seen["done"], seen["streamResult"]) == (True, None)
    assert (seen["chunks"], seen["result"]) == ([4, 5], None)
    assert seen["early"] == [6]
    assert seen["keyed"] == "TypeError: a streaming call takes no idempotency key"
    assert seen["keys"] == [None, None, None]
    assert seen["bad"] == {"code": "bad_frame", "message": "bad_frame: rpc: args: must be a list"}
    assert seen["promptly"] is True
    assert seen["after"] == 8  # the stream left early ran to its end on the server
    assert seen["pending"] == 0


@pytest.mark.parametrize("prefix", ["/roost", "roost/"])
async def test_the_package_reaches_an_app_mounted_under_a_prefix(
    project: Project, data_dir: Path, prefix: str
) -> None:
    roost = create_app(KINDS, data_dir=data_dir)
    parent = Starlette(routes=[Mount("/roost", app=roost)])
    try:
        async with serve_in_process(parent) as addr:
            proc = await asyncio.create_subprocess_exec(
                str(project.node),
                "node_client.mjs",
                addr,
                prefix,
                "m1",
                cwd=project.dir,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await roost.aclose()
    assert proc.returncode == 0, out.decode() + err.decode()
    seen = orjson.loads(out)
    assert seen["counterUrl"] == f"ws://{addr}/roost/agents/counter/m1"
    assert seen["result"] == 2
    assert seen["event"]["event"]["text"] == "hello from node"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def static_site(root: Path) -> Iterator[str]:
    """``root``'s files over HTTP on 127.0.0.1 (any free port): ``host:port``."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


async def members_are(addr: str, name: str, count: int) -> bool:
    """Whether the room ``name`` has ``count`` connections (its state counts them)."""
    found: int = (await get_json(f"http://{addr}/agents/room/{name}"))["state"]["members"]
    return found == count


async def test_use_roost_in_a_vite_react_app_shows_state_calls_and_reconnects_after_a_restart(
    project: Project, browser: Browser, data_dir: Path
) -> None:
    built = project.run(str(project.node), project.tool("vite", "bin/vite.js"), "build", "--logLevel", "warn")
    assert built.returncode == 0, built.stdout + built.stderr
    port = free_port()
    with static_site(project.dir / "dist") as site:
        args = ("--port", str(port), "--origin", f"http://{site}")
        server = ServerProcess(data_dir, *args).start()
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"http://{site}/?roost={server.addr}&name=r1")
            await expect(page.locator("#status")).to_have_text("open")
            await expect(page.locator("#count")).to_have_text("0")
            await expect(page.locator("#at-mount")).to_have_text("5")  # called from an effect at mount
            await page.locator("#increment").click()
            await expect(page.locator("#last")).to_have_text("1")
            await expect(page.locator("#count")).to_have_text("1")

            # events from another client; the hook keeps the newest two (maxEvents: 2)
            await expect(page.locator("#room-status")).to_have_text("open")
            async with httpx.AsyncClient() as http:
                for text in ("a", "b", "c"):
                    r = await http.post(f"http://{server.addr}/agents/room/r1/rpc/say", json=[text])
                    assert r.json()["ok"], r.text
            await expect(page.locator("#said li")).to_have_text(["b", "c"])

            server.kill()
            await expect(page.locator("#status")).to_have_text("reconnecting")
            server = ServerProcess(data_dir, *args).start()
            await expect(page.locator("#status")).to_have_text("open", timeout=20_000)
            await expect(page.locator("#room-status")).to_have_text("open", timeout=20_000)
            await page.locator("#increment").click()
            await expect(page.locator("#last")).to_have_text("2")
            await expect(page.locator("#count")).to_have_text("2")

            # a new name: a new client, from nothing; the old one's connection is closed (the room
            # counts its connections in its state: 1 again since the page reconnected)
            assert await until(lambda: members_are(server.addr, "r1", 1), timeout=10)
            await page.locator("#rename").click()
            await expect(page.locator("#name")).to_have_text("r1-2")
            await expect(page.locator("#count")).to_have_text("0")
            await expect(page.locator("#said li")).to_have_count(0)
            await expect(page.locator("#at-mount")).to_have_text("5")  # r1-2-at-mount, called once
            assert await until(lambda: members_are(server.addr, "r1-2", 1), timeout=10)
            assert await until(lambda: members_are(server.addr, "r1", 0), timeout=10)
            health = await get_json(f"http://{server.addr}/healthz")
            assert health["connections"] == 3  # the hooks' of r1-2: two counters and the room
            assert errors == []
        finally:
            server.kill()


def test_the_readmes_package_block_runs_and_prints_what_it_says(project: Project, data_dir: Path) -> None:
    code, said = readme_js("// roost_client.mjs")
    assert "127.0.0.1:8000" in code
    server = ServerProcess(data_dir).start()
    try:
        (project.dir / "readme_client.mjs").write_text(code.replace("127.0.0.1:8000", server.addr))
        done = project.run(str(project.node), "readme_client.mjs", timeout=60)
    finally:
        server.kill()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == said


class NodeScript:
    """A Node script in the project whose stdout is one JSON line a step, read with a timeout."""

    def __init__(self, project: Project, script: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(project.node), script, *args],
            cwd=project.dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # the script ended

    def next(self, key: str, timeout: float = 60) -> Any:
        """The next line that says ``key``'s value; failing when the script says an error or ends."""
        while True:
            line = self.lines.get(timeout=timeout)
            assert line, f"the script ended before {key!r}: {self.stderr()}"
            said = orjson.loads(line)
            assert "error" not in said, said
            if key in said:
                return said[key]

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return ""
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def test_a_node_client_connects_once_the_server_listens_and_reconnects_after_a_restart(
    project: Project, data_dir: Path
) -> None:
    """Node's WebSocket reports a refused connection with an ``error`` event and no ``close``: the
    client still tries again. Started before the server listens, it connects once it does (its call,
    made while it waited, gets its result); connected, it reconnects after the server is SIGKILLed
    and started again on the same port and data dir, the welcome's state is the committed one, and
    a call after the restart succeeds."""
    port = free_port()
    args = ("--port", str(port))
    script = NodeScript(project, "node_reconnect.mjs", f"127.0.0.1:{port}", "rc1")
    server: ServerProcess | None = None
    try:
        assert script.next("refused") == 1  # nothing listens yet
        server = ServerProcess(data_dir, *args).start()
        connected = script.next("connected")
        assert connected == {"result": 1, "state": {"count": 1}, "welcomes": 1}
        server.kill()
        assert script.next("refused") >= 2  # an attempt after the server went away was refused
        server = ServerProcess(data_dir, *args).start()
        resumed = script.next("resumed")
    finally:
        script.close()
        if server is not None:
            server.kill()
    assert resumed["welcomeState"] == {"count": 1}  # what was committed before the SIGKILL
    assert resumed["resume"] == "replay"
    assert (resumed["result"], resumed["state"]) == (2, {"count": 2})
    assert (resumed["welcomes"], resumed["reconnects"]) == (2, 1)
