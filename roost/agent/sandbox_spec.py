"""Sandbox workspaces, what they are made of: the spec an agent kind declares (manifest, permissions
profile, disposition, limits), the errors of a refused operation, and snapshots in the blob store.

The directory itself — paths, reads and writes, scans, restores — is :mod:`roost.agent.sandbox`;
the row beside the run is :mod:`roost.agent.workspaces`'s (docs/design.md, *Sandbox workspaces*).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, field_validator

from roost.agent.payloads import BlobStore

__all__ = [
    "DISPOSITIONS",
    "AccessDenied",
    "DigestMismatch",
    "Disposition",
    "Entries",
    "LimitExceeded",
    "Limits",
    "Manifest",
    "ManifestEntry",
    "PathRefused",
    "PermissionsProfile",
    "SandboxError",
    "SandboxSpec",
    "changed",
    "digest_of",
    "load_snapshot",
    "snapshot",
    "total",
    "under",
]

Disposition = Literal["resumable", "snapshot", "recreate"]
DISPOSITIONS: tuple[Disposition, ...] = ("resumable", "snapshot", "recreate")

#: A workspace's files as recorded: path → ``[digest, size]``.
Entries = dict[str, list[Any]]


class SandboxError(ValueError):
    """A refused workspace operation. ``retryable`` is False: a background step fails at once."""

    code = "sandbox_error"
    retryable = False


class PathRefused(SandboxError):
    """A path that is not a plain relative path inside the workspace, or that meets a symlink."""

    code = "path_refused"


class AccessDenied(SandboxError):
    """The permissions profile does not allow this read or write."""

    code = "access_denied"


class LimitExceeded(SandboxError):
    """A manifest, file or workspace past one of its :class:`Limits`."""

    code = "limit_exceeded"


class DigestMismatch(SandboxError):
    """Content whose digest is not the one recorded (a manifest entry, a blob)."""

    code = "digest_mismatch"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds of one workspace."""

    max_entries: int = 1000
    max_file_bytes: int = 1 << 20
    max_total_bytes: int = 16 << 20
    max_path_chars: int = 255
    max_depth: int = 16


@dataclass(frozen=True, slots=True)
class PermissionsProfile:
    """Which prefixes a tool may read and write (``""`` is the whole workspace; ``"src"`` covers
    ``src`` and everything under ``src/``). ``read_only`` wins over ``read_write``."""

    name: str = "read_write"
    read_only: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ("",)

    def can_read(self, path: str) -> bool:
        return any(under(path, p) for p in (*self.read_only, *self.read_write))

    def can_write(self, path: str) -> bool:
        return any(under(path, p) for p in self.read_write) and not any(
            under(path, p) for p in self.read_only
        )

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "read_only": list(self.read_only), "read_write": list(self.read_write)}


def under(path: str, prefix: str) -> bool:
    prefix = prefix.strip("/")
    return prefix == "" or path == prefix or path.startswith(prefix + "/")


class ManifestEntry(BaseModel):
    """One file of a manifest: its path, its content (UTF-8 text) and the content's digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    kind: str = "file"
    content: str
    digest: str

    @field_validator("kind")
    @classmethod
    def _files_only(cls, kind: str) -> str:
        if kind == "symlink":
            raise ValueError("symlinks are not allowed in a manifest")
        if kind != "file":
            raise ValueError(f"a manifest entry is a file, not {kind!r}")
        return kind


class Manifest(BaseModel):
    """The contract of a fresh workspace: a version and its files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    entries: tuple[ManifestEntry, ...] = ()

    @classmethod
    def of(cls, version: str, files: Mapping[str, str]) -> Manifest:
        """A manifest of ``files`` (path → text), each with the digest of its content."""
        return cls(
            version=version,
            entries=tuple(
                ManifestEntry(path=p, content=t, digest=digest_of(t.encode())) for p, t in files.items()
            ),
        )

    def ref(self, blobs: BlobStore) -> str:
        """The manifest as a blob (its reference is what a row keeps)."""
        return blobs.put(orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS))

    @classmethod
    def load(cls, blobs: BlobStore, ref: str) -> Manifest:
        data = blobs.get(ref)
        if digest_of(data) != ref:
            raise DigestMismatch(f"manifest blob {ref} does not hold its digest")
        return cls.model_validate(orjson.loads(data))


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What an agent kind declares (``sandbox = SandboxSpec(...)``): each run's workspace."""

    manifest: Manifest
    permissions: PermissionsProfile = PermissionsProfile()
    disposition: Disposition = "resumable"
    limits: Limits = Limits()
    #: Where a run's workspace starts: ``manifest`` (fresh), or ``session``: from the final snapshot
    #: of the newest ended run of the same session (the manifest for the session's first run).
    start: Literal["manifest", "session"] = "manifest"

    def __post_init__(self) -> None:
        if self.disposition not in DISPOSITIONS:
            raise ValueError(f"disposition must be one of {DISPOSITIONS}, not {self.disposition!r}")
        if self.start not in ("manifest", "session"):
            raise ValueError(f"start must be 'manifest' or 'session', not {self.start!r}")


def snapshot(blobs: BlobStore, manifest_ref: str, entries: Entries) -> str:
    """An immutable snapshot of ``entries`` (whose contents are in ``blobs``): its id, a blob ref."""
    body = {"manifest_ref": manifest_ref, "entries": entries}
    return blobs.put(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))


def load_snapshot(blobs: BlobStore, snapshot_id: str) -> Entries:
    data = blobs.get(snapshot_id)
    if digest_of(data) != snapshot_id:
        raise DigestMismatch(f"snapshot {snapshot_id} does not hold its digest")
    entries: Entries = orjson.loads(data)["entries"]
    return entries


def changed(before: Entries, after: Entries) -> tuple[list[str], list[str]]:
    """Paths written (new or different) and paths removed between two entries."""
    written = sorted(p for p in after if before.get(p, [None])[0] != after[p][0])
    removed = sorted(p for p in before if p not in after)
    return written, removed


def total(entries: Iterable[list[Any]]) -> int:
    return sum(int(e[1]) for e in entries)
