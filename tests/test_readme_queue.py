"""The README's durable-queue block (``# queue_tasks.py``) runs as written, as a script, and says ok:
items run in order, a failed attempt is retried after the clock moves, the one behind it waits."""

from __future__ import annotations

from pathlib import Path

from tests.test_readme import python_block, run_block

QUEUE = python_block("# queue_tasks.py")


def test_the_queue_block_runs_as_a_script_and_says_ok(tmp_path: Path) -> None:
    assert QUEUE.startswith("# queue_tasks.py: .venv/bin/python queue_tasks.py\n")
    out = run_block(tmp_path, "queue_tasks.py", QUEUE)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == "ok\n"
