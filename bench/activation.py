"""Section ``activation``: cold activation of a dormant actor with ``activation_files`` actor files on
disk, against a raw ``sqlite3`` open + read of one such file, in the same worker process and run.

The data set is built once by :mod:`bench.dataset` and reused. Each repetition is one fresh worker
process (:mod:`bench.activation_worker`) measuring ``activation_sample`` activations per variant on
names it has not touched (a seeded permutation, a different slice per repetition), interleaved.
"""

from __future__ import annotations

import json
import random
from typing import Any

from bench.dataset import Dataset, ensure_dataset
from bench.procs import log, run_client
from bench.settings import Settings

__all__ = ["run"]

_WARM = 20


def run(s: Settings, dataset: Dataset | None = None) -> dict[str, Any]:
    """``{"reps": [worker result], "files": N, "built_s": ..., "root": ...}``."""
    ds = dataset or ensure_dataset(s.data_dir, s.activation_files)
    seed = random.SystemRandom().randrange(1 << 30)
    reps: list[dict[str, Any]] = []
    for rep in range(s.reps):
        spec = {
            "root": str(ds.root),
            "n": ds.n,
            "seed": seed,
            "rep": rep,
            "k": s.activation_sample,
            "warm": _WARM,
        }
        res = run_client(["--spec", json.dumps(spec)], timeout=600, module="bench.activation_worker")
        reps.append(res)
        log(
            f"activation rep {rep + 1}/{s.reps}: p50 raw sqlite3 open+read {res['raw']['p50_us']:.0f} µs · "
            f"Registry.get {res['get']['p50_us']:.0f} µs · snapshot {res['snapshot']['p50_us']:.0f} µs"
        )
    return {
        "reps": reps,
        "files": ds.n,
        "file_bytes": ds.file_bytes,
        "built_s": ds.built_s,
        "root": str(ds.root),
        "sample": s.activation_sample,
    }
