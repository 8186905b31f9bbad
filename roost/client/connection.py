"""``Connector``: the task that owns the WebSocket of a ``Client``.

One task runs ``connect -> welcome -> dispatch frames -> closed`` in a loop. After a transient
close (1001, 1006, 1011, 1013, network errors, timeouts...) it sleeps ``Backoff.delay(attempt)``
and reconnects with ``cursor=<last processed seq>``; ``attempt`` goes back to 0 after each
welcome. A terminal close (``errors.TERMINAL_CLOSE_CODES``), a protocol violation, ``close()``,
or with ``reconnect=False`` any close, stops it for good: ``closed_reason`` is then set, pending
calls fail and every waiter is woken.

When a connection ends, every call still pending on it is failed *before* anything else can
use the client (no await in between), so a call is always either answered or failed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from .backoff import Backoff
from .calls import Registry, fresh_copy
from .dispatch import Dispatcher, guarded
from .errors import (
    ClientClosed,
    ClientError,
    CloseCode,
    ConnectionLost,
    ProtocolViolation,
    TerminalClose,
    close_code_for_http_status,
    is_terminal,
)
from .frames import Welcome, decode_frame
from .logs import logger
from .resume import ResumeState
from .urls import connect_url

#: How long the clean close handshake may take when the client closes.
CLOSE_TIMEOUT = 2.0

WelcomeCallback = Callable[[Welcome], None]


class Connection:
    """A welcomed WebSocket and the calls sent on it."""

    __slots__ = ("pending", "welcome", "ws")

    def __init__(self, ws: ClientConnection, welcome: Welcome) -> None:
        self.ws = ws
        self.welcome = welcome
        self.pending: Registry = {}


class Connector:
    """Connects, reconnects and feeds a ``Dispatcher``; see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        resume: ResumeState,
        dispatcher: Dispatcher,
        subscribe: frozenset[str] | None,
        backoff: Backoff,
        rng: random.Random,
        reconnect: bool,
        open_timeout: float,
        max_size: int,
        chaos: float,
        on_welcome: WelcomeCallback | None,
    ) -> None:
        self.url = url
        self.subscribe = subscribe
        self._resume = resume
        self._dispatcher = dispatcher
        self._backoff = backoff
        # Independent generators, so backoff delays and chaos drops are each reproducible
        # whatever the interleaving of the two.
        self._backoff_rng = random.Random(rng.getrandbits(64))
        self._chaos_rng = random.Random(rng.getrandbits(64))
        self._reconnect = reconnect
        self._away_until = 0.0
        self._open_timeout = open_timeout
        self._max_size = max_size
        self._chaos = chaos
        self._on_welcome = on_welcome

        self.conn: Connection | None = None  # the welcomed connection, if any
        self.closed_reason: ClientError | None = None
        self.welcomes = 0
        self.drops = 0
        self._ws: ClientConnection | None = None  # the open socket, welcomed or not
        self._task: asyncio.Task[None] | None = None
        self._chaos_task: asyncio.Task[None] | None = None
        self._close_requested = False
        self._changed = asyncio.Event()  # pulsed on welcome, disconnect and stop

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the connection task (and the chaos task). Needs a running event loop."""
        if self._task is not None or self._close_requested:
            raise RuntimeError("a Client can be started only once")
        self._task = asyncio.create_task(self._run(), name=f"roost-client {self.url}")
        if self._chaos > 0:
            self._chaos_task = asyncio.create_task(self._chaos_loop(), name="roost-client chaos")

    async def close(self) -> None:
        """Cancel and await the tasks; pending calls fail with ``ClientClosed``. Idempotent."""
        tasks = [t for t in (self._task, self._chaos_task) if t is not None and not t.done()]
        if not self._close_requested:
            self._close_requested = True
            if self.closed_reason is None:
                self.closed_reason = ClientClosed()
            for task in tasks:
                task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._stop(ClientClosed())

    def drop(self, away: float = 0.0) -> bool:
        """Abort the open socket without a close handshake and reconnect no sooner than ``away``
        seconds from now; False if none is open."""
        ws = self._ws
        if ws is None:
            return False
        self.drops += 1
        self._away_until = asyncio.get_running_loop().time() + away
        ws.transport.abort()
        return True

    async def connection(self, after: Connection | None = None) -> Connection:
        """The welcomed connection (one other than ``after``, a connection found closed), waiting
        for one; raises ``closed_reason`` once stopped."""
        while True:
            if self.closed_reason is not None:
                raise fresh_copy(self.closed_reason)
            if self._task is None:
                raise ClientError("the client is not started: use `async with Client(...)`")
            if self.conn is not None and self.conn is not after:
                return self.conn
            await self._changed.wait()

    # -- the connection task ------------------------------------------------------------------

    def _pulse(self) -> None:
        self._changed.set()
        self._changed.clear()

    def _stop(self, reason: ClientError) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
        if self._chaos_task is not None and self._chaos_task is not asyncio.current_task():
            self._chaos_task.cancel()
        self._dispatcher.end()
        self._pulse()

    async def _run(self) -> None:
        attempt = 0
        try:
            while True:
                welcomes = self.welcomes
                try:
                    await self._session()
                except (TerminalClose, ProtocolViolation) as exc:
                    logger.info("%s: stopping: %s", self.url, exc)
                    self._stop(exc)
                    return
                except (OSError, TimeoutError, WebSocketException) as exc:
                    logger.info("%s: connection failed: %r", self.url, exc)
                if self.welcomes > welcomes:
                    attempt = 0
                if not self._reconnect:
                    self._stop(ConnectionLost("connection lost (reconnect=False)"))
                    return
                delay = self._backoff.delay(attempt, self._backoff_rng)
                delay = max(delay, self._away_until - asyncio.get_running_loop().time())
                attempt += 1
                logger.debug("%s: reconnecting in %.3f s", self.url, delay)
                await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self._stop(ClientClosed())
            raise
        except Exception as exc:
            logger.exception("%s: client task failed", self.url)
            error = ClientError(f"internal error: {exc!r}")
            error.__cause__ = exc
            self._stop(error)

    async def _open(self) -> ClientConnection:
        url = connect_url(self.url, cursor=self._resume.query_cursor(), subscribe=self.subscribe)
        try:
            return await connect(
                url,
                compression=None,
                max_size=self._max_size,
                open_timeout=self._open_timeout,
                close_timeout=CLOSE_TIMEOUT,
                proxy=None,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            code = close_code_for_http_status(status)
            if code is not None:
                raise TerminalClose(code, f"HTTP {status} refused the upgrade") from exc
            raise

    async def _session(self) -> None:
        """One connection: open, welcome, process frames until it closes.

        Returns on a transient close; raises ``TerminalClose``/``ProtocolViolation`` to stop.
        """
        ws = await self._open()
        self._ws = ws
        conn: Connection | None = None
        error: ClientError = ConnectionLost("the connection was lost before the reply")
        try:
            async with asyncio.timeout(self._open_timeout):
                first = decode_frame(await ws.recv())
                # A refusal may explain itself with an error frame before the close (4400...).
                while first.get("type") == "error":
                    self._dispatcher.record_error(first)
                    first = decode_frame(await ws.recv())
            conn = self._welcomed(ws, Welcome.parse(first))
            async for raw in ws:
                self._dispatcher.dispatch(conn.pending, raw)
        except ConnectionClosed:
            pass
        except ProtocolViolation as exc:
            error = exc
            raise
        except asyncio.CancelledError:
            error = self.closed_reason or ClientClosed()
            raise
        finally:
            self._ws = None
            terminal = _terminal_close(ws)
            if terminal is not None and not isinstance(error, ProtocolViolation | ClientClosed):
                error = terminal
            self._disconnected(conn, error)
            if isinstance(error, ProtocolViolation):
                await _close_socket(ws, CloseCode.PROTOCOL_ERROR, str(error)[:100])
            else:
                await _close_socket(ws, CloseCode.NORMAL, "")
        if terminal is not None:
            raise terminal

    def _welcomed(self, ws: ClientConnection, welcome: Welcome) -> Connection:
        self._resume.on_welcome(welcome)
        conn = Connection(ws, welcome)
        self.conn = conn
        self.welcomes += 1
        logger.info(
            "%s: welcome %s resume=%s cursor=%d",
            self.url,
            welcome.connection_id,
            welcome.resume,
            welcome.cursor,
        )
        self._pulse()
        if self._on_welcome is not None:
            guarded(self._on_welcome, welcome)
        return conn

    def _disconnected(self, conn: Connection | None, error: ClientError) -> None:
        if conn is None:
            return
        if self.conn is conn:
            self.conn = None
        for pending in list(conn.pending.values()):
            pending.fail(error)
        self._pulse()

    async def _chaos_loop(self) -> None:
        while True:
            await asyncio.sleep(self._chaos_rng.expovariate(1.0 / self._chaos))
            if self.drop():
                logger.info("%s: chaos: dropped the connection", self.url)


async def _close_socket(ws: ClientConnection, code: int, reason: str) -> None:
    """Close handshake (at most ``CLOSE_TIMEOUT``); abort the transport if interrupted."""
    try:
        await ws.close(code, reason)
    except BaseException:
        ws.transport.abort()
        raise


def _terminal_close(ws: ClientConnection) -> TerminalClose | None:
    received = ws.protocol.close_rcvd
    if received is not None and is_terminal(received.code):
        return TerminalClose(received.code, received.reason)
    return None
