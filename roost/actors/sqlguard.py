"""What ``self.sql`` may do: the SQLite authorizer of an actor's connection.

Guarantee (``tests/test_security.py``, ``tests/test_sql_guard.py``): statements prepared for
``self.sql`` cannot begin, commit or roll back (transactions belong to the runtime), attach other
files, run pragmas, or write the runtime's ``roost_*`` tables (reading them is allowed); during a
read-only caller's turn they cannot write at all. The runtime's own statements are not checked.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from roost.actors.parts import HostCore

__all__ = ["authorizer"]

#: What ``self.sql`` may not do: transactions belong to the runtime, and so do other files and pragmas.
DENIED_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_TRANSACTION,
        sqlite3.SQLITE_SAVEPOINT,
        sqlite3.SQLITE_ATTACH,
        sqlite3.SQLITE_DETACH,
        sqlite3.SQLITE_PRAGMA,
    }
)
#: Actions on a table that ``self.sql`` may not take on the runtime's own ``roost_*`` tables.
#: Either table argument is checked: for ALTER TABLE the table is the second one, for indexes and
#: triggers the first is the index or trigger name and the second the table.
TABLE_WRITES = frozenset(
    {
        sqlite3.SQLITE_INSERT,
        sqlite3.SQLITE_UPDATE,
        sqlite3.SQLITE_DELETE,
        sqlite3.SQLITE_CREATE_TABLE,
        sqlite3.SQLITE_CREATE_TEMP_TABLE,
        sqlite3.SQLITE_DROP_TABLE,
        sqlite3.SQLITE_DROP_TEMP_TABLE,
        sqlite3.SQLITE_ALTER_TABLE,
        sqlite3.SQLITE_CREATE_INDEX,
        sqlite3.SQLITE_CREATE_TEMP_INDEX,
        sqlite3.SQLITE_DROP_INDEX,
        sqlite3.SQLITE_DROP_TEMP_INDEX,
        sqlite3.SQLITE_CREATE_TRIGGER,
        sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
        sqlite3.SQLITE_DROP_TRIGGER,
        sqlite3.SQLITE_DROP_TEMP_TRIGGER,
        sqlite3.SQLITE_CREATE_VIEW,
        sqlite3.SQLITE_CREATE_TEMP_VIEW,
        sqlite3.SQLITE_DROP_VIEW,
        sqlite3.SQLITE_DROP_TEMP_VIEW,
        sqlite3.SQLITE_CREATE_VTABLE,
        sqlite3.SQLITE_DROP_VTABLE,
    }
)


def authorizer(
    host: HostCore, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
) -> int:
    """SQLite authorizer (bound as ``ActorHost.authorize``)."""
    if not host.user_sql:
        return sqlite3.SQLITE_OK
    if action in DENIED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if host.read_only_turn and action in TABLE_WRITES:
        return sqlite3.SQLITE_DENY
    if action in TABLE_WRITES and (
        (arg1 is not None and arg1.startswith("roost_")) or (arg2 is not None and arg2.startswith("roost_"))
    ):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK
