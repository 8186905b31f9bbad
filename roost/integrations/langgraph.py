"""LangGraph's checkpointer on Roost actors: a graph's checkpoints and pending writes kept durably, one
actor (one SQLite file) per thread id.

``AsyncRoostSaver(url=...)`` and ``RoostSaver(url=...)`` are LangGraph's ``BaseCheckpointSaver`` over a
running Roost server (through :class:`roost.client.Client`); the server serves the kinds
:class:`CheckpointThread` and :class:`RunIndex` (``roost serve roost.integrations.langgraph:app``, or
the kinds in your own ``create_app``)::

    graph = builder.compile(checkpointer=AsyncRoostSaver(url="ws://127.0.0.1:8000"))
    await graph.ainvoke(inputs, {"configurable": {"thread_id": "t-1"}})

``AsyncRoostSaver`` runs in the caller's event loop (for ``ainvoke``/``astream``); ``RoostSaver`` owns
an event loop in a thread of its own and serves both the sync methods (``invoke``/``stream``) and the
async ones. This module imports LangGraph (``pip install 'roost[langgraph]'``); ``import roost`` does
not.

Guarantees (tests in ``tests/test_langgraph_saver.py``; 7 and 8 in ``tests/test_langgraph_scale.py``):

1. **The checkpointer contract.** Every capability of ``langgraph-checkpoint-conformance`` passes:
   ``put``, ``put_writes``, ``get_tuple``, ``list`` (``filter`` on metadata, ``before``, ``limit``,
   newest first), ``delete_thread``, ``delete_for_runs``, ``copy_thread`` and ``prune``
   (``keep_latest``, ``delete``). Checkpoints and written values go through the saver's ``serde``
   (``dumps_typed``) and come back as they were given; metadata is kept as JSON.
2. **Durable.** A ``put`` or ``put_writes`` that returned is committed to the thread's actor file: a
   graph interrupted by ``interrupt()`` resumes with ``Command(resume=...)`` after the server was
   killed with SIGKILL and restarted on the same data directory, and no node that had finished runs
   again.
3. **Pending writes are kept.** The writes of the tasks that finished in a super-step where another
   task failed are stored against the step's checkpoint; a retry of the graph takes them from there
   and does not run those tasks again.
4. **One effect per call.** Each write is one call with its own idempotency key: if the connection
   drops after it was sent, it is sent again with the same key and applied once. An outcome still
   unknown after ``timeout`` seconds raises ``roost.client.OutcomeUnknown``.
5. **Bounded.** A checkpoint with its metadata is at most :data:`MAX_CHECKPOINT_BYTES` serialized, one
   ``put_writes`` at most :data:`MAX_WRITES_BYTES`, the pending writes of one checkpoint at most
   :data:`MAX_PENDING_BYTES`. Past a bound the saver raises :class:`CheckpointLimitExceeded` (a
   ``ValueError``) and stores nothing; the actor refuses the same with the error code
   ``checkpoint_too_large``, ``writes_too_large`` or ``pending_writes_full`` whoever calls it.
6. **Threads are apart.** Each thread id is its own actor: nothing one thread does is seen by another
   (``copy_thread`` and ``delete_for_runs`` excepted, by their definition). ``list`` needs a thread id.

7. **No shared actor unless asked.** A saver reaches only its threads' actors: a principal allowed
   only its own thread names checkpoints. ``delete_for_runs`` needs a run index, which a saver keeps
   only when given ``run_index=NAME``: the actor ``langgraph_runs/{NAME}`` (one per tenant, say), to
   which it reports each (run id, thread id) pair once, before the first checkpoint of that run is
   stored. Whoever may reach an index may read and forget every run in it.
8. **Bounded memory.** A saver keeps at most ``max_connections`` connections open (``connections``
   once their calls are over) and never closes one with a call in flight; it remembers at most
   ``remember`` threads and (run, thread) pairs.
"""

from __future__ import annotations

import asyncio
import base64
import random
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        "roost.integrations.langgraph needs LangGraph: pip install 'roost[langgraph]'"
        " (README, 'LangGraph checkpoints on Roost')"
    ) from exc

from roost.client import Backoff
from roost.client import RpcError as ClientRpcError
from roost.integrations.langgraph_connections import ABSENT, Connections, Remembered
from roost.integrations.langgraph_threads import (
    INDEX_KIND,
    KIND,
    LIMIT_CODES,
    MAX_CHECKPOINT_BYTES,
    MAX_PENDING_BYTES,
    MAX_WRITES_BYTES,
    PAGE_ROWS,
    STRATEGIES,
    CheckpointLimitExceeded,
    CheckpointThread,
    RunIndex,
    check_checkpoint,
    check_writes,
    encode,
)

if TYPE_CHECKING:
    from roost.transport import RoostApp

__all__ = [
    "INDEX_KIND",
    "KIND",
    "MAX_CHECKPOINT_BYTES",
    "MAX_PENDING_BYTES",
    "MAX_WRITES_BYTES",
    "AsyncRoostSaver",
    "CheckpointLimitExceeded",
    "CheckpointThread",
    "RoostSaver",
    "RunIndex",
]

T = TypeVar("T")
Method = Literal["put", "put_writes", "get", "page", "delete_thread", "delete_runs", "prune"]


def _thread_id(config: RunnableConfig | None) -> str:
    thread_id = (config or {}).get("configurable", {}).get("thread_id")
    if not isinstance(thread_id, str) or not 1 <= len(thread_id) <= 256 or "\x00" in thread_id:
        raise ValueError(
            "a Roost checkpointer needs config['configurable']['thread_id']: a string of 1 to 256"
            f" characters without NUL, got {thread_id!r}"
        )
    return thread_id


class AsyncRoostSaver(BaseCheckpointSaver[str]):
    """LangGraph's checkpointer on the actors ``langgraph_thread/{thread_id}`` of a running Roost server.

    ``url``: the server, ``ws://HOST:PORT`` or ``http://HOST:PORT`` (``wss``/``https`` too; a path is a
    prefix); ``token``: a Roost access token, sent as ``?token=`` (blanked in the client's logs) and
    as ``Authorization: Bearer`` on the ``GET`` before a read; refused, a call raises
    ``roost.client.TerminalClose`` (code 4401 or 4403), reads included.
    ``timeout`` bounds each call, reconnects included; ``backoff`` paces the reconnects.

    ``connections``: how many threads' connections are kept open once their calls are over (the
    least recently used idle one is closed past that; one with a call in flight never is);
    ``max_connections`` (default four times ``connections``): how many may be open at once, while
    calls to that many threads are in flight; a call to one more thread waits for one to end.
    ``remember``: how many threads (and (run, thread) pairs recorded in the run index) the saver
    remembers, least recently used forgotten (a forgotten one costs a ``GET`` or a ``record`` again).

    ``run_index``: the name of the :class:`RunIndex` actor (``langgraph_runs/{run_index}``) that
    ``delete_for_runs`` reads, e.g. one per tenant; each ``put`` of a new run reports its (run id,
    thread id) pair there first. ``None`` (the default): no index is kept or reached, a principal
    needs only its own threads, and ``delete_for_runs`` raises ``NotImplementedError``.

    Calls run in the event loop of the first one; ``aclose()`` (or ``async with``) closes the
    connections. For sync code, :class:`RoostSaver`.
    """

    def __init__(
        self,
        url: str = "ws://127.0.0.1:8000",
        token: str | None = None,
        *,
        serde: SerializerProtocol | None = None,
        timeout: float = 30.0,
        backoff: Backoff | None = None,
        connections: int = 64,
        max_connections: int | None = None,
        remember: int = 4096,
        run_index: str | None = None,
    ) -> None:
        super().__init__(serde=serde)
        base = url.rstrip("/")
        for http, ws in (("http://", "ws://"), ("https://", "wss://")):
            if base.startswith(http):
                base = ws + base.removeprefix(http)
        self.url = base
        keep = max(1, connections)
        most = 4 * keep if max_connections is None else max_connections
        self._connections = Connections(base, token, timeout, backoff, keep, most, max(1, remember))
        if run_index is not None:
            _thread_id({"configurable": {"thread_id": run_index}})  # an actor name, as a thread id
        self.run_index = run_index
        self._indexed = Remembered(max(1, remember))  # (run id, thread id) pairs already recorded

    async def _rpc(self, kind: str, name: str, method: str, args: list[Any], create: bool = True) -> Any:
        """Call ``method`` on the actor ``kind/name`` (:data:`ABSENT`: never created, and ``create`` is
        false)."""
        return await self._connections.call(kind, name, method, args, create=create)

    async def _call(self, thread_id: str, method: Method, args: list[Any], create: bool = True) -> Any:
        try:
            return await self._rpc(KIND, thread_id, method, args, create)
        except ClientRpcError as exc:
            if exc.code in LIMIT_CODES:
                raise CheckpointLimitExceeded(exc.code, exc.message) from None
            raise

    async def _read(self, thread_id: str, method: Method, args: list[Any]) -> Any:
        """A call that creates nothing; ``None`` for a thread never written to."""
        result = await self._call(thread_id, method, args, create=False)
        return None if result is ABSENT else result

    def _tuple(self, thread_id: str, row: dict[str, Any]) -> CheckpointTuple:
        ns, checkpoint_id, parent = row["ns"], row["id"], row["parent"]
        checkpoint: Checkpoint = self.serde.loads_typed((row["type"], base64.b64decode(row["checkpoint"])))
        return CheckpointTuple(
            config={
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
            },
            checkpoint=checkpoint,
            metadata=row["metadata"],
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=[
                (task, channel, self.serde.loads_typed((t, base64.b64decode(value))))
                for task, channel, t, value in row["writes"]
            ],
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` (its ``checkpoint_id``, else the newest of its namespace)."""
        thread_id = _thread_id(config)
        ns = config["configurable"].get("checkpoint_ns", "")
        row = await self._read(thread_id, "get", [ns, get_checkpoint_id(config)])
        return None if row is None else self._tuple(thread_id, row)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """The thread's checkpoints, newest first, matching ``config``'s namespace and checkpoint id
        (when given), older than ``before``, whose metadata holds ``filter``; at most ``limit``."""
        thread_id = _thread_id(config)
        assert config is not None
        ns = config["configurable"].get("checkpoint_ns")
        checkpoint_id = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        after: list[str] | None = None
        while left is None or left > 0:
            want = PAGE_ROWS if left is None else min(left, PAGE_ROWS)
            rows = await self._read(thread_id, "page", [ns, checkpoint_id, before_id, after, filter, want])
            if not rows:  # a page may come short (its byte bound): only an empty one is the end
                return
            for row in rows:
                yield self._tuple(thread_id, row)
            if left is not None:
                left -= len(rows)
            after = [rows[-1]["id"], rows[-1]["ns"]]

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint``; the config that names it."""
        thread_id = _thread_id(config)
        ns = config["configurable"].get("checkpoint_ns", "")
        type_, data = self.serde.dumps_typed(checkpoint)
        meta_json = orjson.dumps(
            {k: v for k, v in get_checkpoint_metadata(config, metadata).items() if k != "writes"}, default=str
        )
        meta: dict[str, Any] = orjson.loads(meta_json)  # JSON, as it is stored and filtered
        check_checkpoint(len(data) + len(meta_json))  # refused here, before anything is sent
        run_id = meta.get("run_id")
        run_id = str(run_id) if run_id is not None else None
        index = self.run_index
        if index is not None and run_id is not None and (run_id, thread_id) not in self._indexed:
            # recorded before the checkpoint: the index may name a thread without the run, never
            # miss one that has it
            await self._rpc(INDEX_KIND, index, "record", [run_id, thread_id])
            self._indexed.add((run_id, thread_id))
        parent = config["configurable"].get("checkpoint_id")
        await self._call(thread_id, "put", [ns, checkpoint["id"], parent, type_, encode(data), meta, run_id])
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's ``writes`` against the checkpoint of ``config``."""
        thread_id = _thread_id(config)
        ns = config["configurable"].get("checkpoint_ns", "")
        encoded: list[list[Any]] = []
        size = 0
        for idx, (channel, value) in enumerate(writes):
            type_, data = self.serde.dumps_typed(value)
            size += len(data)
            encoded.append([WRITES_IDX_MAP.get(channel, idx), channel, type_, encode(data)])
        check_writes(size)
        checkpoint_id = config["configurable"]["checkpoint_id"]
        await self._call(thread_id, "put_writes", [ns, checkpoint_id, task_id, task_path, encoded])

    async def adelete_thread(self, thread_id: str) -> None:
        """Remove every checkpoint and write of ``thread_id``."""
        _thread_id({"configurable": {"thread_id": thread_id}})
        await self._read(thread_id, "delete_thread", [])
        if self.run_index is not None:
            await self._rpc(INDEX_KIND, self.run_index, "forget", [None, thread_id], False)
        self._indexed.discard_where(lambda pair: pair[1] == thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints (and their writes) of the runs ``run_ids``, in every thread the run
        index names (``NotImplementedError`` for a saver without ``run_index``)."""
        index = self.run_index
        if index is None:
            raise NotImplementedError(
                "delete_for_runs finds a run's threads in a run index: AsyncRoostSaver(run_index='NAME')"
            )
        runs = [str(run_id) for run_id in run_ids]
        if not runs:
            return
        threads = await self._rpc(INDEX_KIND, index, "threads", [runs], False)
        if threads is ABSENT:
            return  # no run was ever recorded
        for thread_id in threads:
            await self._read(thread_id, "delete_runs", [runs])
        await self._rpc(INDEX_KIND, index, "forget", [runs, None])
        self._indexed.discard_where(lambda pair: pair[0] in runs)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of ``source_thread_id`` to ``target_thread_id``."""
        source = {"configurable": {"thread_id": source_thread_id}}
        _thread_id({"configurable": {"thread_id": target_thread_id}})
        async for tup in self.alist(source):  # type: ignore[arg-type]
            ns = tup.config["configurable"]["checkpoint_ns"]
            config: RunnableConfig = {"configurable": {"thread_id": target_thread_id, "checkpoint_ns": ns}}
            if tup.parent_config is not None:
                config["configurable"]["checkpoint_id"] = tup.parent_config["configurable"]["checkpoint_id"]
            stored = await self.aput(config, tup.checkpoint, tup.metadata, {})
            by_task: dict[str, list[tuple[str, Any]]] = {}
            for task_id, channel, value in tup.pending_writes or []:
                by_task.setdefault(task_id, []).append((channel, value))
            for task_id, task_writes in by_task.items():
                for channel, value in task_writes:  # one by one: each keeps its own bound
                    await self.aput_writes(stored, [(channel, value)], task_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only the newest checkpoint of each namespace of each thread;
        ``delete``: remove the threads' checkpoints."""
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        for thread_id in thread_ids:
            _thread_id({"configurable": {"thread_id": thread_id}})
            await self._read(thread_id, "prune", [strategy])

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: an increasing 32-digit count, then a random fraction."""
        current_v = 0 if current is None else int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    async def aclose(self) -> None:
        """Close the connections (a later call opens others). Idempotent."""
        await self._connections.close()

    async def __aenter__(self) -> AsyncRoostSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- sync methods: for sync graphs, RoostSaver ------------------------------------------------------

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        coro.close()
        raise RuntimeError(
            "AsyncRoostSaver serves async graphs (ainvoke, astream); in sync code use RoostSaver"
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return iter(self._sync(_collect(self.alist(config, filter=filter, before=before, limit=limit))))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        return self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        return self._sync(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        return self._sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        return self._sync(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        return self._sync(self.aprune(thread_ids, strategy=strategy))


async def _collect(items: AsyncIterator[T]) -> list[T]:
    return [item async for item in items]


class RoostSaver(AsyncRoostSaver):
    """:class:`AsyncRoostSaver` whose calls run in an event loop of its own, in a daemon thread started at
    the first call: its sync methods serve sync graphs (``invoke``, ``stream``) from any thread, and
    its async methods async ones from any event loop. ``close()`` stops the thread (idempotent)."""

    def __init__(self, url: str = "ws://127.0.0.1:8000", token: str | None = None, **options: Any) -> None:
        super().__init__(url, token, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _owned_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="roost-saver", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._owned_loop())

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._owned_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError("a RoostSaver's sync methods cannot be called from its own loop")
        return self._submit(coro).result()

    async def _rpc(self, kind: str, name: str, method: str, args: list[Any], create: bool = True) -> Any:
        if asyncio.get_running_loop() is self._owned_loop():
            return await super()._rpc(kind, name, method, args, create)
        return await asyncio.wrap_future(self._submit(super()._rpc(kind, name, method, args, create)))

    async def aclose(self) -> None:
        await asyncio.wrap_future(self._submit(self._connections.close()))

    def close(self) -> None:
        """Close the connections and stop the loop's thread (a later call starts another)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._connections.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def __enter__(self) -> RoostSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


app: RoostApp  # made by __getattr__ when first asked for


def __getattr__(name: str) -> Any:
    """``app``: an app serving :class:`CheckpointThread` and :class:`RunIndex`
    (``roost serve roost.integrations.langgraph:app``), made when first asked for, so that importing
    this module makes no app."""
    if name == "app":
        from roost.transport import create_app

        made = create_app([CheckpointThread, RunIndex])
        globals()["app"] = made
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
