"""The ``roost`` command: serve actors, look into a data directory, back it up, issue tokens.

``roost serve [MODULE:APP]`` serves an app made by ``create_app`` (default: the example kinds);
``roost ls``, ``schedules`` and ``workers`` read the directory database; ``roost inspect``,
``export``, ``delete``, ``backup`` and ``gc`` are the data tools; ``roost token`` issues a signed token.
Run ``roost COMMAND --help`` for each command's options and their defaults.

Guarantee: a command never ends in a traceback. It prints one line (``roost: …``) on stderr and exits
1 when it ran and failed, 2 on a usage error, 3 when ``serve`` could not listen (:mod:`roost.cli.errors`);
every command's ``--data`` defaults to ``$ROOST_DATA`` or ``./data``; ``roost --debug`` adds the
traceback of an unexpected error (``tests/test_cli.py`` runs every command with bad input).
"""

from __future__ import annotations

import os

from roost.cli.limits import MAX_HANDSHAKE_LINE

# before websockets is imported (by anything below): it reads the limit once, at import
os.environ.setdefault("WEBSOCKETS_MAX_LINE_LENGTH", MAX_HANDSHAKE_LINE)

import argparse
import sys
import traceback

from roost.cli import data, listing, serve, tokens
from roost.cli.errors import EXIT_FAILURE, EXIT_USAGE, CommandFailed, UsageError

__all__ = ["main"]


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown on every option that has one (unless its help already says it); the description
    kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default is False or "default" in text:
            return text
        return super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:
    from roost import __version__

    parser = argparse.ArgumentParser(
        prog="roost",
        description=(__doc__ or "").split("\n\nGuarantee")[0].replace("``", ""),
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"roost {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    original = sub.add_parser

    def add_parser(name: str, **kwargs: object) -> argparse.ArgumentParser:
        kwargs.setdefault("formatter_class", _Formatter)
        if "help" in kwargs:
            kwargs.setdefault("description", kwargs["help"])
        return original(name, **kwargs)  # type: ignore[arg-type]

    sub.add_parser = add_parser  # type: ignore[method-assign]
    serve.add_parser(sub)
    data.add_parsers(sub)
    tokens.add_parser(sub)
    listing.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``roost`` command; returns its exit code."""
    args = _parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except UsageError as exc:
        print(f"roost: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CommandFailed as exc:
        print(f"roost: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, or something the command did not foresee: still one line
        if _is_config_error(exc):  # roost.toml, refused when an app's agent kinds register
            print(f"roost: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.debug:
            traceback.print_exc()
        print(f"roost: {args.command} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return code


def _is_config_error(exc: Exception) -> bool:
    """``exc`` is a :class:`roost.agent.config.ConfigError` (without importing the agent runtime: if it
    was never imported, nothing raised one)."""
    config = sys.modules.get("roost.agent.config")
    return config is not None and isinstance(exc, config.ConfigError)
