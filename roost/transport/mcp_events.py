"""The MCP server's event store: what its SSE streams sent, in an SQLite file, for resumable streams.

The SDK's streamable HTTP transport gives every event of an SSE stream (a response, a notification,
the priming event) to :meth:`SqliteEventStore.store_event` before it sends it, with the event id this
store returns; a client that lost the stream sends that id back (``Last-Event-ID`` on a GET) and
:meth:`SqliteEventStore.replay_events_after` sends it the events of the same stream that came after
it, in order, then the stream goes on live.

Where: ``<data>/mcp/events.sqlite``, one file for the whole server (not the actors' logs: an MCP
stream's events are the session's, not an actor's, and a per-session actor may not exist yet when
the first of them is written). Guarantees:

- **Per session.** A stream's events are stored under the key of the session that wrote them
  (:data:`SESSION_KEY`, set by :mod:`roost.transport.mcp` for every request of a session and inherited
  by the session's tasks); a replay finds only the events of the session asking, so an id from
  another session replays nothing, even where the SDK's stream ids (a request's JSON-RPC id) repeat.
- **Unguessable ids.** An event id is ``<row>.<128 random bits in hex>``: the row orders it, the
  random part is checked (with the session) before anything is replayed.
- **Bounded.** Events older than :data:`RETENTION_S` (an hour) are removed as new ones come (on the
  first write and every :data:`PRUNE_EVERY` writes after it), as are the oldest beyond
  :data:`MAX_EVENTS`; the constructor takes other bounds.
- **Durable.** Written in SQLite's WAL mode, committed before the event is sent. A restart ends the
  sessions (the SDK keeps them in memory), so a resumption after one is refused with 404 all the same.

The file is used from one worker thread (its own connection), so the event loop never waits on a disk.
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage, jsonrpc_message_adapter

__all__ = ["MAX_EVENTS", "PRUNE_EVERY", "RETENTION_S", "SESSION_KEY", "SqliteEventStore"]

#: The key of the MCP session whose request or task is running (``""`` outside any).
SESSION_KEY: contextvars.ContextVar[str] = contextvars.ContextVar("roost_mcp_session", default="")

RETENTION_S = 3600.0
MAX_EVENTS = 100_000
PRUNE_EVERY = 1000

T = TypeVar("T")

#: One table, no secondary index: a write is one B-tree insert at the end of the table. An event's
#: id is ``<seq>.<token>``: found by its rowid, checked by its token and session; a replay reads the
#: rows after it in rowid order (a bounded table: the retention bounds the scan).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS mcp_events (
    seq INTEGER PRIMARY KEY,
    token TEXT NOT NULL,
    session TEXT NOT NULL,
    stream TEXT NOT NULL,
    message BLOB,
    at REAL NOT NULL
);
"""


class SqliteEventStore(EventStore):
    """The SDK's :class:`~mcp.server.streamable_http.EventStore` over one SQLite file (module doc)."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], float] = time.time,
        retention_s: float = RETENTION_S,
        max_events: int = MAX_EVENTS,
        prune_every: int = PRUNE_EVERY,
    ) -> None:
        self.path = path
        self.clock = clock
        self.retention_s = retention_s
        self.max_events = max_events
        self.prune_every = prune_every
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="roost-mcp-events")
        self._conn: sqlite3.Connection | None = None
        self._writes = 0

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def job() -> T:
            if self._conn is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
                self._conn = conn
            return fn(self._conn)

        return await asyncio.get_running_loop().run_in_executor(self._pool, job)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        token = secrets.token_hex(16)
        session = SESSION_KEY.get()
        body = (
            None
            if message is None
            else orjson.dumps(message.model_dump(by_alias=True, mode="json", exclude_unset=True))
        )
        now = self.clock()
        self._writes += 1
        prune = self._writes % self.prune_every == 1 % self.prune_every

        def write(conn: sqlite3.Connection) -> int:
            seq = conn.execute(
                "INSERT INTO mcp_events (token, session, stream, message, at) VALUES (?, ?, ?, ?, ?)",
                (token, session, stream_id, body, now),
            ).lastrowid
            if prune:
                old = conn.execute(
                    "SELECT MAX(seq) FROM mcp_events WHERE at < ?", (now - self.retention_s,)
                ).fetchone()[0]
                conn.execute(
                    "DELETE FROM mcp_events WHERE seq <= MAX(?, (SELECT MAX(seq) FROM mcp_events) - ?)",
                    (old or 0, self.max_events),
                )
            assert seq is not None
            return seq

        seq = await self._run(write)
        return f"{seq}.{token}"

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        session = SESSION_KEY.get()
        seq_text, _, token = last_event_id.partition(".")
        if not seq_text.isdigit() or len(seq_text) > 19:
            return None

        def read(conn: sqlite3.Connection) -> tuple[str, list[tuple[int, str, bytes]]] | None:
            row = conn.execute(
                "SELECT stream FROM mcp_events WHERE seq = ? AND token = ? AND session = ?",
                (int(seq_text), token, session),
            ).fetchone()
            if row is None:
                return None
            stream = row[0]
            later = conn.execute(
                "SELECT seq, token, message FROM mcp_events WHERE seq > ? AND session = ? AND stream = ? "
                "AND message IS NOT NULL ORDER BY seq",
                (int(seq_text), session, stream),
            ).fetchall()
            return stream, later

        found = await self._run(read)
        if found is None:
            return None
        stream, later = found
        for seq, event_token, body in later:
            message: Any = jsonrpc_message_adapter.validate_json(body)
            await send_callback(EventMessage(message, f"{seq}.{event_token}"))
        return stream

    async def count(self) -> int:
        """How many events the file holds (for tests and the operator)."""

        def read(conn: sqlite3.Connection) -> int:
            total: int = conn.execute("SELECT COUNT(*) FROM mcp_events").fetchone()[0]
            return total

        return await self._run(read)

    def close(self) -> None:
        """Close the file (after the last stream ended); the store may be used again after."""

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        self._pool.submit(shut).result()
