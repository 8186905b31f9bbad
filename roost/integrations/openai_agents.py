"""The OpenAI Agents SDK's ``Session`` on a Roost actor: a conversation's items kept durably, one actor
(one SQLite file) per session id.

``RoostSession(session_id, url)`` is the SDK's ``agents.memory.Session`` protocol over a running Roost
server (through :class:`roost.client.Client`); the server serves the kind :class:`SessionItems`
(``roost serve roost.integrations.openai_agents:app``, or the kind in your own ``create_app``).
``LocalSession(session_id, registry)`` is the same over a :class:`roost.actors.Registry` in this
process (an ``ActorKit``'s, or a ``RoostApp``'s ``app.registry``)::

    session = RoostSession("user-42", "ws://127.0.0.1:8000")
    result = await Runner.run(agent, "Hello", session=session)

This module imports the SDK (``pip install 'roost[openai-agents]'``, then ``pip install --no-deps
openai-agents==0.24.0``: the SDK declares ``websockets<17``, Roost pins 17, and no code of it that a
session or ``Runner`` uses imports websockets); ``import roost`` does not. Two runners on one
session at once interleave their items, as on the SDK's own sessions: one session, one conversation
at a time.

Guarantees (each tested in ``tests/test_openai_agents_session.py``, on both sessions):

1. **The Session contract.** ``get_items(limit)`` returns the latest ``limit`` items, oldest first
   (``None``: the ``session_settings``' limit, else every item; 0 or less: none); ``add_items``
   appends in order; ``pop_item`` removes and returns the newest item (``None`` when there is none);
   ``clear_session`` removes them all. Items come back as they were given (JSON objects). The SDK's
   own session tests, ported, pass against both sessions.
2. **Durable.** An ``add_items`` that returned is committed to the session's actor file: a server
   killed with SIGKILL and restarted on the same data directory has every such item.
3. **One effect per call.** Each ``add_items``, ``pop_item`` and ``clear_session`` of a
   ``RoostSession`` is one call with its own idempotency key: if the connection drops after it was
   sent (the server crashed between the commit and the reply), it is sent again with the same key on
   the next connection, and the actor answers with the recorded outcome: the items are added once.
   An outcome still unknown after ``timeout`` seconds raises ``roost.client.OutcomeUnknown``.
4. **Bounded.** An item's JSON is at most :data:`MAX_ITEM_BYTES`, one ``add_items`` at most
   :data:`MAX_BATCH_BYTES`, a session at most :data:`MAX_ITEMS` items of at most
   :data:`MAX_SESSION_BYTES` in all. Past a bound ``add_items`` raises :class:`SessionLimitExceeded`
   (a ``ValueError``) and adds nothing; the actor refuses the same with the error code
   ``item_too_large``, ``batch_too_large`` or ``session_full`` whoever calls it.
5. **Sessions are apart.** Each session id is its own actor: nothing one session does is seen by
   another.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlencode

import orjson

try:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
    from agents.memory.session_settings import resolve_session_limit
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        "roost.integrations.openai_agents needs the OpenAI Agents SDK, installed in two steps (it "
        "declares websockets<17, which Roost does not use): pip install 'roost[openai-agents]' && "
        "pip install --no-deps openai-agents==0.24.0 (README, 'OpenAI Agents SDK sessions')"
    ) from exc

from roost.actors import Actor, Principal, Registry, RpcError, callable
from roost.client import Backoff, Client, actor_url
from roost.client import RpcError as ClientRpcError

if TYPE_CHECKING:
    from roost.transport import RoostApp

__all__ = [
    "KIND",
    "MAX_BATCH_BYTES",
    "MAX_ITEMS",
    "MAX_ITEM_BYTES",
    "MAX_SESSION_BYTES",
    "LocalSession",
    "RoostSession",
    "SessionItems",
    "SessionLimitExceeded",
]

#: The actor kind of a session: ``ws://HOST/agents/openai_session/{session_id}``.
KIND = "openai_session"
#: The largest item, as JSON: 256 KiB.
MAX_ITEM_BYTES = 256 * 1024
#: The largest ``add_items``, its items' JSON summed: 768 KiB (one call fits a 1 MiB frame).
MAX_BATCH_BYTES = 768 * 1024
#: The most items a session holds.
MAX_ITEMS = 10_000
#: The most bytes of items a session holds (so that ``get_items()`` fits one reply): 2 MiB.
MAX_SESSION_BYTES = 2 * 1024 * 1024
#: The error codes of the bounds (guarantee 4).
LIMIT_CODES = frozenset({"item_too_large", "batch_too_large", "session_full"})


class SessionLimitExceeded(ValueError):
    """An ``add_items`` past a bound of guarantee 4; ``code`` is the actor's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _encoded(items: list[dict[str, Any]]) -> list[bytes]:
    """Each item's JSON, checked against the item and batch bounds (:class:`SessionLimitExceeded`)."""
    encoded = [orjson.dumps(item) for item in items]
    for i, data in enumerate(encoded):
        if len(data) > MAX_ITEM_BYTES:
            raise SessionLimitExceeded(
                "item_too_large", f"item {i} is {len(data)} bytes of JSON, over {MAX_ITEM_BYTES}"
            )
    total = sum(len(data) for data in encoded)
    if total > MAX_BATCH_BYTES:
        raise SessionLimitExceeded(
            "batch_too_large", f"{len(items)} items are {total} bytes of JSON, over {MAX_BATCH_BYTES}"
        )
    return encoded


class SessionItems(Actor):
    """One session's items, in the actor's own table; state ``{"items": count, "bytes": size}``."""

    kind = KIND
    initial_state = {"items": 0, "bytes": 0}
    migrations = (
        "CREATE TABLE openai_session_items"
        " (id INTEGER PRIMARY KEY, item BLOB NOT NULL, size INTEGER NOT NULL)",
    )

    @callable
    async def add_items(self, items: list[dict[str, Any]], trim: bool = False) -> int:
        """Append ``items`` in order; the session's item count after. Past the session's bound it is
        refused (``session_full``), or with ``trim`` the oldest items are dropped, in the same turn,
        until the new ones fit."""
        try:
            encoded = _encoded(items)
        except SessionLimitExceeded as exc:
            raise RpcError(exc.code, str(exc)) from None
        count = int(self.state["items"]) + len(encoded)
        size = int(self.state["bytes"]) + sum(len(data) for data in encoded)
        if trim and (count > MAX_ITEMS or size > MAX_SESSION_BYTES):
            dropped, freed, last = 0, 0, None
            for rid, item_size in self.sql.execute("SELECT id, size FROM openai_session_items ORDER BY id"):
                if count - dropped <= MAX_ITEMS and size - freed <= MAX_SESSION_BYTES:
                    break
                dropped, freed, last = dropped + 1, freed + item_size, rid
            if last is not None:
                self.sql.execute("DELETE FROM openai_session_items WHERE id <= ?", (last,))
            count, size = count - dropped, size - freed
        if count > MAX_ITEMS or size > MAX_SESSION_BYTES:
            raise RpcError(
                "session_full",
                f"the session would hold {count} items of {size} bytes of JSON;"
                f" it holds at most {MAX_ITEMS} items of {MAX_SESSION_BYTES} bytes",
            )
        self.sql.executemany(
            "INSERT INTO openai_session_items (item, size) VALUES (?, ?)", [(d, len(d)) for d in encoded]
        )
        self.set_state({"items": count, "bytes": size})
        return count

    @callable(readonly=True)
    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items, oldest first (every item for ``None``; none for 0 or less)."""
        if limit is None:
            rows = self.sql.execute("SELECT item FROM openai_session_items ORDER BY id")
        elif limit <= 0:
            return []
        else:
            rows = self.sql.execute(
                "SELECT item FROM (SELECT id, item FROM openai_session_items ORDER BY id DESC LIMIT ?)"
                " ORDER BY id",
                (limit,),
            )
        return [orjson.loads(item) for (item,) in rows]

    @callable
    async def pop_item(self) -> Any:
        """Remove the newest item and return it; ``None`` when the session is empty."""
        row = self.sql.one("SELECT id, item, size FROM openai_session_items ORDER BY id DESC LIMIT 1")
        if row is None:
            return None
        self.sql.execute("DELETE FROM openai_session_items WHERE id = ?", (row[0],))
        self.set_state({"items": int(self.state["items"]) - 1, "bytes": int(self.state["bytes"]) - row[2]})
        return orjson.loads(row[1])

    @callable
    async def clear(self) -> None:
        """Remove every item."""
        self.sql.execute("DELETE FROM openai_session_items")
        self.set_state({"items": 0, "bytes": 0})


Method = Literal["add_items", "get_items", "pop_item", "clear"]


class _Session:
    """The ``Session`` protocol over one call function (``_call``): what both sessions share."""

    session_id: str
    session_settings: SessionSettings | None

    def __init__(self, session_id: str, session_settings: SessionSettings | None, trim: bool = False) -> None:
        if not isinstance(session_id, str) or not 1 <= len(session_id) <= 256:
            raise ValueError(f"session_id must be a string of 1 to 256 characters, got {session_id!r}")
        self.session_id = session_id
        self.session_settings = session_settings if session_settings is not None else SessionSettings()
        #: When a session is full, drop its oldest items to make room (else ``session_full``).
        self.trim = trim

    async def _call(self, method: Method, args: list[Any]) -> Any:
        """Call ``method`` on the session's actor; a refusal raises an error with ``code``."""
        raise NotImplementedError

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items, oldest first (``None``: ``session_settings.limit``, else all)."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        try:
            items: list[TResponseInputItem] = await self._call("get_items", [limit])
        except (RpcError, ClientRpcError) as exc:
            if exc.code == "not_found":  # a session never written to: no actor, no items
                return []
            raise
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items``; :class:`SessionLimitExceeded` past a bound (nothing added)."""
        if not items:
            return
        plain: list[dict[str, Any]] = [dict(item) for item in items]
        _encoded(plain)  # refused here, before anything is sent
        try:
            await self._call("add_items", [plain, self.trim] if self.trim else [plain])
        except (RpcError, ClientRpcError) as exc:
            if exc.code in LIMIT_CODES:
                raise SessionLimitExceeded(exc.code, exc.message) from None
            raise

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item; ``None`` when the session is empty."""
        item: TResponseInputItem | None = await self._call("pop_item", [])
        return item

    async def clear_session(self) -> None:
        """Remove every item of the session."""
        await self._call("clear", [])


class RoostSession(_Session):
    """The SDK's ``Session`` on the actor ``openai_session/{session_id}`` of a running Roost server.

    ``url``: the server, ``ws://HOST:PORT`` or ``http://HOST:PORT`` (``wss``/``https`` too; a path is
    a prefix); ``token``: a Roost access token, sent as ``?token=`` (blanked in the client's logs).
    ``timeout`` bounds each call, reconnects included; ``backoff`` paces the reconnects.
    One connection per event loop, opened at the first call; ``close()`` (or ``async with``) closes it.
    ``trim``: a full session (:data:`MAX_ITEMS` items or :data:`MAX_SESSION_BYTES`) drops its oldest
    items to take new ones, instead of refusing them with :class:`SessionLimitExceeded`.
    """

    def __init__(
        self,
        session_id: str,
        url: str = "ws://127.0.0.1:8000",
        *,
        token: str | None = None,
        session_settings: SessionSettings | None = None,
        timeout: float = 30.0,
        backoff: Backoff | None = None,
        kind: str = KIND,
        trim: bool = False,
    ) -> None:
        super().__init__(session_id, session_settings, trim)
        base = url.rstrip("/")
        for http, ws in (("http://", "ws://"), ("https://", "wss://")):
            if base.startswith(http):
                base = ws + base.removeprefix(http)
        self.url = actor_url(base, kind, session_id)
        self._token = token
        self.timeout = timeout
        self._backoff = backoff
        self._client: Client | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _connected(self) -> Client:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            url = self.url if self._token is None else f"{self.url}?{urlencode({'token': self._token})}"
            # no state frames: a session only calls
            self._client = Client(url, subscribe="none", backoff=self._backoff)
            self._loop = loop
            self._client.start()
        return self._client

    async def _call(self, method: Method, args: list[Any]) -> Any:
        return await self._connected().call_with(method, args, timeout=self.timeout)

    async def close(self) -> None:
        """Close the connection (a later call opens another). Idempotent."""
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.close()

    async def __aenter__(self) -> RoostSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class LocalSession(_Session):
    """The SDK's ``Session`` on the actor ``openai_session/{session_id}`` of ``registry``, in this
    process (which must serve :class:`SessionItems`); calls run as ``principal`` (none: in-process)."""

    def __init__(
        self,
        session_id: str,
        registry: Registry,
        *,
        session_settings: SessionSettings | None = None,
        principal: Principal | None = None,
        kind: str = KIND,
        trim: bool = False,
    ) -> None:
        super().__init__(session_id, session_settings, trim)
        self._registry = registry
        self._principal = principal
        self._kind = kind

    async def _call(self, method: Method, args: list[Any]) -> Any:
        result, _ = await self._registry.call(
            self._kind, self.session_id, method, args, {}, principal=self._principal
        )
        return result


app: RoostApp  # made by __getattr__ when first asked for


def __getattr__(name: str) -> Any:
    """``app``: an app serving :class:`SessionItems` (``roost serve roost.integrations.openai_agents:app``),
    made when first asked for, so that importing this module makes no app."""
    if name == "app":
        from roost.transport import create_app

        made = create_app([SessionItems])
        globals()["app"] = made
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
