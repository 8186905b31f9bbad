"""Every error Roost raises on purpose, in one hierarchy::

    RoostError                                     (roost.storage.errors)
    ├── InvalidActorAddress (ValueError)           bad kind or name           close 4400 / HTTP 400
    ├── StorageError                               (roost.storage.errors)
    │   ├── ActorLocked                            live in another process    close 1013 / HTTP 503
    │   └── MigrationError                         a migration step failed
    └── ActorError                                 raised by the actor runtime
        ├── UnknownKind (LookupError)              no kind of that name       close 4404 / HTTP 404
        ├── RpcError                               a call failed; ``code`` goes on the wire
        │   ├── ActorNotFound (LookupError)        code not_found: never created  HTTP 404
        │   ├── MethodNotFound (LookupError)       code method_not_found
        │   ├── InvalidArguments (TypeError)       code invalid_arguments
        │   ├── HandlerError                       code handler_error (the method raised)
        │   ├── CallTimeout (TimeoutError)         code timeout
        │   ├── ReentrantCall                      code reentrant_call
        │   ├── IdempotencyConflict (ValueError)   code idempotency_conflict   HTTP 409
        │   ├── IdempotencyResultUnavailable       code idempotency_result_unavailable  HTTP 409
        │   ├── Overloaded                         code overloaded            close 1013 / HTTP 503
        │   ├── QueueFull                          code queue_full: the actor's queue is at its limit
        │   ├── PayloadTooLarge (ValueError)       code payload_too_large: a queued payload too big
        │   └── ActorUnavailable                   code actor_unavailable     close 1013 / HTTP 503
        │       └── ActorDamaged                   code actor_damaged         close 1011 / HTTP 503
        ├── Reject                                 ``on_connect`` refuses     close 4403 (or 4400-4499)
        ├── StateError (ValueError)                state not valid or not JSON (a call: code invalid_state)
        ├── TooFewDescriptors (RuntimeError)       the descriptor limit fits too few actors to start
        └── NotInTurn (RuntimeError)               actor API used outside a turn

An actor raises ``RpcError(code, message)`` to send its own error code to the caller.
"""

from __future__ import annotations

from roost.storage.errors import (
    ActorLocked,
    InvalidActorAddress,
    MigrationError,
    RoostError,
    StorageError,
)
from roost.storage.paths import local_name

__all__ = [
    "ActorDamaged",
    "ActorError",
    "ActorLocked",
    "ActorNotFound",
    "ActorUnavailable",
    "CallTimeout",
    "HandlerError",
    "IdempotencyConflict",
    "IdempotencyResultUnavailable",
    "InvalidActorAddress",
    "InvalidArguments",
    "MethodNotFound",
    "MigrationError",
    "NotInTurn",
    "Overloaded",
    "PayloadTooLarge",
    "QueueFull",
    "ReentrantCall",
    "Reject",
    "RoostError",
    "RpcError",
    "StateError",
    "StorageError",
    "TooFewDescriptors",
    "UnknownKind",
    "shown_name",
]


class ActorError(RoostError):
    """Base of errors raised by the actor runtime."""


class UnknownKind(ActorError, LookupError):
    def __init__(self, kind: str) -> None:
        super().__init__(f"unknown actor kind {kind!r}")
        self.kind = kind


#: An actor's name as its client sent it: messages to clients never show a tenant's prefix.
shown_name = local_name


class RpcError(ActorError):
    """A call failed. ``code`` and ``message`` are sent to the caller as they are."""

    code: str = "rpc_error"

    def __init__(self, code: str | None = None, message: str = "") -> None:
        if code is not None:
            self.code = code
        super().__init__(message or self.code)
        self.message = message or self.code


class ActorNotFound(RpcError, LookupError):
    """The actor was never created, and what was asked cannot create it: a read (HTTP ``GET``, the
    admin's reads) or a read-only call (``@callable(readonly=True)``) from HTTP, another actor or the
    test kit. Nothing is created. Code ``not_found``."""

    code = "not_found"

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(message=f"actor {kind}/{shown_name(name)!r} does not exist")
        self.kind = kind
        self.name = name


class MethodNotFound(RpcError, LookupError):
    code = "method_not_found"


class InvalidArguments(RpcError, TypeError):
    code = "invalid_arguments"


class HandlerError(RpcError):
    code = "handler_error"


class IdempotencyConflict(RpcError, ValueError):
    """A key already names a pending thing that differs from what is asked now (a schedule's key
    with another callback, payload, time or policy)."""

    code = "idempotency_conflict"


class IdempotencyResultUnavailable(RpcError):
    """The call under this idempotency key ran once, and its outcome was larger than the bytes of
    records its actor keeps (``Actor.call_keys_bytes``), so it was not kept: the call is not run
    again, and its result cannot be answered (:mod:`roost.actors.callkeys`)."""

    code = "idempotency_result_unavailable"


class CallTimeout(RpcError, TimeoutError):
    code = "timeout"


class ReentrantCall(RpcError):
    code = "reentrant_call"


class Overloaded(RpcError):
    code = "overloaded"


class QueueFull(RpcError):
    """The actor's queue holds ``Actor.queue_limit`` live items: nothing was enqueued
    (:mod:`roost.actors.queue`)."""

    code = "queue_full"


class PayloadTooLarge(RpcError, ValueError):
    """A queued item's payload is more JSON than ``Actor.queue_payload_bytes``: nothing was enqueued
    (:mod:`roost.actors.queue`)."""

    code = "payload_too_large"


class ActorUnavailable(RpcError):
    code = "actor_unavailable"


class TooFewDescriptors(ActorError, RuntimeError):
    """The process's descriptor limit, even raised to its hard limit, leaves room for too few live
    actors beside the reserve for sockets (:mod:`roost.actors.descriptors`): the runtime does not
    start. The message is one line that says the numbers and what to change."""


class ActorDamaged(ActorUnavailable):
    """The actor's file is missing or empty although the directory lists it, cannot be read by
    SQLite, or is older than the seq it had committed (:mod:`roost.storage.damage`): the actor is
    refused, never re-created or served with acknowledged writes missing. ``roost inspect KIND NAME``
    (``--data DIR`` or ``--server URL``) shows why; ``roost delete`` clears it, after which the name
    starts afresh."""

    code = "actor_damaged"

    def __init__(self, kind: str, name: str, reason: str) -> None:
        super().__init__(
            message=f"actor {kind}/{shown_name(name)!r} is damaged: {reason} "
            "(an operator can inspect it with roost inspect KIND NAME, --data DIR or --server URL, "
            "and clear it with roost delete)"
        )
        self.kind = kind
        self.name = name
        self.reason = reason


class Reject(ActorError):
    """Raised by ``on_connect`` to refuse a connection with a close ``code`` (4400–4499).

    The range is the one clients treat as final (docs/protocol.md): a refused connection is not
    retried. To ask a client to come back later, close it with 1013 instead.
    """

    def __init__(self, reason: str = "rejected", code: int = 4403) -> None:
        if not 4400 <= code <= 4499:
            raise ValueError("Reject codes are terminal application close codes, 4400-4499")
        super().__init__(reason)
        self.reason = reason
        self.code = code


class StateError(ActorError, ValueError):
    """A new state was refused by ``validate_state`` or cannot be encoded as JSON."""


class NotInTurn(ActorError, RuntimeError):
    """An API that writes or sends was used outside a turn (outside the actor's mailbox)."""
