"""Storage: one SQLite file per actor, the directory database, and forward migrations.

Knows nothing of WebSockets or agents. See ``docs/design.md`` for the data flow.
"""

from roost.storage.actor_file import ActorFile, Durability, LogRow
from roost.storage.directory import ActorEntry, Directory, DirectoryBusy, WorkerEntry, WorkerStatus
from roost.storage.errors import (
    ActorLocked,
    InvalidActorAddress,
    MigrationError,
    RoostError,
    StorageError,
)
from roost.storage.migrations import Migration, apply_migrations
from roost.storage.paths import (
    MAX_NAME_CHARS,
    actor_digest,
    actor_path,
    sandbox_path,
    validate_kind,
    validate_name,
)

__all__ = [
    "MAX_NAME_CHARS",
    "ActorEntry",
    "ActorFile",
    "ActorLocked",
    "Directory",
    "DirectoryBusy",
    "Durability",
    "InvalidActorAddress",
    "LogRow",
    "Migration",
    "MigrationError",
    "RoostError",
    "StorageError",
    "WorkerEntry",
    "WorkerStatus",
    "actor_digest",
    "actor_path",
    "apply_migrations",
    "sandbox_path",
    "validate_kind",
    "validate_name",
]
