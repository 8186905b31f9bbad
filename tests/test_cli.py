"""The ``roost`` command never ends in a traceback (``roost.cli``).

Guarantee: every subcommand given bad input prints one ``roost: …`` line (or argparse's usage and its
error) on stderr and exits 2 for a usage error, 1 for a failure; ``--version`` and ``--help`` work, and
every option's help shows its default.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roost import __version__
from roost.storage import Directory

USAGE, FAILURE = 2, 1


def roost(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("ROOST_SECRET", "ROOST_TOKEN")}
    return subprocess.run(
        [sys.executable, "-m", "roost.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, **(env or {})},
        cwd=cwd,
    )


@pytest.fixture
def data(tmp_path: Path) -> Path:
    Directory(tmp_path / "data").close()  # a data directory with nothing in it
    return tmp_path / "data"


def _cases(data: Path, tmp: Path) -> list[tuple[list[str], dict[str, str], int, str]]:
    """(arguments, environment, exit code, a piece of the message)."""
    short = {"ROOST_SECRET": "short"}
    good = {"ROOST_SECRET": "g" * 40}
    missing = str(tmp / "nowhere")
    return [
        ([], {}, USAGE, "required"),
        (["nosuch"], {}, USAGE, "invalid choice"),
        (["inspect", "chat", "--data", str(data)], {}, USAGE, "KIND and NAME together"),
        (["inspect", "--data", missing], {}, FAILURE, "no data directory"),
        (["export", "counter", "--data", str(data)], {}, USAGE, "name"),
        (["export", "counter", "x" * 300, "--data", str(data)], {}, USAGE, "name"),
        (["export", "counter", "never", "--data", str(data)], {}, FAILURE, "never"),
        (["delete", "counter", "x", "--data", str(data)], {}, USAGE, "--yes"),
        (["token", "alice"], short, USAGE, "ROOST_SECRET"),
        (["token", "alice"], {}, USAGE, "ROOST_SECRET"),
        (["token", "alice", "--ttl", "soon"], {}, USAGE, "invalid float"),
        (["token", "bob", "--ttl", "-5"], good, USAGE, "--ttl must be a positive number of seconds, got -5"),
        (["token", "bob", "--ttl", "0"], good, USAGE, "--ttl must be a positive number of seconds, got 0"),
        (["token", "bob", "--ttl", "nan"], good, USAGE, "--ttl must be a positive number"),
        (["serve", "--data", str(data), "--port", "0"], short, USAGE, "ROOST_SECRET"),
        (["serve", "nosuchmodule:app", "--port", "0"], {}, USAGE, "cannot import"),
        (["serve", "nocolon", "--port", "0"], {}, USAGE, "MODULE:APP"),
        (["serve", "--port", "abc"], {}, USAGE, "invalid int"),
        (["serve", "--port", "99999"], {}, USAGE, "not a port"),
        (["serve", "--data", str(tmp / "afile"), "--port", "0"], {}, USAGE, "not a directory"),
        (["serve", "--data", "/proc/nowhere/data", "--port", "0"], {}, FAILURE, "cannot create it"),
        (["serve", "--config", str(tmp / "nope.toml"), "--port", "0"], {}, USAGE, "no such file"),
        (["serve", "--port", "0"], {"ROOST_CONFIG": str(tmp / "nope.toml")}, USAGE, "no such file"),
        (["serve", "--config", str(tmp / "extra.toml"), "--port", "0"], {}, USAGE, "bogus: Extra inputs"),
        (["serve", "--config", str(tmp / "type.toml"), "--port", "0"], {}, USAGE, "max_tool_hops"),
        (["serve", "--config", str(tmp / "table.toml"), "--port", "0"], {}, USAGE, "unknown table [agnet]"),
        (["serve", "--config", str(tmp / "syntax.toml"), "--port", "0"], {}, USAGE, "not TOML"),
        (
            ["serve", "--config", str(tmp / "near.toml"), "--port", "0"],
            {},
            USAGE,
            "did you mean 'max_tool_hops'?",
        ),
        (
            ["serve", "--config", str(tmp / "tool.toml"), "--port", "0"],
            {},
            USAGE,
            "[agent.tools.nope]: no tool",
        ),
        (
            ["serve", "--config", str(tmp / "setting.toml"), "--port", "0"],
            {},
            USAGE,
            "collect_documents] foo: not a",
        ),
        (["backup", "--out", str(tmp / "b"), "--server", "http://127.0.0.1:1"], {}, FAILURE, "no answer"),
        (["backup", "--data", missing, "--out", str(tmp / "c")], {}, FAILURE, "no data directory"),
        (["ls", "--data", missing], {}, FAILURE, "no data directory"),
        (["ls", "--limit", "many"], {}, USAGE, "invalid int"),
        (["schedules", "--data", missing], {}, FAILURE, "no data directory"),
        (["workers", "--data", missing], {}, FAILURE, "no data directory"),
    ]


def test_every_subcommand_given_bad_input_says_one_line_and_exits_1_or_2(data: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a directory")
    (tmp_path / "extra.toml").write_text("[agent]\nmax_tool_hops = 4\nbogus = 1\n")
    (tmp_path / "type.toml").write_text('[agent]\nmax_tool_hops = "four"\n')
    (tmp_path / "table.toml").write_text("[agnet]\nmax_tool_hops = 4\n")
    (tmp_path / "syntax.toml").write_text("[agent\n")
    (tmp_path / "near.toml").write_text("[agent]\nmax_tool_hop = 4\n")
    (tmp_path / "tool.toml").write_text("[agent.tools.nope]\nx = 1\n")
    (tmp_path / "setting.toml").write_text("[agent.tools.collect_documents]\nfoo = 3\n")
    for args, env, code, words in _cases(data, tmp_path):
        out = roost(*args, env=env, cwd=tmp_path)
        where = f"roost {' '.join(args)!r}: {out.stderr!r}"
        assert "Traceback" not in out.stderr, where
        assert out.returncode == code, where
        assert words in out.stderr, where
        ours = [line for line in out.stderr.splitlines() if line.startswith("roost: ")]
        usage = [line for line in out.stderr.splitlines() if line.startswith("usage: ")]
        assert len(ours) == 1 or usage, where  # one line of ours, or argparse's usage and error


def test_version_help_and_defaults() -> None:
    out = roost("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"roost {__version__}"
    top = roost("--help")
    assert top.returncode == 0
    assert "The ``roost`` command." not in top.stdout
    assert "serve actors" in top.stdout
    for command in ("serve", "inspect", "export", "delete", "backup", "token", "ls", "schedules", "workers"):
        helped = roost(command, "--help")
        assert helped.returncode == 0, helped.stderr
        assert "(default:" in helped.stdout, command
    serve = roost("serve", "--help").stdout
    assert "--port PORT" in serve
    assert "(default: 8000)" in serve
    assert "(default: None)" not in serve  # an option without a default says nothing of one
    assert "``" not in top.stdout


async def test_ls_prints_names_as_clients_sent_them(tmp_path: Path) -> None:
    from roost.examples.kinds import KINDS
    from roost.testing import ActorKit

    async with ActorKit(KINDS, tmp_path / "data") as kit:
        for name in ("c1", "two words", "acme\x00c1"):
            await kit.call("counter", name, "increment")
    out = roost("ls", "--data", str(tmp_path / "data"))
    assert out.returncode == 0, out.stderr
    rows = {line.split()[1]: line for line in out.stdout.splitlines()[1:-1]}
    assert "c1" in rows
    assert "'c1'" not in out.stdout
    assert "'two words'" in out.stdout  # a space would make the column ambiguous: quoted
    assert "c1 (tenant acme)" in out.stdout
