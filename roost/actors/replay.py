"""A connection's replay, read from the log one page at a time (``docs/design.md``, *Resume*).

The connect turn reads the first page (:func:`first_page`) and puts the welcome and it in one
:class:`~roost.actors.outputs.Replayed` output; each later page is read by a turn of its own
(:func:`next_page`, for a :class:`~roost.actors.inputs.ReplayPage` input) that the connection asks
for once its sink has drained (:meth:`~roost.actors.connection.Connection.deliver_replayed`).

Guarantees (tests in ``tests/test_replay_pages.py``):

- **Gap-free, no duplicate.** The reader reads the rows after its position in ``seq`` order; while it
  reads, :func:`~roost.actors.statelog.fanout` skips the connection's logged frames, and the page
  that reaches the head (``host.seq`` in that turn) ends the reading in that same turn, so every
  logged frame after the cursor reaches the client once, by the replay or live, in order.
- **Bounded: one budget.** What the server holds for the connection — its sink's queue, the frames
  held behind the replay and the page read but not yet written — stays within the sink's bound plus
  at most one frame: a page reads at most a quarter of the bound and no more than the bound has
  left (rows and bytes, at least one row), the next once the sink has drained to half the bound less
  what is held; a held frame that passes the bound closes the connection with 1013. A client that
  does not read is paused.
- **Overtaken by retention: 1013.** If pruning removed rows the reader still needs, the connection is
  closed with 1013; it resumes with its cursor (and gets ``snapshot``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roost.actors.connection import Connection, Replay
from roost.actors.outputs import Close, Replayed
from roost.protocol import CloseCode

if TYPE_CHECKING:
    from roost.actors.parts import HostCore

__all__ = ["first_page", "next_page"]

OVERTAKEN = "replay overtaken by the log's retention: resume by cursor"


def first_page(host: HostCore, conn: Connection, after: int, welcome: str) -> None:
    """In the connect turn: the replay of the frames after ``after`` begins; the welcome and the
    first page join the turn's outputs."""
    replay = conn.start_replay(after)
    replay.read([welcome])  # the welcome counts against the bound the first page may use
    texts = [welcome, *_read(host, conn, replay)]
    replay.read(texts)
    host.gate.turn.append(Replayed(conn, texts, not replay.reading))


def next_page(host: HostCore, conn: Connection) -> None:
    """In a turn of its own: the next page of ``conn``'s replay, if it is still being read."""
    replay = conn.replay
    if replay is None or not replay.reading or conn.id not in host.connections:
        return
    if replay.after + 1 < host.oldest:  # pruned under the reader
        replay.reading = False  # what is released for it meanwhile stays held, and goes with it
        host.gate.turn.append(Close(conn, CloseCode.TRY_AGAIN_LATER, OVERTAKEN))
        return
    texts = _read(host, conn, replay)
    replay.read(texts)
    host.gate.turn.append(Replayed(conn, texts, not replay.reading))


def _read(host: HostCore, conn: Connection, replay: Replay) -> list[str]:
    """One page after the reader's position; at the head, the reading ends (in this turn)."""
    rows, nbytes = replay.page
    page = host.file.replay_page(replay.after, rows, nbytes)
    if page:
        replay.after = page[-1][0]
        if host.observer is not None:
            host.observer.replay(sum(len(frame) for _, _, frame in page))
    if not page or replay.after >= host.seq:  # at the head (no row after it: never read again)
        replay.reading = False
    wants = conn.subscriptions.wants
    return [frame for _, kind, frame in page if wants(kind)]
