"""The connections behind ``roost.integrations.langgraph``'s savers: :class:`Connections`, one
:class:`roost.client.Client` per actor, opened at its first call and closed when idle past a bound,
and :class:`Remembered`, the least-recently-used set of what a saver remembers (guarantee 8 of
``roost.integrations.langgraph``'s docstring). This module imports no LangGraph.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any
from urllib.parse import urlencode

import httpx

from roost.client import Backoff, Client, TerminalClose, actor_url

__all__ = ["ABSENT", "Connections", "Remembered"]


#: What a call that must not create its actor answers when the actor was never created.
ABSENT: Any = object()


class Remembered:
    """A set of at most ``keep`` keys; adding one past that forgets the least recently used."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._keys: OrderedDict[Hashable, None] = OrderedDict()

    def __contains__(self, key: Hashable) -> bool:
        if key in self._keys:
            self._keys.move_to_end(key)
            return True
        return False

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: Hashable) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.keep:
            self._keys.popitem(last=False)

    def discard_where(self, drop: Callable[[Any], bool]) -> None:
        for key in [key for key in self._keys if drop(key)]:
            del self._keys[key]


class Connections:
    """One :class:`Client` per actor, in one event loop, opened at its first call; a call from another
    loop starts afresh.

    ``keep`` is a soft bound: past it, the least recently used *idle* connection (no call in flight
    on it) is closed when a call ends or a new one opens. A connection with a call in flight is never
    closed: when every open one is busy, a call to another actor opens one more, up to ``most``;
    there, it waits (within the call's ``timeout``, then ``TimeoutError`` with nothing sent) until a
    call ends and a connection is idle. So at most ``most`` are open at once, and at most ``keep``
    once the calls are over.

    A call with ``create=False`` to an actor not known to exist first asks the server over HTTP
    (``GET /agents/KIND/NAME``, which creates nothing) and answers :data:`ABSENT` for one never
    created: a connection would create it. The actors known to exist are remembered up to
    ``remember`` (least recently used forgotten; forgetting one costs a ``GET`` again)."""

    def __init__(
        self,
        base: str,
        token: str | None,
        timeout: float,
        backoff: Backoff | None,
        keep: int,
        most: int,
        remember: int,
    ) -> None:
        self.base, self.token, self.timeout, self.backoff = base, token, timeout, backoff
        self.keep, self.most = keep, max(keep, most)
        self.clients: OrderedDict[tuple[str, str], Client] = OrderedDict()  # least recently used first
        self.busy: dict[tuple[str, str], int] = {}  # calls in flight, by actor (absent: idle)
        self.known = Remembered(remember)  # actors known to exist
        self.http: httpx.AsyncClient | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.freed: asyncio.Condition | None = None  # notified when a call ends

    async def _exists(self, kind: str, name: str) -> bool:
        if self.http is None:
            headers = {} if self.token is None else {"Authorization": f"Bearer {self.token}"}
            self.http = httpx.AsyncClient(headers=headers, timeout=self.timeout)
        # ws:// → http://, wss:// → https://
        url = "http" + actor_url(self.base, kind, name).removeprefix("ws")
        answer = await self.http.get(url)
        if answer.status_code == 404:
            return False
        if answer.status_code in (401, 403):  # as a refused handshake: 4401, 4403
            raise TerminalClose(4000 + answer.status_code, answer.text[:200])
        answer.raise_for_status()
        return True

    def _idle(self) -> tuple[str, str] | None:
        """The least recently used connection with no call in flight."""
        return next((key for key in self.clients if key not in self.busy), None)

    async def _trim(self, bound: int) -> None:
        """Close idle connections, least recently used first, until at most ``bound`` are open."""
        while len(self.clients) > bound:
            idle = self._idle()
            if idle is None:
                return
            await self.clients.pop(idle).close()

    async def _client(self, key: tuple[str, str], freed: asyncio.Condition) -> Client:
        """``key``'s connection, marked busy: opened if need be, once there is room for it."""
        async with asyncio.timeout(self.timeout):
            while key not in self.clients and len(self.clients) >= self.most:
                if self._idle() is not None:
                    await self._trim(self.most - 1)
                else:
                    async with freed:
                        await freed.wait()
        self.busy[key] = self.busy.get(key, 0) + 1
        client = self.clients.get(key)
        if client is None:
            url = actor_url(self.base, *key)
            if self.token is not None:
                url = f"{url}?{urlencode({'token': self.token})}"
            client = Client(url, subscribe="none", backoff=self.backoff)  # no state frames: it only calls
            client.start()
            self.clients[key] = client
        self.clients.move_to_end(key)  # the most recently used last
        return client

    async def call(self, kind: str, name: str, method: str, args: list[Any], *, create: bool = True) -> Any:
        loop = asyncio.get_running_loop()
        if self.loop is not loop:  # connections belong to the loop that opened them
            self.clients, self.busy, self.http, self.loop = OrderedDict(), {}, None, loop
            self.freed = asyncio.Condition()
        freed = self.freed
        assert freed is not None
        key = (kind, name)
        if key not in self.known:
            if not create and not await self._exists(kind, name):
                return ABSENT
            self.known.add(key)
        client = await self._client(key, freed)
        try:
            return await client.call_with(method, args, timeout=self.timeout)
        finally:
            left = self.busy.pop(key) - 1
            if left:
                self.busy[key] = left
            async with freed:
                freed.notify_all()
            await self._trim(self.keep)

    async def close(self) -> None:
        clients, self.clients, self.busy = list(self.clients.values()), OrderedDict(), {}
        for client in clients:
            await client.close()
        http, self.http = self.http, None
        if http is not None:
            await http.aclose()
