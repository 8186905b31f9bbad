"""``@callable``: marks the methods a client may call by name.

Only methods marked with it can be called over the wire; names starting with ``_`` are refused even if
marked. A method that is an async generator is a *streaming* callable: each ``yield`` is sent as an
``rpc_chunk`` frame after the writes made before it are committed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["CallableInfo", "callable", "callables_of"]

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__roost_callable__"


def callable(fn: F) -> F:
    """Mark ``fn`` as callable by clients (RPC)."""
    if fn.__name__.startswith("_"):
        raise ValueError(f"private method {fn.__name__!r} cannot be @callable")
    setattr(fn, _MARK, True)
    return fn


@dataclass(frozen=True, slots=True)
class CallableInfo:
    name: str
    streaming: bool
    signature: inspect.Signature


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
            )
    return found
