"""Argument types and options every ``roost`` command shares, checked when the command line is parsed.

Guarantee: a number on the command line is refused before the command runs (argparse's usage line and
one error line, exit 2) unless it is finite (no ``nan``, no ``inf``, nothing that overflows to it, such
as ``1e400``), of the right sort (an integer where a count is asked) and in range: positive where zero
would mean nothing (a timeout, a lifetime, a limit on a listing), at least zero where the option's help
says what 0 means (``0: off``). Every command's ``--data`` is one option: the data directory, by default
``$ROOST_DATA`` or ``./data``.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
from collections.abc import Callable

__all__ = [
    "add_data_option",
    "at_least",
    "default_data_dir",
    "listen_host",
    "non_negative_float",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "text",
]


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def positive_float(text: str) -> float:
    """A finite number greater than 0 (seconds of a timeout or a lifetime)."""
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not greater than 0")
    return value


def non_negative_float(text: str) -> float:
    """A finite number, 0 or more (a rate whose 0 switches it off)."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def at_least(minimum: float) -> Callable[[str], float]:
    """The type of a finite number no smaller than ``minimum`` (a burst of at least one token)."""

    def check(text: str) -> float:
        value = _number(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is less than {minimum:g}")
        return value

    check.__name__ = f"at_least_{minimum:g}"
    return check


def positive_int(text: str) -> int:
    """An integer, 1 or more (how many frames to keep, how many rows to list)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is less than 1")
    return value


def non_negative_int(text: str) -> int:
    """An integer, 0 or more (a limit whose 0 switches it off)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def text(max_chars: int) -> Callable[[str], str]:
    """The type of a string of 1 to ``max_chars`` characters (a principal's id, a tenant)."""

    def check(value: str) -> str:
        if not 0 < len(value) <= max_chars:
            raise argparse.ArgumentTypeError(f"must be 1 to {max_chars} characters, got {len(value)}")
        return value

    check.__name__ = f"text_{max_chars}"
    return check


def listen_host(value: str) -> str:
    """An address this host could listen on: an IP address, or a name that resolves to one
    (``localhost``). ``999.1.1.1`` or a name that does not resolve is a usage error here; an address
    that resolves but is not this host's fails later, when the server binds it (exit 3)."""
    if not value:
        raise argparse.ArgumentTypeError("an empty host: give an address, e.g. 127.0.0.1 or 0.0.0.0")
    try:
        socket.getaddrinfo(value, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an IP address or a host name that resolves"
        ) from None
    return value


def default_data_dir() -> str:
    """``$ROOST_DATA``, or ``data`` (in the working directory) when it is unset or empty."""
    return os.environ.get("ROOST_DATA") or "data"


def add_data_option(parser: argparse.ArgumentParser, *, app_decides: bool = False) -> None:
    """``--data DIR``, the data directory: by default ``$ROOST_DATA`` or ``./data``. With
    ``app_decides`` (``roost serve``) nothing is set unless given, so that an app made with its own
    ``data_dir`` keeps it (``create_app`` itself reads ``$ROOST_DATA``)."""
    if app_decides:
        parser.add_argument(
            "--data",
            help="data directory (default: $ROOST_DATA or ./data, as create_app; an app given its own "
            "data_dir keeps it)",
        )
    else:
        parser.add_argument(
            "--data", default=default_data_dir(), help="data directory (default: $ROOST_DATA or ./data)"
        )
