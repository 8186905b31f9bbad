"""What a caller is told when the actor's code raises (``roost.actors.handlers.as_rpc_error``), and what
the server logs (``roost.actors.turn.log_failure``).

- An unexpected exception is told as ``handler_error`` with a generic message and a short reference
  id, never the exception's text; it is logged on ``roost.actor`` with its traceback and the same id.
  The same holds over WebSocket and HTTP, for a streaming call, a message, a task, and for another
  actor calling in process.
- An ``RpcError`` the actor raises on purpose keeps its code and message, and is not logged.
- A failed ``on_connect`` closes with 1011 and the reference id; the traceback is logged.

Real sockets on 127.0.0.1 (``serve_in_process``) and real SQLite files; each test has its own actor.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from roost.actors import Actor, Connection, RpcError, callable
from roost.examples.kinds import KINDS
from roost.testing import ActorKit, connect
from roost.transport import RoostApp, create_app
from tests.conftest import NO_RATE_LIMITS
from tests.support import serve_in_process

REF = re.compile(r"^internal error in (\w+) \(ref ([0-9a-f]{8})\)$")
SECRET = "password=hunter2"


class Leaky(Actor):
    """Handlers whose exceptions carry text a client must not see."""

    kind = "leaky"
    migrations = ("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)",)

    @callable
    async def store(self, text: Any) -> int:  # Any: a dict reaches SQLite
        self.sql.execute("INSERT INTO notes (text) VALUES (?)", (text,))
        return self.emit({"stored": text})

    @callable
    async def count(self) -> int:
        return int(self.sql.dicts("SELECT count(*) AS n FROM notes")[0]["n"])

    @callable
    async def ticks(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            yield i
        raise RuntimeError(f"stream broke, {SECRET}")

    @callable
    async def refuse(self) -> None:
        raise RpcError("out_of_stock", "no more widgets")

    @callable
    async def relay(self, name: str) -> dict[str, str]:
        """Call ``leaky/<name>.store({...})`` and say what this actor was told."""
        try:
            await self.actor("leaky", name).call("store", {"a": 1})
        except RpcError as exc:
            return {"code": exc.code, "message": exc.message}
        return {}

    def on_message(self, conn: Connection, data: Any) -> None:
        raise KeyError(SECRET)


class Grumpy(Actor):
    kind = "grumpy"

    def on_connect(self, conn: Connection) -> None:
        raise RuntimeError(SECRET)


def logged(caplog: pytest.LogCaptureFixture, ref: str) -> list[logging.LogRecord]:
    """The records on ``roost.actor`` that carry ``ref``."""
    return [r for r in caplog.records if r.name == "roost.actor" and f"(ref {ref})" in r.getMessage()]


def ref_of(message: str, where: str) -> str:
    match = REF.match(message)
    assert match is not None, message
    assert match.group(1) == where
    return match.group(2)


@pytest.fixture
def leaky_app(data_dir: Path) -> RoostApp:
    return create_app([Leaky, Grumpy], data_dir=data_dir, limits=NO_RATE_LIMITS)


async def test_an_unexpected_exception_is_told_as_handler_error_with_a_ref_and_logged_with_its_traceback(
    leaky_app: RoostApp, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case: a dict for an unannotated ``text`` reaches SQLite, whose error names the
    parameter binding; the client sees none of it, only a reference the log has with the traceback."""
    async with serve_in_process(leaky_app) as addr, connect(f"ws://{addr}/agents/leaky/ws") as ws:
        await ws.recv()
        frame = await ws.rpc("store", {"a": 1})
        assert frame["ok"] is False
        assert frame["error"]["code"] == "handler_error"
        message = frame["error"]["message"]
        ref = ref_of(message, "store")
        for leak in ("ProgrammingError", "binding", "parameter", "dict", "sqlite"):
            assert leak not in message
        records = logged(caplog, ref)
        assert len(records) == 1
        record = records[0]
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None
        assert isinstance(record.exc_info[1], sqlite3.ProgrammingError)
        assert "leaky/'ws'" in record.getMessage()
        assert "Traceback" in caplog.text
        assert "Error binding parameter" in caplog.text
        assert (await ws.rpc("count"))["result"] == 0  # the turn was rolled back, the actor serves on


async def test_http_streaming_calls_and_messages_are_told_the_same_way(
    leaky_app: RoostApp, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve_in_process(leaky_app) as addr:
        async with httpx.AsyncClient(base_url=f"http://{addr}") as http:
            r = await http.post("/agents/leaky/http/rpc/store", json=[{"a": 1}])
            assert r.status_code == 500
            error = r.json()["error"]
            assert error["code"] == "handler_error"
            assert logged(caplog, ref_of(error["message"], "store"))

            r = await http.post("/agents/leaky/http/rpc/ticks", json=[2])
            assert r.status_code == 500
            assert SECRET not in r.text
            assert logged(caplog, ref_of(r.json()["error"]["message"], "ticks"))

        async with connect(f"ws://{addr}/agents/leaky/stream") as ws:
            await ws.recv()
            frame = await ws.rpc("ticks", 2)
            assert [f["chunk"] for f in ws.frames if f["type"] == "rpc_chunk"] == [0, 1]
            assert frame["error"]["code"] == "handler_error"
            ref = ref_of(frame["error"]["message"], "ticks")
            assert SECRET in caplog.text
            assert logged(caplog, ref)

            await ws.send({"type": "message", "data": {}})
            error = await ws.wait_for(lambda f: f["type"] == "error")
            assert error["code"] == "handler_error"
            assert SECRET not in error["message"]
            assert logged(caplog, ref_of(error["message"], "on_message"))


async def test_an_actor_calling_a_failing_actor_gets_the_generic_message_too(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """In process (another actor, the test kit, HTTP) the caller is told what a client is told."""
    async with ActorKit([Leaky], data_dir) as kit:
        told = await kit.call("leaky", "caller", "relay", "callee")
        assert told["code"] == "handler_error"
        assert logged(caplog, ref_of(told["message"], "store"))
        with pytest.raises(RpcError) as info:
            await kit.call("leaky", "callee", "store", {"a": 1})
        assert info.value.code == "handler_error"
        assert logged(caplog, ref_of(info.value.message, "store"))


async def test_an_rpc_error_raised_on_purpose_keeps_its_code_and_message_and_is_not_logged(
    leaky_app: RoostApp, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve_in_process(leaky_app) as addr, connect(f"ws://{addr}/agents/leaky/own") as ws:
        await ws.recv()
        frame = await ws.rpc("refuse")
        assert frame["error"] == {"code": "out_of_stock", "message": "no more widgets"}
    assert not [r for r in caplog.records if r.name == "roost.actor" and r.levelno >= logging.ERROR]


async def test_a_failed_on_connect_closes_with_1011_and_a_ref_and_is_logged(
    leaky_app: RoostApp, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve_in_process(leaky_app) as addr, connect(f"ws://{addr}/agents/grumpy/g") as ws:
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.wait_for(lambda f: False)  # whatever it sends until it closes
    assert not [f for f in ws.frames if SECRET in str(f)]
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1011
    reason = closed.value.rcvd.reason
    assert SECRET not in reason
    match = re.fullmatch(r"on_connect failed \(ref ([0-9a-f]{8})\)", reason)
    assert match is not None, reason
    assert logged(caplog, match.group(1))


async def test_a_call_that_would_leave_a_state_that_is_not_json_is_invalid_state(data_dir: Path) -> None:
    """A state the runtime cannot store (an integer beyond 64 bits, from an MCP or in-process caller
    whose JSON has them) is refused as the caller's ``invalid_state``, saying why, with the writes
    rolled back; not an internal error."""
    async with ActorKit(KINDS, data_dir) as kit:
        with pytest.raises(RpcError) as refused:
            await kit.call("counter", "big", "increment", 10**30)
        assert refused.value.code == "invalid_state"
        assert "64-bit" in refused.value.message
        assert await kit.call("counter", "big", "get") == 0
