"""The dormant-actor data set: ``N`` ``counter`` actor files plus their directory rows, built once.

Creating each actor through the runtime costs ~1.5 ms (WAL switch, schema, first commit), minutes for
100,000. Instead one real actor file is created with :meth:`storage.ActorFile.open` (the framework and
``counter`` migrations, the initial state) and closed, and its bytes are copied to the path that
:func:`storage.actor_path` gives every other name. Every name is registered with
:meth:`storage.Directory.register`. The copies share the template's ``roost_meta`` rows (kind
``counter``, name ``bench-template``, creation time): nothing reads them on activation. A sample of
copies is opened with ``ActorFile.open`` and must load the initial state.

The set lives in ``<data>/actors-<N>/`` and is reused by later runs when its marker file matches and
the directory holds ``N`` actors.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.procs import log
from roost.examples.kinds import Counter
from roost.storage import ActorFile, Directory, actor_digest, actor_path
from roost.storage.migrations import FRAMEWORK_MIGRATIONS

__all__ = ["KIND", "Dataset", "ensure_dataset", "name_of"]

KIND = "counter"
_FORMAT = 1
_MARKER = "bench-dataset.json"
_SAMPLE = 20


def name_of(i: int) -> str:
    return f"a{i:06d}"


@dataclass(frozen=True, slots=True)
class Dataset:
    root: Path
    n: int
    file_bytes: int
    built_s: float | None  # None: reused from an earlier run

    def path(self, i: int) -> Path:
        return actor_path(self.root, KIND, name_of(i))


def _initial_state() -> str:
    return orjson.dumps(Counter.initial_state).decode()


def _open(path: Path, name: str) -> ActorFile:
    return ActorFile.open(
        path, KIND, name, kind_migrations=Counter.migrations, initial_state=_initial_state()
    )


def _marker(n: int, file_bytes: int) -> dict[str, object]:
    return {
        "format": _FORMAT,
        "n": n,
        "kind": KIND,
        "file_bytes": file_bytes,
        "sqlite": sqlite3.sqlite_version,
        # a file of an older schema would be migrated on its first activation, inflating the figure
        "framework_version": len(FRAMEWORK_MIGRATIONS),
    }


def _valid(root: Path, n: int) -> Dataset | None:
    marker = root / _MARKER
    if not marker.exists():
        return None
    try:
        info = json.loads(marker.read_text())
    except ValueError:
        return None
    if info != _marker(n, int(info.get("file_bytes", 0))):
        return None
    directory = Directory(root)
    try:
        if directory.count() != n:
            return None
    finally:
        directory.close()
    rng = random.Random(1)
    for i in rng.sample(range(n), min(n, _SAMPLE)):
        if not actor_path(root, KIND, name_of(i)).is_file():
            return None
    return Dataset(root, n, int(info["file_bytes"]), None)


def _build(root: Path, n: int) -> Dataset:
    t0 = time.perf_counter()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    template_path = root / "template.sqlite"
    _open(template_path, "bench-template").close()
    if Path(f"{template_path}-wal").exists():
        raise RuntimeError("the closed template still has a WAL file")
    blob = template_path.read_bytes()
    template_path.unlink()
    made: set[Path] = set()
    for i in range(n):
        path = actor_path(root, KIND, name_of(i))
        parent = path.parent
        if parent not in made:
            parent.mkdir(parents=True, exist_ok=True)
            made.add(parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, blob)
        finally:
            os.close(fd)
        if (i + 1) % 25_000 == 0:
            log(f"dataset: {i + 1:,}/{n:,} files written")
    directory = Directory(root)
    try:
        now = time.time()
        for i in range(n):
            name = name_of(i)
            directory.register(KIND, name, actor_digest(KIND, name), now)
        if directory.count() != n:
            raise RuntimeError("directory does not hold every actor")
    finally:
        directory.close()
    rng = random.Random(2)
    for i in rng.sample(range(n), min(n, _SAMPLE)):
        f = _open(actor_path(root, KIND, name_of(i)), name_of(i))
        try:
            state, seq = f.load_state()
        finally:
            f.close()
        if orjson.loads(state) != Counter.initial_state or seq != 0:
            raise RuntimeError(f"copy {name_of(i)} does not load the initial state: {state!r}, seq {seq}")
    (root / _MARKER).write_text(json.dumps(_marker(n, len(blob))))
    return Dataset(root, n, len(blob), time.perf_counter() - t0)


def ensure_dataset(data_dir: Path, n: int) -> Dataset:
    """The data set of ``n`` actors under ``data_dir``, built if missing or invalid."""
    root = data_dir / f"actors-{n}"
    found = _valid(root, n)
    if found is not None:
        log(f"dataset: reusing {n:,} actor files in {root}")
        return found
    log(f"dataset: building {n:,} actor files in {root} (one-off; reused by later runs)")
    built = _build(root, n)
    log(f"dataset: built in {built.built_s:.1f} s ({built.file_bytes:,} bytes per file)")
    return built
