"""Connections to MCP servers, over stdio or streamable HTTP, with the official SDK's ``Client``.

- :func:`discover`: a server's tools (``tools/list``), once per agent kind when the registry starts.
- :class:`McpConnection`: one MCP session, held by a task of its own (the SDK's anyio scopes are
  entered and left in that task), used by the worker of an MCP call (:mod:`roost.agent.mcp_tools`):
  a new session (the ``initialize`` handshake), or a session of streamable HTTP that an earlier
  connection made, **rejoined** (:class:`Rejoin`: its id and the handshake's result kept in the
  capability session's row, installed with the SDK's ``ClientSession.adopt``, no handshake).
- :class:`McpPool`: this process's connections, by capability session id (the service
  ``agent.mcp``), and the futures through which ``provide_input`` answers an elicitation a worker
  waits on. Stopped with the registry: every connection is closed, every waiter cancelled.

Guarantees (tests in ``tests/test_mcp_client.py``):

- **No connection outlives the pool**: :meth:`McpPool.stop` closes and awaits every connection task.
- **A broken connection is never reused**: a connection whose task ended (the server died, the
  session was terminated) is dropped; the row's next open decides what the next call gets (the
  session rejoined, or a new one only with leave: :mod:`roost.agent.capabilities`).
- **A rejoined session is the same session**: its requests carry the server's session id, so the
  server sees the calls of a run before and after a lost connection (or a lost Roost process) in one
  session; a server that no longer knows it answers 404, :class:`SessionExpired`.
- **A healthy connection outlives its run, briefly**: when a run ends, its idle connections are kept
  :data:`IDLE_S` seconds for the next run that needs the same server in this process (starting a
  stdio server costs seconds; a call on a live session, milliseconds), then closed. A connection with
  a call in flight is never kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import httpx2
import mcp_types as types
import orjson
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from roost.agent.mcp_config import McpServer

if TYPE_CHECKING:
    from roost.actors.extension import Process

__all__ = [
    "IDEMPOTENCY_META",
    "SERVICE",
    "CallTimedOut",
    "ConnectionLost",
    "McpConnection",
    "McpPool",
    "Rejoin",
    "SessionExpired",
    "discover",
    "mcp_pool",
]

log = logging.getLogger("roost.agent.mcp")
SERVICE = "agent.mcp"
#: Seconds a healthy connection of an ended run waits for the next run that needs its server.
IDLE_S = 30.0

#: What the SDK says when a streamable HTTP server answers 404 for the session id it gave.
_TERMINATED = "Session terminated"

ElicitFn = Callable[[str, dict[str, Any]], Awaitable[types.ElicitResult | types.ErrorData]]
ProgressFn = ProgressFnT


class ConnectionLost(ConnectionError):
    """The connection ended (the server died or closed it). ``sent``: under a call, which may have
    had its effect (else before the call went out, which may be retried as it is)."""

    retryable = True

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


#: The ``_meta`` key of a ``tools/call`` that carries the step's idempotency key.
IDEMPOTENCY_META = "roost/idempotency_key"


class CallTimedOut(Exception):
    """The server did not answer a call within ``call_timeout_s`` (time spent waiting for the user's
    answer to an elicitation not counted). Final: the call may have had its effect, so it is not
    run again."""


class SessionExpired(ConnectionError):
    """The server no longer knows the session (streamable HTTP answered 404 for its id). ``sent``
    False only when the 404 answered the call's own ``tools/call`` (it never ran); a 404 of another
    request (the GET stream, a reconnect after the call's stream broke) says nothing of the call."""

    retryable = True

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


@dataclass(frozen=True, slots=True)
class Rejoin:
    """What rejoining a streamable HTTP session takes: the server's session id (the row's
    ``resume_token``) and the result of the handshake that made the session (its ``handshake``)."""

    session_id: str
    handshake: dict[str, Any]


def _stdio(server: McpServer) -> StdioServerParameters:
    return StdioServerParameters(
        command=server.command or "", args=list(server.args), env=server.env, cwd=server.cwd
    )


def _transport(
    server: McpServer, on_response: Callable[[httpx2.Response], None], session_id: str | None = None
) -> Any:
    """The streams of a connection: stdio, or a streamable HTTP transport whose HTTP client (closed
    with it) shows ``on_response`` every response (the session id the server hands out, a 404 for
    a session it forgot) and, to rejoin a session, sends ``session_id`` with every request."""
    if server.command is not None:
        return stdio_client(_stdio(server))
    return _http(server, on_response, session_id)


@contextlib.asynccontextmanager
async def _http(
    server: McpServer, on_response: Callable[[httpx2.Response], None], session_id: str | None = None
) -> AsyncIterator[Any]:
    assert server.url is not None
    headers = server.http_headers()
    if session_id is not None:
        headers = {**headers, "mcp-session-id": session_id}

    async def note(response: httpx2.Response) -> None:
        on_response(response)

    async with httpx2.AsyncClient(
        timeout=httpx2.Timeout(server.connect_timeout_s, read=server.call_timeout_s),
        headers=headers,
        event_hooks={"response": [note]},
    ) as http:
        async with streamable_http_client(server.url, http_client=http) as streams:
            yield streams


async def _list_tools(server: McpServer) -> list[types.Tool]:
    target = _stdio(server) if server.command is not None else _http(server, lambda response: None)
    async with Client(target, mode="legacy", cache=None) as client:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a paginator that never ends cannot hang the registration
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools


def discover(server: McpServer) -> list[types.Tool]:
    """The tools of ``server``, listed in a thread of their own (the caller may be inside an event
    loop: the kind's registration). Raises ``ConnectionError`` naming the server when it cannot be
    reached or listed within ``connect_timeout_s``."""
    found: list[list[types.Tool]] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            found.append(asyncio.run(asyncio.wait_for(_list_tools(server), server.connect_timeout_s)))
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=work, name=f"roost-mcp-discover-{server.name}", daemon=True)
    thread.start()
    thread.join()
    if failed or not found:
        why = _why(failed[0]) if failed else "no answer"
        raise ConnectionError(
            f"MCP server {server.name!r} ({server.transport}): cannot list its tools: {why}"
        )
    return found[0]


def _is_call(body: bytes) -> bool:
    """Whether an HTTP request's body is a ``tools/call`` (one JSON-RPC message, or a batch)."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    messages = message if isinstance(message, list) else [message]
    return any(isinstance(m, dict) and m.get("method") == "tools/call" for m in messages)


def _why(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:300]


class McpConnection:
    """One MCP session with one server, owned by one task (see the module doc)."""

    def __init__(self, server: McpServer, rejoin: Rejoin | None = None) -> None:
        self.server = server
        self._rejoin = rejoin
        #: The server's session id (streamable HTTP), when it gave one.
        self.session_id: str | None = rejoin.session_id if rejoin else None
        #: The handshake's result (``InitializeResult``, as JSON): what rejoining the session takes.
        self.handshake: dict[str, Any] | None = rejoin.handshake if rejoin else None
        self._client: ClientSession | None = None
        #: The server answered 404 for the session's id: it forgot the session.
        self._forgotten = False
        #: ... and the 404 answered the call in progress itself (calls of a row are one at a time).
        self._call_refused = False
        self._ready = asyncio.Event()
        self._close = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        #: The elicitation handler of the call in progress (calls of one run are sequential).
        self.on_elicit: ElicitFn | None = None
        #: Calls in flight (a connection is kept for another run only when there is none).
        self.calls = 0
        #: Elicitations waiting for their answer now, and the seconds spent so on this connection:
        #: a call's timeout does not run while the user is asked.
        self._asking = 0
        self._asked_s = 0.0
        self._not_asking = asyncio.Event()
        self._not_asking.set()

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and not self._close.is_set()

    async def start(self) -> None:
        """Connect and initialise (the handshake protocol, see docs/design.md), or rejoin the session
        of :class:`Rejoin`. Raises :class:`ConnectionLost` when that fails."""
        self._task = asyncio.get_running_loop().create_task(self._own(), name=f"{SERVICE}:{self.server.name}")
        ready = asyncio.ensure_future(self._ready.wait())
        try:
            await asyncio.wait(
                (ready, self._task),
                timeout=self.server.connect_timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            ready.cancel()
        if not self._ready.is_set():
            await self.aclose()
            why = _why(self._failure) if self._failure else "timed out"
            raise ConnectionLost(f"MCP server {self.server.name!r}: cannot connect: {why}")

    def _noted(self, response: httpx2.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid:
            self.session_id = sid
        if response.status_code == 404 and "mcp-session-id" in response.request.headers:
            self._forgotten = True  # the server no longer knows the session (its body may say so or not)
            if response.request.method == "POST" and _is_call(response.request.content):
                self._call_refused = True  # this 404 answered a tools/call: that call never ran

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        handler = self.on_elicit
        if handler is None or not isinstance(params, types.ElicitRequestFormParams):
            return types.ErrorData(code=types.INVALID_REQUEST, message="no call of this client elicits now")
        loop = asyncio.get_running_loop()
        began = loop.time()
        self._asking += 1
        self._not_asking.clear()
        try:
            return await handler(params.message, dict(params.requested_schema))
        finally:
            self._asking -= 1
            self._asked_s += loop.time() - began
            if not self._asking:
                self._not_asking.set()

    async def _own(self) -> None:
        rejoin = self._rejoin
        try:
            async with (
                _transport(self.server, self._noted, rejoin.session_id if rejoin else None) as (read, write),
                ClientSession(
                    read,
                    write,
                    elicitation_callback=self._elicit,
                    read_timeout_seconds=None,  # start() bounds the handshake, _wait_for each call
                ) as client,
            ):
                if rejoin is not None:  # the session exists: its negotiated state, no handshake
                    client.adopt(types.InitializeResult.model_validate(rejoin.handshake))
                else:
                    made = await client.initialize()
                    self.handshake = made.model_dump(mode="json", by_alias=True, exclude_none=True)
                self._client = client
                self._ready.set()
                await self._close.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failure = exc
            log.info("MCP connection to %s ended: %s", self.server.name, _why(exc))
        finally:
            self._client = None
            self._close.set()

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        progress: ProgressFn | None,
        idempotency_key: str | None = None,
    ) -> types.CallToolResult:
        """``tools/call``, with ``idempotency_key`` in its ``_meta`` (``roost/idempotency_key``: the
        same for every run of the step's attempt, so that a server can tell a repeat). Raises
        :class:`SessionExpired` or :class:`ConnectionLost` when the session or the connection ended
        under the call; other ``MCPError`` s as they come."""
        client = self._client
        if client is None or not self.alive:
            raise ConnectionLost(f"MCP server {self.server.name!r}: the connection is closed")
        # a ``_meta`` key of our own beside the SDK's progress token (a TypedDict that has no room
        # for it in its type, though the wire has)
        meta = (
            cast("types.RequestParamsMeta", {IDEMPOTENCY_META: idempotency_key}) if idempotency_key else None
        )
        self._call_refused = False
        call = asyncio.ensure_future(client.call_tool(name, arguments, progress_callback=progress, meta=meta))
        assert self._task is not None
        self.calls += 1
        try:
            await self._wait_for(call)
        except asyncio.CancelledError:
            call.cancel()
            raise
        finally:
            self.calls -= 1
        if not call.done():
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            raise self._lost()
        try:
            return call.result()
        except MCPError as exc:
            if exc.message == _TERMINATED or self._forgotten:
                await self.aclose()
                gone = f"MCP server {self.server.name!r}: {exc.message}"
                raise SessionExpired(gone, sent=not self._call_refused) from None
            if exc.code == types.CONNECTION_CLOSED or not self.alive:
                await self.aclose()
                raise self._lost() from None
            raise

    async def _wait_for(self, call: asyncio.Future[Any]) -> None:
        """Until ``call`` or the connection ends; :class:`CallTimedOut` (the call cancelled) after
        ``call_timeout_s`` of the server's own time, the time the user is asked not counted."""
        assert self._task is not None
        loop = asyncio.get_running_loop()
        start, asked = loop.time(), self._asked_s
        limit = self.server.call_timeout_s
        while not call.done() and not self._task.done():
            if self._asking:  # the user is asked: no timeout runs until the answer is given
                resumed = asyncio.ensure_future(self._not_asking.wait())
                try:
                    await asyncio.wait((call, self._task, resumed), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    resumed.cancel()
                continue
            left = limit - (loop.time() - start - (self._asked_s - asked))
            if left <= 0:
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
                raise CallTimedOut(
                    f"MCP server {self.server.name!r}: no answer within {limit} s (not retried: the "
                    "call may have had its effect)"
                )
            await asyncio.wait((call, self._task), timeout=left, return_when=asyncio.FIRST_COMPLETED)

    def _lost(self) -> ConnectionLost | SessionExpired:
        why = _why(self._failure) if self._failure else "connection closed"
        if _TERMINATED in why or self._forgotten:
            gone = f"MCP server {self.server.name!r}: {_TERMINATED}"
            return SessionExpired(gone, sent=not self._call_refused)
        return ConnectionLost(
            f"MCP server {self.server.name!r}: the connection ended under the call: {why}", sent=True
        )

    async def aclose(self) -> None:
        """Close the session and wait for its task (idempotent)."""
        self._close.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 5.0)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


def _key(server: McpServer, owner: str) -> str:
    """Connections to equal servers (same name, transport and settings) are interchangeable within
    one owner (one actor): never across actors, whose principals and tenants may differ, since a
    server may keep state per session."""
    return f"{owner}\0{server.model_dump_json()}"


def mcp_pool(process: Process) -> McpPool:
    """This process's pool of MCP connections (made on first use, stopped with the registry)."""
    return process.service(SERVICE, McpPool)


class McpPool:
    """This process's MCP connections and elicitation waiters, by capability session id."""

    def __init__(self, process: Process) -> None:
        self.connections: dict[str, McpConnection] = {}
        self.waiters: dict[str, asyncio.Future[Any]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        #: Healthy connections of ended runs, by owner and server, each with the timer that closes it.
        self._idle: dict[str, list[tuple[McpConnection, asyncio.TimerHandle]]] = {}
        #: The owner (the actor) of each row's connection: whose idle connections it may join.
        self._owners: dict[str, str] = {}

    def live(self, capability_session_id: str) -> McpConnection | None:
        conn = self.connections.get(capability_session_id)
        if conn is not None and not conn.alive:
            self.close(capability_session_id)
            return None
        return conn

    async def connect(
        self, capability_session_id: str, server: McpServer, owner: str = "", rejoin: Rejoin | None = None
    ) -> McpConnection:
        """A new connection for the row, replacing any it had: to the session of ``rejoin``, else a
        new MCP session: one ``owner`` (the actor whose run it is) left idle, if any, else a new one.
        **Never another owner's**."""
        self.close(capability_session_id)
        conn = self._take_idle(server, owner) if rejoin is None else None
        if conn is None:
            conn = McpConnection(server, rejoin)
            await conn.start()
        self.connections[capability_session_id] = conn
        self._owners[capability_session_id] = owner
        return conn

    def release(self, capability_session_id: str) -> None:
        """The row's run ended: its connection, if healthy and idle, waits :data:`IDLE_S` seconds
        for another run that needs the same server; otherwise it is closed."""
        conn = self.connections.get(capability_session_id)
        if conn is None or not conn.alive or conn.calls:
            self.close(capability_session_id)
            return
        self.connections.pop(capability_session_id)
        owner = self._owners.pop(capability_session_id, "")
        waiter = self.waiters.pop(capability_session_id, None)
        if waiter is not None and not waiter.done():
            waiter.cancel()
        conn.on_elicit = None
        timer = asyncio.get_running_loop().call_later(IDLE_S, self._expire, conn)
        self._idle.setdefault(_key(conn.server, owner), []).append((conn, timer))

    def _take_idle(self, server: McpServer, owner: str) -> McpConnection | None:
        parked = self._idle.get(_key(server, owner), [])
        while parked:
            conn, timer = parked.pop()
            timer.cancel()
            if conn.alive:
                return conn
            self._aclose(conn)
        return None

    def _expire(self, conn: McpConnection) -> None:
        for key, parked in self._idle.items():
            kept = [(c, t) for c, t in parked if c is not conn]
            if len(kept) != len(parked):
                self._idle[key] = kept
                self._aclose(conn)
                return

    def _aclose(self, conn: McpConnection) -> None:
        task = asyncio.get_running_loop().create_task(conn.aclose(), name=f"{SERVICE}:close")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def close(self, capability_session_id: str) -> None:
        """Close the row's connection (in the background; :meth:`stop` awaits it) and cancel its waiter."""
        conn = self.connections.pop(capability_session_id, None)
        self._owners.pop(capability_session_id, None)
        waiter = self.waiters.pop(capability_session_id, None)
        if waiter is not None and not waiter.done():
            waiter.cancel()
        if conn is not None:
            self._aclose(conn)

    def wait_for_answer(self, capability_session_id: str) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiters[capability_session_id] = fut
        return fut

    def deliver(self, capability_session_id: str, answer: Any) -> bool:
        """Hand ``answer`` to the worker waiting on the row here; False if none waits here."""
        fut = self.waiters.pop(capability_session_id, None)
        if fut is None or fut.done():
            return False
        fut.set_result(answer)
        return True

    async def stop(self) -> None:
        for key in list(self.connections):
            self.close(key)
        for parked in self._idle.values():
            for conn, timer in parked:
                timer.cancel()
                self._aclose(conn)
        self._idle.clear()
        for fut in list(self.waiters.values()):
            fut.cancel()
        self.waiters.clear()
        await asyncio.gather(*self._closing, return_exceptions=True)
