"""Actors: named, stateful, durable, one turn at a time. Knows nothing of Starlette.

See :mod:`actors.actor` for the API a user writes against, :mod:`actors.host` for turns and the output
gate, :mod:`actors.registry` for activation and dormancy, :mod:`actors.errors` for the error hierarchy.
"""

from actors.actor import Actor
from actors.connection import ANONYMOUS, Connection, Principal, Sink, Subscriptions
from actors.decorators import callable, wakeup
from actors.errors import (
    ActorError,
    ActorNotFound,
    ActorUnavailable,
    CallTimeout,
    InvalidActorAddress,
    Reject,
    RoostError,
    RpcError,
    UnknownKind,
)
from actors.registry import ActorRef, Registry, RuntimeConfig
from actors.schedules import DeadLetter, Misfire, RetryPolicy, Schedule

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
    "Misfire",
    "Principal",
    "Registry",
    "Reject",
    "RetryPolicy",
    "RoostError",
    "RpcError",
    "RuntimeConfig",
    "Schedule",
    "Sink",
    "Subscriptions",
    "UnknownKind",
    "callable",
    "wakeup",
]
