"""The ``roost`` command never ends in a traceback (``roost.cli``).

Guarantee: every subcommand given bad input prints one ``roost: …`` line (or argparse's usage and its
error) on stderr and exits 2 for a usage error, 1 for a failure; ``--version`` and ``--help`` work, and
every option's help shows its default.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from roost import __version__
from roost.storage import Directory
from tests.support import ROOT

USAGE, FAILURE = 2, 1
SECRET = {"ROOST_SECRET": "s" * 32}


def roost(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("ROOST_SECRET", "ROOST_TOKEN", "ROOST_DATA")}
    environ["PYTHONPATH"] = str(ROOT)  # this checkout's roost, wherever the command runs
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
        (["token", "bob", "--ttl", "-5"], SECRET, USAGE, "-5 is not greater than 0"),
        (["token", "bob", "--ttl", "0"], SECRET, USAGE, "0 is not greater than 0"),
        (["token", "alice", "--ttl", "nan"], SECRET, USAGE, "not a finite number"),
        (["token", "alice", "--ttl", "1e400"], SECRET, USAGE, "not a finite number"),
        (["token", ""], SECRET, USAGE, "1 to 256 characters"),
        (["serve", "--idle-timeout", "-5", "--port", "0"], {}, USAGE, "not greater than 0"),
        (["serve", "--idle-timeout", "0", "--port", "0"], {}, USAGE, "not greater than 0"),
        (["serve", "--retention", "-1", "--port", "0"], {}, USAGE, "less than 1"),
        (["serve", "--rate-limit", "-1", "--port", "0"], {}, USAGE, "negative"),
        (["serve", "--host", "999.1.1.1", "--port", "0"], {}, USAGE, "not an IP address"),
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
        (["serve", "--config", str(tmp / "top.toml"), "--port", "0"], {}, USAGE, "model belongs in [agent]"),
        (
            ["serve", "--config", str(tmp / "openai.toml"), "--port", "0"],
            {"ROOST_MODEL_BASE_URL": "", "OPENAI_BASE_URL": ""},
            USAGE,
            'model = "openai" needs ROOST_MODEL_BASE_URL',
        ),
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
    (tmp_path / "top.toml").write_text('model = "openai"\n')
    (tmp_path / "openai.toml").write_text('[agent]\nmodel = "openai"\n')
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
    for command in (
        "serve",
        "inspect",
        "export",
        "delete",
        "backup",
        "gc",
        "token",
        "ls",
        "schedules",
        "workers",
    ):
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


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """``roost`` and each of its subcommands' parsers, as ``main`` builds them."""
    from roost.cli import _parser

    top = _parser()
    (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return {"": top, **sub.choices}


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """Arguments the parser cannot do without (a positional, ``--out``), each given ``x``."""
    given: list[str] = []
    for action in parser._actions:
        if not action.option_strings and action.nargs is None:
            given.append("x")
        elif action.option_strings and action.required:
            given += [action.option_strings[0], "x"]
    return given


def _numeric(action: argparse.Action) -> type | None:
    """``int`` or ``float`` for an option whose value is a number, else None."""
    if not action.option_strings or action.type is None or not callable(action.type):
        return None
    try:
        value = action.type("7")
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return None
    return type(value) if isinstance(value, int | float) else None


def test_every_numeric_option_refuses_negative_nan_inf_and_words_when_parsed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every option that takes a number, found by walking the parsers (a new one is covered too):
    a negative, ``nan``, ``inf``, ``1e400`` and a word are refused with argparse's error line and exit 2;
    0 is accepted only where the help says what 0 means; an integer option refuses ``1.5``."""
    seen = []
    for command, parser in _parsers().items():
        prefix = [command] if command else []
        for action in parser._actions:
            sort = _numeric(action)
            if sort is None:
                continue
            option = action.option_strings[-1]
            seen.append(f"{command} {option}")
            bad = ["-1", "-0.5", "nan", "inf", "-inf", "1e400", "many", ""]
            if sort is int:
                bad.append("1.5")
            zero_means = "0:" in (action.help or "") or "(0" in (action.help or "")
            for value in [*bad, *([] if zero_means else ["0"])]:
                argv = [*prefix, *_required(parser), f"{option}={value}"]
                with pytest.raises(SystemExit) as exited:
                    parser.parse_args(argv[1:] if command else argv)
                err = capsys.readouterr().err
                where = f"roost {' '.join(argv)}: {err!r}"
                assert exited.value.code == USAGE, where
                assert "Traceback" not in err, where
                assert f"error: argument {option}" in err.splitlines()[-1], where
            if zero_means:
                args = parser.parse_args([*_required(parser), f"{option}=0"])
                assert getattr(args, action.dest) == 0
    assert {
        "serve --idle-timeout",
        "serve --retention",
        "serve --rate-limit",
        "token --ttl",
        "ls --limit",
        "gc --grace",
    } <= set(seen)


def test_every_option_with_a_default_says_it_in_help() -> None:
    """Every option and optional positional of every command says its default in its help: the value
    (argparse's ``(default: …)``) or, where the default is not a value, what it is (``default: none``,
    ``default: the app's``); never ``(default: None)``."""
    missing = []
    for command, parser in _parsers().items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(
                action, argparse._SubParsersAction | argparse._HelpAction | argparse._VersionAction
            ):
                continue
            if action.nargs == 0 or action.required or (not action.option_strings and action.nargs is None):
                continue  # a flag (off unless given), or something that must be given
            shown = formatter._get_help_string(action) or ""
            if "default" not in shown:
                missing.append(f"{command} {'/'.join(action.option_strings) or action.dest}")
        assert "(default: None)" not in parser.format_help(), command
    assert not missing, missing


def test_every_data_option_defaults_to_ROOST_DATA(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every command that reads a data directory takes ``--data``, by default ``$ROOST_DATA`` (else
    ``./data``), as ``roost serve`` does (which leaves it to the app: ``create_app`` reads it)."""
    monkeypatch.setenv("ROOST_DATA", str(tmp_path / "elsewhere"))
    defaults = {}
    for command, parser in _parsers().items():
        for action in parser._actions:
            if "--data" in action.option_strings:
                defaults[command] = action.default
                assert "$ROOST_DATA" in (action.help or ""), command
    assert set(defaults) == {
        "serve",
        "ls",
        "schedules",
        "workers",
        "inspect",
        "export",
        "delete",
        "backup",
        "gc",
    }
    assert defaults.pop("serve") is None
    assert set(defaults.values()) == {str(tmp_path / "elsewhere")}
    monkeypatch.delenv("ROOST_DATA")
    assert {p.get_default("data") for c, p in _parsers().items() if c in defaults} == {"data"}


async def test_data_tools_read_the_directory_ROOST_DATA_names(tmp_path: Path) -> None:
    from roost.examples.kinds import KINDS
    from roost.testing import ActorKit

    async with ActorKit(KINDS, tmp_path / "kept") as kit:
        await kit.call("counter", "env-1", "increment")
    (tmp_path / "cwd").mkdir()  # no ./data here
    env = {"ROOST_DATA": str(tmp_path / "kept")}
    for args, words in [
        (["ls"], "env-1"),
        (["schedules"], "0 of 0"),
        (["workers"], "0 worker(s)"),
        (["inspect", "counter", "env-1"], '"seq"'),
        (["export", "counter", "env-1"], '"state"'),
        (["backup", "--out", str(tmp_path / "copy")], "backed up 1 actor(s)"),
        (["delete", "counter", "env-1", "--yes"], "deleted counter/'env-1'"),
    ]:
        out = roost(*args, env=env, cwd=tmp_path / "cwd")
        assert out.returncode == 0, (args, out.stderr)
        assert words in out.stdout, (args, out.stdout)


def test_a_port_that_is_busy_is_exit_3_with_one_line(tmp_path: Path) -> None:
    """A bad ``--host`` is a usage error (exit 2, above); exit 3 is kept for a server that could not
    listen on an address that is well formed: a port in use."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = roost("serve", "--port", str(port), "--data", str(tmp_path / "data"), cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr
    assert "address already in use" in out.stderr
