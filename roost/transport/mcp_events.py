"""The MCP server's event store: what a session's SSE streams sent, in its actor's own file.

The SDK's streamable HTTP transport gives every event of an SSE stream (a response, a notification,
the priming event) to :meth:`ActorEventStore.store_event` before it sends it, with the event id this
store returns; a client that lost the stream sends that id back (``Last-Event-ID`` on a GET) and
:meth:`ActorEventStore.replay_events_after` sends it the events of the same stream that came after
it, in order, then the stream goes on live.

Where: the table :data:`TABLE` of the actor the session is bound to (``/mcp/{kind}/{name}``: that
actor; ``/mcp/{kind}``: the session's own actor), written in a turn of that actor as any of its
writes is: committed before the event is sent, in the same file as the actor's log and state, so
deleting or exporting the actor takes its sessions' events with it, and nothing of one tenant's
sessions lands outside that tenant's actors. The events are not rows of ``roost_log``: that log's
``seq`` is gap-free for the actor's WebSocket subscribers (they count a skipped ``seq`` as lost),
and an MCP stream's events are one session's, not frames every subscriber of the actor receives.
Guarantees (``tests/test_mcp_server.py``):

- **Per session.** A stream's events are stored under the key of the session that wrote them (the
  :class:`~roost.transport.mcp_tools.Binding` in :data:`BINDING`, set by :mod:`roost.transport.mcp`
  for every request of a session and inherited by the session's tasks); a replay finds only the
  events of the session asking, so an id from another session replays nothing, even where the SDK's
  stream ids (a request's JSON-RPC id) repeat.
- **Unguessable ids.** An event id is ``<row>.<128 random bits in hex>``: the row orders it, the
  random part is checked (with the session) before anything is replayed.
- **Bounded, per actor.** At most :data:`MAX_EVENTS` events and :data:`MAX_BYTES` of messages are
  kept in one actor's file, none older than :data:`RETENTION_S` (an hour, on the registry's clock):
  the oldest go, every :data:`PRUNE_EVERY` writes and on every write of a message of
  :data:`BIG_EVENT` bytes or more. A session's events are removed when it ends with a ``DELETE``
  (:meth:`ActorEventStore.forget`).
- **Never creates an actor.** Opening a session creates its actor (:mod:`roost.transport.mcp`);
  an event of a session whose actor was deleted since is sent but not stored (its id replays
  nothing), so a deleted actor is never brought back by its sessions' traffic.

A restart ends the sessions (the SDK keeps them in memory), so a resumption after one is refused
with 404 all the same; their stored events go with the bounds.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
import sqlite3
from typing import TYPE_CHECKING, Any

import orjson
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage, jsonrpc_message_adapter

from roost.actors import Actor, RpcError

if TYPE_CHECKING:
    from roost.actors import Registry
    from roost.transport.mcp_tools import Binding

__all__ = [
    "BIG_EVENT",
    "BINDING",
    "MAX_BYTES",
    "MAX_EVENTS",
    "PRUNE_EVERY",
    "RETENTION_S",
    "TABLE",
    "ActorEventStore",
]

log = logging.getLogger("roost.mcp")

#: The session whose request or task is running (None outside any).
BINDING: contextvars.ContextVar[Binding | None] = contextvars.ContextVar("roost_mcp_binding", default=None)

TABLE = "roost_mcp_events"
RETENTION_S = 3600.0
MAX_EVENTS = 10_000
MAX_BYTES = 64 << 20
PRUNE_EVERY = 256
BIG_EVENT = 64 << 10

#: Made in the actor's file by its first event (an actor never served over MCP has no such table).
#: The small columns come before the message, which may overflow its page: the pruning reads only
#: them. No secondary index: a write is one insert at the end of the table; a replay reads the rows
#: after its id in rowid order, within the bounds.
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id      INTEGER PRIMARY KEY,
    session TEXT    NOT NULL,
    stream  TEXT    NOT NULL,
    token   TEXT    NOT NULL,
    size    INTEGER NOT NULL,
    at      REAL    NOT NULL,
    message TEXT
)
"""
#: The id of a stored event that cannot be replayed (its actor is gone): row 0 never exists.
_UNSTORED = "0"


class ActorEventStore(EventStore):
    """The SDK's :class:`~mcp.server.streamable_http.EventStore` over the actors' files (module doc)."""

    def __init__(
        self,
        registry: Registry,
        *,
        retention_s: float = RETENTION_S,
        max_events: int = MAX_EVENTS,
        max_bytes: int = MAX_BYTES,
        prune_every: int = PRUNE_EVERY,
    ) -> None:
        self.registry = registry
        self.retention_s = retention_s
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.prune_every = prune_every

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        bound = _bound()
        token = secrets.token_hex(16)
        raw = (
            b""
            if message is None
            else orjson.dumps(message.model_dump(by_alias=True, mode="json", exclude_unset=True))
        )
        size = len(raw)
        body = raw.decode() if message is not None else None

        async def write(actor: Actor) -> int:
            conn = actor.extension.connection()
            row = (bound.key, stream_id, token, size, actor.extension.now, body)
            try:
                seq = conn.execute(_INSERT, row).lastrowid
            except sqlite3.OperationalError:  # the actor's first event: no table yet
                conn.execute(_SCHEMA)
                seq = conn.execute(_INSERT, row).lastrowid
            assert seq is not None
            if seq % self.prune_every == 1 % self.prune_every or size >= BIG_EVENT:
                self._prune(conn, actor.extension.now)
            return seq

        if not self.registry.exists(bound.kind, bound.scoped):
            return self._unstored(bound, token)
        try:
            seq = await self.registry.run(bound.kind, bound.scoped, write)
        except RpcError as exc:  # being deleted, damaged, unavailable: the event goes unstored
            log.info("MCP event of %s/%r not stored: %s", bound.kind, bound.scoped, exc.code)
            return self._unstored(bound, token)
        return f"{seq}.{token}"

    def _unstored(self, bound: Binding, token: str) -> str:
        log.info("MCP event of %s/%r not stored: the actor no longer exists", bound.kind, bound.scoped)
        return f"{_UNSTORED}.{token}"

    def _prune(self, conn: sqlite3.Connection, now: float) -> None:
        """Remove the oldest events beyond the bounds (module doc): by age, by count, by bytes."""
        keep = 0
        total = 0
        for row_id, size, at in conn.execute(f"SELECT id, size, at FROM {TABLE} ORDER BY id DESC"):
            total += size
            if at < now - self.retention_s or keep >= self.max_events or total > self.max_bytes:
                conn.execute(f"DELETE FROM {TABLE} WHERE id <= ?", (row_id,))
                return
            keep += 1

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        bound = _bound()
        seq_text, _, token = last_event_id.partition(".")
        if not seq_text.isdigit() or len(seq_text) > 19 or seq_text == _UNSTORED:
            return None
        if not self.registry.exists(bound.kind, bound.scoped):
            return None
        after = int(seq_text)

        async def read(actor: Actor) -> tuple[str, list[tuple[int, str, str]]] | None:
            conn = actor.extension.connection()
            try:
                row = conn.execute(
                    f"SELECT stream FROM {TABLE} WHERE id = ? AND token = ? AND session = ?",
                    (after, token, bound.key),
                ).fetchone()
            except sqlite3.OperationalError:  # no table: no event was ever stored here
                return None
            if row is None:
                return None
            stream: str = row[0]
            later = conn.execute(
                f"SELECT id, token, message FROM {TABLE} WHERE id > ? AND session = ? AND stream = ? "
                "AND message IS NOT NULL ORDER BY id",
                (after, bound.key, stream),
            ).fetchall()
            return stream, later

        try:
            found: tuple[str, list[tuple[int, str, str]]] | None = await self.registry.run(
                bound.kind, bound.scoped, read
            )
        except RpcError:
            return None
        if found is None:
            return None
        stream, later = found
        for seq, event_token, body in later:
            message: Any = jsonrpc_message_adapter.validate_json(body)
            await send_callback(EventMessage(message, f"{seq}.{event_token}"))
        return stream

    async def forget(self, bound: Binding) -> int:
        """Remove the events of the session ``bound`` (it ended); how many there were."""
        if not self.registry.exists(bound.kind, bound.scoped):
            return 0

        async def delete(actor: Actor) -> int:
            conn = actor.extension.connection()
            try:
                return conn.execute(f"DELETE FROM {TABLE} WHERE session = ?", (bound.key,)).rowcount
            except sqlite3.OperationalError:
                return 0

        try:
            removed: int = await self.registry.run(bound.kind, bound.scoped, delete)
        except RpcError:
            return 0
        return removed

    async def count(self, kind: str, name: str) -> int:
        """How many events the actor's file holds (for tests and the operator)."""

        async def read(actor: Actor) -> int:
            try:
                conn = actor.extension.connection()
                found: int = conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0]
            except sqlite3.OperationalError:
                return 0
            return found

        total: int = await self.registry.run(kind, name, read)
        return total


_INSERT = f"INSERT INTO {TABLE} (session, stream, token, size, at, message) VALUES (?, ?, ?, ?, ?, ?)"


def _bound() -> Binding:
    bound = BINDING.get()
    if bound is None:  # every request reaches the SDK through the gate, which sets it
        raise RuntimeError("an MCP event outside any session")
    return bound
