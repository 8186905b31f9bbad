"""What the faces of an actor need of its host, and what the host needs of its registry.

The actor runtime's objects call each other both ways: an :class:`~roost.actors.actor.Actor` asks its
host for its state and to write, its ``actor.extension`` asks for the turn's clock reading, ``self.sql``
for the turn's connection; the host asks its registry for the config, the clock, the directory and the
threads it owns, and the registry makes the hosts. So they do not import each other: each imports the
protocol of what it uses, here, and the concrete class satisfies it structurally (mypy checks it where
the object is handed over):

- :class:`HostApi`: the host as the actor's faces see it (``Actor``, ``TurnContext``, ``Sql``).
  :class:`~roost.actors.host.ActorHost` is one (checked where the host creates its actor).
- :class:`RegistryApi`: the registry as a host and its parts see it, and ``Actor.actor()``.
  :class:`~roost.actors.registry.Registry` is one (checked where the registry creates a host).

What the host's own parts (the turn template, the handlers, the state log, the alarms, the wake-ups,
the SQL guard) need of it is a larger protocol, :class:`~roost.actors.parts.HostCore`, one level up:
it names the ``Actor`` class, which imports this module. The import graph stays a tree: registry →
host → parts (turn, handlers, statelog, alarms, wakeups, sqlguard) → :mod:`~roost.actors.parts` →
actor → this module → connection, schedules, refs, config; none of them imports one above it.

A protocol lists what a caller may use, not everything the class does; everything here is read on
the hot path through an ordinary attribute or method of the concrete object, so it costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import random
    import sqlite3
    from concurrent.futures import ThreadPoolExecutor

    from roost.actors.config import RuntimeConfig
    from roost.actors.connection import Connection, Principal
    from roost.actors.refs import ActorRef, Key
    from roost.actors.schedules import ScheduleStore
    from roost.scheduler.clock import Clock
    from roost.storage import ActorFile, Directory

__all__ = ["HostApi", "RegistryApi", "Savepoint"]


class RegistryApi(Protocol):
    """The registry as a host and its parts see it (:class:`~roost.actors.registry.Registry` is one)."""

    @property
    def config(self) -> RuntimeConfig:
        """The runtime's knobs (limits, timeouts, retention)."""

    @property
    def clock(self) -> Clock:
        """The clock every timer of the runtime uses (a fake one in tests)."""

    @property
    def directory(self) -> Directory | None:
        """The directory database (None before the registry has started)."""

    @property
    def rng(self) -> random.Random:
        """Retry jitter of wake-ups; tests may seed or replace it."""

    def alarm_set(self, at: float) -> None:
        """A live actor wrote its alarm: the dispatcher may need to wake earlier."""

    def checkpoints(self) -> ThreadPoolExecutor:
        """The threads that run actor WAL checkpoints."""

    def release_file(
        self, key: Key, file: ActorFile, last_state: tuple[str, int, float] | None = None
    ) -> None:
        """Close a deactivated actor's file off the loop, after writing its snapshot row."""

    def ref(
        self, kind: str, name: str, *, chain: tuple[Key, ...] = (), principal: Principal | None = None
    ) -> ActorRef:
        """A reference to another actor of this process."""


class HostApi(Protocol):
    """One live actor's host as the actor's faces see it: ``Actor``, ``actor.extension`` and
    ``self.sql`` (:class:`~roost.actors.host.ActorHost` is one). Turn-only members raise
    ``NotInTurn`` outside a turn."""

    #: A statement of ``self.sql`` is being prepared (the SQL guard checks it; see ``sqlguard``).
    user_sql: bool
    #: The open turn changed the schedules or the queue: the directory's alarm needs syncing.
    alarm_dirty: bool

    @property
    def name(self) -> str: ...

    @property
    def registry(self) -> RegistryApi: ...

    @property
    def file(self) -> ActorFile:
        """The actor's file (the runtime's; ``self.sql`` is the actor's way in)."""

    @property
    def schedules(self) -> ScheduleStore: ...

    @property
    def state(self) -> Any:
        """The current state (as of the last ``set_state``)."""

    @property
    def seq(self) -> int:
        """The ``seq`` of the newest logged frame."""

    @property
    def connections(self) -> dict[str, Connection]:
        """The welcomed connections, by id."""

    @property
    def chain(self) -> tuple[Key, ...]:
        """The actors the open turn's call chain went through, this one last."""

    @property
    def caller(self) -> Connection | None:
        """The connection whose input the open turn handles."""

    @property
    def principal(self) -> Principal | None:
        """Who caused the open turn."""

    @property
    def read_only_turn(self) -> bool:
        """The open turn serves a read-only principal: nothing may be written."""

    @property
    def turn_now(self) -> float:
        """The clock's reading at the start of the open turn."""

    @property
    def trace_id(self) -> str:
        """An id for the open turn, made when first asked for."""

    def require_turn(self) -> None: ...

    def turn_connection(self) -> sqlite3.Connection:
        """The turn's SQLite connection. Turn only."""

    def checkpoint(self) -> None:
        """Inside a turn: make the writes so far durable and release the outputs so far."""

    def savepoint(self, name: str) -> Savepoint:
        """A nested savepoint of the open turn. Turn only."""

    def set_state(self, state: Any, source: Connection | None) -> None: ...

    def emit(self, event: Any) -> int: ...

    def broadcast(self, data: Any, exclude: tuple[str, ...], tags: frozenset[str] | None) -> int: ...

    def add_schedule(self, trigger: dict[str, Any], callback: str, payload: Any, **options: Any) -> Any: ...

    def cancel_schedule(self, id_or_key: str) -> bool: ...


class Savepoint(Protocol):
    """A nested savepoint of the open turn: ``rollback()`` undoes what was done since (SQL, state,
    ``seq``, queued outputs), ``release()`` keeps it; one of the two, once."""

    def rollback(self) -> None: ...

    def release(self) -> None: ...
