"""An unchanged Cloudflare Agents frontend against ``roost serve``: the real npm packages ``agents``
(``AgentClient``) and ``partysocket`` under it, in Node 22 (``tests/js/cf_agent_client.mjs``), with
only the host changed. Identity and ``ready``, state updates, ``call``, ``stub``, a streamed call, an
error, a refused client ``setState``, and the reconnect after the server is SIGKILLed and started again;
and ``useAgent`` (``agents/react``) in a React 19 component rendered into a jsdom document
(``tests/js/cf_use_agent.mjs``).

Node 22 and the packages are installed with ``npm ci`` from ``tests/js/locks/cf-clients`` (each
package pinned, the whole tree locked) into ``.cache/cf-clients`` at the repository's root (ignored by
git), once; later runs reuse them while the lock is unchanged. Without ``npm``, or when the install
fails (no network), the tests fail under ``make test`` and CI, and are skipped elsewhere, saying why
(``tests/support.py``, ``node_unavailable``).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support import ROOT, ServerProcess, npm_installed

pytestmark = pytest.mark.slow

CACHE = ROOT / ".cache" / "cf-clients"
SCRIPT = ROOT / "tests" / "js" / "cf_agent_client.mjs"
HOOK = ROOT / "tests" / "js" / "cf_use_agent.mjs"
FINAL = ROOT / "tests" / "js" / "cf_final_close.mjs"


def node() -> Path:
    """Node 22, with the packages beside it in :data:`CACHE` (installed if missing)."""
    return npm_installed(CACHE, "cf-clients", "the Cloudflare client packages")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def step(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The client's next step (a JSON line), failing with what it printed if it ended."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"the client ended: {proc.stderr.read() if proc.stderr else ''}")
    found: dict[str, Any] = orjson.loads(line)
    assert found["step"] != "error", found["message"]
    return found


def test_an_unchanged_cloudflare_agent_client_works_and_reconnects_after_a_sigkill(tmp_path: Path) -> None:
    binary = node()
    script = CACHE / SCRIPT.name  # beside its node_modules, where Node resolves "agents/client"
    shutil.copyfile(SCRIPT, script)
    port = free_port()
    data = tmp_path / "data"
    server = ServerProcess(data, "--port", str(port)).start()
    client = subprocess.Popen(
        [str(binary), str(script), f"127.0.0.1:{port}", "cf1"],
        cwd=CACHE,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = step(client)
        assert ready == {
            "step": "ready",
            "identified": True,
            "name": "cf1",
            "agent": "counter",
            "state": {"count": 0},
        }
        calls = step(client)
        assert calls["called"] == 2
        assert calls["stubbed"] == 5
        assert calls["chunks"] == [6, 7]
        assert calls["streamed"] is None
        assert calls["failed"].startswith("method_not_found: ")
        assert calls["stateError"] == "state_refused: this actor takes no state from clients"
        assert calls["stateAfterRefusal"] == {"count": 1000}  # the client keeps what it set
        assert step(client) == {"step": "kill-now"}
        server.kill()
        server = ServerProcess(data, "--port", str(port)).start()
        assert client.stdin is not None
        client.stdin.write("restarted\n")
        client.stdin.flush()
        after = step(client)
        assert after["after"] == 8  # nothing lost: 2 + 3 + 2, committed before the kill, then 1
        assert after["state"] == {"count": 8}
        assert after["closes"] >= 1
        assert client.wait(20) == 0
    finally:
        if client.poll() is None:
            client.kill()
        client.wait(10)
        for pipe in (client.stdin, client.stdout, client.stderr):
            if pipe is not None:
                pipe.close()
        server.kill()


def readme_js(first_line: str) -> tuple[str, str]:
    """The README's ``js`` block that starts with ``first_line``, and what the README says it prints
    (the first ``It prints `…``` after it)."""
    readme = (ROOT / "README.md").read_text()
    found = [
        (m.group(1), readme[m.end() :])
        for m in re.finditer(r"^```js\n(.*?)^```", readme, re.M | re.S)
        if m.group(1).startswith(first_line)
    ]
    assert len(found) == 1, f"{len(found)} js blocks of the README start with {first_line!r}"
    ((block, after),) = found
    said = after.split("It prints `", 1)[1].split("`", 1)[0]
    return block, said


def test_the_readmes_cloudflare_client_block_runs_and_prints_what_it_says(tmp_path: Path) -> None:
    binary = node()
    code, said = readme_js("// cf_client.mjs")
    assert "127.0.0.1:8000" in code
    server = ServerProcess(tmp_path / "data").start()
    try:
        script = CACHE / "readme_cf_client.mjs"
        script.write_text(code.replace("127.0.0.1:8000", server.addr))
        done = subprocess.run(
            [str(binary), str(script)], cwd=CACHE, capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        server.kill()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == said


def test_a_react_component_with_use_agent_shows_the_actors_state(tmp_path: Path) -> None:
    """``useAgent`` from ``agents/react``, unchanged: the component calls ``increment`` once its agent
    is ready and renders the state the server sends (``onStateUpdate``)."""
    binary = node()
    script = CACHE / HOOK.name
    shutil.copyfile(HOOK, script)
    server = ServerProcess(tmp_path / "data").start()
    try:
        done = subprocess.run(
            [str(binary), str(script), server.addr, "hook1"],
            cwd=CACHE,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.kill()
    assert done.returncode == 0, done.stdout + done.stderr
    assert orjson.loads(done.stdout) == {"shown": "5", "result": 5}


def test_a_deleted_actor_stays_deleted_for_an_unchanged_cloudflare_client(tmp_path: Path) -> None:
    """Deleting an actor closes its connections with Roost's 1000 (do not come back), which goes to a
    Cloudflare client as 4000: ``AgentClient`` takes it as final (``onConnectionError``), opens no
    new connection, and so never makes the actor again. Before that: a connection refused (a kind
    that does not exist) is told as ``roost_error`` and closed with 4404, final for it too; a call
    with bad arguments rejects at once with the reason, not at its timeout."""
    binary = node()
    script = CACHE / FINAL.name
    shutil.copyfile(FINAL, script)
    server = ServerProcess(tmp_path / "data").start()
    client = subprocess.Popen(
        [str(binary), str(script), server.addr, "gone1"],
        cwd=CACHE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        refused = step(client)
        assert (refused["code"], refused["retries"]) == (4404, 0)
        assert "no-such-kind" in refused["reason"]
        assert [(t["type"], t["code"]) for t in refused["told"]] == [("roost_error", "unknown_kind")]
        called = step(client)
        assert called["failed"] == "bad_frame: rpc: args: must be a list"
        assert called["promptly"] is True
        assert called["after"] == 2
        assert step(client) == {"step": "delete-now"}
        deleted = httpx.delete(f"{server.http}/admin/actors/counter/gone1", timeout=10)
        assert deleted.status_code == 200, deleted.text
        final = step(client)
        assert (final["code"], final["reason"]) == (4000, "actor deleted")
        assert (final["opens"], final["retries"]) == (1, 0)
        assert client.wait(20) == 0
        # the client is done: the actor was not made again
        assert httpx.get(f"{server.http}/admin/actors/counter/gone1", timeout=10).status_code == 404
    finally:
        if client.poll() is None:
            client.kill()
        client.wait(10)
        for pipe in (client.stdout, client.stderr):
            if pipe is not None:
                pipe.close()
        server.kill()
