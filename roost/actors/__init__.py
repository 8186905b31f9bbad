"""Actors: named, stateful, durable, one turn at a time. Knows nothing of Starlette.

See :mod:`roost.actors.actor` for the API a user writes against, :mod:`roost.actors.host` for one
live actor (its lifecycle and mailbox task), :mod:`roost.actors.turn` for the one template every turn
runs in, :mod:`roost.actors.outputs` for the output gate, :mod:`roost.actors.handlers` for what each
kind of input does, :mod:`roost.actors.arguments` for how a call's arguments are checked against
the method's signature, :mod:`roost.actors.registry` for activation and dormancy, and
:mod:`roost.actors.errors` for the error hierarchy. The modules import each other as a tree: where
two need each other, the lower one uses a protocol of the other's shape (:mod:`roost.actors.interfaces`
for the actor's faces and the registry, :mod:`roost.actors.parts` for the host's parts).

The public API is what this package exports (and :mod:`roost.actors.extension` for layers on top):
the upper layers import only these names, never a module of the actor core (``make lint``).
"""

from roost.actors.actor import Actor
from roost.actors.callkeys import KEYS_BYTES, KEYS_KEPT, MAX_KEY
from roost.actors.connection import (
    ANONYMOUS,
    MAX_CONNECTION_STATE_BYTES,
    MAX_REQUEST_BYTES,
    Backpressure,
    Connection,
    Params,
    Principal,
    Request,
    Sink,
    Subscriptions,
)
from roost.actors.decorators import CallableInfo, callable, callables_of, wakeup
from roost.actors.descriptors import FDS_PER_ACTOR, DescriptorBudget, fit_descriptors
from roost.actors.errors import (
    ActorDamaged,
    ActorError,
    ActorLocked,
    ActorNotFound,
    ActorUnavailable,
    CallTimeout,
    HandlerError,
    IdempotencyConflict,
    IdempotencyResultUnavailable,
    InvalidActorAddress,
    InvalidArguments,
    MethodNotFound,
    MigrationError,
    NotInTurn,
    Overloaded,
    PayloadTooLarge,
    QueueFull,
    ReentrantCall,
    Reject,
    RoostError,
    RpcError,
    StateError,
    StorageError,
    TooFewDescriptors,
    UnknownKind,
)
from roost.actors.inline import INLINE_TURNS, FastPath, fast_paths_off
from roost.actors.inputs import Call, Connect, Deliver, Disconnect, Input, Key, Mailbox, Message, Task, Wake
from roost.actors.observe import Observer, Observers
from roost.actors.queue import QueueItem, QueueStatus, queue_report
from roost.actors.registry import ActorRef, Registry, RuntimeConfig
from roost.actors.schedules import DeadLetter, Misfire, RetryPolicy, Schedule, ScheduleStatus

__all__ = [
    "ANONYMOUS",
    "FDS_PER_ACTOR",
    "INLINE_TURNS",
    "KEYS_BYTES",
    "KEYS_KEPT",
    "MAX_CONNECTION_STATE_BYTES",
    "MAX_KEY",
    "MAX_REQUEST_BYTES",
    "Actor",
    "ActorDamaged",
    "ActorError",
    "ActorLocked",
    "ActorNotFound",
    "ActorRef",
    "ActorUnavailable",
    "Backpressure",
    "Call",
    "CallTimeout",
    "CallableInfo",
    "Connect",
    "Connection",
    "DeadLetter",
    "Deliver",
    "DescriptorBudget",
    "Disconnect",
    "FastPath",
    "HandlerError",
    "IdempotencyConflict",
    "IdempotencyResultUnavailable",
    "Input",
    "InvalidActorAddress",
    "InvalidArguments",
    "Key",
    "Mailbox",
    "Message",
    "MethodNotFound",
    "MigrationError",
    "Misfire",
    "NotInTurn",
    "Observer",
    "Observers",
    "Overloaded",
    "Params",
    "PayloadTooLarge",
    "Principal",
    "QueueFull",
    "QueueItem",
    "QueueStatus",
    "ReentrantCall",
    "Registry",
    "Reject",
    "Request",
    "RetryPolicy",
    "RoostError",
    "RpcError",
    "RuntimeConfig",
    "Schedule",
    "ScheduleStatus",
    "Sink",
    "StateError",
    "StorageError",
    "Subscriptions",
    "Task",
    "TooFewDescriptors",
    "UnknownKind",
    "Wake",
    "callable",
    "callables_of",
    "fast_paths_off",
    "fit_descriptors",
    "queue_report",
    "wakeup",
]
