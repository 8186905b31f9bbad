"""Actors: named, stateful, durable, one turn at a time. Knows nothing of Starlette.

See :mod:`roost.actors.actor` for the API a user writes against, :mod:`roost.actors.host` for one
live actor (its lifecycle and mailbox task), :mod:`roost.actors.turn` for the one template every turn
runs in, :mod:`roost.actors.outputs` for the output gate, :mod:`roost.actors.handlers` for what each
kind of input does, :mod:`roost.actors.registry` for activation and dormancy, and
:mod:`roost.actors.errors` for the error hierarchy. The modules import each other as a tree: where
two need each other, the lower one uses a protocol of the other's shape (:mod:`roost.actors.interfaces`
for the actor's faces and the registry, :mod:`roost.actors.parts` for the host's parts).
"""

from roost.actors.actor import Actor
from roost.actors.connection import ANONYMOUS, Connection, Principal, Sink, Subscriptions
from roost.actors.decorators import callable, wakeup
from roost.actors.errors import (
    ActorError,
    ActorNotFound,
    ActorUnavailable,
    CallTimeout,
    InvalidActorAddress,
    InvalidArguments,
    Overloaded,
    Reject,
    RoostError,
    RpcError,
    UnknownKind,
)
from roost.actors.registry import ActorRef, Registry, RuntimeConfig
from roost.actors.schedules import DeadLetter, Misfire, RetryPolicy, Schedule, ScheduleStatus

__all__ = [
    "ANONYMOUS",
    "Actor",
    "ActorError",
    "ActorNotFound",
    "ActorRef",
    "ActorUnavailable",
    "CallTimeout",
    "Connection",
    "DeadLetter",
    "InvalidActorAddress",
    "InvalidArguments",
    "Misfire",
    "Overloaded",
    "Principal",
    "Registry",
    "Reject",
    "RetryPolicy",
    "RoostError",
    "RpcError",
    "RuntimeConfig",
    "Schedule",
    "ScheduleStatus",
    "Sink",
    "Subscriptions",
    "UnknownKind",
    "callable",
    "wakeup",
]
