"""``self.sql``: the actor's own tables, in its own file, inside the current turn's transaction.

Statements run inline on the event loop thread (no thread hop). They are part of the turn: if the turn
fails, they are rolled back with it; if it succeeds, they are committed with the batch, before any output
of the turn leaves the server. Create your tables with ``Actor.migrations``.

Refused (``sqlite3.DatabaseError: not authorized``): transaction control (BEGIN, COMMIT, ROLLBACK,
SAVEPOINT, RELEASE), ATTACH/DETACH, PRAGMA, and writes to the runtime's ``roost_*`` tables. The turn
is the transaction; a statement that could end it would break the output gate.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roost.actors.interfaces import HostApi

__all__ = ["Sql"]

#: Prefixed to every statement of ``self.sql``. The sqlite3 module caches prepared statements by their
#: text, and the authorizer only runs when a statement is prepared: the prefix keeps user statements
#: from ever reusing a statement the runtime prepared (unchecked), e.g. ``COMMIT``.
_MARK = "/* roost:sql */ "
#: The same for read-only turns, whose statements are authorised (and cached) apart: a write prepared
#: in an ordinary turn must not be reused, unchecked, by a read-only one.
_MARK_RO = "/* roost:sql:ro */ "

Params = Sequence[Any] | dict[str, Any]


class Sql:
    __slots__ = ("_host",)

    def __init__(self, host: HostApi) -> None:
        self._host = host

    def execute(self, query: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Run one statement; return all rows (an empty list for writes)."""
        return self._run(query, params).fetchall()

    def executemany(self, query: str, rows: Iterable[Params]) -> int:
        """Run one statement for many parameter rows; return the number of changed rows."""
        host = self._host
        conn = host.turn_connection()
        host.user_sql = True
        try:
            return conn.executemany((_MARK_RO if host.read_only_turn else _MARK) + query, rows).rowcount
        finally:
            host.user_sql = False

    def one(self, query: str, params: Params = ()) -> tuple[Any, ...] | None:
        """The first row, or None."""
        row: tuple[Any, ...] | None = self._run(query, params).fetchone()
        return row

    def scalar(self, query: str, params: Params = ()) -> Any:
        """The first column of the first row, or None."""
        row = self.one(query, params)
        return None if row is None else row[0]

    def dicts(self, query: str, params: Params = ()) -> list[dict[str, Any]]:
        """All rows as dicts keyed by column name."""
        cur = self._run(query, params)
        cols = [d[0] for d in cur.description or ()]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def _run(self, query: str, params: Params) -> sqlite3.Cursor:
        host = self._host
        conn = host.turn_connection()
        host.user_sql = True
        try:
            return conn.execute((_MARK_RO if host.read_only_turn else _MARK) + query, params)
        finally:
            host.user_sql = False
