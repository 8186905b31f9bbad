"""Smoke test of the benchmark suite: the quick variant still runs end to end and writes every section.

It never asserts a timing: the figures of a seconds-long run on a shared machine mean nothing. It checks
that ``python -m bench --quick`` exits 0 and that RESULTS.md has every section heading and the targets
table with a verdict per target.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import HEADINGS

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_quick_bench_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONASYNCIODEBUG"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out), "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    for heading in HEADINGS:
        assert heading in text, f"missing section {heading!r}"
    assert "Not run in this invocation" not in text
    targets = text.split("## Targets", 1)[1]
    assert "| target | threshold | measured | met? |" in targets
    rows = [
        ln
        for ln in targets.splitlines()
        if ln.startswith("| ") and ln.endswith(("**met** |", "**not met** |"))
    ]
    assert len(rows) == 13, targets
