"""The runtime of one live actor: its file, its mailbox, its turns and its output gate.

Guarantees (each has a test named after it in ``tests/``):

- **One turn at a time (guarantee 2).** Every input (connect, message, call, close, internal task) goes
  into one mailbox drained by one owner task. A turn runs to completion before the next starts, so the
  actor's fields need no locks. A turn that runs longer than ``turn_timeout`` is cancelled and rolled
  back, so nothing holds the mailbox forever.
- **Atomic turns.** A turn runs inside a SAVEPOINT of the batch transaction. If it raises, its SQL
  writes, its state change, its ``seq`` numbers and its outputs are all undone; the caller gets an
  error. In-memory fields other than ``state`` are the actor's own business.
- **Output gate with group commit (guarantee 3).** Outputs of a turn (frames, closes, replies to
  in-process callers) are held until the transaction that holds the turn's writes has committed. Turns
  that find more input already waiting share one commit (up to ``max_batch`` turns); when the mailbox is
  empty the batch commits and its outputs are released in turn order. A streaming call commits at each
  ``yield``. If a commit fails, nothing of the batch is released: callers get ``actor_unavailable``,
  connections are closed with 1011 and the actor is stopped; the next input reactivates it from disk.
- **Gap-free log (guarantee 4).** Each state change and durable event gets the next ``seq``; the frame
  is written to the log in the turn's transaction. A connection is added to the broadcast set in the
  same turn that sends its welcome and replay, so it sees every later frame, after them, once.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sqlite3
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import CoroutineType
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors import wakeups
from roost.actors.connection import Connection, Principal
from roost.actors.decorators import CallableInfo
from roost.actors.errors import (
    ActorUnavailable,
    CallTimeout,
    HandlerError,
    InvalidArguments,
    MethodNotFound,
    MigrationError,
    NotInTurn,
    Overloaded,
    Reject,
    RpcError,
    StateError,
)
from roost.actors.inline import AVAILABLE as _INLINE
from roost.actors.inline import Resume, Suspended, step_as
from roost.actors.schedules import ScheduleStore
from roost.protocol import CloseCode, frames
from roost.protocol.resume import decide_resume
from roost.storage import ActorFile

if TYPE_CHECKING:
    from roost.actors.actor import Actor
    from roost.actors.registry import Registry

__all__ = ["ActorHost", "Call", "Connect", "Deliver", "Disconnect", "Message", "Task", "Wake"]

log = logging.getLogger("roost.actor")
Key = tuple[str, str]


# -- mailbox inputs ---------------------------------------------------------------------------------
@dataclass(slots=True)
class Connect:
    conn: Connection
    cursor: int | None


@dataclass(slots=True)
class Message:
    conn: Connection
    data: Any


@dataclass(slots=True)
class Disconnect:
    conn: Connection
    code: int


@dataclass(slots=True)
class Deliver:
    """A frame for a connection, delivered in order after every earlier input (no turn)."""

    conn: Connection
    text: str


@dataclass(slots=True)
class Call:
    """A call from a connection (``conn`` set, reply by frame) or in-process (``reply`` future)."""

    method: str
    args: list[Any]
    kwargs: dict[str, Any]
    conn: Connection | None = None
    id: str = ""
    reply: asyncio.Future[Any] | None = None
    chunks: list[Any] | None = None
    chain: tuple[Key, ...] = ()
    principal: Principal | None = None


@dataclass(slots=True)
class Task:
    """Run ``fn(actor)`` as a turn; its result resolves ``reply`` after the commit."""

    fn: Callable[[Actor], Awaitable[Any]]
    reply: asyncio.Future[Any]
    chain: tuple[Key, ...] = field(default=())


@dataclass(slots=True)
class Wake:
    """Run every due wake-up of this actor (one fire turn each); ``reply`` gets how many fired."""

    reply: asyncio.Future[Any] | None = None


Input = Connect | Message | Disconnect | Call | Task | Deliver | Wake

# Outputs held by the gate: (0, conn, text) frame · (1, conn, (code, reason)) close ·
# (2, future, value) result · (3, future, exception) error.
Output = tuple[int, Any, Any]
_UNSET: Any = object()


#: What ``self.sql`` may not do: transactions belong to the runtime, and so do other files and pragmas.
_DENIED_ACTIONS = frozenset(
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
_TABLE_WRITES = frozenset(
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


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _error_frame_for_call(call_id: str, err: RpcError) -> str:
    return frames.rpc_error(call_id, err.code, err.message)


class ActorHost:
    """One live actor. Created and owned by the :class:`~roost.actors.registry.Registry`."""

    def __init__(
        self,
        registry: Registry,
        actor_cls: type[Actor],
        kind: str,
        name: str,
        file: ActorFile,
        callables: dict[str, CallableInfo],
    ) -> None:
        self.registry = registry
        self.kind = kind
        self.name = name
        self.key: Key = (kind, name)
        self.file = file
        self.callables = callables
        cfg = registry.config
        self.clock = registry.clock
        self.retention = max(1, actor_cls.log_retention or cfg.log_retention)
        self.turn_timeout = cfg.turn_timeout
        self.max_batch = cfg.max_batch
        self.connections: dict[str, Connection] = {}
        self.in_turn = False
        self.stopping = False
        self.last_active = self.clock.monotonic()
        self.chain: tuple[Key, ...] = ()
        self.caller: Connection | None = None
        self.principal: Principal | None = None
        self.user_sql = False
        #: The turn serves a read-only principal: nothing may be written (state, events, schedules,
        #: and ``self.sql`` writes are refused).
        self.read_only_turn = False
        self.max_inbox = cfg.max_inbox
        self._inbox: deque[Input] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._pending: list[Output] = []
        self._turn_out: list[Output] = []
        self._batch = 0
        self._started = False
        self._stop_requested = False
        self._now = 0.0
        self._snap: tuple[int, int, str, int, int, int] = (0, 1, "", 0, 0, 0)
        self._turn_id = 0
        self._turn_changes = 0
        self._turn_started = 0.0
        self._deadline: asyncio.TimerHandle | None = None
        self._expired = 0
        self._current: Input | None = None
        self._adopt: Suspended | None = None  # an inline turn that suspended, for the mailbox task
        self._stepping = False  # run_now is stepping a turn inline
        self._checkpointing = False  # the file's WAL is being checkpointed in a worker thread
        self._checkpoint_refused = False  # said once in the log
        self._flush_queued = False  # the registry will call flush_soon at the end of the iteration
        self.schedules = ScheduleStore(file.conn, kind, name)
        self.alarm_dirty = False  # a turn changed the schedules: the directory's alarm needs syncing
        self.dir_alarm: float | None = None  # what this host last wrote (None: unknown or none)
        self._trace_id: str | None = None
        self._loop = asyncio.get_running_loop()
        _, self.saved_state_seq = file.load_state()
        self.state_json, self.state_seq = file.current_state()
        self.state: Any = orjson.loads(self.state_json)
        self.oldest, self.seq = file.log_bounds()
        file.conn.set_authorizer(self._authorize)
        self.actor: Actor = actor_cls._create(self)
        from roost.actors.actor import Actor as base  # (a cycle at import time)

        # the state hooks are called only where the kind defines them (most do not)
        self._validates = actor_cls.validate_state is not base.validate_state
        self._watches = actor_cls.on_state_changed is not base.on_state_changed
        self._context = contextvars.copy_context()  # the mailbox task's, for turns run inline
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            self._run(), name=f"actor:{kind}/{name}", context=self._context
        )

    # -- mailbox ---------------------------------------------------------------------------------
    def submit(self, item: Input) -> None:
        """Queue an input. Raises ``ActorUnavailable`` if the actor is stopping, ``Overloaded`` if
        its mailbox holds ``max_inbox`` inputs (a disconnect or a delivery is always accepted)."""
        if self.stopping:
            raise ActorUnavailable(message=f"actor {self.kind}/{self.name!r} is stopping")
        if len(self._inbox) >= self.max_inbox and not isinstance(item, Disconnect | Deliver):
            raise Overloaded(message=f"mailbox of {self.kind}/{self.name!r} is full")
        self._inbox.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def run_now(self, item: Call | Message) -> None:
        """Queue an input, or run its turn at once when the mailbox task is parked with nothing queued.

        The turn runs in the caller's task (a socket's reader) on behalf of the mailbox task: its
        context, ``asyncio.current_task()`` is the mailbox task, so its timeout and cancellation work as
        in the mailbox. Order is kept (nothing is queued before it), and so is group commit: its writes
        join the open batch, which commits at the end of this loop iteration with any other turn that
        joined it, before any output is released. A turn that suspends is handed to the mailbox task,
        which continues it where it stopped. Raises what :meth:`submit` raises.
        """
        waiter = self._waiter
        if (
            waiter is None
            or waiter.done()
            or self._inbox
            or self.in_turn
            or self._checkpointing
            or self.stopping
            or self._stop_requested
            or not _INLINE
        ):
            self.submit(item)
            return
        self._stepping = True
        try:
            suspended = step_as(self.task, self._context, self._inline(item))
        finally:
            self._stepping = False
        if suspended is not None:
            if self.in_turn:  # what _begin_turn leaves to the loop otherwise: arm the timeout …
                self._on_suspend(self._turn_id)
            self._adopt = suspended
            if not waiter.done():
                waiter.set_result(None)

    async def _inline(self, item: Call | Message) -> None:
        """One input's turn, run by :meth:`run_now`; the batch commits in :meth:`flush_soon`."""
        try:
            await self._dispatch(item)
            self._current = None
            self._batch += 1
            if self._batch >= self.max_batch:
                if not self._flush():
                    self.task.cancel()  # the actor failed: end its parked mailbox task
                    return
            if not self._flush_queued and (self._pending or self.file.in_transaction):
                self._flush_queued = True
                self.registry.flush_soon(self, self._loop)
        except asyncio.CancelledError:
            if not self.stopping:
                self._fail(ActorUnavailable(message="actor task cancelled"))
            if self._stepping:  # raised, not delivered: the task itself was not cancelled; end it
                self.task.cancel()
                return
            raise
        except BaseException as exc:  # a bug in the runtime itself: never leave callers hanging
            log.exception("actor %s/%r crashed", self.kind, self.name)
            self._fail(ActorUnavailable(message=f"actor crashed: {type(exc).__name__}"))
            self.task.cancel()

    def flush_soon(self) -> None:
        """End of the loop iteration that ran inline turns (called by the registry): commit their
        batch and release it, unless the mailbox task is running (or about to): it commits before it
        parks."""
        self._flush_queued = False
        if self.in_turn or self._adopt is not None or self.stopping or self.file.closed:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if not self._settle():
            self.task.cancel()

    def _settle(self) -> bool:
        """Nothing more to run now: commit the batch and release it, note the time, and start a
        checkpoint if one is due. False if the commit failed (the actor has stopped)."""
        if self._pending or self.file.in_transaction:
            if not self._flush():
                return False
        self.last_active = self.clock.monotonic()
        self._maybe_checkpoint()
        return True

    def _maybe_checkpoint(self) -> None:
        """Between turns, with the batch committed: if the WAL is due for a checkpoint, run it in a
        worker thread. Until it ends the actor takes no turn (inputs queue in the mailbox) and cannot
        be deactivated; the event loop, and every other actor, go on meanwhile."""
        file = self.file
        if (
            self._checkpointing
            or not file.checkpoint_due
            or self.in_turn
            or file.in_transaction
            or file.closed
            or self._pending
        ):
            return
        self._checkpointing = True
        try:
            done = self._loop.run_in_executor(self.registry.checkpoints(), file.checkpoint)
        except Exception as exc:  # no thread to run it (shutting down): commits bound the WAL meanwhile
            self._checkpointing = False
            if not self._checkpoint_refused:
                self._checkpoint_refused = True
                log.warning("checkpoint of %s/%r not started: %s", self.kind, self.name, exc)
            return
        self._checkpoint_refused = False
        done.add_done_callback(self._checkpointed)

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpointing = False
        if not done.cancelled() and done.exception() is not None:  # tried again after more commits
            log.warning("checkpoint of %s/%r failed: %s", self.kind, self.name, done.exception())
        waiter = self._waiter
        if waiter is not None and not waiter.done():  # inputs that waited for it, or a stop
            waiter.set_result(None)

    @property
    def quiescent(self) -> bool:
        """Nothing queued, running or held: the mailbox task is parked, waiting for input."""
        return (
            self._started
            and not self.in_turn
            and not self._inbox
            and not self._pending
            and not self.file.in_transaction
            and self._adopt is None
            and not self._checkpointing
        )

    @property
    def idle(self) -> bool:
        """True when the actor could be deactivated right now without losing anything."""
        return self.quiescent and not self.connections

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            if not await self._start():
                return
            while True:
                if not self._inbox or self._checkpointing:
                    if not self._settle():
                        return
                    if self._stop_requested and not self._checkpointing:
                        return
                    self._waiter = loop.create_future()
                    cancel: asyncio.CancelledError | None = None
                    try:
                        await self._waiter
                    except asyncio.CancelledError as exc:
                        if self._adopt is None:
                            raise
                        cancel = exc  # it reaches the inline turn at its await
                    self._waiter = None
                    adopt = self._adopt
                    if adopt is not None:  # an inline turn suspended: continue it here
                        self._adopt = None
                        await Resume(adopt, cancel)
                    continue
                item = self._inbox.popleft()
                await self._dispatch(item)
                self._current = None
                self._batch += 1
                if self._batch >= self.max_batch:
                    if not self._flush():
                        return
                    self._maybe_checkpoint()  # a busy actor checkpoints too (its inputs wait)
        except asyncio.CancelledError:
            if not self.stopping:
                self._fail(ActorUnavailable(message="actor task cancelled"))
            raise
        except BaseException as exc:  # a bug in the runtime itself: never leave callers hanging
            log.exception("actor %s/%r crashed", self.kind, self.name)
            self._fail(ActorUnavailable(message=f"actor crashed: {type(exc).__name__}"))

    def _flush(self) -> bool:
        """Commit the batch, then release its outputs in order. False if the commit failed."""
        self._batch = 0
        try:
            # a directory that cannot take an earlier alarm fails the batch: nothing is committed
            alarm = self._alarm_before_commit() if self.alarm_dirty else _UNSET
            self.file.commit()
        except Exception as exc:
            log.exception("commit failed for %s/%r", self.kind, self.name)
            # nothing held is released: _fail answers the held replies and drops the frames
            self._fail(ActorUnavailable(message=f"commit failed: {exc}"))
            return False
        if alarm is not _UNSET:
            self._alarm_after_commit(alarm)
        out, self._pending = self._pending, []
        for tag, target, value in out:
            if tag == 0:
                target.deliver(value)
            elif tag == 2:
                if not target.done():
                    target.set_result(value)
            elif tag == 3:
                if not target.done():
                    target.set_exception(value)
            else:
                target.deliver_close(*value)
        return True

    # -- the actor's alarm in the directory (wake-ups) ------------------------------------------------
    def _alarm_before_commit(self) -> float | None:
        """The actor's earliest wake-up as this batch leaves it. If earlier than the directory's, the
        directory is lowered *before* the commit: a directory alarm may be early (a spurious wake) but
        never later than the truth, whatever crashes when."""
        alarm = self.schedules.next_alarm()
        directory = self.registry.directory
        if alarm is not None and directory is not None and (self.dir_alarm is None or alarm < self.dir_alarm):
            directory.lower_alarm(self.kind, self.name, alarm)
        return alarm

    def _alarm_after_commit(self, alarm: float | None) -> None:
        """After the commit: the directory takes the true alarm (later or none), dropping any claim."""
        directory = self.registry.directory
        self.alarm_dirty = False
        if directory is None:
            return
        try:
            directory.set_alarm(self.kind, self.name, alarm)
        except Exception:  # a later alarm not written only means a spurious wake-up
            log.exception("could not write the alarm of %s/%r", self.kind, self.name)
            self.alarm_dirty = True
            return
        self.dir_alarm = alarm
        if alarm is not None:
            self.registry.alarm_set(alarm)

    def _fail(self, err: ActorUnavailable) -> None:
        """Stop after a failure: answer everything queued, close connections, release the file."""
        if self.file.closed:
            return  # already failed
        self.stopping = True
        for tag, target, _ in (*self._pending, *self._turn_out):
            if tag in (2, 3) and not target.done():
                target.set_exception(err)
        self._pending.clear()
        self._turn_out = []
        current = self._current  # the input whose turn crashed, if any
        if isinstance(current, Call | Task) and current.reply is not None and not current.reply.done():
            current.reply.set_exception(err)
        while self._inbox:
            item = self._inbox.popleft()
            if isinstance(item, Call | Task) and item.reply is not None and not item.reply.done():
                item.reply.set_exception(err)
            elif isinstance(item, Call) and item.conn is not None:
                item.conn.deliver(_error_frame_for_call(item.id, err))
            elif isinstance(item, Connect):  # never welcomed: tell it to come back later
                item.conn.deliver_close(CloseCode.TRY_AGAIN_LATER, "actor unavailable")
        for conn in list(self.connections.values()):
            conn.deliver_close(CloseCode.INTERNAL_ERROR, "actor stopped")
        self.connections.clear()
        try:
            if self.file.in_transaction:  # also after a failed COMMIT: it leaves the flag set
                self.file.conn.rollback()
        except Exception:
            log.debug("rollback after failure failed", exc_info=True)
        self.file.in_transaction = False
        self.file.close()
        self.registry._forget(self)

    # -- turns -------------------------------------------------------------------------------------
    def _begin_turn(self, caller: Connection | None = None) -> None:
        self.in_turn = True
        self.chain = (self.key,)
        self.caller = caller
        self.principal = caller.principal if caller is not None else None
        self._now = self.clock.now()
        self._turn_out = []
        self.file.begin_turn()
        self._snap = self._mark()
        self._turn_id += 1
        self._turn_started = self._loop.time()
        self._turn_changes = self.file.conn.total_changes
        if not self._stepping:  # run_now sees a suspension itself
            self._loop.call_soon(self._on_suspend, self._turn_id)

    def _on_suspend(self, turn_id: int) -> None:
        """Runs only if turn ``turn_id`` gave the event loop a chance to run, i.e. it awaits something
        real (another actor, I/O). A turn that never suspends costs no timer at all.

        - It arms the turn's timeout (``turn_timeout`` from the turn's start).
        - If earlier turns of the batch hold outputs and this turn has written nothing yet, it commits
          them and releases their outputs now instead of when the slow turn ends; the turn goes on in
          a new transaction, exactly as if it had started after that commit.
        """
        if not self.in_turn or turn_id != self._turn_id:
            return
        if self._deadline is None:
            self._deadline = self._loop.call_at(self._turn_started + self.turn_timeout, self._expire, turn_id)
        if not self._pending or self.file.conn.total_changes != self._turn_changes:
            return  # nothing held, or this turn wrote already: the batch commits with it
        self.file.end_turn()
        if self._flush():
            self.file.begin_turn()
        else:  # the actor failed: the suspended turn ends where it waits
            self.task.cancel()

    def _expire(self, turn_id: int) -> None:
        """The turn's time is up: cancel it where it waits; ``_check_timeout`` turns that into a
        ``TimeoutError`` so that the turn is rolled back and its caller told ``timeout``."""
        if self.in_turn and turn_id == self._turn_id:
            self._expired = turn_id
            self.task.cancel()

    def _check_timeout(self, exc: BaseException) -> BaseException:
        """The turn's own timeout becomes a ``TimeoutError``; a cancel from elsewhere that landed
        with it (a shutdown's) stays a ``CancelledError``, as ``asyncio.timeout`` does it."""
        if isinstance(exc, asyncio.CancelledError) and self._expired == self._turn_id:
            self._expired = 0
            if self.task.uncancel() == 0:
                return TimeoutError(f"turn exceeded {self.turn_timeout} s")
        return exc

    def _commit_turn(self) -> None:
        self.file.end_turn()
        self._pending.extend(self._turn_out)
        self._end_turn()

    @property
    def turn_now(self) -> float:
        """The clock's reading at the start of the current turn."""
        return self._now

    @property
    def trace_id(self) -> str:
        """An id for the current turn, made when first asked for (records carry it)."""
        if self._trace_id is None:
            self._trace_id = uuid.uuid4().hex
        return self._trace_id

    def _end_turn(self) -> None:
        self.read_only_turn = False
        self._trace_id = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._turn_out = []
        self.in_turn = False
        self.chain = ()
        self.caller = None
        self.principal = None

    def _abort_turn(self) -> None:
        """Undo the turn back to its savepoint (the last checkpoint of a streaming call)."""
        if not self.file.closed:  # a failed commit already closed it
            self.file.abort_turn()
        self._rewind(self._snap)
        self._end_turn()

    def _mark(self) -> tuple[int, int, str, int, int, int]:
        """Where a rollback returns to, in memory: the turn's start (or last checkpoint), or a nested
        savepoint (a failed wake-up callback)."""
        return (
            self.seq,
            self.oldest,
            self.state_json,
            self.state_seq,
            self.saved_state_seq,
            len(self._turn_out),
        )

    def _rewind(self, mark: tuple[int, int, str, int, int, int]) -> None:
        self.seq, self.oldest, state_json, self.state_seq, self.saved_state_seq, n = mark
        del self._turn_out[n:]
        if state_json is not self.state_json:
            self.state_json = state_json
            self.state = orjson.loads(state_json)

    # -- wake-ups (API for Actor, during a turn) ------------------------------------------------------
    def add_schedule(self, trigger: dict[str, Any], callback: str, payload: Any, **options: Any) -> Any:
        self._require_writable()
        self.require_turn()
        fn = wakeups.check_callback(type(self.actor), callback)
        model = getattr(fn, "__roost_wakeup_model__", None)
        if model is not None:
            payload = model.model_validate(payload).model_dump(mode="json")
        try:
            _json(payload)
        except TypeError as exc:
            raise StateError(f"payload is not JSON: {exc}") from exc
        timeout = options.pop("timeout", None)
        schedule, new = self.schedules.add(
            callback=callback,
            payload=payload,
            trigger=trigger,
            timeout=float(timeout if timeout is not None else self.turn_timeout * 0.9),
            trace_id=self.trace_id,
            now=self._now,
            **options,
        )
        if new:
            self.alarm_dirty = True
        return schedule

    def cancel_schedule(self, id_or_key: str) -> bool:
        self._require_writable()
        self.require_turn()
        done = self.schedules.cancel(id_or_key)
        if done:
            self.alarm_dirty = True
        return done

    def checkpoint(self) -> None:
        """Inside a turn: make the writes so far durable and release the outputs so far."""
        self.file.end_turn()
        self._pending.extend(self._turn_out)
        self._turn_out = []
        if not self._flush():
            raise ActorUnavailable(message="commit failed")
        self.file.begin_turn()
        self._snap = self._mark()
        self._turn_changes = self.file.conn.total_changes

    async def _start(self) -> bool:
        self._begin_turn()
        try:
            self._migrate_state()
            await _maybe_await(self.actor.on_start())
        except BaseException as exc:
            exc = self._check_timeout(exc)
            self._abort_turn()
            log.exception("on_start failed for %s/%r", self.kind, self.name)
            self._report(exc, None)
            self._fail(ActorUnavailable(message=f"on_start failed: {type(exc).__name__}: {exc}"))
            if isinstance(exc, asyncio.CancelledError):
                raise
            return False
        self._commit_turn()
        self._started = True
        return True

    def _migrate_state(self) -> None:
        """Bring a state written by an older version of the kind forward (``Actor.state_version``,
        ``Actor.migrate_state``), one version at a time, in the first turn: the new state is logged
        and broadcast like any other, and the file records its version in the same commit. A state
        newer than the code is refused (old code would misread it)."""
        target = type(self.actor).state_version
        conn = self.file.conn
        row = conn.execute("SELECT value FROM roost_meta WHERE key = 'state_version'").fetchone()
        stored = int(row[0]) if row is not None else 1  # files from before versions existed: 1
        if stored > target:
            raise MigrationError(
                f"state:{self.kind}",
                stored,
                ValueError(f"state version {stored} is newer than this code's {target}"),
            )
        if stored == target:
            return
        state = self.state
        for version in range(stored, target):
            state = self.actor.migrate_state(state, version)
        self.set_state(state, None)
        conn.execute(
            "INSERT INTO roost_meta (key, value) VALUES ('state_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(target),),
        )

    async def _dispatch(self, item: Input) -> None:
        self._current = item
        if isinstance(item, Call):
            try:
                await self._call(item)
            finally:
                if item.conn is not None:
                    item.conn.in_flight -= 1
        elif isinstance(item, Message):
            try:
                await self._message(item)
            finally:
                item.conn.in_flight -= 1
        elif isinstance(item, Connect):
            await self._connect(item)
        elif isinstance(item, Disconnect):
            await self._disconnect(item)
        elif isinstance(item, Deliver):
            item.conn.in_flight -= 1  # counted by the transport when it queued the frame
            if item.conn.id in self.connections:
                self._pending.append((0, item.conn, item.text))
        elif isinstance(item, Wake):
            fired = await wakeups.run_due(self)
            if item.reply is not None:
                self._pending.append((2, item.reply, fired))
        else:
            await self._task(item)

    async def _call(self, item: Call) -> None:
        conn = item.conn
        if conn is not None and conn.id not in self.connections:
            return  # rejected or already gone
        self._begin_turn(conn)
        if item.chain:
            self.chain = (*item.chain, self.key)
        if item.principal is not None:
            self.principal = item.principal
        who = conn.principal if conn is not None else item.principal
        self.read_only_turn = who is not None and bool(who.claims.get("read_only"))
        try:
            result = await self._invoke(item)
            if conn is not None:
                frame = frames.rpc_ok(item.id, result)
                self._turn_out.append((0, conn, frame))
            elif item.reply is not None:
                self._turn_out.append((2, item.reply, orjson.loads(orjson.dumps(result))))
        except BaseException as exc:
            exc = self._check_timeout(exc)
            self._abort_turn()
            err = self._as_rpc_error(exc)
            if not isinstance(err, RpcError) or isinstance(err, HandlerError):
                self._report(exc, conn)
            if conn is not None:
                self._pending.append((0, conn, _error_frame_for_call(item.id, err)))
            elif item.reply is not None:
                self._pending.append((3, item.reply, err))
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            self._commit_turn()

    async def _invoke(self, item: Call) -> Any:
        info = self.callables.get(item.method)
        if info is None:
            raise MethodNotFound(message=f"no callable method {item.method!r}")
        fn = getattr(self.actor, item.method)
        try:
            res = fn(*item.args, **item.kwargs)
        except TypeError as exc:
            try:
                info.signature.bind(None, *item.args, **item.kwargs)
            except TypeError:
                raise InvalidArguments(message=str(exc)) from None
            raise
        if not info.streaming:
            if type(res) is CoroutineType or isinstance(res, Awaitable):
                return await res
            return res
        async for chunk in res:
            if item.conn is not None:
                frame = frames.rpc_chunk(item.id, chunk)
                self._turn_out.append((0, item.conn, frame))
            elif item.chunks is not None:
                item.chunks.append(orjson.loads(orjson.dumps(chunk)))
            self.checkpoint()
        return None

    async def _message(self, item: Message) -> None:
        conn = item.conn
        if conn.id not in self.connections:
            return
        self._begin_turn(conn)
        try:
            await _maybe_await(self.actor.on_message(conn, item.data))
        except BaseException as exc:
            exc = self._check_timeout(exc)
            self._abort_turn()
            self._report(exc, conn)
            err = self._as_rpc_error(exc)
            self._pending.append((0, conn, frames.error(err.code, err.message)))
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            self._commit_turn()

    async def _connect(self, item: Connect) -> None:
        conn = item.conn
        conn._host = self
        self._begin_turn(conn)
        try:
            await _maybe_await(self.actor.on_connect(conn))
        except BaseException as exc:
            exc = self._check_timeout(exc)
            self._abort_turn()
            conn._host = None
            if isinstance(exc, Reject):
                self._pending.append((1, conn, (exc.code, exc.reason)))
            else:
                self._report(exc, conn)
                self._pending.append((1, conn, (CloseCode.INTERNAL_ERROR, "on_connect failed")))
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        # The welcome is this connection's first frame, whatever on_connect sent it: it reflects
        # the state after on_connect, then the replay, then what on_connect sent.
        welcome, replay = self._welcome(conn, item.cursor)
        mine = [out for out in self._turn_out if out[1] is conn]
        if mine:
            self._turn_out = [out for out in self._turn_out if out[1] is not conn]
        self._turn_out.append((0, conn, welcome))
        self._turn_out.extend((0, conn, frame) for frame in replay)
        self._turn_out.extend(mine)
        self.connections[conn.id] = conn
        self._commit_turn()

    def _welcome(self, conn: Connection, cursor: int | None) -> tuple[str, list[str]]:
        """The welcome frame and the frames to replay after it, per the resume rules."""
        resume = decide_resume(cursor, self.seq, self.oldest)
        replay: list[str] = []
        if resume.replay_after is not None:
            subs = conn.subscriptions
            replay = [f for _, k, f in self.file.replay(resume.replay_after) if subs.wants(k)]
        name = self.name.rpartition("\x00")[2]  # as the client named it
        welcome = frames.welcome(
            conn.id, self.kind, name, self.state_json, self.seq, self.oldest, resume.mode, resume.reason
        )
        return welcome, replay

    async def _disconnect(self, item: Disconnect) -> None:
        conn = item.conn
        if self.connections.pop(conn.id, None) is None:
            conn._host = None
            return
        self._begin_turn(conn)
        try:
            await _maybe_await(self.actor.on_close(conn, item.code))
        except BaseException as exc:
            exc = self._check_timeout(exc)
            self._abort_turn()
            self._report(exc, conn)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            self._commit_turn()
        finally:
            conn._host = None  # a closed connection keeps nothing of the actor alive

    async def _task(self, item: Task) -> None:
        self._begin_turn()
        self.chain = (*item.chain, self.key)
        try:
            result = await item.fn(self.actor)
            self._turn_out.append((2, item.reply, result))
        except BaseException as exc:
            exc = self._check_timeout(exc)
            self._abort_turn()
            self._pending.append((3, item.reply, self._as_rpc_error(exc)))
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            self._commit_turn()

    def _as_rpc_error(self, exc: BaseException) -> RpcError:
        if isinstance(exc, RpcError):
            return exc
        if isinstance(exc, TimeoutError):
            return CallTimeout(message=f"turn exceeded {self.turn_timeout} s")
        if isinstance(exc, asyncio.CancelledError):
            return ActorUnavailable(message="actor is stopping")
        return HandlerError(message=f"{type(exc).__name__}: {exc}"[:500])

    def _report(self, exc: BaseException, conn: Connection | None) -> None:
        """Hand a failure to ``on_error`` (outside any turn); its own errors are only logged."""
        if isinstance(exc, asyncio.CancelledError):
            return
        try:
            self.actor.on_error(exc, conn)
        except Exception:
            log.exception("on_error raised for %s/%r", self.kind, self.name)

    # -- API used by Actor during a turn -------------------------------------------------------------
    def require_turn(self) -> None:
        if not self.in_turn:
            raise NotInTurn("this actor API can only be used during a turn (a hook or a callable)")

    def turn_connection(self) -> sqlite3.Connection:
        self.require_turn()
        return self.file.conn

    def _authorize(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
    ) -> int:
        """SQLite authorizer: statements prepared for ``self.sql`` cannot touch transactions, other
        files, pragmas, or write the runtime's ``roost_*`` tables (reading them is allowed)."""
        if not self.user_sql:
            return sqlite3.SQLITE_OK
        if action in _DENIED_ACTIONS:
            return sqlite3.SQLITE_DENY
        if self.read_only_turn and action in _TABLE_WRITES:
            return sqlite3.SQLITE_DENY
        if action in _TABLE_WRITES and (
            (arg1 is not None and arg1.startswith("roost_"))
            or (arg2 is not None and arg2.startswith("roost_"))
        ):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def _require_writable(self) -> None:
        if self.read_only_turn:
            raise StateError("a read-only caller's turn cannot write")

    def set_state(self, state: Any, source: Connection | None) -> None:
        self.require_turn()
        self._require_writable()
        if self._validates:
            self.actor.validate_state(state)
        try:
            text = _json(state)
        except TypeError as exc:
            raise StateError(f"state is not JSON: {exc}") from exc
        seq = self._next_seq()
        frame = frames.state(seq, text)
        self.file.append_log(seq, "state", frame, self._now)  # the frame is the state's only write
        self.state_seq = seq
        self.state_json = text
        self.state = orjson.loads(text)
        self._fanout("state", frame, (), None)
        if not self._watches:
            return
        try:
            self.actor.on_state_changed(self.state, source)
        except Exception as exc:  # a hook error never undoes a write
            log.exception("on_state_changed raised for %s/%r", self.kind, self.name)
            self._report(exc, source)

    def emit(self, event: Any) -> int:
        self.require_turn()
        self._require_writable()
        try:
            text = _json(event)
        except TypeError as exc:
            raise StateError(f"event is not JSON: {exc}") from exc
        seq = self._next_seq()
        frame = frames.event(seq, text)
        self.file.append_log(seq, "event", frame, self._now)
        self._fanout("event", frame, (), None)
        return seq

    def broadcast(self, data: Any, exclude: tuple[str, ...], tags: frozenset[str] | None) -> int:
        frame = frames.message(data)
        return self._fanout("message", frame, exclude, tags)

    def _fanout(self, kind: str, frame: str, exclude: tuple[str, ...], tags: frozenset[str] | None) -> int:
        n = 0
        for conn in self.connections.values():
            if not conn.subscriptions.wants(kind) or conn.id in exclude:
                continue
            if tags is not None and not (tags & conn.tags):
                continue
            self._gate((0, conn, frame))
            n += 1
        return n

    def gate_frame(self, conn: Connection, text: str) -> None:
        self._gate((0, conn, text))

    def gate_close(self, conn: Connection, code: int, reason: str) -> None:
        self._gate((1, conn, (code, reason)))

    def _gate(self, out: Output) -> None:
        """Hold an output until the writes before it are committed, keeping order.

        During a turn it joins the turn's outputs. Outside a turn (e.g. from a background task) it is
        delivered at once if nothing is held, else queued behind what is held (the mailbox task
        flushes held outputs before it waits for input).
        """
        if self.in_turn:
            self._turn_out.append(out)
        elif self._pending or self.file.in_transaction:
            self._pending.append(out)
        elif out[0] == 0:
            out[1].deliver(out[2])
        else:
            out[1].deliver_close(*out[2])

    def _unsaved_state(self) -> tuple[str, int, float] | None:
        """``(state JSON, seq, now)`` for the snapshot row if it is behind the current state."""
        if self.saved_state_seq == self.state_seq:
            return None
        return self.state_json, self.state_seq, self.clock.now()

    def _save_state(self) -> None:
        """Bring the snapshot row up to the current state (in the open transaction, if any)."""
        unsaved = self._unsaved_state()
        if unsaved is not None:
            self.file.save_state(*unsaved)
            self.saved_state_seq = self.state_seq

    def _next_seq(self) -> int:
        self.seq += 1
        if self.seq - self.oldest + 1 > self.retention + max(1, self.retention // 10):
            keep_from = self.seq - self.retention + 1
            self._save_state()  # the state frame may be pruned: keep the state in the snapshot row
            self.file.prune_log(keep_from)
            self.oldest = keep_from
        elif self.oldest > self.seq:  # the log was empty
            self.oldest = self.seq
        return self.seq

    # -- lifecycle -------------------------------------------------------------------------------------
    def deactivate(self) -> bool:
        """If idle, close the file and end the task at once; return whether it happened. The file's
        release (the state snapshot row, and SQLite's close: a WAL checkpoint and fsyncs, ~0.5 ms) is
        handed to the registry, which runs it off the loop and waits for it before the actor is
        opened again."""
        if not self.idle or self.stopping:
            return False
        self.stopping = True
        try:  # the snapshot row, if behind, is written with the release
            self.registry.release_file(self.key, self.file, self._unsaved_state())
        finally:
            self.task.cancel()
        return True

    async def stop(self) -> None:
        """Drain the mailbox, commit, close the file. Connections should be closed first."""
        if self.task.done():
            self.file.close()
            return
        self._stop_requested = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        try:
            await self.task
        finally:
            self.stopping = True
            if not self.file.closed:
                try:
                    self._save_state()
                finally:
                    self.file.close()


async def _maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
        return await value
    return value
