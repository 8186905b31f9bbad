"""The extension API: what a runtime layered on actors (the agent runtime) may use.

A layer on top of the actor runtime needs more than an application does: the turn's own clock
reading, the trace id records carry, the turn's SQL connection for tables the layer owns, per-process
services (a job worker) that live as long as the registry, and a way to run a function as a turn of
another actor. This module is that surface, and the only one: the agent runtime imports nothing else
of :mod:`roost.actors` but the public API of :mod:`roost.actors` itself (``make lint`` enforces it).

- :class:`TurnContext` (``actor.extension``) is per actor: valid during a turn unless said otherwise.
- :class:`Process` (``actor.extension.process``) is per registry: valid for the registry's life.

Guarantees (tests in ``tests/test_extension_api.py``):

- **The turn's time is one reading.** :attr:`TurnContext.now` is the clock's ``now()`` taken when the
  turn began; every record a turn writes with it carries the same time, and a fake clock moves it.
- **A service is created once per process.** :meth:`Process.service` returns the same object for the
  same key for the registry's life, and the registry stops it (``await service.stop()``) before its
  actors drain.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from roost.scheduler.clock import Clock
from roost.storage.directory import Directory

if TYPE_CHECKING:
    from roost.actors.actor import Actor
    from roost.actors.host import ActorHost
    from roost.actors.registry import Registry

__all__ = ["Process", "Service", "TurnContext"]


class Service(Protocol):
    """Something that lives as long as a registry and stops before its actors drain."""

    async def stop(self) -> None: ...


S = TypeVar("S", bound=Service)


class Process:
    """The per-process side of the extension API: one per registry."""

    __slots__ = ("_registry",)

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    @property
    def clock(self) -> Clock:
        """The clock every timer of the runtime uses (a fake one in tests)."""
        return self._registry.clock

    @property
    def data_dir(self) -> Path:
        """The data directory this process serves."""
        return self._registry.config.data_dir

    @property
    def directory(self) -> Directory | None:
        """The directory database (None before the registry has started)."""
        return self._registry.directory

    def service(self, key: str, factory: Callable[[Process], S]) -> S:
        """This process's service named ``key``, made by ``factory(process)`` on first use; stopped
        with the registry, before its actors drain."""
        services = self._registry.services
        found = services.get(key)
        if found is None:
            made = factory(self)
            services[key] = made
            return made
        return found  # type: ignore[return-value]  # one key, one factory: the caller's type

    async def run(
        self,
        kind: str,
        name: str,
        fn: Callable[[Actor], Awaitable[Any]],
        *,
        timeout: float | None = None,
    ) -> Any:
        """Run ``fn(actor)`` as a turn of that actor (activating it); its result after the commit."""
        return await self._registry.run(kind, name, fn, timeout=timeout)


class TurnContext:
    """The per-actor side of the extension API (``actor.extension``)."""

    __slots__ = ("_host",)

    def __init__(self, host: ActorHost) -> None:
        self._host = host

    @property
    def process(self) -> Process:
        """The process this actor lives in."""
        return self._host.registry.process

    @property
    def now(self) -> float:
        """The clock's reading at the start of the current turn (epoch seconds)."""
        return self._host.turn_now

    @property
    def trace_id(self) -> str:
        """An id for the current turn, made when first asked for (records carry it)."""
        return self._host.trace_id

    def connection(self) -> sqlite3.Connection:
        """The turn's SQLite connection, inside the turn's transaction, for the tables the layer owns
        (declared in ``Actor.components``). Unlike ``self.sql`` it may write ``roost_*`` tables; it
        must not begin, commit or roll back. Turn only."""
        return self._host.turn_connection()

    def emit(self, event: Any) -> int:
        """Log a durable event and broadcast it, as ``Actor.emit``; returns its ``seq``."""
        return self._host.emit(event)
