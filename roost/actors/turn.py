"""A turn: the one way anything runs inside an actor.

Every input that runs code of the actor (a call, a message, a connect or close hook, a job's task, a
fire of a wake-up, ``on_start``) runs it as a turn, and every turn goes through :class:`Turn`::

    with host.turn.run(caller, failed, item):
        ...  # the handler's body: await the actor's code, add outputs to host.gate

:meth:`Turn.run` begins the turn (a SAVEPOINT of the batch transaction, the rollback mark, the clock
reading); leaving the block commits the turn (its outputs join the batch's) or, if the body raised,
turns the turn's own timeout into a ``TimeoutError``, rolls the turn back to its mark, and calls
``failed(host, item, exc)`` to answer the caller. The ``with`` block swallows the failure, except a
cancellation (the actor is stopping), which goes on up once ``failed`` has run. :attr:`Turn.ok` says
which way it went. The object is one per actor, reused by every turn: a turn allocates no context
manager, only its :class:`TurnMark`.

Guarantees (tests in ``tests/test_turns.py``):

- **Atomic turns.** A turn that raises is rolled back: its SQL writes, its state change, its ``seq``
  numbers and its outputs are undone (to :class:`TurnMark`); the caller gets an error.
- **A turn that runs too long is cancelled and rolled back.** ``turn_timeout`` after the turn began
  (read on the runtime's clock, so a fake clock moves it), the turn is cancelled where it waits; the
  caller is told ``timeout``. A turn that never suspends arms no timer at all.
- **A cancel from elsewhere is kept.** A cancellation that lands together with the turn's own timeout
  (a shutdown's) stays a ``CancelledError``, as with ``asyncio.timeout``: the uncancel count decides.
- **A slow turn does not hold the batch's outputs.** If it suspends before writing anything, the
  turns before it in the batch commit and their outputs leave at once.
- **Nested savepoints** (:meth:`Turn.savepoint`): a part of a turn (one wake-up callback) can be
  rolled back alone, with the state and outputs it changed.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors.connection import Connection
from roost.actors.errors import ActorUnavailable
from roost.scheduler.clock import TimerHandle

if TYPE_CHECKING:
    from roost.actors.parts import Failed, HostCore

__all__ = ["Savepoint", "Turn", "TurnMark", "log_failure", "report"]

log = logging.getLogger("roost.actor")


@dataclass(slots=True)
class TurnMark:
    """Where a rollback returns to, in memory: the turn's start (or its last checkpoint), or a nested
    savepoint. The SQL side is the matching SAVEPOINT."""

    seq: int
    oldest: int
    state_json: str
    state_seq: int
    saved_state_seq: int
    outputs: int  # how many outputs the turn had queued


def _ignore(host: HostCore, item: Any, exc: BaseException) -> None:
    return None


class Turn:
    """The open turn of one actor (at most one at a time), and the template every turn runs in.

    Per-turn fields: ``now`` (the clock's ``now()`` at the turn's start), ``id`` (counts turns),
    ``ok`` (the last turn committed). Lifecycle of one turn: :meth:`run` → body → ``__exit__``
    (commit, or abort + ``failed``). :meth:`checkpoint` commits part of a long turn.
    """

    __slots__ = (
        "_changes",
        "_deadline",
        "_expired",
        "_failed",
        "_item",
        "_started",
        "_trace_id",
        "host",
        "id",
        "mark",
        "now",
        "ok",
    )

    def __init__(self, host: HostCore) -> None:
        self.host = host
        self.now = 0.0
        self.id = 0
        self.ok = False
        self.mark = TurnMark(0, 1, "", 0, 0, 0)
        self._started = 0.0
        self._changes = 0
        self._deadline: TimerHandle | None = None
        self._expired = 0
        self._trace_id: str | None = None
        self._failed: Failed = _ignore
        self._item: Any = None

    # -- the template --------------------------------------------------------------------------------
    def run(self, caller: Connection | None = None, failed: Failed = _ignore, item: Any = None) -> Turn:
        """Begin a turn for ``caller``; use the result as a ``with`` block around the turn's body."""
        self._failed = failed
        self._item = item
        self.begin(caller)
        return self

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, tp: object, exc: BaseException | None, tb: object) -> bool:
        if exc is None:  # commit(), written out: this is every turn's path
            host = self.host
            host.file.end_turn()
            host.gate.held.extend(host.gate.turn)  # end() gives the next turn a new list
            self.end()
            self.ok = True
            if host.observer is not None:  # metrics or traces: the only cost of a turn without them
                host.observer.turn(host.kind, host.clock.monotonic() - self._started, host.current)
            return False
        exc = self.check_timeout(exc)
        self.abort()
        self.ok = False
        failed, item = self._failed, self._item
        self._failed, self._item = _ignore, None
        failed(self.host, item, exc)
        return not isinstance(exc, asyncio.CancelledError)

    # -- the steps ---------------------------------------------------------------------------------
    def begin(self, caller: Connection | None = None) -> None:
        host = self.host
        host.gate.turn_open = True
        host.chain = (host.key,)
        host.caller = caller
        host.principal = caller.principal if caller is not None else None
        clock = host.clock
        self.now = clock.now()
        if host.gate.turn:  # end() leaves a new empty list; only a turn that never ended leaves one
            host.gate.turn = []
        host.file.begin_turn()
        self.mark = self.mark_now()
        self.id += 1
        self._started = clock.monotonic()
        self._changes = host.file.conn.total_changes
        if not host.stepping:  # run_now sees a suspension itself
            host.loop.call_soon(self.on_suspend, self.id)

    def commit(self) -> None:
        """The turn's writes stay in the batch transaction; its outputs join the batch's."""
        host = self.host
        host.file.end_turn()
        host.gate.held.extend(host.gate.turn)  # end() gives the next turn a new list
        self.end()

    def abort(self) -> None:
        """Undo the turn back to its mark (the last checkpoint of a streaming call)."""
        host = self.host
        if not host.file.closed:  # a failed commit already closed it
            host.file.abort_turn()
        self.rewind(self.mark)
        self.end()

    def end(self) -> None:
        host = self.host
        host.read_only_turn = False
        self._trace_id = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        host.gate.turn = []
        host.gate.turn_open = False
        host.chain = ()
        host.caller = None
        host.principal = None

    def checkpoint(self) -> None:
        """Inside a turn: make the writes so far durable and release the outputs so far."""
        host = self.host
        host.file.end_turn()
        host.gate.commit_turn()
        if not host.flush():
            raise ActorUnavailable(message="commit failed")
        host.file.begin_turn()
        self.mark = self.mark_now()
        self._changes = host.file.conn.total_changes

    @property
    def trace_id(self) -> str:
        """An id for the current turn, made when first asked for (records carry it): the W3C trace id of
        the turn's caller when the observer knows it (:meth:`Observer.trace_id`), else a new one."""
        if self._trace_id is None:
            host = self.host
            observer = host.observer
            caller = observer.trace_id(host.current) if observer is not None else None
            self._trace_id = caller or uuid.uuid4().hex
        return self._trace_id

    # -- rollback marks ------------------------------------------------------------------------------
    def mark_now(self) -> TurnMark:
        host = self.host
        return TurnMark(
            host.seq, host.oldest, host.state_json, host.state_seq, host.saved_state_seq, len(host.gate.turn)
        )

    def rewind(self, mark: TurnMark) -> None:
        host = self.host
        host.seq = mark.seq
        host.oldest = mark.oldest
        host.state_seq = mark.state_seq
        host.saved_state_seq = mark.saved_state_seq
        del host.gate.turn[mark.outputs :]
        if mark.state_json is not host.state_json:
            host.state_json = mark.state_json
            host.state = orjson.loads(mark.state_json)

    def savepoint(self, name: str) -> Savepoint:
        """A nested savepoint inside the open turn: roll back a part of it alone."""
        return Savepoint(self, name)

    # -- time ----------------------------------------------------------------------------------------
    def on_suspend(self, turn_id: int) -> None:
        """Runs only if turn ``turn_id`` gave the event loop a chance to run, i.e. it awaits something
        real (another actor, I/O). A turn that never suspends costs no timer at all.

        - It arms the turn's timeout (``turn_timeout`` from the turn's start, on the runtime's clock).
        - If earlier turns of the batch hold outputs and this turn has written nothing yet, it commits
          them and releases their outputs now instead of when the slow turn ends; the turn goes on in
          a new transaction, exactly as if it had started after that commit.
        """
        host = self.host
        if not host.gate.turn_open or turn_id != self.id:
            return
        if self._deadline is None:
            self._deadline = host.clock.call_at(self._started + host.turn_timeout, self._expire, turn_id)
        if not host.gate.held or host.file.conn.total_changes != self._changes:
            return  # nothing held, or this turn wrote already: the batch commits with it
        host.file.end_turn()
        if host.flush():
            host.file.begin_turn()
        else:  # the actor failed: the suspended turn ends where it waits
            host.task.cancel()

    def _expire(self, turn_id: int) -> None:
        """The turn's time is up: cancel it where it waits; :meth:`check_timeout` turns that into a
        ``TimeoutError`` so that the turn is rolled back and its caller told ``timeout``."""
        if self.host.gate.turn_open and turn_id == self.id:
            self._expired = turn_id
            self.host.task.cancel()

    def check_timeout(self, exc: BaseException) -> BaseException:
        """The turn's own timeout becomes a ``TimeoutError``; a cancel from elsewhere that landed
        with it (a shutdown's) stays a ``CancelledError``, as ``asyncio.timeout`` does it."""
        if isinstance(exc, asyncio.CancelledError) and self._expired == self.id:
            self._expired = 0
            if self.host.task.uncancel() == 0:
                return TimeoutError(f"turn exceeded {self.host.turn_timeout} s")
        return exc


class Savepoint:
    """A nested SAVEPOINT of the open turn with its in-memory mark: :meth:`rollback` or
    :meth:`release` it, once."""

    __slots__ = ("_mark", "_name", "_turn")

    def __init__(self, turn: Turn, name: str) -> None:
        self._turn = turn
        self._name = name
        self._mark = turn.mark_now()
        turn.host.file.conn.execute(f"SAVEPOINT {name}")

    def rollback(self) -> None:
        """Undo everything since the savepoint: SQL, state, ``seq`` and the outputs queued since."""
        conn = self._turn.host.file.conn
        conn.execute(f"ROLLBACK TO {self._name}")
        conn.execute(f"RELEASE {self._name}")
        self._turn.rewind(self._mark)

    def release(self) -> None:
        """Keep what was done since the savepoint (as part of the turn)."""
        self._turn.host.file.conn.execute(f"RELEASE {self._name}")


def log_failure(actor: HostCore | tuple[str, str], exc: BaseException, where: str) -> str:
    """Log an unexpected failure ``where`` in an actor (its host, or its ``(kind, name)`` before it
    has one) on logger ``roost.actor``, level ERROR, with the traceback, under a new short reference
    id, and return the id. A client is told only the id (``internal error in say (ref 3f9a12bc)``),
    never the exception's text: the operator finds the rest in the log by the id."""
    kind, name = actor if isinstance(actor, tuple) else (actor.kind, actor.name)
    ref = secrets.token_hex(4)
    log.error("%s failed in %s/%r (ref %s)", where, kind, name, ref, exc_info=exc)
    return ref


def report(host: HostCore, exc: BaseException, conn: Connection | None) -> None:
    """Hand a failure to ``on_error`` (outside any turn); its own errors are only logged."""
    if isinstance(exc, asyncio.CancelledError):
        return
    try:
        host.actor.on_error(exc, conn)
    except Exception:
        log.exception("on_error raised for %s/%r", host.kind, host.name)
