"""What goes into an actor's mailbox: one small dataclass per kind of input.

The transport, the registry and the testing kit build these and hand them to
:meth:`ActorHost.submit <roost.actors.host.ActorHost.submit>`; the mailbox task takes
them one at a time and :mod:`roost.actors.handlers` runs each as a turn (a :class:`Deliver` is the one
input that runs no turn).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from roost.actors.connection import Connection, Principal
from roost.actors.refs import Key

if TYPE_CHECKING:
    from roost.actors.actor import Actor

__all__ = [
    "Call",
    "Connect",
    "Deliver",
    "Disconnect",
    "Input",
    "Key",
    "Mailbox",
    "Message",
    "ReplayPage",
    "Task",
    "Wake",
]


@dataclass(slots=True)
class Connect:
    """A connection's first input: ``on_connect``, then its welcome and replay from ``cursor``."""

    conn: Connection
    cursor: int | None


@dataclass(slots=True)
class Message:
    """A client's free-form message: ``on_message``."""

    conn: Connection
    data: Any


@dataclass(slots=True)
class Disconnect:
    """The connection closed with ``code``: ``on_close``."""

    conn: Connection
    code: int


@dataclass(slots=True)
class Deliver:
    """A frame for a connection, delivered in order after every earlier input (no turn)."""

    conn: Connection
    text: str


@dataclass(slots=True)
class ReplayPage:
    """Read the next page of a connection's replay (its sink has drained); at most one is queued per
    connection, so the mailbox always takes it."""

    conn: Connection


@dataclass(slots=True)
class Call:
    """A call from a connection (``conn`` set, reply by frame) or in-process (``reply`` future);
    ``key``: its idempotency key, if any (:mod:`roost.actors.callkeys`)."""

    method: str
    args: list[Any]
    kwargs: dict[str, Any]
    conn: Connection | None = None
    id: str = ""
    reply: asyncio.Future[Any] | None = None
    chunks: list[Any] | None = None
    chain: tuple[Key, ...] = ()
    principal: Principal | None = None
    key: str | None = None
    #: The caller's trace context, opaque here (set when tracing is on): the parent of the turn's span.
    trace: object = None


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


Input = Connect | Message | Disconnect | Call | Task | Deliver | Wake | ReplayPage


class Mailbox(Protocol):
    """What a transport holds of a live actor (``Registry.submit`` returns one): where its inputs go.

    :class:`~roost.actors.host.ActorHost` is the one implementation; a transport needs no more of it.
    """

    @property
    def stopping(self) -> bool:
        """The actor takes no more input."""

    def submit(self, item: Input) -> None:
        """Queue an input; raises ``ActorUnavailable`` (stopping) or ``Overloaded`` (mailbox full)."""

    def run_now(self, item: Call | Message) -> None:
        """Run a call's or a message's turn at once if the actor is parked with nothing queued (an
        inline turn), else queue it as :meth:`submit` does; raises what :meth:`submit` raises."""
