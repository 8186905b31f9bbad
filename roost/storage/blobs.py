"""Collection of the blob store (``DATA/blobs``): a blob no actor's file references any longer goes.

Blobs are keyed by their content's sha256 alone, so one blob may be referenced by many actors (two
workspaces holding the same file, two payloads with the same heavy string): deleting an actor, a run
or a workspace can therefore never remove "its" blobs. A collection decides over the whole data
directory instead, in two phases (``roost gc``, ``POST /admin/gc``: :mod:`roost.transport.collect`):

- **Mark.** Every actor file is read, each in one read transaction (:func:`mark_connection`), and
  every ``sha256:<64 hex digits>`` in any text or blob value of any of its tables is marked: payload
  references (``{"$blob": …}``, ``[blob sha256:… n bytes]``), a workspace's entries, its
  ``snapshot_id``, ``started_from`` and ``manifest_ref``. Then every marked blob is read in turn
  (:func:`mark_blobs`) and what it names is marked too (a snapshot names its manifest and its files'
  blobs, a manifest its entries, a whole payload its heavy strings), until no marked blob is left
  unread. Anything that looks like a reference keeps its blob: the mark errs only on the side of
  keeping. The marks live in a private temporary SQLite database on disk (:class:`Marks`, its page
  cache 2 MiB), files and blobs are read in chunks: **memory stays bounded** whatever the number of
  actors and blobs.
- **Sweep** (:func:`sweep`). A blob is removed only when it is not marked **and** its file was last
  stored before ``cutoff`` (the collection's start less its grace period, an hour by default).

Guarantees (tests in ``tests/test_blob_gc.py`` and ``tests/test_blob_gc_process.py``):

- **A blob is removed only when no actor's file references it**: the mark covers every table of
  every file under ``DATA/actors`` (listed or not), and what marked blobs name; a file that cannot be
  read (held by a server, damaged) ends the collection before anything is removed (``a collection
  removes nothing when an actor file cannot be marked``).
- **A reference committed during a collection never dangles**: a reference is committed after the
  ``BlobStore.put`` that stored its blob, and a ``put`` of content already
  stored makes the file fresh (its modification time now), holding the store's lock shared; the
  sweep checks the time and unlinks holding it exclusive. So either the ``put`` came first (the file
  is fresh: kept) or the removal did (the ``put`` stores it again). A reference committed within the
  grace period of its ``put`` (every runtime commit is: the ``put`` is made in the committing turn) is
  therefore safe, whichever actor the mark read first (``a blob stored again during a collection is
  kept``, ``a removal waits for a put in progress and keeps what it stored``).
- **A SIGKILL at any point removes nothing still referenced and leaves no reference to a removed
  blob**: the mark writes nothing but its temporary database (gone with the process), and each removal
  is of one unmarked, old blob, decided under the lock (``sigkill of a collection removes nothing
  still referenced``).
"""

from __future__ import annotations

import fcntl
import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EXAMPLES",
    "GRACE",
    "LOCK_FILE",
    "Marks",
    "Missing",
    "Swept",
    "blob_lock",
    "blob_path",
    "mark_blobs",
    "mark_bytes",
    "mark_connection",
    "mark_file_bytes",
    "sweep",
]

#: The file under a blob store's root that a ``put`` locks shared and the sweep exclusive (never a
#: blob: a blob's name is 64 hex digits).
LOCK_FILE = ".lock"
#: Seconds a blob stored (or stored again) is kept whatever references it: longer than any runtime
#: path from a ``put`` to the commit of its reference (a turn, with its timeout).
GRACE = 3600.0
_REF = re.compile(r"sha256:([0-9a-f]{64})")
_REF_BYTES = re.compile(rb"sha256:([0-9a-f]{64})")
_BLOB_NAME = re.compile(r"[0-9a-f]{64}")
_TMP_NAME = re.compile(r"[0-9a-f]{64}\.tmp[0-9]+")
_HEX2 = re.compile(r"[0-9a-f]{2}")
#: Bytes of a file read at once; the overlap keeps a reference cut by a chunk's end.
_CHUNK = 1 << 20
_OVERLAP = len("sha256:") + 64 - 1
#: Missing blobs a report names at most.
EXAMPLES = 10
#: Rows (or blobs) between two looks at the stop event, marks written per batch, removals per lock.
_BATCH = 512


def blob_path(root: Path, digest: str) -> Path:
    """Where the blob ``digest`` (64 hex digits) lives under ``root``."""
    return root / digest[:2] / digest[2:4] / digest


def blob_lock(root: Path, how: int) -> int:
    """A new descriptor of ``root``'s :data:`LOCK_FILE` (made if missing) holding ``flock(how)``:
    closing it lets go (so does the process's death, SIGKILL included)."""
    try:
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, how)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Stopped(Exception):
    """The mark was told to stop (the turn it ran in timed out or was cancelled)."""


class Marks:
    """The marked digests (hex, no ``sha256:``) in a private temporary database on disk, and whether
    each one's contents were read yet. Used by one thread at a time."""

    def __init__(self) -> None:
        # "": SQLite's private temporary database, on disk, deleted when closed (or the process dies)
        self.db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA cache_size=-2048")
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE marked (digest TEXT PRIMARY KEY, read INTEGER NOT NULL DEFAULT 0)")
        self.db.execute("CREATE INDEX unread ON marked (read) WHERE read = 0")
        self.db.execute("CREATE TABLE seen (path TEXT PRIMARY KEY) WITHOUT ROWID")

    def add(self, digests: Iterable[str]) -> None:
        self.db.executemany("INSERT OR IGNORE INTO marked (digest) VALUES (?)", ((d,) for d in digests))

    def has(self, digest: str) -> bool:
        return self.db.execute("SELECT 1 FROM marked WHERE digest = ?", (digest,)).fetchone() is not None

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM marked").fetchone()[0])

    def digests(self) -> Iterator[str]:
        """Every marked digest, in order, a page at a time."""
        last = ""
        while True:
            page = [
                r[0]
                for r in self.db.execute(
                    "SELECT digest FROM marked WHERE digest > ? ORDER BY digest LIMIT ?", (last, _BATCH)
                )
            ]
            if not page:
                return
            yield from page
            last = page[-1]

    def unread(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT digest FROM marked WHERE read = 0 LIMIT ?", (_BATCH,))]

    def set_read(self, digests: list[str]) -> None:
        self.db.executemany("UPDATE marked SET read = 1 WHERE digest = ?", ((d,) for d in digests))

    def see(self, path: Path) -> None:
        """``path`` (an actor file) was marked."""
        self.db.execute("INSERT OR IGNORE INTO seen VALUES (?)", (str(path),))

    def seen(self, path: Path) -> bool:
        return self.db.execute("SELECT 1 FROM seen WHERE path = ?", (str(path),)).fetchone() is not None

    def close(self) -> None:
        self.db.close()


def mark_connection(conn: sqlite3.Connection, marks: Marks, stop: threading.Event | None = None) -> int:
    """Mark every reference in every table of the database ``conn`` reads (one read transaction is
    the caller's); the rows read. ``stop`` set: raises :class:`Stopped` within :data:`_BATCH` rows."""
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    rows = 0
    found: list[str] = []
    for table in tables:
        quoted = table.replace('"', '""')
        for row in conn.execute(f'SELECT * FROM "{quoted}"'):
            rows += 1
            for value in row:
                if isinstance(value, str):
                    if "sha256:" in value:
                        found.extend(_REF.findall(value))
                elif isinstance(value, bytes) and b"sha256:" in value:
                    found.extend(d.decode() for d in _REF_BYTES.findall(value))
            if rows % _BATCH == 0:
                marks.add(found)
                found.clear()
                if stop is not None and stop.is_set():
                    raise Stopped("the mark was stopped")
    marks.add(found)
    return rows


def mark_bytes(chunks: Iterable[bytes], marks: Marks) -> None:
    """Mark every reference in the bytes ``chunks`` make together (one cut between two is found)."""
    tail = b""
    for chunk in chunks:
        data = tail + chunk
        found = _REF_BYTES.findall(data)
        if found:
            marks.add(d.decode() for d in found)
        tail = data[-_OVERLAP:]


def _chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def mark_file_bytes(path: Path, marks: Marks) -> None:
    """Mark every reference in the raw bytes of ``path`` (a kept WAL, say), read in chunks."""
    mark_bytes(_chunks(path), marks)


@dataclass
class Missing:
    """Marked digests not in the store (references that pointed at nothing already): how many, and
    the first :data:`EXAMPLES` of them (``sha256:…``)."""

    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, digest: str) -> None:
        self.count += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(f"sha256:{digest}")


def mark_blobs(root: Path, marks: Marks, stop: threading.Event | None = None) -> Missing:
    """Read every marked blob not read yet, marking what it names, until none is left; the marked
    digests not in the store under ``root``."""
    missing = Missing()
    while batch := marks.unread():
        for digest in batch:
            try:
                mark_file_bytes(blob_path(root, digest), marks)
            except FileNotFoundError:
                missing.add(digest)
        marks.set_read(batch)
        if stop is not None and stop.is_set():
            raise Stopped("the mark was stopped")
    return missing


@dataclass
class Swept:
    """What a sweep did (or, dry, would do)."""

    #: Blobs removed: unmarked and stored before the cutoff.
    removed: int = 0
    removed_bytes: int = 0
    #: Unmarked blobs kept: stored (or stored again) after the cutoff.
    young: int = 0
    #: Blobs kept: marked.
    kept: int = 0
    #: Temporary files of writes that never finished, removed.
    leftovers: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _dirs(root: Path) -> Iterator[Path]:
    """``root/<h0h1>/<h2h3>`` directories, in order, one level listed at a time."""
    try:
        tops = sorted(e.name for e in os.scandir(root) if _HEX2.fullmatch(e.name) and e.is_dir())
    except FileNotFoundError:
        return
    for top in tops:
        try:
            mids = sorted(e.name for e in os.scandir(root / top) if _HEX2.fullmatch(e.name) and e.is_dir())
        except FileNotFoundError:
            continue
        for mid in mids:
            yield root / top / mid
        yield root / top  # after its children: removed when left empty


def sweep(root: Path, marks: Marks, cutoff: float, *, dry_run: bool = False) -> Swept:
    """Remove every blob under ``root`` that is not marked and was last stored before ``cutoff`` (epoch
    seconds), and the temporary files of writes older than it; then the directories left empty.

    Each removal is decided holding the store's lock exclusive (:func:`blob_lock`, at most
    :data:`_BATCH` removals per hold, so a ``put`` waits that long at most): a ``put`` of the same
    content, which holds it shared, either made the file fresh before (kept) or stores it again after."""
    out = Swept()
    for directory in _dirs(root):
        if directory.parent != root:  # a <h2h3> directory: blobs
            try:
                names = [e.name for e in os.scandir(directory)]
            except FileNotFoundError:
                continue
            candidates = []
            for name in names:
                if _BLOB_NAME.fullmatch(name):
                    if marks.has(name):
                        out.kept += 1
                    else:
                        candidates.append(name)
                elif _TMP_NAME.fullmatch(name):
                    candidates.append(name)
            for start in range(0, len(candidates), _BATCH):
                _remove(root, directory, candidates[start : start + _BATCH], cutoff, out, dry_run)
        if not dry_run:
            fd = blob_lock(root, fcntl.LOCK_EX)  # a put makes its directories holding it shared
            try:
                os.rmdir(directory)
            except OSError:
                pass  # not empty (or gone)
            finally:
                os.close(fd)
    return out


def _remove(root: Path, directory: Path, names: list[str], cutoff: float, out: Swept, dry: bool) -> None:
    fd = blob_lock(root, fcntl.LOCK_EX)
    try:
        for name in names:
            path = directory / name
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if st.st_mtime >= cutoff:
                if ".tmp" not in name:
                    out.young += 1
                continue
            if not dry:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    continue
            if ".tmp" in name:
                out.leftovers += 1
            else:
                out.removed += 1
                out.removed_bytes += st.st_size
    finally:
        os.close(fd)
