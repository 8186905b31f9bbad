"""``@workflow``: marks an actor's async method as a workflow body, and finds a kind's bodies."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from roost.actors.extension import WORKFLOW_MARK

__all__ = ["bodies_of", "workflow"]

F = TypeVar("F", bound=Callable[..., Any])
_MARK = WORKFLOW_MARK
_CACHE = "_roost_workflow_bodies"


@overload
def workflow(fn: F, *, name: str | None = None) -> F: ...


@overload
def workflow(fn: None = None, *, name: str | None = None) -> Callable[[F], F]: ...


def workflow(fn: F | None = None, *, name: str | None = None) -> F | Callable[[F], F]:
    """Mark ``async def body(self, step, input)`` as the workflow ``name`` (default: the method's
    name), started with ``start_workflow(name, input)``, on a kind that subclasses
    :class:`~roost.workflows.Workflows` (a registry refuses one on any other actor class, naming
    it). The body is called again from the top on
    every advance: between steps it must do the same thing each time (no clock, randomness or I/O
    outside steps)."""

    def mark(f: F) -> F:
        if not inspect.iscoroutinefunction(f):
            raise TypeError(f"a @workflow body must be an async def, got {f!r}")
        setattr(f, _MARK, name or f.__name__)
        return f

    return mark(fn) if fn is not None else mark


def bodies_of(cls: type) -> dict[str, str]:
    """The workflows of an actor class: workflow name → method name (inherited ones included)."""
    cached: dict[str, str] | None = cls.__dict__.get(_CACHE)
    if cached is not None:
        return cached
    found: dict[str, str] = {}
    for attr in dir(cls):
        fn = getattr(cls, attr, None)
        name = getattr(fn, _MARK, None)
        if isinstance(name, str):
            if name in found:
                raise TypeError(f"{cls.__name__} has two workflows named {name!r}")
            found[name] = attr
    setattr(cls, _CACHE, found)
    return found
