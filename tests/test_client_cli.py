"""The ``roost.client`` command line (``python -m roost.client URL --call METHOD``): one JSON line per
result on stdout, exit code 0; a refused connection exits 3 with the close code on stderr and nothing
on stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from roost.transport.tokens import TokenSigner
from tests.support import ROOT, server_process


def run_demo_client(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "roost.client", *args],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "ROOST_TOKEN"} | (env or {}),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.slow
def test_demo_client_command_line_calls_and_exit_codes(data_dir: Path) -> None:
    with server_process(data_dir) as server:
        done = run_demo_client(f"{server.ws}/agents/counter/cli", "--call", "increment", "--count", "3")
        assert done.returncode == 0, done.stderr
        assert [orjson.loads(line) for line in done.stdout.splitlines()] == [
            {"result": 1},
            {"result": 2},
            {"result": 3},
        ]
        refused = run_demo_client(f"{server.ws}/agents/nokind/x", "--call", "get")
        assert refused.returncode == 3, refused.stderr
        assert "4404" in refused.stderr
        assert refused.stdout == ""


@pytest.mark.slow
def test_the_command_line_client_presents_a_token_from_the_option_or_the_environment(data_dir: Path) -> None:
    secret = "c" * 40
    token = TokenSigner(secret).issue("cli", ttl=600)
    with server_process(data_dir, env={"ROOST_SECRET": secret}) as server:
        url = f"{server.ws}/agents/counter/cli-token"
        refused = run_demo_client(url, "--call", "increment")
        assert refused.returncode == 3, refused.stderr
        assert "4401" in refused.stderr
        done = run_demo_client(url, "--token", token, "--call", "increment")
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout) == {"result": 1}
        from_env = run_demo_client(url, "--call", "increment", env={"ROOST_TOKEN": token})
        assert from_env.returncode == 0, from_env.stderr
        assert orjson.loads(from_env.stdout) == {"result": 2}
