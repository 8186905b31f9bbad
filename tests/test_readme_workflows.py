"""The README's workflow block (``# workflows.py``) runs as written, as a script, and prints what the
README says it prints."""

from __future__ import annotations

from pathlib import Path

from tests.test_readme import README, python_block, run_block

WORKFLOWS = python_block("# workflows.py")


def test_the_workflows_block_runs_as_a_script_and_prints_what_the_readme_says(tmp_path: Path) -> None:
    assert WORKFLOWS.startswith("# workflows.py: .venv/bin/python workflows.py\n")
    out = run_block(tmp_path, "workflows.py", WORKFLOWS)
    assert out.returncode == 0, out.stderr[-2000:]
    printed = out.stdout.strip()
    assert printed == "['resumed', 'slept', 'completed']"
    assert f"It prints `{printed}`" in README
