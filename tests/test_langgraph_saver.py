"""The guarantees of ``roost.integrations.langgraph`` (its docstring, numbered as there) with real
LangGraph graphs: a ``StateGraph`` with ``interrupt()`` resumed after a SIGKILL of the ``roost serve``
process, a failed super-step's pending writes, a reply lost on the way (tests/tcp_proxy.py), the
bounds, threads apart, and LangGraph kept out of ``import roost``. The conformance suite (guarantee 1):
tests/test_langgraph_conformance.py."""

from __future__ import annotations

import asyncio
import base64
import operator
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from roost.client import Client, RpcError, TerminalClose, actor_url
from roost.integrations.langgraph import (
    KIND,
    MAX_CHECKPOINT_BYTES,
    MAX_PENDING_BYTES,
    MAX_WRITES_BYTES,
    AsyncRoostSaver,
    CheckpointLimitExceeded,
    CheckpointThread,
    RoostSaver,
    RunIndex,
)
from roost.storage import actor_path
from roost.testing import until
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.integration_support import FAST, check_import_is_lazy, restarted, token_server
from tests.support import ServerProcess, serve_in_process
from tests.tcp_proxy import TcpProxy

APP = "roost.integrations.langgraph:app"


def thread() -> RunnableConfig:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:12]}"}}


async def pending(url: str, config: RunnableConfig) -> list[tuple[str, str, Any]]:
    """The pending writes of the thread's newest checkpoint, read by a saver of its own (straight to
    the server at ``url``)."""
    async with AsyncRoostSaver(url=url, backoff=FAST) as reader:
        tup = await reader.aget_tuple(config)
    return [] if tup is None else list(tup.pending_writes or [])


@pytest.fixture
async def url(data_dir: Path) -> AsyncIterator[str]:
    app = create_app([CheckpointThread, RunIndex], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        yield f"ws://{addr}"


@pytest.fixture
async def saver(url: str) -> AsyncIterator[AsyncRoostSaver]:
    async with AsyncRoostSaver(url=url, backoff=FAST) as saver:
        yield saver


@pytest.fixture
def server(data_dir: Path) -> Iterator[ServerProcess]:
    """A ``roost serve`` of the test's own, to kill."""
    process = ServerProcess(data_dir, app=APP).start()
    try:
        yield process
    finally:
        process.kill()


class Log(TypedDict):
    log: Annotated[list[str], operator.add]


# -- 2. Durable ------------------------------------------------------------------------------------------


def approval_graph(runs: dict[str, int]) -> StateGraph[Log, Any, Log, Log]:
    """prepare → ask (``interrupt()`` for an answer) → finish; ``runs`` counts each node's side effect."""

    def prepare(state: Log) -> Log:
        runs["prepare"] += 1
        return {"log": ["prepared"]}

    def ask(state: Log) -> Log:
        answer = interrupt("approve?")  # the node runs again from here on resume, with the answer
        runs["ask"] += 1
        return {"log": [f"approved: {answer}"]}

    def finish(state: Log) -> Log:
        runs["finish"] += 1
        return {"log": ["finished"]}

    builder = StateGraph(Log)
    builder.add_node("prepare", prepare)
    builder.add_node("ask", ask)
    builder.add_node("finish", finish)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask")
    builder.add_edge("ask", "finish")
    builder.add_edge("finish", END)
    return builder


@pytest.mark.slow
async def test_durable_an_interrupted_graph_resumes_after_a_sigkill_and_no_finished_node_runs_again(
    server: ServerProcess,
) -> None:
    runs = {"prepare": 0, "ask": 0, "finish": 0}
    builder = approval_graph(runs)
    config = thread()
    async with AsyncRoostSaver(url=server.ws, backoff=FAST) as saver:
        first = await builder.compile(checkpointer=saver).ainvoke({"log": []}, config)
        assert [i.value for i in first["__interrupt__"]] == ["approve?"]
        assert runs == {"prepare": 1, "ask": 0, "finish": 0}
    server.kill()  # between the interrupt and the resume: no shutdown code runs
    again = restarted(server)
    try:
        async with AsyncRoostSaver(url=again.ws, backoff=FAST) as saver:
            graph = builder.compile(checkpointer=saver)
            final = await graph.ainvoke(Command(resume="yes"), config)
            assert final == {"log": ["prepared", "approved: yes", "finished"]}
            assert runs == {"prepare": 1, "ask": 1, "finish": 1}
            state = await graph.aget_state(config)
            assert state.next == ()
            assert state.values == final
    finally:
        again.kill()


@pytest.mark.slow
def test_durable_a_sync_graph_on_roostsaver_resumes_after_a_sigkill(server: ServerProcess) -> None:
    runs = {"prepare": 0, "ask": 0, "finish": 0}
    builder = approval_graph(runs)
    config = thread()
    with RoostSaver(url=server.http, backoff=FAST) as saver:
        first = builder.compile(checkpointer=saver).invoke({"log": []}, config)
        assert "__interrupt__" in first
    server.kill()
    again = restarted(server)
    try:
        with RoostSaver(url=again.ws, backoff=FAST) as saver:
            final = builder.compile(checkpointer=saver).invoke(Command(resume="ok"), config)
        assert final == {"log": ["prepared", "approved: ok", "finished"]}
        assert runs == {"prepare": 1, "ask": 1, "finish": 1}
    finally:
        again.kill()


# -- 3. Pending writes are kept ----------------------------------------------------------------------------


async def test_pending_writes_are_kept_a_failed_super_step_does_not_run_its_finished_task_again(
    url: str, data_dir: Path
) -> None:
    runs = {"steady": 0, "flaky": 0}

    def steady(state: Log) -> Log:
        runs["steady"] += 1
        return {"log": ["steady"]}

    async def flaky(state: Log) -> Log:
        runs["flaky"] += 1
        if runs["flaky"] == 1:
            await until(lambda: runs["steady"] == 1)  # fails after its sibling has finished
            raise RuntimeError("flaky failed")
        return {"log": ["flaky"]}

    builder = StateGraph(Log)
    builder.add_node("steady", steady)
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "steady")  # one super-step, two parallel tasks
    builder.add_edge(START, "flaky")
    builder.add_edge("steady", END)
    builder.add_edge("flaky", END)
    config = thread()
    async with AsyncRoostSaver(url=url, backoff=FAST) as saver:
        with pytest.raises(RuntimeError, match="flaky failed"):
            await builder.compile(checkpointer=saver).ainvoke({"log": []}, config)
    channels = [channel for _, channel, _ in await pending(url, config)]
    assert "log" in channels  # steady's write
    assert "__error__" in channels  # flaky's error
    async with AsyncRoostSaver(url=url, backoff=FAST) as saver:  # a new process, say: from the server
        final = await builder.compile(checkpointer=saver).ainvoke(None, config)
    assert sorted(final["log"]) == ["flaky", "steady"]
    assert runs == {"steady": 1, "flaky": 2}


# -- 4. One effect per call --------------------------------------------------------------------------------


async def test_one_effect_per_call_a_write_whose_reply_was_lost_is_sent_again_and_applied_once(
    url: str, data_dir: Path
) -> None:
    proxy = await TcpProxy(url.removeprefix("ws://")).start()
    try:
        async with AsyncRoostSaver(url=f"ws://{proxy.addr}", backoff=FAST, timeout=30) as saver:
            config = thread()
            stored = await saver.aput(
                {"configurable": {**config["configurable"], "checkpoint_ns": ""}},
                empty_checkpoint(),
                {"source": "input", "step": -1},
                {},
            )
            proxy.mute()  # the reply to the next write is lost on the way
            writing = asyncio.create_task(
                saver.aput_writes(stored, [("log", "one"), ("log", "two")], "task-1")
            )

            async def committed() -> bool:
                return len(await pending(url, stored)) == 2

            await until(committed, message="the writes committed")
            assert not writing.done(), "its reply never arrived"
            proxy.sever()  # the connection drops: the write is sent again on the next one
            proxy.mute(False)
            await writing
            tup = await saver.aget_tuple(stored)
            assert tup is not None
            assert tup.pending_writes == [
                ("task-1", "log", "one"),
                ("task-1", "log", "two"),
            ]
    finally:
        await proxy.close()


# -- 5. Bounded --------------------------------------------------------------------------------------------


async def test_bounded_a_checkpoint_over_max_checkpoint_bytes_is_refused_and_nothing_is_stored(
    saver: AsyncRoostSaver,
) -> None:
    config = thread()
    big = empty_checkpoint()
    big["channel_values"] = {"log": "x" * MAX_CHECKPOINT_BYTES}
    with pytest.raises(CheckpointLimitExceeded) as refused:
        await saver.aput({"configurable": {**config["configurable"], "checkpoint_ns": ""}}, big, {}, {})
    assert refused.value.code == "checkpoint_too_large"
    assert await saver.aget_tuple(config) is None


async def test_bounded_writes_over_max_writes_bytes_or_max_pending_bytes_are_refused(
    saver: AsyncRoostSaver,
) -> None:
    config = thread()
    stored = await saver.aput(
        {"configurable": {**config["configurable"], "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
    )
    with pytest.raises(CheckpointLimitExceeded) as refused:
        await saver.aput_writes(stored, [("log", "x" * MAX_WRITES_BYTES)], "big")
    assert refused.value.code == "writes_too_large"
    part = "x" * (MAX_WRITES_BYTES // 4)
    for n in range(MAX_PENDING_BYTES // len(part) - 1):
        await saver.aput_writes(stored, [("log", part)], f"task-{n}")
    with pytest.raises(CheckpointLimitExceeded) as full:
        await saver.aput_writes(stored, [("log", part), ("log", part)], "one-too-many")
    assert full.value.code == "pending_writes_full"
    tup = await saver.aget_tuple(stored)
    assert tup is not None
    assert len(tup.pending_writes or []) == MAX_PENDING_BYTES // len(part) - 1


async def test_bounded_the_actor_refuses_past_a_bound_whoever_calls_it(url: str) -> None:
    async with Client(actor_url(url, KIND, "direct"), subscribe="none") as client:
        blob = base64.b64encode(b"x" * (MAX_CHECKPOINT_BYTES + 1)).decode()
        with pytest.raises(RpcError) as refused:
            await client.call("put", "", "c1", None, "msgpack", blob, {})
        assert refused.value.code == "checkpoint_too_large"
        with pytest.raises(RpcError) as bad:
            await client.call("put_writes", "", "c1", "t", "", [[0, "log"]])
        assert bad.value.code == "invalid_arguments"
        with pytest.raises(RpcError) as not_base64:
            await client.call("put", "", "c1", None, "msgpack", "not base64!", {})
        assert not_base64.value.code == "invalid_arguments"
        assert await client.call("get", "", None) is None


# -- 6. Threads are apart ------------------------------------------------------------------------------


async def test_threads_are_apart_each_thread_id_is_its_own_actor_file(
    saver: AsyncRoostSaver, data_dir: Path
) -> None:
    one, two = thread(), thread()
    await saver.aput(
        {"configurable": {**one["configurable"], "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
    )
    assert await saver.aget_tuple(two) is None
    assert [t async for t in saver.alist(two)] == []
    assert actor_path(data_dir, KIND, one["configurable"]["thread_id"]).exists()
    assert not actor_path(data_dir, KIND, two["configurable"]["thread_id"]).exists(), "a read creates nothing"
    with pytest.raises(ValueError, match="thread_id"):
        [t async for t in saver.alist(None)]


async def test_async_roost_saver_says_to_use_roost_saver_in_sync_code(saver: AsyncRoostSaver) -> None:
    with pytest.raises(RuntimeError, match="RoostSaver"):
        saver.get_tuple(thread())


async def test_a_token_is_presented_on_every_connection_and_none_is_refused(data_dir: Path) -> None:
    with token_server(data_dir, APP) as (server, token):
        config = thread()
        async with AsyncRoostSaver(url=server.ws, token=token, backoff=FAST) as saver:
            assert await saver.aget_tuple(config) is None  # asked over HTTP, with the token
            stored = await saver.aput(
                {"configurable": {**config["configurable"], "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
            )
            assert await saver.aget_tuple(config) is not None  # over the WebSocket, with the token
        async with AsyncRoostSaver(url=server.ws, backoff=FAST) as anonymous:
            with pytest.raises(TerminalClose) as read:
                await anonymous.aget_tuple(thread())  # refused over HTTP
            assert read.value.code == 4401
            with pytest.raises(TerminalClose) as write:
                await anonymous.aput_writes(stored, [("log", "x")], "t")  # refused at the handshake
            assert write.value.code == 4401
        assert token not in "".join(server.log)


def test_import_roost_does_not_import_langgraph() -> None:
    check_import_is_lazy("langgraph", "langgraph")
