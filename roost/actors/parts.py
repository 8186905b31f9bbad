"""What the host's parts need of it: :class:`HostCore`, and of the open turn: :class:`TurnApi`.

:class:`~roost.actors.host.ActorHost` is a small hub over modules of one concern each — the turn
template (:mod:`~roost.actors.turn`), one handler per input (:mod:`~roost.actors.handlers`), the state
and log (:mod:`~roost.actors.statelog`), the alarms (:mod:`~roost.actors.alarms`), the fire turns
(:mod:`~roost.actors.wakeups`) and the SQL guard (:mod:`~roost.actors.sqlguard`). The host imports
them and binds some of their functions as its methods; they take the host as their first argument,
typed :class:`HostCore`, and import this module, not the host. ``ActorHost`` satisfies ``HostCore``
structurally; mypy checks it where the host hands itself to its :class:`~roost.actors.turn.Turn`.
In the same way the turn is a :class:`TurnApi` to the parts that run turns (the handlers and the
wake-ups), and the registry a :class:`RegistryCore` to the host.

This module sits above :mod:`roost.actors.actor` (a part calls the actor's hooks) and below the
parts; at run time it is only type declarations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from roost.actors.interfaces import HostApi, RegistryApi

if TYPE_CHECKING:
    import asyncio

    from roost.actors.actor import Actor, Process
    from roost.actors.callkeys import CallKeys
    from roost.actors.connection import Connection, Principal
    from roost.actors.decorators import CallableInfo
    from roost.actors.errors import ActorUnavailable
    from roost.actors.inputs import Input
    from roost.actors.observe import Observer
    from roost.actors.outputs import OutputGate
    from roost.actors.refs import Key
    from roost.scheduler.clock import Clock

__all__ = ["Failed", "HostCore", "RegistryCore", "SavepointApi", "TurnApi"]


class RegistryCore(RegistryApi, Protocol):
    """The registry as the host sees it (:class:`~roost.actors.registry.Registry` is one)."""

    @property
    def process(self) -> Process:
        """The extension API's per-process side, handed to each actor's ``extension``."""

    @property
    def observer(self) -> Observer | None:
        """Metrics and traces (None: off), read by each host when it is made."""

    def forget(self, host: HostCore) -> None:
        """A host that stopped after a failure leaves the registry's table."""

    def flush_soon(self, host: Any, loop: asyncio.AbstractEventLoop) -> None:
        """Call ``host.flush_soon()`` at the end of this loop iteration (one callback for every host
        that ran a turn inline in it)."""


class SavepointApi(Protocol):
    """A nested savepoint of the open turn (:class:`~roost.actors.turn.Savepoint`)."""

    def rollback(self) -> None: ...

    def release(self) -> None: ...


class TurnApi(Protocol):
    """The turn template as the parts that run turns see it (:class:`~roost.actors.turn.Turn`)."""

    @property
    def ok(self) -> bool:
        """The last turn committed."""

    @property
    def now(self) -> float:
        """The clock's ``now()`` at the open turn's start."""

    @property
    def trace_id(self) -> str: ...

    def run(self, caller: Connection | None = None, failed: Failed = ..., item: Any = None) -> TurnApi:
        """Begin a turn; use the result as a ``with`` block around the turn's body."""

    def __enter__(self) -> TurnApi: ...

    def __exit__(self, tp: object, exc: BaseException | None, tb: object) -> bool: ...

    def checkpoint(self) -> None: ...

    def savepoint(self, name: str) -> SavepointApi: ...


class HostCore(HostApi, Protocol):
    """One live actor's host as its parts see it (:class:`~roost.actors.host.ActorHost` is one).

    The fields a turn saves and restores (``seq`` … ``saved_state_seq``) and the open turn's context
    (``chain``, ``caller``, ``principal``, ``read_only_turn``) are written by the parts."""

    seq: int
    oldest: int
    state: Any
    state_json: str
    state_seq: int
    saved_state_seq: int
    chain: tuple[Key, ...]
    caller: Connection | None
    principal: Principal | None
    read_only_turn: bool
    #: The id of the connection whose connect turn is open, alone (else empty): it is in
    #: ``connections`` already, but its welcome and replay carry that turn's logged frames.
    joining: tuple[str, ...]
    #: A turn changed the schedules: the directory's alarm needs syncing.
    alarm_dirty: bool
    #: What this host last wrote as its directory alarm (None: unknown or none).
    dir_alarm: float | None
    #: ``run_now`` is running a turn inline (it arms the turn's timeout itself if the turn suspends).
    stepping: bool
    #: Metrics and traces (None: off): :class:`~roost.actors.observe.Observer`.
    observer: Observer | None
    #: The input being handled (None between inputs).
    current: Input | None

    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> Key: ...

    @property
    def registry(self) -> RegistryCore: ...

    @property
    def actor(self) -> Actor: ...

    @property
    def callables(self) -> dict[str, CallableInfo]: ...

    @property
    def call_keys(self) -> CallKeys:
        """The idempotency keys of calls recorded in the actor's file."""

    @property
    def clock(self) -> Clock: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def task(self) -> asyncio.Task[None]:
        """The mailbox task (a turn's timeout cancels it where the turn waits)."""

    @property
    def gate(self) -> OutputGate: ...

    @property
    def turn(self) -> TurnApi: ...

    @property
    def retention(self) -> int: ...

    @property
    def turn_timeout(self) -> float: ...

    @property
    def validates(self) -> bool:
        """The kind defines ``validate_state``."""

    @property
    def watches(self) -> bool:
        """The kind defines ``on_state_changed``."""

    def require_writable(self) -> None: ...

    def flush(self) -> bool:
        """Commit the batch, then release its outputs in order. False if the commit failed."""

    def fail(self, err: ActorUnavailable) -> None:
        """Stop after a failure: answer everything queued, close connections, release the file."""

    def gate_frame(self, conn: Connection, text: str) -> None: ...

    def gate_close(self, conn: Connection, code: int, reason: str) -> None: ...

    def read_replay(self, conn: Connection) -> None: ...


#: ``failed(host, item, exc)``: answer the input whose turn was rolled back (exc is converted).
Failed = Callable[[HostCore, Any, BaseException], None]
