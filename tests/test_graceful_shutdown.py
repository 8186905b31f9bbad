"""SIGTERM to ``roost serve`` closes its clients with a transient code (1001 or 1012, so
``roost.client`` reconnects) and keeps every acknowledged call: a new process on the same data
directory serves the state they left."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import orjson
import pytest
from websockets.sync.client import connect as connect_sync

from roost.testing import close_code_sync, rpc_frame
from tests.support import ServerProcess, server_process


@pytest.mark.slow
def test_sigterm_closes_clients_with_a_transient_code_and_keeps_acknowledged_calls(data_dir: Path) -> None:
    server = ServerProcess(data_dir).start()
    try:
        with connect_sync(f"{server.ws}/agents/counter/graceful", open_timeout=5) as ws:
            assert orjson.loads(ws.recv(timeout=5))["type"] == "welcome"
            ws.send(rpc_frame("1", "increment", 7))
            while (frame := orjson.loads(ws.recv(timeout=5)))["type"] != "rpc_result":
                pass
            assert frame["result"] == 7
            assert server.proc is not None
            os.killpg(server.proc.pid, signal.SIGTERM)
            assert close_code_sync(ws) in (1001, 1012)
        # uvicorn re-raises the signal once its graceful shutdown is done
        assert server.proc.wait(20) in (0, -signal.SIGTERM)
    finally:
        server.kill()
    with server_process(data_dir) as again:
        r = httpx.get(f"{again.http}/agents/counter/graceful", timeout=10)
        assert r.json()["state"] == {"count": 7}
