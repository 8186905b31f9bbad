"""``roost.client``'s calls and dispatch without a server, no network, no sleeps: the update queue, pending
calls and streams, the dispatcher, a client not started or closed, and the command line's usage errors.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from websockets.exceptions import InvalidURI

from roost.client import (
    CallStream,
    CallTimeout,
    Client,
    ClientClosed,
    ClientError,
    ConnectionLost,
    ProtocolViolation,
    ResumeState,
    RpcError,
    TerminalClose,
    Updates,
)
from roost.client.__main__ import main
from roost.client.calls import Chunk, PendingCall, Registry
from roost.client.dispatch import ERRORS_KEPT, Dispatcher
from roost.client.frames import JSON, Frame, encode_frame
from tests.client_frames import event, state, welcome

# -- Updates, pending calls, Dispatcher ------------------------------------------------------------


async def test_updates_drop_the_oldest_when_full() -> None:
    updates = Updates(maxsize=3)
    for seq in range(1, 6):
        updates.put(state(seq))
    assert updates.dropped == 2
    assert len(updates) == 3
    updates.end()
    updates.put(state(6))  # ignored once ended
    assert [f["seq"] async for f in updates] == [3, 4, 5]


async def test_updates_close_unsubscribes() -> None:
    closed: list[Updates] = []
    updates = Updates(maxsize=10, on_close=closed.append)
    updates.put(state(1))
    updates.close()
    updates.close()
    assert closed == [updates]
    assert updates.get_nowait() is None
    assert [f async for f in updates] == []


def dispatcher_with_log() -> tuple[Dispatcher, list[tuple[str, JSON, int]]]:
    log: list[tuple[str, JSON, int]] = []

    def on_state(value: JSON, seq: int) -> None:
        log.append(("state", value, seq))

    def on_event(value: JSON, seq: int) -> None:
        if seq == 4:
            raise RuntimeError("a broken callback must not break the client")
        log.append(("event", value, seq))

    resume = ResumeState()
    resume.on_welcome(welcome("fresh", 0))
    return Dispatcher(resume, on_state=on_state, on_event=on_event, queue_size=100), log


async def test_dispatcher_delivers_deduplicated_updates_in_order() -> None:
    dispatcher, log = dispatcher_with_log()
    first, second = dispatcher.subscribe(), dispatcher.subscribe()
    registry: Registry = {}
    frames = [state(1), event(2), state(1), {"type": "message", "data": "hi"}, event(4), state(3)]
    for frame in frames:
        dispatcher.dispatch(registry, encode_frame(frame))
    dispatcher.end()
    expected = [1, 2, None, 4]
    assert [f.get("seq") async for f in first] == expected
    assert [f.get("seq") async for f in second] == expected
    assert log == [("state", {"n": 1}, 1), ("event", {"e": 2}, 2)]
    assert dispatcher.subscribe().ended


async def test_dispatcher_routes_replies_to_pending_calls() -> None:
    dispatcher, _ = dispatcher_with_log()
    registry: Registry = {}
    call = PendingCall("1", registry, want_chunks=False)
    stream = PendingCall("2", registry, want_chunks=True)
    replies: list[Frame] = [
        {"type": "rpc_chunk", "id": "1", "chunk": "ignored"},
        {"type": "rpc_chunk", "id": "2", "chunk": "a"},
        {"type": "rpc_result", "id": "1", "ok": True, "result": 42},
        {"type": "rpc_result", "id": "1", "ok": True, "result": "late duplicate, ignored"},
        {"type": "rpc_result", "id": "unknown", "ok": True, "result": 0},
        {"type": "rpc_result", "id": "2", "ok": False, "error": {"code": "boom", "message": "m"}},
    ]
    for frame in replies:
        dispatcher.dispatch(registry, encode_frame(frame))
    assert registry == {}
    assert await call.result() == 42
    chunk = await stream.next()
    assert isinstance(chunk, Chunk)
    assert chunk.value == "a"
    with pytest.raises(RpcError) as info:
        await stream.result()
    assert (info.value.code, info.value.message) == ("boom", "m")


async def test_dispatcher_keeps_the_last_error_frames() -> None:
    seen: list[Frame] = []
    resume = ResumeState()
    resume.on_welcome(welcome())
    dispatcher = Dispatcher(resume, on_error=seen.append)
    updates = dispatcher.subscribe()
    for i in range(ERRORS_KEPT + 5):
        dispatcher.dispatch({}, encode_frame({"type": "error", "code": "bad_frame", "message": str(i)}))
    dispatcher.dispatch({}, encode_frame({"type": "from_the_future"}))
    assert len(dispatcher.errors) == ERRORS_KEPT
    assert dispatcher.errors[0]["message"] == "5"
    assert len(seen) == ERRORS_KEPT + 5
    assert len(updates) == 0  # error frames are not updates
    with pytest.raises(ProtocolViolation, match="welcome"):
        dispatcher.dispatch({}, encode_frame(welcome().raw))


async def test_call_stream_yields_chunks_then_keeps_the_result() -> None:
    registry: Registry = {}

    async def opener() -> PendingCall:
        pending = PendingCall("7", registry, want_chunks=True)
        for chunk in ("a", "b"):
            pending.chunk(chunk)
        pending.resolve("done")
        return pending

    stream = CallStream(opener, timeout=5)
    assert [chunk async for chunk in stream] == ["a", "b"]
    assert (stream.done, stream.result) == (True, "done")
    assert registry == {}


async def test_call_stream_times_out_and_unregisters() -> None:
    registry: Registry = {}

    async def opener() -> PendingCall:
        return PendingCall("8", registry, want_chunks=True)

    with pytest.raises(CallTimeout):
        await anext(CallStream(opener, timeout=0))
    assert registry == {}


async def test_call_stream_raises_a_lost_connection() -> None:
    async def opener() -> PendingCall:
        pending = PendingCall("9", {}, want_chunks=True)
        pending.fail(ConnectionLost("gone"))
        return pending

    with pytest.raises(ConnectionLost, match="gone"):
        await anext(CallStream(opener, timeout=5))


# -- Client without a server ----------------------------------------------------------------------


async def test_client_refuses_calls_until_started_and_after_close() -> None:
    client = Client("ws://127.0.0.1:9/agents/counter/x", rng=random.Random(0))
    assert (client.connected, client.cursor, client.state, client.reconnects) == (False, None, None, 0)
    with pytest.raises(ClientError, match="not started"):
        await client.call("increment")
    await client.close()
    await client.close()  # idempotent
    assert isinstance(client.closed_reason, ClientClosed)
    with pytest.raises(ClientClosed):
        await client.call("increment")
    with pytest.raises(ClientClosed):
        await client.wait_connected(1)
    assert client.updates().ended
    assert not client.drop()
    with pytest.raises(RuntimeError):
        client.start()


def test_client_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="subscribe"):
        Client("ws://h/agents/k/x", subscribe="everything")
    with pytest.raises(ValueError, match="chaos"):
        Client("ws://h/agents/k/x", chaos=-1)
    with pytest.raises(ValueError, match="cursor"):
        Client("ws://h/agents/k/x", cursor=-1)
    with pytest.raises(InvalidURI):
        Client("http://h/agents/k/x")
    assert Client("ws://h/agents/k/x", subscribe="events,state").subscription == "state,events"


def test_terminal_close_is_a_client_error_not_a_connection_lost() -> None:
    assert issubclass(TerminalClose, ClientError)
    assert not issubclass(TerminalClose, ConnectionLost)


# -- command line ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--kind", "counter"],
        ["ws://h/agents/k/x", "--kind", "k", "--name", "x"],
        ["ws://h/agents/k/x", "--call", "m", "[1]", "extra"],
        ["ws://h/agents/k/x", "--call", "m", "{not json"],
        ["ws://h/agents/k/x", "--call", "m", "3"],
        ["ws://h/agents/k/x", "--subscribe", "all"],
        ["http://h/agents/k/x"],
        ["--kind", "k", "--name", "x", "--base", "http://h"],
    ],
)
def test_cli_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_a_client_can_be_built_outside_an_event_loop() -> None:
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    assert not Client("ws://h/agents/k/x").connected
