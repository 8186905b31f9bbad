"""``make demo`` as a newcomer runs it: stdin not a terminal, a fresh data directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roost.client.resume import ResumeState
from tests.support import ROOT

pytestmark = pytest.mark.slow


def test_make_demo_flow_exits_0_with_a_reconnect_no_duplicate_no_gap(tmp_path: Path) -> None:
    data = tmp_path / "demo-data"
    proc = subprocess.run(
        [sys.executable, "-m", "roost.examples.agent_demo", "--data", str(data), "--delay", "0.3"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for line in (
        "PASS at least one reconnect",
        "PASS no duplicate",
        "PASS no gap",
        "approved automatically",
        "the server replays the",
    ):
        assert line in out
    assert " duplicates      │ 0 (frames re-sent by the server and dropped: 0)" in out
    assert " gaps            │ 0" in out
    reports = list((data / "reports").rglob("*.md"))
    assert len(reports) == 1
    assert str(reports[0]) in out
    # no process left behind: nothing runs with this data directory on its command line
    leftovers = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if str(data).encode() in cmdline:
                leftovers.append(pid)
    assert leftovers == []


def test_the_client_counts_frames_it_received_twice() -> None:
    resume = ResumeState()
    from roost.client.frames import Welcome

    resume.on_welcome(
        Welcome.parse(
            {
                "type": "welcome",
                "protocol": 1,
                "connection_id": "c",
                "actor": {"kind": "k", "name": "n"},
                "state": {},
                "cursor": 0,
                "resume": "fresh",
                "oldest": 1,
            }
        )
    )
    event = {"type": "event", "seq": 1, "event": {}}
    assert resume.on_frame(event) is True
    assert resume.on_frame(event) is False
    assert resume.duplicates == 1


def test_make_demo_removes_its_temporary_data_directory_unless_asked_to_keep_it(tmp_path: Path) -> None:
    """Without ``--data``, the demo's temporary directory is gone at exit; ``--keep`` keeps it and
    says where."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    for keep in (False, True):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "roost.examples.agent_demo",
                "--delay",
                "0.05",
                *(["--keep"] if keep else []),
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200", "TMPDIR": str(temp)},
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        left = sorted(temp.glob("roost-demo-*"))
        if keep:
            assert len(left) == 1
            assert f"data directory kept: {left[0]}" in proc.stdout
        else:
            assert left == []
