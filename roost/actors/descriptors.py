"""File descriptors: how many live actors fit under the process's limit, and what to say when none is
left.

Each live actor holds :data:`FDS_PER_ACTOR` descriptors: its SQLite file, its WAL (the file is
opened with ``locking_mode=EXCLUSIVE``, so the WAL index is in heap memory and there is no ``-shm``
file) and its high-water seq witness (``<file>-seq``, :class:`roost.storage.damage.Witness`);
``tests/test_descriptors.py`` measures it. A deactivated actor's file is closed in a release
thread, and until then holds them too: at most ``max(16, max_active // 10)`` such releases are pending
(:class:`~roost.actors.releases.FileReleases`).

At start (:meth:`Registry.start <roost.actors.Registry.start>`, and ``roost serve`` before it listens),
:func:`fit_descriptors`:

1. raises ``RLIMIT_NOFILE``'s soft limit to the hard limit;
2. counts the descriptors open now;
3. keeps a reserve for sockets and everything else the process opens: ``fd_reserve`` of the runtime's
   config, by default :func:`default_reserve` (a quarter of the limit, at least 64);
4. sizes ``max_active`` so that the live actors and the pending releases fit in what is left
   (:func:`budget`; never above the configured ``max_active``).

Guarantees:

- **Actors never take the reserve.** With ``max_active`` sized by :func:`budget`, live actors and their
  pending releases hold at most the descriptors left beside it, so a client's handshake still finds one
  when the process holds its maximum of actors (the next new actor is ``overloaded``, 503 / 1013).
- **A limit too small is refused at start**, with one line saying the numbers
  (:class:`~roost.actors.errors.TooFewDescriptors`), when fewer than :data:`MIN_ACTORS` would fit.
- **Sockets stay in the reserve** (``roost serve``): :meth:`DescriptorBudget.connections` is the
  number of connections the server holds at once, the reserve less a headroom (an eighth, at least
  16) for the connections being refused and the process's own files; ``roost serve`` gives it to
  uvicorn as ``limit_concurrency`` (past it a new request or WebSocket handshake is answered HTTP 503,
  not left without an answer by an ``EMFILE``), and a connection opened past
  :meth:`DescriptorBudget.ceiling` is closed at once (``roost.transport.uvicorn_http``); one
  client (an anonymous address, an authenticated principal) holds at most half of the connections
  by default (``roost.cli.serve``).
- **Running out is a capacity error.** An actor whose file cannot be opened because the process (or
  the system) has no descriptor left is ``actor_unavailable`` with a message that says so
  (:func:`out_of_descriptors` tells it apart from other failures to open), never a traceback per
  attempt.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import sqlite3

from roost.actors.errors import TooFewDescriptors

try:
    import resource
except ImportError:  # not POSIX: no limit to read or raise
    resource = None  # type: ignore[assignment]

__all__ = [
    "FDS_PER_ACTOR",
    "MIN_ACTORS",
    "DescriptorBudget",
    "budget",
    "default_reserve",
    "fit_descriptors",
    "open_descriptors",
    "out_of_descriptors",
    "socket_headroom",
]

log = logging.getLogger("roost.registry")

#: Descriptors one live actor holds (its file, its WAL and its witness), measured by
#: tests/test_descriptors.py.
FDS_PER_ACTOR = 3
#: Fewer live actors than this and the runtime refuses to start.
MIN_ACTORS = 16


@dataclasses.dataclass(frozen=True, slots=True)
class DescriptorBudget:
    """What :func:`fit_descriptors` found and decided."""

    #: The soft limit in force (after raising it), and the hard limit.
    limit: int
    hard: int
    #: The soft limit before it was raised; None when it already was the hard limit.
    raised_from: int | None
    #: Descriptors open when it was counted, and those kept for sockets and the rest.
    in_use: int
    reserve: int
    #: The bound on live actors that fits; the configured one when it was lowered (else None).
    max_active: int
    lowered_from: int | None

    def connections(self) -> int:
        """Connections the server holds at once: the reserve less :func:`socket_headroom`."""
        return max(1, self.reserve - socket_headroom(self.reserve))

    def ceiling(self) -> int:
        """Sockets past which a new one is closed at once: :meth:`connections` and half the headroom
        (the connections being answered 503); the other half is for the process's own files."""
        return self.connections() + socket_headroom(self.reserve) // 2

    def describe(self) -> str:
        """One line for the log: the limit and ``max_active``, and why."""
        limit = f"descriptor limit {self.limit}"
        if self.raised_from is not None:
            limit += f" (raised from {self.raised_from} to the hard limit)"
        why = (
            f"{FDS_PER_ACTOR} per actor, {self.in_use} in use, {self.reserve} kept for sockets: "
            f"{self.connections()} connections"
        )
        if self.lowered_from is not None:
            return f"{limit}; max_active lowered from {self.lowered_from} to {self.max_active} to fit ({why})"
        return f"{limit}; max_active {self.max_active} fits ({why})"

    def as_json(self) -> dict[str, int | None]:
        return {
            "limit": self.limit,
            "hard": self.hard,
            "in_use_at_start": self.in_use,
            "reserve": self.reserve,
            "per_actor": FDS_PER_ACTOR,
            "max_active": self.max_active,
            "connections": self.connections(),
        }


def default_reserve(limit: int) -> int:
    """Descriptors kept for sockets and the rest under ``limit``: a quarter of it, at least 64."""
    return max(64, limit // 4)


def socket_headroom(reserve: int) -> int:
    """Descriptors of the reserve kept beside the connections: an eighth of it, at least 16 (at most
    half of it)."""
    return min(reserve // 2, max(16, reserve // 8))


def _pending_releases(max_active: int) -> int:
    return max(16, max_active // 10)  # as Registry sizes its FileReleases


def budget(
    limit: int, in_use: int, max_active: int, reserve: int | None = None, *, hard: int | None = None
) -> DescriptorBudget:
    """The ``max_active`` that fits under ``limit`` with ``in_use`` descriptors open: live actors and
    their pending releases (:data:`FDS_PER_ACTOR` each) take at most ``limit - in_use - reserve``.
    Raises :class:`TooFewDescriptors` below :data:`MIN_ACTORS`. No I/O."""
    kept = default_reserve(limit) if reserve is None else reserve
    files = max(0, (limit - in_use - kept) // FDS_PER_ACTOR)
    fits = files * 10 // 11
    if _pending_releases(fits) + fits > files:
        fits = max(0, files - _pending_releases(fits))
    if fits < MIN_ACTORS:
        raise TooFewDescriptors(
            f"too few file descriptors: a limit of {limit} with {in_use} in use and {kept} kept for "
            f"sockets leaves room for {fits} live actors (at least {MIN_ACTORS}, {FDS_PER_ACTOR} "
            f"descriptors each); raise the hard limit (ulimit -Hn, systemd LimitNOFILE=)"
        )
    chosen = min(max_active, fits)
    return DescriptorBudget(
        limit=limit,
        hard=limit if hard is None else hard,
        raised_from=None,
        in_use=in_use,
        reserve=kept,
        max_active=chosen,
        lowered_from=max_active if chosen < max_active else None,
    )


def open_descriptors() -> int:
    """How many descriptors this process has open (``/proc/self/fd``, or ``/dev/fd``; 0 where
    neither can be listed)."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(0, len(os.listdir(where)) - 1)  # less the listing's own
        except OSError:
            continue
    return 0


def fit_descriptors(max_active: int, reserve: int | None = None) -> DescriptorBudget | None:
    """Raise the soft descriptor limit to the hard limit and size ``max_active`` to fit
    (:func:`budget`); None where there is no limit (not POSIX, or unlimited). Raises
    :class:`TooFewDescriptors`."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised_from = None
    if soft != hard and soft != resource.RLIM_INFINITY:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            raised_from, soft = soft, hard
        except (ValueError, OSError) as exc:  # e.g. macOS refuses an unlimited soft limit
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, hard, exc)
    if soft == resource.RLIM_INFINITY:
        return None
    found = budget(soft, open_descriptors(), max_active, reserve, hard=hard)
    return dataclasses.replace(found, raised_from=raised_from)


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether a failure to open a file was for want of a descriptor (``EMFILE``, ``ENFILE``). SQLite
    says only "unable to open database file": then one descriptor is asked for, and given back."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EMFILE, errno.ENFILE)
    if not isinstance(exc, sqlite3.Error):
        return False
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
    except OSError as probe:
        return probe.errno in (errno.EMFILE, errno.ENFILE)
    os.close(fd)
    return False
