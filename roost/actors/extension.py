"""The extension API: what a runtime layered on actors (the agent runtime) may use.

A layer on top of the actor runtime needs more than an application does: the turn's own clock
reading, the trace id records carry, the turn's SQL connection for tables the layer owns, per-process
services (a job worker) that live as long as the registry, and a way to run a function as a turn of
another actor. This module is that surface, and the only one: the agent runtime imports nothing else
of :mod:`roost.actors` but the public API of :mod:`roost.actors` itself (``make lint`` enforces it).
The classes are defined in :mod:`roost.actors.actor` (an ``Actor`` carries its ``TurnContext``, whose
``process`` runs functions of an ``Actor``: types that name each other share a module).

- :class:`TurnContext` (``actor.extension``) is per actor: valid during a turn unless said otherwise.
- :class:`Process` (``actor.extension.process``) is per registry: valid for the registry's life.

Guarantees (tests in ``tests/test_extension_api.py``):

- **The turn's time is one reading.** :attr:`TurnContext.now` is the clock's ``now()`` taken when the
  turn began; every record a turn writes with it carries the same time, and a fake clock moves it.
- **A savepoint undoes a part of a turn alone.** :meth:`TurnContext.savepoint` opens a nested
  savepoint; its ``rollback()`` undoes the SQL writes, state, events and outputs since, and the turn
  goes on and commits the rest.
- **A service is created once per process.** :meth:`Process.service` returns the same object for the
  same key for the registry's life, and the registry stops it (``await service.stop()``) before its
  actors drain.
"""

from __future__ import annotations

from roost.actors.actor import Process, ProcessRegistry, Service, TurnContext
from roost.actors.decorators import WORKFLOW_MARK
from roost.actors.interfaces import Savepoint

__all__ = ["WORKFLOW_MARK", "Process", "ProcessRegistry", "Savepoint", "Service", "TurnContext"]
