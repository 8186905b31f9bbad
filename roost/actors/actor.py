"""``Actor``: the base class a user subclasses. A thin face over :class:`~roost.actors.host.ActorHost`.

::

    from roost.actors import Actor, callable

    class Counter(Actor):
        kind = "counter"
        initial_state = {"count": 0}

        @callable
        async def increment(self, by: int = 1) -> int:
            self.set_state({"count": self.state["count"] + by})
            return self.state["count"]

Hooks may be plain or ``async`` methods; each runs as one turn (see :mod:`roost.actors.host`):
``on_start`` (first turn after activation), ``on_connect(conn)`` (raise :class:`Reject` to refuse),
``on_message(conn, data)``, ``on_close(conn, code)``. ``on_error(error, conn)`` is told about failures
after the failed turn was rolled back; ``validate_state(state)`` (sync) may raise to refuse a new state;
``on_state_changed(state, source)`` (sync) runs after a new state is persisted and broadcast.

``set_state`` does, in this order: validate (``validate_state``) → persist (in the turn's transaction,
with the next ``seq``, logged) → broadcast a ``state`` frame to every connection subscribed to state
(through the output gate, so after the commit) → ``on_state_changed``. An error in the hook never undoes
the write. ``state`` is only persisted through ``set_state``: mutating it in place changes nothing durable.

The extension API's two classes live here too (:mod:`roost.actors.extension` is their public home and
documents them): an actor carries its :class:`TurnContext` (``actor.extension``), whose ``process``
is the :class:`Process`, whose ``run`` takes a function of an ``Actor``: three types that name each
other belong in one module. The host is seen here only as a
:class:`~roost.actors.interfaces.HostApi`, the registry as a :class:`ProcessRegistry`.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from roost.actors import queue
from roost.actors.connection import Connection, Principal
from roost.actors.errors import shown_name
from roost.actors.interfaces import RegistryApi, Savepoint
from roost.actors.queue import QueueItem
from roost.actors.schedules import DeadLetter, Misfire, RetryPolicy, Schedule
from roost.actors.sql import Sql
from roost.scheduler.clock import Clock
from roost.scheduler.triggers import interval_trigger, make_trigger
from roost.storage import Migration
from roost.storage.directory import Directory

if TYPE_CHECKING:
    from roost.actors.interfaces import HostApi
    from roost.actors.observe import Observer
    from roost.actors.refs import ActorRef

__all__ = ["Actor", "Process", "ProcessRegistry", "Service", "TurnContext"]


class Actor:
    """Base class of every actor kind."""

    #: The kind's name in URLs and on disk (``[a-z][a-z0-9_-]{0,62}``); defaults to the class name
    #: in lower case.
    kind: ClassVar[str] = ""
    #: The state of a new actor (must be JSON).
    initial_state: ClassVar[Any] = {}
    #: Forward migrations of this kind's own tables; step ``i`` is version ``i + 1``.
    migrations: ClassVar[Sequence[Migration]] = ()
    #: Tables of a runtime layered on actors (e.g. the agent runtime): ``(component, migrations)``
    #: pairs, applied before the kind's own ``migrations``.
    components: ClassVar[Sequence[tuple[str, Sequence[Migration]]]] = ()
    #: The version of this kind's state. Raise it when the shape changes and say how to get there in
    #: :meth:`migrate_state`; files are brought forward when the actor next starts.
    state_version: ClassVar[int] = 1
    #: SQLite page size of this kind's new files (existing files keep theirs). A commit writes each page
    #: it changed whole, so small pages suit small states and events (a 60-byte state frame commits in
    #: 6.7 µs with 1 KiB pages, 8.7 µs with 4 KiB), large ones suit large frames (a 30 KB frame: 59 µs
    #: against 29 µs). The agent runtime uses 4096.
    page_size: ClassVar[int] = 1024
    #: How many logged frames to keep for resume (``None``: the server's default).
    log_retention: ClassVar[int | None] = None
    #: How many idempotency keys of calls to keep, the newest (``None``: 10,000); none is kept past
    #: 24 h (:mod:`roost.actors.callkeys`).
    call_keys_kept: ClassVar[int | None] = None
    #: How many bytes of idempotency records to keep, the newest (``None``: 4 MiB): a record counts
    #: its caller, key and outcome (a call's whole result). A larger outcome is not kept: a retry
    #: under its key gets ``idempotency_result_unavailable`` (:mod:`roost.actors.callkeys`).
    call_keys_bytes: ClassVar[int | None] = None
    #: The most bytes of JSON one queued item's payload may be (``enqueue``; ``payload_too_large``).
    queue_payload_bytes: ClassVar[int] = queue.PAYLOAD_BYTES
    #: The most live (pending or running) items the actor's queue may hold (``queue_full``).
    queue_limit: ClassVar[int] = queue.QUEUE_LIMIT

    _host: HostApi
    sql: Sql
    #: The extension API for runtimes layered on actors (:mod:`roost.actors.extension`).
    extension: TurnContext

    @classmethod
    def _create(cls, host: HostApi, process: Process) -> Actor:
        self = cls.__new__(cls)
        self._host = host
        self.sql = Sql(host)
        self.extension = TurnContext(host, process)
        self.__init__()  # type: ignore[misc]
        return self

    # -- identity and state -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._host.name

    @property
    def tenant(self) -> str | None:
        """The tenant this actor belongs to (its name is ``tenant NUL local_name``), or None."""
        tenant, sep, _ = self._host.name.rpartition("\x00")
        return tenant if sep else None

    @property
    def local_name(self) -> str:
        """The name as clients of its tenant address it."""
        return shown_name(self._host.name)

    @property
    def state(self) -> Any:
        """The current state (as of the last ``set_state`` in this or an earlier turn)."""
        return self._host.state

    @property
    def seq(self) -> int:
        """The ``seq`` of the newest logged frame."""
        return self._host.seq

    def set_state(self, state: Any, *, source: Connection | None = None) -> None:
        """Replace the state: validate → persist → broadcast → ``on_state_changed``. Turn only."""
        self._host.set_state(state, source)

    def emit(self, event: Any) -> int:
        """Log a durable event with the next ``seq`` and send it to subscribed connections."""
        return self._host.emit(event)

    @property
    def caller(self) -> Connection | None:
        """The connection whose input this turn handles (None for HTTP, wake-ups, other actors).

        Its ``request`` is the handshake it came with. An HTTP call has no connection and so no
        request here; ``self.principal`` says who made it."""
        return self._host.caller

    @property
    def principal(self) -> Principal | None:
        """Who caused this turn: the caller's principal, or an HTTP caller's (None if unknown)."""
        return self._host.principal

    # -- connections --------------------------------------------------------------------------------
    @property
    def connections(self) -> list[Connection]:
        return list(self._host.connections.values())

    def get_connections(self, tag: str | None = None) -> list[Connection]:
        if tag is None:
            return self.connections
        return [c for c in self._host.connections.values() if tag in c.tags]

    def broadcast(
        self,
        data: Any,
        *,
        exclude: Iterable[str | Connection] = (),
        tags: Iterable[str] | None = None,
    ) -> int:
        """Send ``{"type":"message","data":…}`` to connections subscribed to messages.

        ``exclude`` takes connections or ids; ``tags`` limits it to connections having any of them.
        Not logged (use :meth:`emit` for durable events). Returns how many connections it went to.
        """
        ids = tuple(c.id if isinstance(c, Connection) else c for c in exclude)
        return self._host.broadcast(data, ids, frozenset(tags) if tags is not None else None)

    # -- wake-ups -------------------------------------------------------------------------------------
    async def schedule(
        self,
        when: float | datetime | str,
        callback: str,
        payload: Any = None,
        *,
        key: str | None = None,
        misfire: Misfire = Misfire.RUN_ONCE,
        misfire_grace: float = 1.0,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        tz: str = "UTC",
    ) -> Schedule:
        """Wake this actor: ``when`` is seconds from now (sub-second allowed), an aware ``datetime``,
        or a cron string (5 or 6 fields, in ``tz``). ``callback`` names a ``@wakeup`` method; ``payload``
        is JSON. Written in this turn's transaction. With a ``key`` whose schedule is pending or
        finished less than 24 h ago, the same spec returns that schedule and adds nothing (safe to
        call in ``on_start``, or to re-send), another spec raises ``IdempotencyConflict``; after that,
        or after a cancel, the key schedules anew."""
        trigger = make_trigger(when, now=self._host.turn_now, tz=tz)
        return self._schedule(trigger, callback, payload, key, misfire, misfire_grace, retry, timeout)

    async def schedule_every(
        self,
        interval: float,
        callback: str,
        payload: Any = None,
        *,
        key: str | None = None,
        start: float | datetime | None = None,
        misfire: Misfire = Misfire.RUN_ONCE,
        misfire_grace: float = 1.0,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> Schedule:
        """Wake this actor every ``interval`` seconds (first at ``start``, default one interval from
        now). Runs never overlap: a run later than its grace is a misfire (default: coalesced)."""
        begin = start.timestamp() if isinstance(start, datetime) else start
        trigger = interval_trigger(interval, now=self._host.turn_now, start=begin)
        return self._schedule(trigger, callback, payload, key, misfire, misfire_grace, retry, timeout)

    def _schedule(
        self,
        trigger: dict[str, Any],
        callback: str,
        payload: Any,
        key: str | None,
        misfire: Misfire,
        misfire_grace: float,
        retry: RetryPolicy | None,
        timeout: float | None,
    ) -> Schedule:
        schedule: Schedule = self._host.add_schedule(
            trigger,
            callback,
            payload,
            key=key,
            misfire=Misfire(misfire),
            misfire_grace=misfire_grace,
            retry=retry or RetryPolicy(),
            timeout=timeout,
        )
        return schedule

    async def list_schedules(self, *, include_finished: bool = False) -> list[Schedule]:
        """This actor's schedules (active ones unless ``include_finished``), soonest first."""
        self._host.require_turn()
        return self._host.schedules.all(include_finished=include_finished)

    async def get_schedule(self, id_or_key: str) -> Schedule | None:
        self._host.require_turn()
        store = self._host.schedules
        return store.get(id_or_key) or store.get_by_key(id_or_key)

    async def cancel_schedule(self, id_or_key: str) -> bool:
        """Cancel an active schedule by id or key; False if there was none."""
        return self._host.cancel_schedule(id_or_key)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Wake-ups that failed ``max_attempts`` times, newest first."""
        self._host.require_turn()
        return self._host.schedules.dead_letters(limit)

    # -- the queue (roost.actors.queue) --------------------------------------------------------------
    async def enqueue(
        self,
        callback: str,
        payload: Any = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> str:
        """Add an item at the end of this actor's durable FIFO queue; its id. Turn only.

        ``callback`` names a ``@wakeup`` method, called as ``callback(payload, item)`` (or with the
        payload alone, or nothing, as its signature takes) in a turn of its own, after every item
        before it is done, dead or cancelled. Written in this turn's transaction (a rolled-back turn
        enqueues nothing); kept across restarts, and run after one without any new enqueue. Its writes
        commit with its completion (once); an effect outside the actor's file is at least once, keyed
        by ``item.idempotency_key``. A failure is retried per ``retry`` (default ``RetryPolicy()``,
        full jitter), the queue waiting behind it; after the last attempt it is a dead letter and the
        queue moves on. ``timeout`` bounds one attempt (default: 90 % of the turn timeout). Refused
        with ``PayloadTooLarge`` or ``QueueFull`` (``queue_payload_bytes``, ``queue_limit``)."""
        return queue.enqueue(
            self._host,
            type(self),
            callback,
            payload,
            retry=retry or RetryPolicy(),
            timeout=timeout,
            payload_bytes=self.queue_payload_bytes,
            limit=self.queue_limit,
            turn_timeout=self._host.registry.config.turn_timeout,
        )

    async def list_queue(self, *, include_finished: bool = False, limit: int = 1000) -> list[QueueItem]:
        """The queue in order, from its oldest kept item: the live items (pending or running), or with
        ``include_finished`` the kept finished ones too (done, dead, cancelled), each with its attempts
        and last error; at most ``limit`` of them."""
        self._host.require_turn()
        store = queue.QueueStore(self._host.file.conn)
        return store.items(include_finished=include_finished, limit=limit)

    async def get_queued(self, item_id: str) -> QueueItem | None:
        self._host.require_turn()
        return queue.QueueStore(self._host.file.conn).get(item_id)

    async def cancel_queued(self, item_id: str) -> bool:
        """Cancel a pending item (one waiting for its retry too): the queue moves past it. False if
        there was none (unknown, running, or finished)."""
        return queue.cancel(self._host, item_id)

    async def queue_dead_letters(self, limit: int = 100) -> list[QueueItem]:
        """Queue items that failed their last attempt, newest first, each with its last error."""
        self._host.require_turn()
        return queue.QueueStore(self._host.file.conn).dead(limit)

    # -- other actors -------------------------------------------------------------------------------
    def actor(self, kind: str, name: str) -> ActorRef:
        """A reference to another actor by name, in this actor's tenant; ``await ref.call(...)``.
        Calls made during a turn carry that turn's caller, so a read-only caller stays read-only."""
        tenant = self.tenant
        if tenant is not None:
            if "\x00" in name:  # never a way out of the tenant, whatever a client passed in
                raise ValueError("actor names may not contain NUL")
            name = f"{tenant}\x00{name}"
        host = self._host
        caller = host.caller.principal if host.caller is not None else host.principal
        return host.registry.ref(kind, name, chain=host.chain, principal=caller)

    # -- hooks (override) ---------------------------------------------------------------------------
    @classmethod
    def on_register(cls) -> None:
        """The kind is taken by a registry (``create_app``, ``ActorKit``): raise to refuse it there, at
        start, rather than at an actor's first turn (the agent runtime checks ``roost.toml`` here).
        Runs where the registry is made, maybe on a running event loop: it must not wait on I/O."""

    @classmethod
    def on_registry_start(cls) -> None:
        """The registry that took the kind starts (``Registry.start``), before any actor of the kind
        is activated by it: the kind's setup that may wait on I/O (the agent runtime asks its MCP
        servers for their tools here). **Called in a worker thread**, so the event loop goes on
        serving meanwhile; raise to refuse the start."""

    def on_start(self) -> Any:
        """First turn after activation (the file is open, ``state`` is loaded)."""

    def on_connect(self, conn: Connection) -> Any:
        """A connection arrives; raise ``Reject`` to refuse it. Set ``conn.tags`` here."""

    def on_message(self, conn: Connection, data: Any) -> Any:
        """A ``{"type":"message"}`` frame from a connection."""

    def on_close(self, conn: Connection, code: int) -> Any:
        """A connection went away (``code`` is the WebSocket close code)."""

    def on_error(self, error: BaseException, conn: Connection | None) -> None:
        """A turn failed (already rolled back): for logging and reporting, it cannot write.

        Also told, inside the turn, when ``on_state_changed`` raised (the write stays).
        """

    def migrate_state(self, state: Any, version: int) -> Any:
        """The state of version ``version + 1``, from the state of ``version`` (runs in the first turn
        after activation, before ``on_start``, once per version step). Override with ``state_version``."""
        raise NotImplementedError(f"{type(self).__name__} has no migration from state version {version}")

    def validate_state(self, state: Any) -> None:
        """Raise (any exception) to refuse a new state before anything is written."""

    def on_state_changed(self, state: Any, source: Connection | None) -> None:
        """After a new state was persisted and broadcast."""


# -- the extension API (documented in roost.actors.extension) ------------------------------------------
class Service(Protocol):
    """Something that lives as long as a registry and stops before its actors drain. One that holds
    leases (the workflow core's runner of outside steps) says how many as an ``int`` attribute
    ``leases_held``: the metrics' ``roost_leases_held`` adds them to the dispatcher's. One that runs
    work of an actor outside its turns may define ``holds_actor(kind, name) -> bool``: while it says
    True, the registry keeps that actor live (no idle sweep or eviction deactivates it)."""

    async def stop(self) -> None: ...


S = TypeVar("S", bound=Service)


class ProcessRegistry(RegistryApi, Protocol):
    """The registry as a :class:`Process` sees it (:class:`~roost.actors.registry.Registry` is one)."""

    @property
    def services(self) -> dict[str, Service]:
        """Per-process services, by name; stopped before the actors drain."""

    @property
    def observer(self) -> Observer | None:
        """Metrics and traces (None: off)."""

    async def run(
        self,
        kind: str,
        name: str,
        fn: Callable[[Actor], Awaitable[Any]],
        *,
        timeout: float | None = None,
    ) -> Any:
        """Run ``fn(actor)`` as a turn of that actor; its result after the commit."""

    def exists(self, kind: str, name: str) -> bool:
        """Whether the actor was ever created (live, or dormant with a file)."""


class Process:
    """The per-process side of the extension API: one per registry."""

    __slots__ = ("_registry",)

    def __init__(self, registry: ProcessRegistry) -> None:
        self._registry = registry

    @property
    def clock(self) -> Clock:
        """The clock every timer of the runtime uses (a fake one in tests)."""
        return self._registry.clock

    @property
    def data_dir(self) -> Path:
        """The data directory this process serves."""
        return self._registry.config.data_dir

    @property
    def tracer(self) -> object:
        """The OpenTelemetry ``Tracer`` the app was given a provider for (``create_app(tracer_provider=
        ...)``), or None: tracing is off and an extension makes no span."""
        observer = self._registry.observer
        return observer.tracer if observer is not None else None

    @property
    def directory(self) -> Directory | None:
        """The directory database (None before the registry has started)."""
        return self._registry.directory

    @property
    def rng(self) -> random.Random:
        """The process's random source for retry jitter: the one wake-ups draw from, so that a test
        that seeds it (``registry.rng``) makes every retry delay of the process reproducible."""
        return self._registry.rng

    def service(self, key: str, factory: Callable[[Process], S]) -> S:
        """This process's service named ``key``, made by ``factory(process)`` on first use; stopped
        with the registry, before its actors drain."""
        services = self._registry.services
        found = services.get(key)
        if found is None:
            made = factory(self)
            services[key] = made
            return made
        return found  # type: ignore[return-value]  # one key, one factory: the caller's type

    async def run(
        self,
        kind: str,
        name: str,
        fn: Callable[[Actor], Awaitable[Any]],
        *,
        timeout: float | None = None,
    ) -> Any:
        """Run ``fn(actor)`` as a turn of that actor (activating it); its result after the commit."""
        return await self._registry.run(kind, name, fn, timeout=timeout)

    def exists(self, kind: str, name: str) -> bool:
        """Whether the actor was ever created and not deleted (live, or dormant with a file)."""
        return self._registry.exists(kind, name)


class TurnContext:
    """The per-actor side of the extension API (``actor.extension``)."""

    __slots__ = ("_host", "_process")

    def __init__(self, host: HostApi, process: Process) -> None:
        self._host = host
        self._process = process

    @property
    def process(self) -> Process:
        """The process this actor lives in."""
        return self._process

    @property
    def now(self) -> float:
        """The clock's reading at the start of the current turn (epoch seconds)."""
        return self._host.turn_now

    @property
    def trace_id(self) -> str:
        """An id for the current turn, made when first asked for (records carry it)."""
        return self._host.trace_id

    def connection(self) -> sqlite3.Connection:
        """The turn's SQLite connection, inside the turn's transaction, for the tables the layer owns
        (declared in ``Actor.components``). Unlike ``self.sql`` it may write ``roost_*`` tables; it
        must not begin, commit or roll back. Turn only."""
        return self._host.turn_connection()

    def emit(self, event: Any) -> int:
        """Log a durable event and broadcast it, as ``Actor.emit``; returns its ``seq``."""
        return self._host.emit(event)

    def checkpoint(self) -> None:
        """Inside a turn: commit the writes so far and release the outputs so far, as a streaming call
        does at each ``yield`` (a rollback of the turn then returns here). Turn only: outside a turn it
        raises ``NotInTurn`` and touches nothing."""
        self._host.require_turn()
        self._host.checkpoint()

    def savepoint(self, name: str) -> Savepoint:
        """Inside a turn: a nested savepoint named ``name`` (an SQL identifier). ``rollback()`` undoes
        everything done since (SQL writes, ``set_state``, ``emit``, queued outputs) and keeps the rest
        of the turn; ``release()`` keeps it. One of the two, once. Turn only (``NotInTurn``)."""
        if not name.isidentifier():
            raise ValueError(f"savepoint name must be an identifier, got {name!r}")
        return self._host.savepoint(name)
