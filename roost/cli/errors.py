"""How the ``roost`` command fails: one line on stderr, never a traceback, and a documented exit code.

Exit codes: 0 success; 1 the command ran and failed (a damaged file, a server that did not answer, an
integrity failure); 2 a usage error (bad arguments, an incomplete address, a configuration the command
cannot start with; every number and ``--host`` is checked when the command line is parsed,
:mod:`roost.cli.options`); 3 ``roost serve`` could not listen on a well-formed address (a port in use,
an address that is not this host's: uvicorn's start-up failure, with its one ``ERROR`` line).
``roost --debug COMMAND`` shows the traceback of an unexpected error as well.
"""

from __future__ import annotations

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "CommandFailed", "UsageError"]

EXIT_FAILURE = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """The command was given something it cannot work with: exit 2 with this message."""


class CommandFailed(Exception):
    """The command ran and failed: exit 1 with this message."""
