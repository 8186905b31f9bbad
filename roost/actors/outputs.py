"""The output gate: what a turn sends is held until the transaction holding its writes has committed.

An output is one of five small records (a tagged union): a :class:`Frame`, a page of a replay
(:class:`Replayed`) or a :class:`Close` for a connection, a :class:`Result` or a :class:`Failure` for
an in-process caller's future. Each knows how to :meth:`release` itself; :class:`OutputGate` holds
them in order.

Guarantees (``tests/test_output_gate.py``):

- **Nothing leaves before its commit.** During a turn an output joins the turn's list
  (:attr:`OutputGate.turn`); at the turn's commit those move to :attr:`OutputGate.held`, which is
  released, in order, only after the batch's ``COMMIT`` (:meth:`OutputGate.release`). A rolled-back
  turn's outputs are dropped with it.
- **Order is kept.** Outside a turn (a background task) an output is delivered at once only if nothing
  is held and no transaction is open; otherwise it waits behind what is held.
- **A failed commit releases nothing.** :meth:`OutputGate.drop` answers every held future with the
  failure and forgets the frames.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roost.actors.connection import Connection

if TYPE_CHECKING:
    from roost.storage import ActorFile

__all__ = ["Close", "Failure", "Frame", "Output", "OutputGate", "Replayed", "Result"]


@dataclass(slots=True)
class Frame:
    """An encoded frame for one connection."""

    conn: Connection
    text: str

    def release(self) -> None:
        self.conn.deliver(self.text)


@dataclass(slots=True)
class Replayed:
    """One page of a connection's replay (the connect turn's starts with the welcome); ``done``: it
    reached the head (see :meth:`Connection.deliver_replayed`)."""

    conn: Connection
    texts: list[str]
    done: bool

    def release(self) -> None:
        self.conn.deliver_replayed(self.texts, self.done)


@dataclass(slots=True)
class Close:
    """Close one connection with ``code`` and ``reason``."""

    conn: Connection
    code: int
    reason: str

    def release(self) -> None:
        self.conn.deliver_close(self.code, self.reason)


@dataclass(slots=True)
class Result:
    """Resolve an in-process caller's future with ``value``."""

    reply: asyncio.Future[Any]
    value: Any

    def release(self) -> None:
        if not self.reply.done():
            self.reply.set_result(self.value)


@dataclass(slots=True)
class Failure:
    """Fail an in-process caller's future with ``error``."""

    reply: asyncio.Future[Any]
    error: BaseException

    def release(self) -> None:
        if not self.reply.done():
            self.reply.set_exception(self.error)


Output = Frame | Replayed | Close | Result | Failure


class OutputGate:
    """The held outputs of one actor: those of the open turn, and those of committed-to-be turns.

    ``turn_open`` is true while a turn runs (set by :class:`~roost.actors.turn.Turn`).
    """

    __slots__ = ("file", "held", "turn", "turn_open")

    def __init__(self, file: ActorFile) -> None:
        self.file = file
        #: Outputs of the turns of the open batch, in order, released after its commit.
        self.held: list[Output] = []
        #: Outputs of the open turn, moved to :attr:`held` when it commits, dropped if it aborts.
        self.turn: list[Output] = []
        self.turn_open = False

    def put(self, out: Output) -> None:
        """Hold an output until the writes before it are committed, keeping order.

        During a turn it joins the turn's outputs. Outside a turn (e.g. from a background task) it is
        delivered at once if nothing is held, else queued behind what is held (the mailbox task
        flushes held outputs before it waits for input).
        """
        if self.turn_open:
            self.turn.append(out)
        elif self.held or self.file.in_transaction:
            self.held.append(out)
        else:
            out.release()

    def commit_turn(self) -> None:
        """The turn's outputs join the batch's."""
        self.held.extend(self.turn)
        self.turn = []

    def release(self) -> None:
        """After the batch's commit: release every held output, in order."""
        out, self.held = self.held, []
        for item in out:
            item.release()

    def drop(self, err: BaseException) -> None:
        """The actor failed: every held future gets ``err``; frames and closes are forgotten."""
        for out in (*self.held, *self.turn):
            if isinstance(out, Result | Failure) and not out.reply.done():
                out.reply.set_exception(err)
        self.held.clear()
        self.turn = []
