"""Errors raised by the storage layer.

The whole hierarchy of Roost's errors (the storage part is defined here, the rest in
:mod:`roost.actors.errors`, which re-exports these)::

    RoostError
    ├── InvalidActorAddress (also ValueError)  bad kind or name: refused before any file is touched
    ├── StorageError
    │   ├── ActorLocked                        the actor is live in another process
    │   └── MigrationError                     a migration failed; the actor does not start
    └── (roost.actors.errors) ActorError ...
"""

from __future__ import annotations

__all__ = [
    "ActorLocked",
    "InvalidActorAddress",
    "MigrationError",
    "RoostError",
    "StorageError",
]


class RoostError(Exception):
    """Base class of every error Roost raises on purpose."""


class InvalidActorAddress(RoostError, ValueError):
    """A kind or name that cannot address an actor. Carries the offending ``field`` and ``reason``."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"invalid actor {field}: {reason}")
        self.field = field
        self.reason = reason


class StorageError(RoostError):
    """A failure of an actor's file or of the directory database."""


class ActorLocked(StorageError):
    """The actor's file is held by another live process on the same data directory (guarantee 1)."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"actor {kind}/{name!r} is live in another process")
        self.kind = kind
        self.name = name


class MigrationError(StorageError):
    """A migration step failed; nothing of it was applied."""

    def __init__(self, component: str, version: int, cause: BaseException) -> None:
        super().__init__(f"migration {component} v{version} failed: {cause}")
        self.component = component
        self.version = version
