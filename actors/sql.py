"""``self.sql``: the actor's own tables, in its own file, inside the current turn's transaction.

Statements run inline on the event loop thread (no thread hop). They are part of the turn: if the turn
fails, they are rolled back with it; if it succeeds, they are committed with the batch, before any output
of the turn leaves the server. Create your tables with ``Actor.migrations``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.host import ActorHost

__all__ = ["Sql"]

Params = Sequence[Any] | dict[str, Any]


class Sql:
    __slots__ = ("_host",)

    def __init__(self, host: ActorHost) -> None:
        self._host = host

    def execute(self, query: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Run one statement; return all rows (an empty list for writes)."""
        conn = self._host.turn_connection()
        return conn.execute(query, params).fetchall()

    def executemany(self, query: str, rows: Iterable[Params]) -> int:
        """Run one statement for many parameter rows; return the number of changed rows."""
        conn = self._host.turn_connection()
        return conn.executemany(query, rows).rowcount

    def one(self, query: str, params: Params = ()) -> tuple[Any, ...] | None:
        """The first row, or None."""
        conn = self._host.turn_connection()
        row: tuple[Any, ...] | None = conn.execute(query, params).fetchone()
        return row

    def scalar(self, query: str, params: Params = ()) -> Any:
        """The first column of the first row, or None."""
        row = self.one(query, params)
        return None if row is None else row[0]

    def dicts(self, query: str, params: Params = ()) -> list[dict[str, Any]]:
        """All rows as dicts keyed by column name."""
        conn = self._host.turn_connection()
        cur = conn.execute(query, params)
        cols = [d[0] for d in cur.description or ()]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
