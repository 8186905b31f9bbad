"""``@callable``: marks the methods a client may call by name.

Only methods marked with it can be called over the wire; names starting with ``_`` are refused even if
marked. A method that is an async generator is a *streaming* callable: each ``yield`` is sent as an
``rpc_chunk`` frame after the writes made before it are committed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

__all__ = ["CallableInfo", "callable", "callables_of", "wakeup"]

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__roost_callable__"


@overload
def callable(fn: F, *, readonly: bool = False) -> F: ...


@overload
def callable(fn: None = None, *, readonly: bool = False) -> Callable[[F], F]: ...


def callable(fn: F | None = None, *, readonly: bool = False) -> F | Callable[[F], F]:
    """Mark ``fn`` as callable by clients (RPC): ``@callable`` or ``@callable(readonly=True)``.

    ``readonly`` declares that the method changes nothing: read-only principals may call it (and only
    such methods). For a read-only caller the turn is read-only: ``set_state``, ``emit``, schedules
    and ``self.sql`` writes raise, and the turn is rolled back.
    """

    def mark(f: F) -> F:
        if f.__name__.startswith("_"):
            raise ValueError(f"private method {f.__name__!r} cannot be @callable")
        setattr(f, _MARK, True)
        setattr(f, "__roost_readonly__", readonly)  # noqa: B010
        return f

    return mark(fn) if fn is not None else mark


def wakeup(fn: F | None = None, *, model: type[Any] | None = None) -> Any:
    """Mark a method as a wake-up callback (``self.schedule(when, "method", payload)``).

    ``@wakeup`` or ``@wakeup(model=PydanticModel)``: with a model, the payload is validated when the
    wake-up is scheduled and handed to the method as a model instance when it fires. The method takes
    the payload as its one argument, or no argument at all.
    """

    def mark(f: F) -> F:
        if f.__name__.startswith("_"):
            raise ValueError(f"private method {f.__name__!r} cannot be @wakeup")
        setattr(f, "__roost_wakeup__", True)  # noqa: B010
        setattr(f, "__roost_wakeup_model__", model)  # noqa: B010
        return f

    return mark(fn) if fn is not None else mark


@dataclass(frozen=True, slots=True)
class CallableInfo:
    name: str
    streaming: bool
    signature: inspect.Signature
    readonly: bool = False


def callables_of(cls: type) -> dict[str, CallableInfo]:
    """The ``@callable`` methods of an actor class, by name (inherited ones included)."""
    found: dict[str, CallableInfo] = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        fn = getattr(cls, name, None)
        if fn is not None and getattr(fn, _MARK, False):
            found[name] = CallableInfo(
                name=name,
                streaming=inspect.isasyncgenfunction(fn),
                signature=inspect.signature(fn),
                readonly=bool(getattr(fn, "__roost_readonly__", False)),
            )
    return found
