"""Child processes of the suite, all on 127.0.0.1: servers stopped by PID, clients run with a timeout.

Nothing here ever signals a process by name: a :class:`Server` keeps the ``Popen`` of its own child and
terminates exactly that PID (then kills it if it does not exit).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.settings import ROOT

__all__ = [
    "HOST",
    "Server",
    "child_env",
    "free_port",
    "http_json",
    "log",
    "proc_cpu_s",
    "rss_kb",
    "run_client",
    "running",
]

HOST = "127.0.0.1"
_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    """Progress on stdout."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for children: unbuffered, no asyncio debug mode (``make unit`` sets it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONASYNCIODEBUG", "PYTHONDEVMODE")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    if extra:
        env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def rss_kb(pid: int) -> int:
    """VmRSS of a process in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a whole process (all its threads), in seconds; NaN if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / _TCK


def http_json(port: int, path: str, body: bytes | None = None, timeout: float = 10.0) -> Any:
    """GET (or POST ``body``) ``http://127.0.0.1:port/path`` and decode the JSON answer."""
    req = urllib.request.Request(f"http://{HOST}:{port}{path}", data=body, method="POST" if body else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


class Server:
    """A server child process on ``port``; :meth:`stop` ends exactly this PID."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        port: int,
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
    ) -> None:
        self.name = name
        self.port = port
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=child_env({"WEBSOCKETS_MAX_LINE_LENGTH": "32768", **(env or {})}),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 30.0) -> Server:
        """Wait until the port accepts connections (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited rc={self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"{self.name} did not listen on {self.port} within {timeout} s")

    def rss_kb(self) -> int:
        return rss_kb(self.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@contextlib.contextmanager
def running(*servers: Server) -> Iterator[None]:
    """Wait for every server to listen; stop them all on exit."""
    try:
        for s in servers:
            s.wait_ready()
        yield
    finally:
        for s in servers:
            s.stop()


def run_client(args: Sequence[str], timeout: float, module: str = "bench.loadgen") -> dict[str, Any]:
    """Run ``python -m MODULE ARGS`` (the load client by default) as its own process; return the JSON
    object it prints last. On timeout ``subprocess.run`` kills exactly that child.
    """
    cp = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if cp.returncode != 0:
        raise RuntimeError(f"{module} {list(args)[:3]} failed rc={cp.returncode}:\n{cp.stderr[-3000:]}")
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{module} printed no JSON:\n{cp.stdout[-2000:]}\n{cp.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
