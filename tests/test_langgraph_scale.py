"""Guarantees 7 and 8 of ``roost.integrations.langgraph`` (its docstring): a saver reaches no shared
actor unless given a run index, and its connections and memory stay bounded with many threads at
once, against a Roost server on 127.0.0.1 (the other guarantees: tests/test_langgraph_saver.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from roost.client import TerminalClose
from roost.integrations.langgraph import INDEX_KIND, AsyncRoostSaver, CheckpointThread, RunIndex
from roost.storage import actor_path
from roost.transport import create_app
from roost.transport.security import claims_authorize, token_authenticate
from roost.transport.tokens import TokenSigner
from tests.conftest import NO_RATE_LIMITS
from tests.integration_support import FAST
from tests.support import serve_in_process

SECRET = "s" * 40


@pytest.fixture
async def url(data_dir: Path) -> AsyncIterator[str]:
    app = create_app([CheckpointThread, RunIndex], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr:
        yield f"ws://{addr}"


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


async def put(saver: AsyncRoostSaver, thread_id: str, run_id: str | None = None) -> RunnableConfig:
    metadata = {} if run_id is None else {"run_id": run_id}
    return await saver.aput(config(thread_id), empty_checkpoint(), metadata, {})  # type: ignore[arg-type]


# -- 8. Bounded memory: connections ------------------------------------------------------------------------


async def test_bounded_memory_more_threads_at_once_than_connections_all_checkpoint(url: str) -> None:
    """With the default settings, 120 threads checkpointing at once: none of their calls has its
    connection closed under it (64 are kept; a busy one is never closed)."""
    prefix = uuid.uuid4().hex[:8]
    async with AsyncRoostSaver(url=url, backoff=FAST) as saver:
        stored = await asyncio.gather(*(put(saver, f"{prefix}-{i}") for i in range(120)))
        assert len(stored) == 120
        assert len(saver._connections.clients) <= 64, "idle connections past the bound are closed"
        for i in (0, 63, 64, 119):
            assert await saver.aget_tuple(config(f"{prefix}-{i}")) is not None


async def test_bounded_memory_past_max_connections_a_call_waits_for_one_to_end(url: str) -> None:
    """``connections=4, max_connections=8``: 120 threads at once all checkpoint, with never more than
    8 connections open, and 4 once the calls are over."""
    prefix = uuid.uuid4().hex[:8]
    seen: list[int] = []
    async with AsyncRoostSaver(url=url, backoff=FAST, connections=4, max_connections=8) as saver:

        async def one(i: int) -> None:
            await put(saver, f"{prefix}-{i}")
            seen.append(len(saver._connections.clients))

        await asyncio.gather(*(one(i) for i in range(120)))
        assert len(seen) == 120
        assert max(seen) <= 8
        assert len(saver._connections.clients) <= 4
        assert saver._connections.busy == {}


# -- 8. Bounded memory: what a saver remembers -------------------------------------------------------


async def test_bounded_memory_a_saver_remembers_at_most_remember_threads_and_runs(url: str) -> None:
    prefix = uuid.uuid4().hex[:8]
    async with AsyncRoostSaver(url=url, backoff=FAST, remember=5, run_index=f"{prefix}-runs") as saver:
        for i in range(20):
            await put(saver, f"{prefix}-{i}", run_id=f"run-{i}")
            assert await saver.aget_tuple(config(f"{prefix}-{i}")) is not None
        assert len(saver._connections.known) <= 5
        assert len(saver._indexed) <= 5
        assert await saver.aget_tuple(config(f"{prefix}-0")) is not None, "a forgotten thread is asked for"
        await saver.adelete_for_runs(["run-0", "run-19"])  # the index keeps what the saver forgot
        assert await saver.aget_tuple(config(f"{prefix}-0")) is None
        assert await saver.aget_tuple(config(f"{prefix}-19")) is None
        assert await saver.aget_tuple(config(f"{prefix}-1")) is not None


# -- 7. No shared actor unless asked ---------------------------------------------------------------


async def test_no_shared_actor_unless_asked_a_principal_limited_to_its_own_threads_checkpoints(
    data_dir: Path,
) -> None:
    signer = TokenSigner(SECRET)
    app = create_app(
        [CheckpointThread, RunIndex],
        data_dir=data_dir,
        limits=NO_RATE_LIMITS,
        authenticate=token_authenticate(signer),
        authorize=claims_authorize,
    )
    alice = signer.issue("alice", ttl=600, names=["alice-*"])
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}"
        async with AsyncRoostSaver(url=url, token=alice, backoff=FAST) as saver:
            stored = await put(saver, "alice-1", run_id="run-1")  # a run id, and no index to reach
            await saver.aput_writes(stored, [("log", "x")], "task-1")
            assert await saver.aget_tuple(config("alice-1")) is not None
            with pytest.raises(NotImplementedError, match="run_index"):
                await saver.adelete_for_runs(["run-1"])
        assert not actor_path(data_dir, INDEX_KIND, "index").exists(), "no shared index was made"
        async with AsyncRoostSaver(url=url, token=alice, backoff=FAST, run_index="alice-runs") as indexed:
            await put(indexed, "alice-2", run_id="run-2")
            await indexed.adelete_for_runs(["run-2"])
            assert await indexed.aget_tuple(config("alice-2")) is None
        async with AsyncRoostSaver(url=url, token=alice, backoff=FAST, run_index="bob-runs") as other:
            with pytest.raises(TerminalClose) as refused:  # another tenant's index is not alice's
                await put(other, "alice-3", run_id="run-3")
            assert refused.value.code == 4403
            assert await other.aget_tuple(config("alice-3")) is None, "nothing stored without its index"
