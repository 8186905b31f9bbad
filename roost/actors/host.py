"""The runtime of one live actor: its lifecycle, its mailbox task, its batches and its failure.

One :class:`ActorHost` per live actor, made and owned by the :class:`~roost.actors.registry.Registry`.
It is a small hub over modules of one concern each:

- :mod:`roost.actors.inputs`: what goes into the mailbox; :mod:`roost.actors.handlers`: one handler per
  input kind; :mod:`roost.actors.turn`: the one template every turn runs in (begin, savepoint, timeout,
  abort, commit); :mod:`roost.actors.outputs`: the output gate; :mod:`roost.actors.statelog`: state and
  log; :mod:`roost.actors.alarms`: schedules and the directory's alarm; :mod:`roost.actors.sqlguard`:
  what ``self.sql`` may do; :mod:`roost.actors.wakeups`: fire turns.

The parts import none of this module: they take the host as a :class:`~roost.actors.parts.HostCore`,
the actor and its ``extension`` and ``sql`` as a :class:`~roost.actors.interfaces.HostApi`, a
connection as a :class:`~roost.actors.connection.Gate`; and the host sees its registry as a
:class:`~roost.actors.parts.RegistryCore`. ``ActorHost`` satisfies each structurally (mypy checks it
where the host hands itself over), so the imports form a tree with the registry at its root.

Lifecycle (:class:`HostState`): ``STARTING`` (the ``on_start`` turn) → ``LIVE`` → ``DRAINING``
(:meth:`ActorHost.stop`: the mailbox drains, then the task ends) → ``STOPPED`` (deactivated, failed or
stopped: no input is accepted; the file is closed or being released). A failure goes to ``STOPPED``
from any state.

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
  After the commit and before the release, the committed seq is written to the actor's high-water
  witness (:class:`roost.storage.damage.Witness`): no acknowledged write is ahead of it.
- **Gap-free log (guarantee 4).** See :mod:`roost.actors.statelog`. A connection is added to the
  broadcast set in the same turn that sends its welcome and replay, so it sees every later frame,
  after them, once. It is in ``self.connections`` while ``on_connect`` runs; the state and events
  of that turn reach it in its welcome and replay only, never twice; if the turn fails (a ``Reject``
  included) it is removed with the turn, whose broadcasts nobody saw.
- **Every task has an owner.** The mailbox task belongs to its host: :meth:`ActorHost.stop` awaits it,
  :meth:`ActorHost.deactivate` and a failure cancel it; the registry stops every host it made.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import logging
import sqlite3
from collections import deque
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors import alarms, sqlguard, statelog
from roost.actors.actor import Actor
from roost.actors.callkeys import KEYS_BYTES, KEYS_KEPT, CallKeys
from roost.actors.connection import Connection, Principal
from roost.actors.decorators import CallableInfo
from roost.actors.errors import ActorUnavailable, NotInTurn, Overloaded, RoostError, StateError, shown_name
from roost.actors.handlers import dispatch, maybe_await
from roost.actors.inline import AVAILABLE as _INLINE
from roost.actors.inline import Resume, Suspended, step_as
from roost.actors.inputs import Call, Connect, Deliver, Disconnect, Input, Message, ReplayPage, Task, Wake
from roost.actors.observe import Observer
from roost.actors.outputs import Close, Frame, OutputGate
from roost.actors.refs import Key
from roost.actors.schedules import ScheduleStore
from roost.actors.turn import Turn, log_failure, report
from roost.protocol import CloseCode, frames
from roost.storage import ActorFile, DirectoryBusy

if TYPE_CHECKING:
    from roost.actors.interfaces import Savepoint
    from roost.actors.parts import HostCore, RegistryCore

__all__ = [
    "ACTOR_TASK",
    "ActorHost",
    "Call",
    "Connect",
    "Deliver",
    "Disconnect",
    "HostState",
    "Message",
    "Task",
    "Wake",
    "turn_runner",
]

log = logging.getLogger("roost.actor")
_UNSET: Any = object()
#: Seconds before a commit deferred by a busy directory is tried again.
DIRECTORY_RETRY = 0.05
#: The start of an actor's mailbox task's name (``actor:KIND/NAME``).
ACTOR_TASK = "actor:"
#: The host whose mailbox task's context this is (set once per host, in its own context copy).
_HOST: contextvars.ContextVar[ActorHost] = contextvars.ContextVar("roost_actor_host")


def turn_runner() -> str:
    """Who runs the current turn at this moment (a hook for tests of the inline path):

    ``"inline"`` (``run_now`` stepping it in a socket's reader), ``"resumed"`` (the mailbox task
    continuing an inline turn that suspended), ``"mailbox"`` (the mailbox task, from the start), or
    ``""`` outside every actor's turn."""
    host = _HOST.get(None)
    if host is None or not host.gate.turn_open:
        return ""
    if host.stepping:
        return "inline"
    return "resumed" if host.resuming else "mailbox"


class HostState(enum.Enum):
    """Where a live actor is in its life (see the module's docstring)."""

    STARTING = "starting"  # the on_start turn has not committed yet
    LIVE = "live"
    DRAINING = "draining"  # stop() was called: the mailbox drains, then the task ends
    STOPPED = "stopped"  # takes no input; deactivated, failed or stopped


class ActorHost:
    """One live actor. Created and owned by the :class:`~roost.actors.registry.Registry`.

    Besides :attr:`lifecycle`, a few transient flags are not lifecycle and stay named fields:
    ``stepping`` (``run_now`` is running a turn inline), ``resuming`` (the mailbox task continues
    one that suspended), ``checkpointing`` (the WAL is being
    checkpointed in a worker thread), ``flush_queued`` (the registry will call :meth:`flush_soon` at
    the end of this loop iteration), ``adopt`` (an inline turn that suspended, for the mailbox task).
    """

    def __init__(
        self,
        registry: RegistryCore,
        actor_cls: type[Actor],
        kind: str,
        name: str,
        file: ActorFile,
        callables: dict[str, CallableInfo],
    ) -> None:
        self.registry = registry
        #: Metrics and traces (:class:`~roost.actors.observe.Observer`), read once: None when off.
        observer = registry.observer
        self.observer: Observer | None = None if observer is None else observer.for_host(kind, name)
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
        self.max_inbox = cfg.max_inbox
        self.lifecycle = HostState.STARTING
        self.connections: dict[str, Connection] = {}
        self.joining: tuple[str, ...] = ()  # the connection of the open connect turn (see handlers)
        self.last_active = self.clock.monotonic()
        # the open turn's context, read by the Actor API (set by Turn.begin, cleared by Turn.end)
        self.chain: tuple[Key, ...] = ()
        self.caller: Connection | None = None
        self.principal: Principal | None = None
        #: The turn serves a read-only principal: nothing may be written (state, events, schedules,
        #: and ``self.sql`` writes are refused).
        self.read_only_turn = False
        self.user_sql = False  # a statement of self.sql is being prepared (see sqlguard)
        self.gate = OutputGate(file)
        core: HostCore = self  # what the parts see of the host (mypy checks ActorHost against it)
        self.turn = Turn(core)
        self.mailbox: deque[Input] = deque()
        self.current: Input | None = None  # the input being handled
        self.stepping = False
        self.resuming = False  # the mailbox task is continuing a suspended inline turn
        self.checkpointing = False
        self.flush_queued = False
        self.adopt: Suspended | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._batch = 0
        self._checkpoint_refused = False  # said once in the log
        self.schedules = ScheduleStore(file.conn, kind, name)
        self.call_keys = CallKeys(
            file.conn, actor_cls.call_keys_kept or KEYS_KEPT, actor_cls.call_keys_bytes or KEYS_BYTES
        )
        self.alarm_dirty = False  # a turn changed the schedules: the directory's alarm needs syncing
        self.dir_alarm: float | None = None  # what this host last wrote (None: unknown or none)
        self.loop = asyncio.get_running_loop()
        _, self.saved_state_seq = file.load_state()
        self.state_json, self.state_seq = file.current_state()
        self.state: Any = orjson.loads(self.state_json)
        self.oldest, self.seq = file.log_bounds()
        #: The seq as of the last commit: what the directory records as the actor's high-water seq.
        self.acked_seq = max(self.seq, self.state_seq)
        self._commit_retry: asyncio.TimerHandle | None = None
        self._deferred = False  # the open batch waits for the directory to take its earlier alarm
        #: The ``created_at`` of the actor's directory row (None: no row), set by the registry: the
        #: directory's touches for this actor land on that row only.
        self.row_created: float | None = None
        #: Set while the actor is being deleted: every new input is refused with it (``submit``).
        self.refusal: str | None = None
        file.conn.set_authorizer(self.authorize)
        self.actor: Actor = actor_cls._create(self, registry.process)
        # the state hooks are called only where the kind defines them (most do not)
        self.validates = actor_cls.validate_state is not Actor.validate_state
        self.watches = actor_cls.on_state_changed is not Actor.on_state_changed
        self._context = contextvars.copy_context()  # the mailbox task's, for turns run inline
        self._context.run(_HOST.set, self)
        self.task: asyncio.Task[None] = self.loop.create_task(
            self._run(), name=f"{ACTOR_TASK}{kind}/{name}", context=self._context
        )

    # -- the lifecycle, as the rest of the runtime asks about it ------------------------------------
    @property
    def stopping(self) -> bool:
        """The actor takes no more input (``STOPPED``)."""
        return self.lifecycle is HostState.STOPPED

    @property
    def in_turn(self) -> bool:
        return self.gate.turn_open

    @property
    def queued(self) -> int:
        """How many inputs wait in the mailbox."""
        return len(self.mailbox)

    # -- mailbox ---------------------------------------------------------------------------------
    def submit(self, item: Input) -> None:
        """Queue an input. Raises ``ActorUnavailable`` if the actor is stopping, ``Overloaded`` if
        its mailbox holds ``max_inbox`` inputs (a disconnect, a delivery or a replay page is always
        accepted)."""
        if self.lifecycle is HostState.STOPPED:
            raise ActorUnavailable(message=f"actor {self.kind}/{shown_name(self.name)!r} is stopping")
        if self.refusal is not None:
            raise ActorUnavailable(message=self.refusal)
        if len(self.mailbox) >= self.max_inbox and not isinstance(item, Disconnect | Deliver | ReplayPage):
            raise Overloaded(message=f"mailbox of {self.kind}/{shown_name(self.name)!r} is full")
        self.mailbox.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def run_now(self, item: Call | Message | Task) -> None:
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
            or self.mailbox
            or self.gate.turn_open
            or self.checkpointing
            or self.lifecycle is not HostState.LIVE
            or self.refusal is not None
            or not _INLINE
        ):
            self.submit(item)
            return
        self.stepping = True
        try:
            suspended = step_as(self.task, self._context, self._inline(item))
        finally:
            self.stepping = False
        if suspended is not None:
            if self.gate.turn_open:  # what Turn.begin leaves to the loop otherwise: arm the timeout …
                self.turn.on_suspend(self.turn.id)
            self.adopt = suspended
            if not waiter.done():
                waiter.set_result(None)

    async def _inline(self, item: Call | Message | Task) -> None:
        """One input's turn, run by :meth:`run_now`; the batch commits in :meth:`flush_soon`."""
        try:
            self.current = item
            await dispatch(self, item)
            self.current = None
            self._batch += 1
            if self._batch >= self.max_batch:
                if not self.flush():
                    self.task.cancel()  # the actor failed: end its parked mailbox task
                    return
            if not self.flush_queued and (self.gate.held or self.file.in_transaction):
                self.flush_queued = True
                self.registry.flush_soon(self, self.loop)
        except asyncio.CancelledError:
            if self.lifecycle is not HostState.STOPPED:
                self.fail(ActorUnavailable(message="actor task cancelled"))
            if self.stepping:  # raised, not delivered: the task itself was not cancelled; end it
                self.task.cancel()
                return
            raise
        except BaseException as exc:  # a bug in the runtime itself: never leave callers hanging
            log.exception("actor %s/%r crashed", self.kind, self.name)
            self.fail(ActorUnavailable(message=f"actor crashed: {type(exc).__name__}"))
            self.task.cancel()

    def flush_soon(self) -> None:
        """End of the loop iteration that ran inline turns (called by the registry): commit their
        batch and release it, unless the mailbox task is running (or about to): it commits before it
        parks."""
        self.flush_queued = False
        if self.gate.turn_open or self.adopt is not None or self.stopping or self.file.closed:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if not self._settle():
            self.task.cancel()

    def _settle(self) -> bool:
        """Nothing more to run now: commit the batch and release it, note the time, and start a
        checkpoint if one is due. False if the commit failed (the actor has stopped)."""
        if self.gate.held or self.file.in_transaction:
            if not self.flush():
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
            self.checkpointing
            or not file.checkpoint_due
            or self.gate.turn_open
            or file.in_transaction
            or file.closed
            or self.gate.held
        ):
            return
        self.checkpointing = True
        try:
            done = self.loop.run_in_executor(self.registry.checkpoints(), file.checkpoint)
        except Exception as exc:  # no thread to run it (shutting down): commits bound the WAL meanwhile
            self.checkpointing = False
            if not self._checkpoint_refused:
                self._checkpoint_refused = True
                log.warning("checkpoint of %s/%r not started: %s", self.kind, self.name, exc)
            return
        self._checkpoint_refused = False
        done.add_done_callback(self._checkpointed)

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self.checkpointing = False
        if not done.cancelled() and done.exception() is not None:  # tried again after more commits
            log.warning("checkpoint of %s/%r failed: %s", self.kind, self.name, done.exception())
        waiter = self._waiter
        if waiter is not None and not waiter.done():  # inputs that waited for it, or a stop
            waiter.set_result(None)

    @property
    def quiescent(self) -> bool:
        """Nothing queued, running or held: the mailbox task is parked, waiting for input."""
        return (
            (self.lifecycle is HostState.LIVE or self.lifecycle is HostState.DRAINING)
            and not self.gate.turn_open
            and not self.mailbox
            and not self.gate.held
            and not self.file.in_transaction
            and self.adopt is None
            and not self.checkpointing
        )

    @property
    def idle(self) -> bool:
        """True when the actor could be deactivated right now without losing anything."""
        return self.quiescent and not self.connections

    async def _run(self) -> None:
        loop = self.loop
        try:
            if not await self._start():
                return
            while True:
                if not self.mailbox or self.checkpointing:
                    if not self._settle():
                        return
                    if self.lifecycle is HostState.DRAINING and not self.checkpointing:
                        return
                    self._waiter = loop.create_future()
                    cancel: asyncio.CancelledError | None = None
                    try:
                        await self._waiter
                    except asyncio.CancelledError as exc:
                        self._waiter = None
                        if self.adopt is None:
                            raise
                        cancel = exc  # it reaches the inline turn at its await
                    self._waiter = None
                    adopt = self.adopt
                    if adopt is not None:  # an inline turn suspended: continue it here
                        self.adopt = None
                        self.resuming = True
                        try:
                            await Resume(adopt, cancel)
                        finally:
                            self.resuming = False
                    continue
                item = self.mailbox.popleft()
                self.current = item
                await dispatch(self, item)
                self.current = None
                self._batch += 1
                if self._batch >= self.max_batch:
                    if not self.flush():
                        return
                    self._maybe_checkpoint()  # a busy actor checkpoints too (its inputs wait)
        except asyncio.CancelledError:
            if self.lifecycle is not HostState.STOPPED:
                self.fail(ActorUnavailable(message="actor task cancelled"))
            raise
        except BaseException as exc:  # a bug in the runtime itself: never leave callers hanging
            log.exception("actor %s/%r crashed", self.kind, self.name)
            self.fail(ActorUnavailable(message=f"actor crashed: {type(exc).__name__}"))

    async def _start(self) -> bool:
        """The first turn: migrate the state if the kind's version moved, then ``on_start``."""
        with self.turn.run(None, _start_failed):
            statelog.migrate_state(self)
            await maybe_await(self.actor.on_start())
        if not self.turn.ok:
            return False
        if self.lifecycle is HostState.STARTING:
            self.lifecycle = HostState.LIVE
        return True

    def flush(self) -> bool:
        """Commit the batch, then release its outputs in order. False if the commit failed.

        When the batch makes the actor's alarm earlier and another process holds the directory's
        lock, the earlier alarm cannot be written first, and the batch is not committed yet either
        (a directory alarm is never later than the truth): it stays open with its outputs held, later
        turns join it, and the commit is tried again in :data:`DIRECTORY_RETRY` seconds. Nothing
        waits on the loop meanwhile."""
        turns, self._batch = self._batch, 0
        observer = self.observer
        started = self.clock.monotonic() if observer is not None else 0.0
        try:
            try:
                alarm = alarms.alarm_before_commit(self) if self.alarm_dirty else _UNSET
            except DirectoryBusy:
                self._deferred = True
                self._commit_later()
                return True
            # a directory that cannot take an earlier alarm fails the batch: nothing is committed
            self.file.commit()
            if self.file.witness is not None:  # the high-water seq, before anything is released
                self.file.witness.write(self.seq)
        except Exception as exc:
            ref = log_failure(self, exc, "commit")
            # nothing held is released: fail answers the held replies and drops the frames
            self.fail(ActorUnavailable(message=f"commit failed (ref {ref})"))
            return False
        self.acked_seq = self.seq
        self._deferred = False
        if alarm is not _UNSET:
            alarms.alarm_after_commit(self, alarm)
        self.gate.release()
        if observer is not None:
            observer.commit(self.kind, turns, self.clock.monotonic() - started)
        return True

    def _commit_later(self) -> None:
        """Try the deferred commit again soon (real time: it waits for another process, not for the
        runtime's clock), from :meth:`flush_soon` if the mailbox task is parked by then."""
        if self._commit_retry is None:
            self._commit_retry = self.loop.call_later(DIRECTORY_RETRY, self._retry_commit)

    def _retry_commit(self) -> None:
        self._commit_retry = None
        if self.file.in_transaction and not self.stopping:
            self.flush_soon()
            if self.file.in_transaction and not self.gate.turn_open:
                self._commit_later()  # still busy, or the mailbox task commits it at its batch's end

    def fail(self, err: ActorUnavailable) -> None:
        """Stop after a failure: answer everything queued, close connections, release the file."""
        if self.file.closed:
            return  # already failed
        self.lifecycle = HostState.STOPPED
        self.gate.drop(err)
        current = self.current  # the input whose turn crashed, if any
        if isinstance(current, Call | Task) and current.reply is not None and not current.reply.done():
            current.reply.set_exception(err)
        while self.mailbox:
            item = self.mailbox.popleft()
            if isinstance(item, Call | Task) and item.reply is not None and not item.reply.done():
                item.reply.set_exception(err)
            elif isinstance(item, Call) and item.conn is not None:
                item.conn.deliver(frames.rpc_error(item.id, err.code, err.message))
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
        self.registry.forget(self)

    # -- API used by Actor during a turn -------------------------------------------------------------
    def require_turn(self) -> None:
        if not self.gate.turn_open:
            raise NotInTurn("this actor API can only be used during a turn (a hook or a callable)")

    def require_writable(self) -> None:
        if self.read_only_turn:
            raise StateError("a read-only caller's turn cannot write")

    def turn_connection(self) -> sqlite3.Connection:
        self.require_turn()
        return self.file.conn

    @property
    def turn_now(self) -> float:
        """The clock's reading at the start of the current turn."""
        return self.turn.now

    @property
    def trace_id(self) -> str:
        """An id for the current turn, made when first asked for (records carry it)."""
        return self.turn.trace_id

    def checkpoint(self) -> None:
        """Inside a turn: make the writes so far durable and release the outputs so far."""
        self.turn.checkpoint()

    def savepoint(self, name: str) -> Savepoint:
        """A nested savepoint of the open turn. Turn only."""
        self.require_turn()
        return self.turn.savepoint(name)

    def gate_frame(self, conn: Connection, text: str) -> None:
        self.gate.put(Frame(conn, text))

    def gate_close(self, conn: Connection, code: int, reason: str) -> None:
        self.gate.put(Close(conn, code, reason))

    def read_replay(self, conn: Connection) -> None:
        """The connection's sink has drained: queue the turn that reads its replay's next page, from
        the next iteration of the loop (a page's release may ask for the next one: the loop, and every
        other client, runs between two pages). The mailbox always takes it; a stopping actor closes
        its connections itself."""
        self.loop.call_soon(self._read_replay, conn)

    def _read_replay(self, conn: Connection) -> None:
        try:
            self.submit(ReplayPage(conn))
        except ActorUnavailable:
            pass

    authorize = sqlguard.authorizer
    set_state = statelog.set_state
    emit = statelog.emit
    broadcast = statelog.broadcast
    add_schedule = alarms.add_schedule
    cancel_schedule = alarms.cancel_schedule

    # -- lifecycle -------------------------------------------------------------------------------------
    def deactivate(self) -> bool:
        """If idle, close the file and end the task at once; return whether it happened. The file's
        release (the state snapshot row, and SQLite's close: a WAL checkpoint and fsyncs, ~0.5 ms) is
        handed to the registry, which runs it off the loop and waits for it before the actor is
        opened again."""
        if not self.idle or self.stopping:
            return False
        self.lifecycle = HostState.STOPPED
        try:  # the snapshot row, if behind, is written with the release
            self.registry.release_file(self.key, self.file, statelog.unsaved_state(self))
        finally:
            self.task.cancel()
        return True

    async def stop(self) -> None:
        """Drain the mailbox, commit, close the file. Connections should be closed first."""
        if self.task.done():
            self.file.close()
            return
        if self.lifecycle is not HostState.STOPPED:
            self.lifecycle = HostState.DRAINING
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        try:
            await self.task
            while self.file.in_transaction and not self.file.closed and self.flush():
                if self.file.in_transaction:  # a deferred commit (the directory is busy): not closed
                    await asyncio.sleep(DIRECTORY_RETRY)  # uncommitted; bounded by stop_timeout
        finally:
            self.lifecycle = HostState.STOPPED
            if self._commit_retry is not None:
                self._commit_retry.cancel()
                self._commit_retry = None
            if self._deferred and self.file.in_transaction and not self.file.closed:
                # stopped while the directory still refused its earlier alarm: never committed past
                # it (the close would commit what is pending); nothing of it was shown. The state in
                # memory is the batch's: no snapshot of it
                self.gate.drop(ActorUnavailable(message="stopped before the directory took its alarm"))
                self.file.conn.rollback()
                self.file.in_transaction = False
                self.file.close()
            if not self.file.closed:
                try:
                    statelog.save_state(self)
                finally:
                    self.file.close()


def _start_failed(host: HostCore, item: None, exc: BaseException) -> None:
    ref = log_failure(host, exc, "on_start")
    report(host, exc, None)
    # Roost's own errors (a state newer than the code) say what is wrong; others only where to look
    why = f": {exc}" if isinstance(exc, RoostError) else ""
    host.fail(ActorUnavailable(message=f"on_start failed{why} (ref {ref})"))
