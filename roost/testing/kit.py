"""Actors in process, no sockets, real SQLite files.

::

    async with ActorKit([Counter], tmp_path, clock=FakeClock()) as kit:
        c = kit.connect("counter", "t1")
        assert await c.call("increment", 2) == 2
        await c.wait_for(lambda f: f["type"] == "state" and f["seq"] == 1)
        kit.clock.advance(61); kit.registry.sweep()   # idle deactivation without waiting

Frames arrive exactly as the WebSocket endpoint would send them (decoded to dicts), through the same
output gate. Waiting is on conditions, never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from roost.actors import (
    ANONYMOUS,
    Actor,
    Call,
    Connect,
    Connection,
    Disconnect,
    Message,
    Principal,
    Registry,
    RpcError,
    RuntimeConfig,
    Subscriptions,
)
from roost.scheduler import Clock, FakeClock
from roost.transport.handshake import connect_request

__all__ = ["ActorKit", "FaultySink", "KitConnection", "RecordingSink"]

Frame = dict[str, Any]


class RecordingSink:
    """A :class:`~roost.actors.connection.Sink` that records decoded frames and wakes waiters.

    Guarantees: ``frames`` holds every frame sent before the close, decoded, in the order sent; nothing
    is recorded after :meth:`close`, and only the first close is kept; :meth:`wait_for` sees frames
    recorded before it was called as well as later ones.
    """

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.closed: tuple[int, str] | None = None
        self._changed = asyncio.Event()

    def send_text(self, text: str) -> None:
        if self.closed is None:
            self.frames.append(orjson.loads(text))
            self._changed.set()

    def close(self, code: int, reason: str) -> None:
        if self.closed is None:
            self.closed = (code, reason)
            self._changed.set()

    async def wait_for(self, predicate: Callable[[Frame], bool], timeout: float = 5.0) -> Frame:
        """The first recorded frame matching ``predicate``, waiting for it if needed."""
        async with asyncio.timeout(timeout):
            seen = 0
            while True:
                for frame in self.frames[seen:]:
                    if predicate(frame):
                        return frame
                seen = len(self.frames)
                if self.closed is not None:
                    raise ConnectionError(f"closed {self.closed} while waiting")
                self._changed.clear()
                await self._changed.wait()

    async def wait_closed(self, timeout: float = 5.0) -> tuple[int, str]:
        async with asyncio.timeout(timeout):
            while self.closed is None:
                self._changed.clear()
                await self._changed.wait()
        return self.closed

    def of_type(self, kind: str) -> list[Frame]:
        return [f for f in self.frames if f.get("type") == kind]


class FaultySink(RecordingSink):
    """A :class:`RecordingSink` that loses or holds frames on purpose, as a bad network would.

    Guarantees: a frame sent inside :meth:`dropping` never reaches ``frames`` (it is counted in
    ``dropped``); frames sent inside :meth:`holding` are recorded when the block ends, all of them and in
    the order sent, ahead of any frame sent after it; a close is never dropped or held.
    """

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0
        self._mode: str | None = None
        self._held: list[str] = []

    def send_text(self, text: str) -> None:
        if self._mode == "drop":
            self.dropped += 1
        elif self._mode == "hold":
            self._held.append(text)
        else:
            super().send_text(text)

    @contextlib.contextmanager
    def dropping(self) -> Iterator[None]:
        """Drop every frame sent while the block runs."""
        self._mode = "drop"
        try:
            yield
        finally:
            self._mode = None

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold every frame sent while the block runs; deliver them, in order, when it ends."""
        self._mode = "hold"
        try:
            yield
        finally:
            self._mode = None
            held, self._held = self._held, []
            for text in held:
                super().send_text(text)


class KitConnection:
    """A connection to one actor, driven by the test."""

    def __init__(self, kit: ActorKit, kind: str, name: str, conn: Connection, sink: RecordingSink):
        self.kit = kit
        self.kind = kind
        self.name = name
        self.conn = conn
        self.sink = sink
        self._ids = itertools.count(1)

    @property
    def frames(self) -> list[Frame]:
        return self.sink.frames

    async def wait_for(self, predicate: Callable[[Frame], bool], timeout: float = 5.0) -> Frame:
        return await self.sink.wait_for(predicate, timeout)

    def send_call(self, method: str, *args: Any, **kwargs: Any) -> str:
        """Queue a call without waiting; returns its id."""
        call_id = f"c{next(self._ids)}"
        host = self.kit.registry.get(self.kind, self.name)
        host.submit(Call(method, list(args), kwargs, conn=self.conn, id=call_id))
        return call_id

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call and wait for the ``rpc_result``; raises ``RpcError`` for ``ok: false``."""
        call_id = self.send_call(method, *args, **kwargs)
        frame = await self.wait_for(lambda f: f.get("type") == "rpc_result" and f["id"] == call_id)
        if not frame["ok"]:
            raise RpcError(frame["error"]["code"], frame["error"]["message"])
        return frame["result"]

    def message(self, data: Any) -> None:
        self.kit.registry.get(self.kind, self.name).submit(Message(self.conn, data))

    def disconnect(self, code: int = 1000) -> None:
        self.kit.registry.get(self.kind, self.name).submit(Disconnect(self.conn, code))


class ActorKit:
    """A registry over ``data_dir`` (a path or a string) with a fake clock by default; an async
    context manager."""

    def __init__(
        self,
        kinds: Iterable[type[Actor]],
        data_dir: Path | str,
        *,
        clock: Clock | None = None,
        **config: Any,
    ) -> None:
        self.clock = clock or FakeClock()
        self.registry = Registry(kinds, RuntimeConfig(data_dir=Path(data_dir), **config), clock=self.clock)
        self._ids = itertools.count(1)

    async def __aenter__(self) -> ActorKit:
        await self.registry.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.registry.stop()

    def connect(
        self,
        kind: str,
        name: str,
        *,
        cursor: int | None = None,
        subscribe: str | None = None,
        principal: Principal = ANONYMOUS,
        sink: RecordingSink | None = None,
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> KitConnection:
        """Connect to ``kind/name`` as a WebSocket client would; ``sink`` (a :class:`FaultySink`, say)
        receives its frames. ``query`` and ``headers`` make the connection's ``conn.request`` as the
        server would from a handshake (:func:`~roost.transport.handshake.connect_request`: credentials
        left out); its path is ``/agents/{kind}/{name}``, its client ``("127.0.0.1", 0)``."""
        sink = sink if sink is not None else RecordingSink()
        scope = {
            "path": f"/agents/{kind}/{name}",
            "query_string": urlencode(list((query or {}).items())).encode(),
            "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
            "client": ("127.0.0.1", 0),
        }
        conn = Connection(
            f"k{next(self._ids)}",
            sink,
            principal=principal,
            subscriptions=Subscriptions.parse(subscribe),
            request=connect_request(scope),
        )
        self.registry.submit(kind, name, Connect(conn, cursor))
        return KitConnection(self, kind, name, conn, sink)

    async def call(self, kind: str, name: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """An in-process call (as from another actor or HTTP)."""
        result, _ = await self.registry.call(kind, name, method, list(args), kwargs)
        return result

    async def fire_due(self, kind: str, name: str) -> int:
        """Fire the actor's wake-ups that are due on the kit's clock now (activating it if dormant),
        each in its own turn, without waiting for the dispatcher; how many fire turns ran."""
        return await self.registry.wake(kind, name)

    async def settle(self, max_rounds: int = 10_000) -> None:
        """Let every live actor drain its mailbox and release its outputs."""
        for _ in range(max_rounds):
            if all(h.quiescent or h.stopping for h in self.registry.hosts.values()):
                return
            await asyncio.sleep(0)
        raise TimeoutError("actors did not settle")
