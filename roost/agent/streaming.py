"""Streamed model output, the turn's side: each batch of deltas a row of its own and a ``model_delta``.

The worker of a streaming model step (:mod:`roost.agent.stream_buffer`) hands its text to
:meth:`Streams.append` in batches, each in a turn; the batch's row (``roost_agent_stream_chunks``)
and the event commit together, and the output gate sends the event only after that commit. See
docs/design.md, *Streamed model output*, for the data flow and the row's states.

Guarantees (tests in ``tests/test_stream_output.py``):

- **Deltas are gap-free and in order**: ``offset`` is the number of characters (Unicode code points)
  of the message before the delta; each ``model_delta`` starts where the one before it ended, so a
  reader that holds ``offset`` characters appends, one that holds more skips, one that holds fewer
  knows it missed something (resume from its cursor fills it).
- **Streamed text passes the payload policy**: every batch is scrubbed of the run's secrets and of
  credential patterns before it is written or logged (the buffer never ends a batch inside either:
  :func:`~roost.agent.stream_buffer.safe_cut`, :func:`~roost.agent.stream_buffer.secret_cut`).
- **Once text was shown, nothing redoes it silently**: see :meth:`Streams.interrupt` and
  :meth:`Streams.open` (``stream_resume``: ``continue`` or ``restart``).
"""

from __future__ import annotations

from collections.abc import Sequence

from roost.agent.context import Part
from roost.agent.payloads import redact_text
from roost.agent.status import EventStatus, StreamStatus
from roost.agent.store import Row
from roost.storage import Migration

__all__ = ["STREAM_MIGRATIONS", "Streams", "message_id"]

STREAM_MIGRATIONS: Sequence[Migration] = (
    """
    CREATE TABLE roost_agent_streams (
        message_id TEXT PRIMARY KEY,
        run_id     TEXT NOT NULL,
        turn_id    TEXT NOT NULL,
        hop        INTEGER NOT NULL,
        job_id     TEXT,
        text       TEXT NOT NULL DEFAULT '',
        chars      INTEGER NOT NULL DEFAULT 0,
        status     TEXT NOT NULL,
        error      TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX roost_agent_streams_run ON roost_agent_streams (run_id, hop);
    """,
    # v2: a message's text as its batches, one row each (appending to one growing row rewrote it
    # whole at every batch: quadratic in the message's length)
    """
    CREATE TABLE roost_agent_stream_chunks (
        message_id TEXT NOT NULL,
        start      INTEGER NOT NULL,
        text       TEXT NOT NULL,
        PRIMARY KEY (message_id, start)
    ) WITHOUT ROWID;
    INSERT INTO roost_agent_stream_chunks (message_id, start, text)
        SELECT message_id, 0, text FROM roost_agent_streams WHERE text != '';
    UPDATE roost_agent_streams SET text = '';
    """,
    # v3: the batches in a rowid table, keyed by an index (a WITHOUT ROWID table keeps its rows, each
    # a batch of kilobytes, in the key's tree, which rebalanced its pages at almost every insert: a
    # batch's commit cost 1.5 to 2 times as much), each with where it ends (``stop``, counted as
    # Python counts: SQLite's length() stops at a NUL): the message's end is its last batch's stop.
    # An existing batch ends where the next begins, the last where its message's chars said.
    """
    CREATE TABLE roost_agent_stream_chunks_v3 (
        message_id TEXT NOT NULL,
        start      INTEGER NOT NULL,
        stop       INTEGER NOT NULL,
        text       TEXT NOT NULL,
        PRIMARY KEY (message_id, start)
    );
    INSERT INTO roost_agent_stream_chunks_v3 (message_id, start, stop, text)
        SELECT c.message_id, c.start,
               coalesce(lead(c.start) OVER (PARTITION BY c.message_id ORDER BY c.start),
                        (SELECT s.chars FROM roost_agent_streams s WHERE s.message_id = c.message_id),
                        c.start + length(c.text)),
               c.text
        FROM roost_agent_stream_chunks c ORDER BY c.message_id, c.start;
    DROP TABLE roost_agent_stream_chunks;
    ALTER TABLE roost_agent_stream_chunks_v3 RENAME TO roost_agent_stream_chunks;
    """,
)


def message_id(run_id: str, hop: int) -> str:
    """The id of the message a model step of ``run_id`` streams: one per step (``hop``)."""
    return f"{run_id}.{hop}"


#: Where the message whose id is ``{mid}`` ends: its last batch's stop (its ``chars`` while it streams).
_END = "SELECT stop FROM roost_agent_stream_chunks WHERE message_id = {mid} ORDER BY start DESC LIMIT 1"
#: :data:`_END` for the message id given as a parameter, and a batch's read: the message's status and
#: end (built once: a batch's turn runs it).
_END_OF = _END.format(mid="?")
_STATUS_AND_END = f"SELECT status, ({_END_OF}) FROM roost_agent_streams WHERE message_id = ?"


class Streams(Part):
    """The rows of streamed messages. **A message's** ``chars`` **is what its batches hold**: while it
    streams, a batch writes its own row only (the message's row is not rewritten at every batch),
    and what reads the row counts its batches; the column is brought up to date when the message
    leaves ``streaming`` (completed, interrupted, failed, cancelled)."""

    def get(self, mid: str) -> Row | None:
        row = self.store.get("streams", mid)
        return None if row is None else self._counted(row)

    def _counted(self, row: Row) -> Row:
        """``row`` with its ``chars`` counted from its batches if it is still streaming."""
        if row["status"] == StreamStatus.STREAMING:
            row["chars"] = int(self.store.scalar(_END_OF, (row["message_id"],)) or 0)
        return row

    def text(self, mid: str) -> str:
        """The message's committed text (its batches, in order)."""
        joined = self.store.scalar(
            "SELECT group_concat(text, '') FROM "
            "(SELECT text FROM roost_agent_stream_chunks WHERE message_id = ? ORDER BY start)",
            (mid,),
        )
        return str(joined or "")

    def of_job(self, job: Row) -> Row | None:
        """The message a model job streams (None for a job that has not streamed yet)."""
        return self.get(message_id(job["run_id"], int(job["args"].get("hop", 0))))

    def open(self, run: Row, job: Row) -> str:
        """A model job begins: its message is ``streaming``; returns what the model continues from.

        A message that streamed before (an interrupted step taken up again by ``continue_run``) goes on
        by ``stream_resume``: ``continue`` hands its committed text back (the model continues after it,
        new deltas follow at the same offset); ``restart`` logs ``model_stream_restarted`` and empties
        it (the next delta has offset 0)."""
        hop = int(job["args"].get("hop", 0))
        mid = message_id(run["run_id"], hop)
        now = self.now
        row = self.get(mid)
        if row is None:
            self.store.insert(
                "streams",
                {
                    "message_id": mid,
                    "run_id": run["run_id"],
                    "turn_id": run["turn_id"],
                    "hop": hop,
                    "job_id": job["job_id"],
                    "status": StreamStatus.STREAMING,
                    "created_at": now,
                    "updated_at": now,
                },
            )
            return ""
        values: dict[str, object] = {"status": StreamStatus.STREAMING, "job_id": job["job_id"], "error": None}
        if row["chars"] and self.agent.settings().stream_resume == "restart":
            self.event(
                "model_stream_restarted",
                run,
                status=EventStatus.IN_PROGRESS,
                payload={"message_id": mid, "hop": hop, "discarded": row["chars"]},
            )
            values.update(chars=0)
            self.store.execute("DELETE FROM roost_agent_stream_chunks WHERE message_id = ?", (mid,))
            self.store.update("streams", mid, updated_at=now, **values)
            return ""
        self.store.update("streams", mid, updated_at=now, **values)
        return self.text(mid)

    def append(self, run: Row, hop: int, text: str) -> None:
        """One batch of the stream of ``run``'s model step ``hop``: cleaned, appended to its message,
        one ``model_delta``.

        One statement reads the message's status and where its last batch ends (the batch's
        offset), then the batch is one row: a batch every few milliseconds reads no whole row and
        rewrites none (each row written is a page the commit writes)."""
        mid = message_id(run["run_id"], hop)
        clean = redact_text(self.records.vault.scrub(text))
        store = self.store
        found = store.one(_STATUS_AND_END, (mid, mid))
        if found is None or found[0] != StreamStatus.STREAMING:
            return  # not begun, or no longer streaming
        offset = int(found[1] or 0)
        store.execute(
            "INSERT INTO roost_agent_stream_chunks (message_id, start, stop, text) VALUES (?, ?, ?, ?)",
            (mid, offset, offset + len(clean), clean),
        )
        self.event(
            "model_delta",
            run,
            status=EventStatus.RUNNING,
            payload={"message_id": mid, "hop": hop, "offset": offset, "text": clean},
            cleaned=True,  # the text was cleaned above; the ids and numbers need no policy
        )

    def committed(self, job: Row) -> int:
        """Characters of the job's message already committed (and so possibly shown)."""
        row = self.of_job(job)
        return int(row["chars"]) if row is not None else 0

    def finish(self, job: Row) -> str | None:
        """The job's step ended well: its message is ``completed``; returns its text (None if the
        job never streamed)."""
        row = self.of_job(job)
        if row is None:
            return None
        self.store.update(
            "streams",
            row["message_id"],
            status=StreamStatus.COMPLETED,
            chars=row["chars"],
            updated_at=self.now,
        )
        return self.text(row["message_id"])

    def interrupt(self, run: Row, job: Row, error: str) -> int:
        """The job failed for good: its message (if it began one) is ``interrupted`` if it had shown
        text (and ``model_stream_interrupted`` is logged), else ``failed``; returns the committed
        characters."""
        row = self.of_job(job)
        if row is None or row["status"] != StreamStatus.STREAMING:
            return 0
        self.store.update(
            "streams",
            row["message_id"],
            status=StreamStatus.INTERRUPTED if row["chars"] else StreamStatus.FAILED,
            chars=row["chars"],
            error=self.err(error, 500),
            updated_at=self.now,
        )
        if not row["chars"]:
            return 0
        self.event(
            "model_stream_interrupted",
            run,
            status=EventStatus.FAILED,
            payload={
                "message_id": row["message_id"],
                "hop": row["hop"],
                "chars": row["chars"],
                "error": self.err(error),
            },
        )
        return int(row["chars"])

    def cancel_run(self, run: Row) -> None:
        """The run was cancelled: its streaming messages are ``cancelled`` (their text stays)."""
        self.store.execute(
            "UPDATE roost_agent_streams SET status = ?, updated_at = ?, "
            f"chars = coalesce(({_END.format(mid='roost_agent_streams.message_id')}), 0) "
            "WHERE run_id = ? AND status = ?",
            (StreamStatus.CANCELLED, self.now, run["run_id"], StreamStatus.STREAMING),
        )

    def of_run(self, run_id: str) -> list[Row]:
        """The run's messages in step order, each with its ``text`` (``get_run`` shows them)."""
        rows = self.store.select("streams", "run_id = ?", (run_id,), order="hop")
        for row in rows:
            self._counted(row)["text"] = self.text(row["message_id"])
        return rows
