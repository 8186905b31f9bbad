"""From an actor's address ``(kind, name)`` to its file, so that no name can reach outside the data dir.

The file of an actor is ``<data>/actors/<kind>/<h[0:2]>/<h[2:4]>/<h>.sqlite`` where ``h`` is the
BLAKE2b-160 hex digest of the UTF-8 bytes of ``kind``, a NUL byte and ``name``. The name never appears in
the path, so ``../../etc/passwd``, ``a/b``, ``..`` or a NUL byte address ordinary files inside the
directory. The kind does appear, and is therefore restricted to ``[a-z][a-z0-9_-]{0,62}``.

Valid names: any string of 1 to :data:`MAX_NAME_CHARS` code points that can be encoded as UTF-8 (which
excludes lone surrogates). Everything else is refused with :class:`~roost.storage.errors.InvalidActorAddress`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from roost.storage.errors import InvalidActorAddress

__all__ = [
    "MAX_NAME_CHARS",
    "actor_digest",
    "actor_path",
    "local_name",
    "sandbox_path",
    "validate_kind",
    "validate_name",
]

MAX_NAME_CHARS = 256
_KIND_RE = re.compile(r"[a-z][a-z0-9_-]{0,62}")


def local_name(name: str) -> str:
    """An actor's name as its client sent it: a tenant's actor is stored as ``tenant NUL name``."""
    return name.rpartition("\x00")[2]


def validate_kind(kind: object) -> str:
    """Return ``kind`` if it is a valid kind identifier, else raise ``InvalidActorAddress``."""
    if not isinstance(kind, str) or not _KIND_RE.fullmatch(kind):
        raise InvalidActorAddress("kind", "must match [a-z][a-z0-9_-]{0,62}")
    return kind


def validate_name(name: object) -> str:
    """Return ``name`` if it is a valid actor name, else raise ``InvalidActorAddress``."""
    if not isinstance(name, str):
        raise InvalidActorAddress("name", "must be a string")
    if not name:
        raise InvalidActorAddress("name", "must not be empty")
    # a tenant's actor is stored as ``tenant NUL name``: the limit is the name's, as its client sent
    # it (tenants are at most 128 characters, checked where tokens are)
    if len(local_name(name)) > MAX_NAME_CHARS:
        raise InvalidActorAddress("name", f"longer than {MAX_NAME_CHARS} characters")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidActorAddress("name", "not valid Unicode (lone surrogate)") from None
    return name


def actor_digest(kind: str, name: str) -> str:
    """The hex digest that names an actor's file. Stable across versions: changing it loses data."""
    raw = kind.encode("utf-8") + b"\x00" + name.encode("utf-8")
    return hashlib.blake2b(raw, digest_size=20).hexdigest()


def actor_path(data_dir: Path, kind: str, name: str) -> Path:
    """The actor's SQLite file under ``data_dir``; validates both parts first."""
    h = actor_digest(validate_kind(kind), validate_name(name))
    return data_dir / "actors" / kind / h[0:2] / h[2:4] / f"{h}.sqlite"


def sandbox_path(data_dir: Path, kind: str, name: str) -> Path:
    """Where the actor's sandbox workspaces live (``<data>/sandboxes/<kind>/<h>/``, the agent runtime's
    :mod:`roost.agent.workspaces`); removed with the actor."""
    h = actor_digest(validate_kind(kind), validate_name(name))
    return data_dir / "sandboxes" / kind / h
