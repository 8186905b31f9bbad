"""Example actor kinds served by a bare ``roost serve``: ``counter``, ``room``, the ``docs`` agent
(:mod:`roost.examples.docs_agent`) and the ``chat`` agent (:class:`roost.agent.ChatAgent`: ``send(text)``
starts an answer, streamed by the deterministic model, and returns its ``message_id``) and the
orchestrator-workers example ``team`` / ``team_worker`` (:mod:`roost.examples.team`).

``counter`` is part of the wire contract: state ``{"count": int}``; ``increment(by=1) -> int`` returns
the new count and ``get() -> int`` the current one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from roost.actors import Actor, Connection, callable, wakeup
from roost.agent import ChatAgent
from roost.examples.docs_agent import DocsAgent
from roost.examples.team import Team, TeamWorker

__all__ = ["KINDS", "Chat", "Counter", "DocsAgent", "Room", "Team", "TeamWorker"]


class Counter(Actor):
    """A durable counter."""

    kind = "counter"
    initial_state = {"count": 0}

    @callable
    async def increment(self, by: int = 1) -> int:
        self.set_state({"count": self.state["count"] + by})
        count: int = self.state["count"]
        return count

    @callable(readonly=True)
    async def get(self) -> int:
        count: int = self.state["count"]
        return count

    @callable
    async def increment_later(self, seconds: float, by: int = 1, key: str | None = None) -> str:
        """Schedule ``add(by)`` in ``seconds``; the same ``key`` twice gives one schedule. The id."""
        schedule = await self.schedule(seconds, "add", {"by": by}, key=key)
        return schedule.id

    @callable(readonly=True)
    async def schedules(self) -> list[dict[str, Any]]:
        """The pending wake-ups, as control records."""
        return [s.to_json() for s in await self.list_schedules()]

    @wakeup
    async def add(self, payload: dict[str, int]) -> None:
        self.set_state({"count": self.state["count"] + int(payload["by"])})

    @callable
    async def count_to(self, n: int) -> AsyncIterator[int]:
        """Stream: increment ``n`` times, yielding each new count (each chunk after its commit)."""
        for _ in range(n):
            self.set_state({"count": self.state["count"] + 1})
            yield self.state["count"]


class Room(Actor):
    """A chat room: messages are durable events; presence is connection state and broadcasts.

    ``?nick=ann`` in the address names the connection (default: its principal's id)."""

    kind = "room"
    initial_state = {"topic": "", "members": 0}
    migrations = ("CREATE TABLE messages (id INTEGER PRIMARY KEY, author TEXT NOT NULL, text TEXT NOT NULL)",)

    def on_connect(self, conn: Connection) -> None:
        nick = conn.request.query.get("nick", conn.principal.id)[:64]
        conn.set_state({"nick": nick})
        self.set_state({**self.state, "members": len(self.connections)})  # it is one of them

    def on_close(self, conn: Connection, code: int) -> None:
        self.set_state({**self.state, "members": len(self.connections)})

    @callable
    async def say(self, text: str, author: str = "anonymous") -> int:
        self.sql.execute("INSERT INTO messages (author, text) VALUES (?, ?)", (author, text))
        return self.emit({"kind": "said", "author": author, "text": text})

    @callable(readonly=True)
    async def history(self, limit: int = 50) -> list[dict[str, Any]]:
        return self.sql.dicts("SELECT id, author, text FROM messages ORDER BY id DESC LIMIT ?", (limit,))

    def on_message(self, conn: Connection, data: Any) -> None:
        self.broadcast({"from": conn.id, "data": data}, exclude=[conn])


class Chat(ChatAgent):
    """A chat: each message answered in turn, the answer streamed (``model_delta`` events)."""

    kind = "chat"


KINDS: tuple[type[Actor], ...] = (Counter, Room, DocsAgent, Chat, Team, TeamWorker)
