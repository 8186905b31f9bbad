"""``self.sql`` guards the runtime's own bookkeeping: a kind's code may read and write its own tables and
read the runtime's log, but transaction control, PRAGMAs, ATTACH and any write or schema change to the
runtime's tables (``roost_*``) are refused, the turn (state included) rolls back, and the seq goes on
without a gap.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from roost.actors import Actor, RpcError, callable
from roost.storage import actor_path
from roost.testing import ActorKit


class Scribe(Actor):
    kind = "scribe"
    initial_state = {"n": 0}
    migrations = ("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)",)

    @callable
    def note(self, text: str) -> int:
        self.sql.execute("INSERT INTO notes (text) VALUES (?)", (text,))
        self.set_state({"n": self.state["n"] + 1})
        return self.seq

    @callable
    def attempt(self, statement: str, params: list[Any]) -> str:
        """Change state, then run ``statement``: if it is refused the turn (state included) rolls back."""
        self.set_state({"n": self.state["n"] + 1000})
        self.sql.execute(statement, params)
        return "ran"

    @callable
    def log_rows(self) -> int:
        n: int = self.sql.scalar("SELECT count(*) FROM roost_log")
        return n

    @callable
    def notes(self) -> list[str]:
        return [row[0] for row in self.sql.execute("SELECT text FROM notes ORDER BY id")]


REFUSED_SQL: list[tuple[str, list[Any]]] = [
    ("BEGIN", []),
    ("COMMIT", []),
    ("SAVEPOINT x", []),
    ("ROLLBACK", []),
    ("RELEASE turn", []),
    ("ATTACH DATABASE ':memory:' AS m", []),
    ("PRAGMA journal_mode=DELETE", []),
    ("DELETE FROM roost_log", []),
    ("UPDATE roost_state SET seq = 0", []),
    ("DROP TABLE roost_log", []),
    ("INSERT INTO roost_log (seq, kind, frame, created_at) VALUES (99, 'state', '{}', 0)", []),
    # the exact text the runtime itself uses for its state write
    ("UPDATE roost_state SET state = ?, seq = ?, updated_at = ? WHERE id = 1", ['{"n": -1}', 0, 0.0]),
    ("ALTER TABLE roost_log ADD COLUMN junk TEXT", []),
    ("CREATE INDEX sneaky ON roost_log (kind)", []),
    ("CREATE TRIGGER wipe AFTER UPDATE ON roost_state BEGIN DELETE FROM roost_log; END", []),
]


def roost_file_facts(path: Path) -> dict[str, Any]:
    with closing(sqlite3.connect(path)) as db:
        return {
            "log": [row[0] for row in db.execute("SELECT seq FROM roost_log ORDER BY seq")],
            "state_seq": db.execute("SELECT seq FROM roost_state").fetchone()[0],
            "journal_mode": db.execute("PRAGMA journal_mode").fetchone()[0],
            "log_columns": [row[1] for row in db.execute("PRAGMA table_info(roost_log)")],
            "extra_schema": db.execute(
                "SELECT type, name FROM sqlite_master WHERE type IN ('index', 'trigger') AND sql IS NOT NULL"
            ).fetchall(),
        }


@pytest.mark.parametrize(("statement", "params"), REFUSED_SQL, ids=[s for s, _ in REFUSED_SQL])
async def test_self_sql_refuses_transaction_control_pragmas_and_runtime_tables(
    tmp_path: Path, statement: str, params: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Each refused statement fails its call with ``handler_error`` and changes nothing (the refusal
    is in the server's log, under the reference the caller got); reading the runtime's log and
    writing the kind's own tables work; the seq goes on without a gap."""
    data = tmp_path / "data"
    async with ActorKit([Scribe], data, call_timeout=2.0, turn_timeout=2.0) as kit:
        c = kit.connect("scribe", "guard")
        await c.wait_for(lambda f: f["type"] == "welcome")
        assert await c.call("note", "before") == 1
        with pytest.raises(RpcError) as info:  # in process, as from HTTP or another actor
            await kit.call("scribe", "guard", "attempt", statement, params)
        assert info.value.code == "handler_error"
        ref = info.value.message.removeprefix("internal error in attempt (ref ").removesuffix(")")
        assert "not authorized" not in info.value.message
        assert any(f"(ref {ref})" in r.getMessage() and r.exc_info for r in caplog.records)
        assert "not authorized" in caplog.text
        assert await c.call("note", "after") == 2, "the seq continues with no gap"
        assert await c.call("log_rows") == 2
        assert await c.call("notes") == ["before", "after"]
        await c.wait_for(lambda f: f["type"] == "state" and f["seq"] == 2)
        states = [f for f in c.frames if f["type"] == "state"]
        assert [(f["seq"], f["state"]) for f in states] == [(1, {"n": 1}), (2, {"n": 2})]
    assert roost_file_facts(actor_path(data, "scribe", "guard")) == {
        "log": [1, 2],
        "state_seq": 2,
        "journal_mode": "wal",
        "log_columns": ["seq", "kind", "frame", "created_at"],
        # the runtime's own, nothing more
        "extra_schema": [
            ("index", "roost_schedules_due"),
            ("index", "roost_queue_live"),
            ("index", "roost_queue_finished"),
        ],
    }
