"""Sandbox workspaces, the backend: a directory made from a manifest, paths resolved inside it, a
permissions profile, limits, scans, snapshots in the blob store and their restore.

No asyncio and no database here: :mod:`roost.agent.workspaces` keeps the row beside the run and
decides when to materialise, reconcile, snapshot or restore (docs/design.md, *Sandbox workspaces*).
The spec, the errors and the snapshots are :mod:`roost.agent.sandbox_spec`'s, re-exported here.

Guarantees (tests in ``tests/test_sandbox.py``):

- **Nothing outside the root is read or written through a workspace**: a path is relative, made of
  plain names (no ``..``, no ``.``, no empty part, no NUL or backslash), and each of its components is
  opened from its parent's descriptor with ``O_NOFOLLOW``, so no symlink is followed — neither one in
  the manifest (refused), nor one made inside the workspace, nor one swapped in after the workspace
  was made (:class:`PathRefused`).
- **The profile is enforced**: reads only under a ``read_only`` or ``read_write`` prefix, writes only
  under a ``read_write`` prefix and never under a ``read_only`` one (:class:`AccessDenied`).
- **A manifest is verified before anything is written**: every entry's content must have its digest
  (:class:`DigestMismatch`); a blob restored into the workspace is checked the same way.
- **Bounded**: manifest entries, bytes per file, bytes in all, path length and depth
  (:class:`Limits`; :class:`LimitExceeded` names the bound).

Not guaranteed: this is not an OS sandbox. A tool is Python code in the server's process and can
open any file it likes without ``ctx.workspace``; a hard link made inside the root by someone with
access to the data directory is read like a file. The workspace guards the paths a tool, or a model
through a tool, names.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roost.agent.payloads import BlobStore
from roost.agent.sandbox_spec import (
    DISPOSITIONS,
    AccessDenied,
    DigestMismatch,
    Disposition,
    Entries,
    LimitExceeded,
    Limits,
    Manifest,
    ManifestEntry,
    PathRefused,
    PermissionsProfile,
    SandboxError,
    SandboxSpec,
    changed,
    digest_of,
    load_snapshot,
    snapshot,
    total,
    under,
)

#: The spec's names are this module's too (one import for the users of workspaces).
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
    "Reconciled",
    "SandboxError",
    "SandboxSpec",
    "Workspace",
    "changed",
    "digest_of",
    "load_snapshot",
    "snapshot",
    "total",
]

_TMP = ".roost-tmp-"


@dataclass(slots=True)
class Reconciled:
    """What putting a directory back to its entries did, path by path."""

    kept: list[str] = field(default_factory=list)
    reverted: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kept": self.kept,
            "reverted": self.reverted,
            "restored": self.restored,
            "removed": self.removed,
        }


class Workspace:
    """One workspace directory (``root``), its profile and limits. Every method is synchronous and
    quick (bounded by the limits); paths are resolved as the module doc says."""

    def __init__(self, root: Path, permissions: PermissionsProfile, limits: Limits, blobs: BlobStore) -> None:
        self.root = root
        self.permissions = permissions
        self.limits = limits
        self.blobs = blobs
        #: What the last scan found, by path: (inode, size, mtime_ns, digest). A file found with the
        #: same inode, size and modification time is not read again (a write replaces the inode).
        self.known: dict[str, tuple[int, int, int, str]] = {}
        self._total: int | None = None

    # -- paths ----------------------------------------------------------------------------------------
    def parts(self, path: Any) -> list[str]:
        """The components of a workspace path, or :class:`PathRefused`."""
        if not isinstance(path, str) or not path:
            raise PathRefused("a workspace path is a non-empty string")
        if len(path) > self.limits.max_path_chars:
            raise LimitExceeded(f"path longer than {self.limits.max_path_chars} characters")
        if path.startswith("/"):
            raise PathRefused(f"{path!r}: absolute paths are refused")
        if "\0" in path or "\\" in path:
            raise PathRefused(f"{path!r}: NUL and backslash are refused in a path")
        parts = path.split("/")
        for p in parts:
            if p in ("", ".", ".."):
                raise PathRefused(f"{path!r}: empty, '.' and '..' components are refused")
            if p.startswith(_TMP):
                raise PathRefused(f"{path!r}: names starting with {_TMP!r} are the runtime's")
        if len(parts) > self.limits.max_depth:
            raise LimitExceeded(f"path deeper than {self.limits.max_depth} components")
        return parts

    def _root_fd(self) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise SandboxError("the workspace directory is gone") from None

    def _walk_to_parent(self, parts: list[str], create: bool) -> int:
        """The descriptor of the directory holding ``parts[-1]`` (the caller closes it)."""
        fd = self._root_fd()
        try:
            for name in parts[:-1]:
                if create:
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    raise FileNotFoundError("/".join(parts)) from None
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise PathRefused(
                            f"{'/'.join(parts)!r}: {name!r} is a symlink or not a directory"
                        ) from None
                    raise
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    # -- tool operations (profile checked) ------------------------------------------------------------
    def read(self, path: Any) -> bytes:
        parts = self.parts(path)
        if not self.permissions.can_read(path):
            raise AccessDenied(f"{path!r}: not readable under profile {self.permissions.name!r}")
        return self._read(parts)

    def read_text(self, path: Any) -> str:
        return self.read(path).decode("utf-8", errors="replace")

    def write(self, path: Any, data: bytes | str) -> str:
        """Write ``data`` to ``path`` (parents made), atomically; its digest."""
        parts = self.parts(path)
        if not self.permissions.can_write(path):
            raise AccessDenied(f"{path!r}: not writable under profile {self.permissions.name!r}")
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if len(raw) > self.limits.max_file_bytes:
            raise LimitExceeded(
                f"{path!r}: {len(raw)} bytes, more than {self.limits.max_file_bytes} per file"
            )
        old = self._size(parts)
        total = self.total_bytes() - old + len(raw)
        if total > self.limits.max_total_bytes:
            raise LimitExceeded(
                f"the workspace would hold {total} bytes, more than {self.limits.max_total_bytes}"
            )
        self._write(parts, raw)
        self._total = total
        return digest_of(raw)

    def append(self, path: Any, data: bytes | str) -> str:
        """Append to ``path`` (made if missing): :meth:`write` of the old content and ``data``."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        try:
            old = self.read(path)
        except FileNotFoundError:
            old = b""
        return self.write(path, old + raw)

    def delete(self, path: Any) -> bool:
        parts = self.parts(path)
        if not self.permissions.can_write(path):
            raise AccessDenied(f"{path!r}: not writable under profile {self.permissions.name!r}")
        fd = self._walk_to_parent(parts, create=False)
        try:
            os.unlink(parts[-1], dir_fd=fd)
            self._total = None
            return True
        except FileNotFoundError:
            return False
        except IsADirectoryError:
            raise SandboxError(f"{path!r} is a directory") from None
        finally:
            os.close(fd)

    def listing(self, prefix: str = "") -> list[dict[str, Any]]:
        """The readable files under ``prefix`` (path and size), sorted."""
        if prefix:
            self.parts(prefix.rstrip("/"))
        return [
            {"path": p, "size": size}
            for p, size in sorted(self._files())
            if under(p, prefix) and self.permissions.can_read(p)
        ]

    # -- runtime operations (no profile: the runtime makes and repairs the directory) ------------------
    def _read(self, parts: list[str]) -> bytes:
        fd = self._walk_to_parent(parts, create=False)
        try:
            try:
                f = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # the last component is a symlink
                    raise PathRefused(f"{'/'.join(parts)!r} is a symlink") from None
                raise
        finally:
            os.close(fd)
        try:
            st = os.fstat(f)
            if not stat.S_ISREG(st.st_mode):
                raise PathRefused(f"{'/'.join(parts)!r} is not a regular file")
            if st.st_size > self.limits.max_file_bytes:
                raise LimitExceeded(f"{'/'.join(parts)!r}: more than {self.limits.max_file_bytes} bytes")
            chunks = []
            while chunk := os.read(f, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(f)

    def _size(self, parts: list[str]) -> int:
        try:
            fd = self._walk_to_parent(parts, create=False)
        except FileNotFoundError:
            return 0
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            return st.st_size if stat.S_ISREG(st.st_mode) else 0
        except FileNotFoundError:
            return 0
        finally:
            os.close(fd)

    def _write(self, parts: list[str], raw: bytes) -> None:
        fd = self._walk_to_parent(parts, create=True)
        try:
            tmp = _TMP + secrets.token_hex(6)
            f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
            try:
                view = memoryview(raw)
                while view:
                    view = view[os.write(f, view) :]
            finally:
                os.close(f)
            try:
                os.replace(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)  # a symlink there is replaced
            except OSError as exc:
                os.unlink(tmp, dir_fd=fd)
                if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise SandboxError(f"{'/'.join(parts)!r} is a directory") from None
                raise
        finally:
            os.close(fd)

    def _files(self) -> Iterator[tuple[str, int]]:
        """Every regular file (path, size); symlinks and other things are not files."""
        for path, kind, size in self._tree():
            if kind == "file":
                yield path, size

    def _tree(self) -> Iterator[tuple[str, str, int]]:
        """Everything in the directory: (path, ``file`` | ``dir`` | ``other``, size); never follows."""
        for path, kind, size, _st in self._stat_tree():
            yield path, kind, size

    def _stat_tree(self) -> Iterator[tuple[str, str, int, os.stat_result]]:
        """:meth:`_tree` with each entry's ``lstat``."""
        stack: list[tuple[str, int]] = [("", self._root_fd())]
        while stack:
            base, fd = stack.pop()
            try:
                with os.scandir(fd) as it:
                    found = list(it)
                for e in found:
                    rel = f"{base}{e.name}"
                    st = e.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        yield rel, "file", st.st_size, st
                    elif stat.S_ISDIR(st.st_mode):
                        yield rel, "dir", 0, st
                        try:
                            sub = os.open(e.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                        except OSError:
                            continue  # swapped for something else meanwhile: seen at the next scan
                        stack.append((rel + "/", sub))
                    else:
                        yield rel, "other", 0, st
            finally:
                os.close(fd)

    def total_bytes(self) -> int:
        """The bytes of its files: counted once per handle, then kept up to date by its writes."""
        if self._total is None:
            self._total = sum(size for _, size in self._files())
        return self._total

    def scan(self) -> tuple[Entries, list[str]]:
        """The directory's files as entries (digest and size, contents put into the blob store) and
        the paths of what is not a plain file or directory (symlinks, leftovers of a write)."""
        entries: Entries = {}
        odd: list[str] = []
        total = 0
        known: dict[str, tuple[int, int, int, str]] = {}
        for path, kind, size, st in self._stat_tree():
            name = path.rsplit("/", 1)[-1]
            if kind == "other" or name.startswith(_TMP):
                odd.append(path)
            elif kind == "file":
                total += size
                if len(entries) >= self.limits.max_entries:
                    raise LimitExceeded(f"the workspace holds more than {self.limits.max_entries} files")
                if total > self.limits.max_total_bytes:
                    raise LimitExceeded(f"the workspace holds more than {self.limits.max_total_bytes} bytes")
                seen = self.known.get(path)
                if seen is not None and seen[:3] == (st.st_ino, st.st_size, st.st_mtime_ns):
                    entries[path] = [seen[3], st.st_size]
                else:
                    data = self._read(path.split("/"))
                    entries[path] = [self.blobs.put(data), len(data)]
                known[path] = (st.st_ino, st.st_size, st.st_mtime_ns, entries[path][0])
        self.known = known
        self._total = total
        return entries, odd

    def wipe(self) -> None:
        """Empty the directory (made if missing); nothing outside it is touched (symlinks are removed,
        not followed)."""
        if self.root.is_symlink():
            raise PathRefused(f"the workspace root {self.root} is a symlink")
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._total = None

    def materialise(self, manifest: Manifest) -> Entries:
        """Write ``manifest`` into an emptied directory, every entry checked first; its entries."""
        entries = self.check_manifest(manifest)
        self.wipe()
        for e in manifest.entries:
            raw = e.content.encode()
            self.blobs.put(raw)
            self._write(self.parts(e.path), raw)
        return entries

    def check_manifest(self, manifest: Manifest) -> Entries:
        """The manifest's entries, or the first reason it is refused (nothing written)."""
        if len(manifest.entries) > self.limits.max_entries:
            raise LimitExceeded(
                f"manifest has {len(manifest.entries)} entries, more than {self.limits.max_entries}"
            )
        entries: Entries = {}
        dirs: set[str] = set()
        total = 0
        for e in manifest.entries:
            self.parts(e.path)
            raw = e.content.encode()
            if digest_of(raw) != e.digest:
                raise DigestMismatch(f"manifest entry {e.path!r}: content does not match digest {e.digest}")
            if len(raw) > self.limits.max_file_bytes:
                raise LimitExceeded(
                    f"manifest entry {e.path!r}: more than {self.limits.max_file_bytes} bytes"
                )
            total += len(raw)
            if total > self.limits.max_total_bytes:
                raise LimitExceeded(f"manifest holds more than {self.limits.max_total_bytes} bytes")
            parts = e.path.split("/")
            ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
            if e.path in entries or e.path in dirs or any(a in entries for a in ancestors):
                raise PathRefused(f"manifest entry {e.path!r} collides with another entry")
            dirs.update(ancestors)
            entries[e.path] = [e.digest, len(raw)]
        return entries

    def restore(self, entries: Entries) -> list[str]:
        """Empty the directory and write ``entries`` from the blob store (each checked, within the
        limits); the paths."""
        limits = self.limits
        if len(entries) > limits.max_entries:
            raise LimitExceeded(f"snapshot has {len(entries)} files, more than {limits.max_entries}")
        if total(entries.values()) > limits.max_total_bytes:
            raise LimitExceeded(f"snapshot holds more than {limits.max_total_bytes} bytes")
        for path in entries:
            self.parts(path)
        self.wipe()
        for path in sorted(entries):
            self._put_back(path, entries[path][0])
        return sorted(entries)

    def reconcile(self, entries: Entries) -> Reconciled:
        """Put the directory back to ``entries`` in place: keep what matches, put back what differs or
        is missing, remove what is not recorded (and every symlink or odd thing)."""
        out = Reconciled()
        self._total = None
        if not self.root.is_dir() or self.root.is_symlink():
            self.wipe()
        present: dict[str, str] = {}
        dirs: list[str] = []
        for path, kind, _size in self._tree():
            name = path.rsplit("/", 1)[-1]
            if kind == "dir":
                dirs.append(path)
            elif kind == "file" and not name.startswith(_TMP) and path in entries:
                present[path] = digest_of(self._read(path.split("/")))
            else:
                self._remove(path)
                out.removed.append(path)
        for d in sorted(d for d in dirs if d in entries):  # a directory where a file belongs
            self._remove(d)
            out.removed.append(d)
        for path in sorted(entries):
            digest = entries[path][0]
            if path not in present:
                self._put_back(path, digest)
                out.restored.append(path)
            elif present[path] != digest:
                self._put_back(path, digest)
                out.reverted.append(path)
            else:
                out.kept.append(path)
        for d in sorted(dirs, key=len, reverse=True):  # directories left empty by removals
            if not any(under(p, d) for p in entries):
                self._remove(d)
        out.removed.sort()
        return out

    def _put_back(self, path: str, digest: str) -> None:
        data = self.blobs.get(digest)
        if digest_of(data) != digest:
            raise DigestMismatch(f"blob {digest} of {path!r} does not hold its digest")
        self._write(self.parts(path), data)

    def _remove(self, path: str) -> None:
        parts = path.split("/")
        try:
            fd = self._walk_to_parent(parts, create=False)
        except (FileNotFoundError, PathRefused):
            return  # its parent went (or is a symlink, itself removed)
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(parts[-1], dir_fd=fd)
            else:
                os.unlink(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
