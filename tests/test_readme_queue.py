"""The README's durable-queue block (``# queue_tasks.py``) runs as written, as a script, and says ok:
items run in order, a failed attempt is retried after the clock moves, the one behind it waits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.test_readme import ROOT, python_block

QUEUE = python_block("# queue_tasks.py")


def test_the_queue_block_runs_as_a_script_and_says_ok(tmp_path: Path) -> None:
    assert QUEUE.startswith("# queue_tasks.py: .venv/bin/python queue_tasks.py\n")
    (tmp_path / "queue_tasks.py").write_text(QUEUE)
    out = subprocess.run(
        [sys.executable, "queue_tasks.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == "ok\n"
