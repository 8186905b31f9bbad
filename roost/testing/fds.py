"""What this process has open, as the kernel names it (Linux: read from ``/proc/self/fd``).

::

    await until(lambda: str(path) not in open_files())   # the actor's file is really closed
    before = open_sockets()
    ...                                                   # clients reset their connections
    await until(lambda: open_sockets() <= before)         # the server in this process let go of them

For a server served in the test's own process (:func:`roost.testing.serve`) this is how a test sees what
the server did with a file or a socket when no API says it: the descriptor is the fact.
"""

from __future__ import annotations

import os

__all__ = ["open_files", "open_sockets"]

_FD_DIR = "/proc/self/fd"


def open_files() -> set[str]:
    """What every open descriptor of this process refers to: a file's absolute path as the kernel
    resolved it, ``socket:[inode]``, ``pipe:[inode]``, ``anon_inode:[...]``.

    Guarantees: a file open in this process is in the set under its resolved path, and is no longer in
    it once every descriptor on it is closed (whichever thread closed it); a descriptor closed while the
    set is read is left out; where ``/proc/self/fd`` does not exist (not Linux) it raises ``OSError``
    rather than answer an empty set.
    """
    targets: set[str] = set()
    for fd in os.listdir(_FD_DIR):
        try:
            targets.add(os.readlink(f"{_FD_DIR}/{fd}"))
        except OSError:  # closed since the listing (the listing's own descriptor among them)
            continue
    return targets


def open_sockets() -> set[str]:
    """The sockets this process has open, each as ``socket:[inode]`` (same guarantees as
    :func:`open_files`): a socket closed, by the test or by a server in this process, leaves the set."""
    return {target for target in open_files() if target.startswith("socket:")}
