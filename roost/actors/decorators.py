"""``@callable``: marks the methods a client may call by name.

Only methods marked with it can be called over the wire; names starting with ``_`` are refused even if
marked. A method that is an async generator is a *streaming* callable: each ``yield`` is sent as an
``rpc_chunk`` frame after the writes made before it are committed.

A call's arguments are bound to the method's signature and validated against its annotations before
the method runs (:mod:`roost.actors.arguments`); the checks are built once, when the kind is
registered (:func:`callables_of`), so an annotation that cannot be checked fails there.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from roost.actors.arguments import Arguments, Check, result_check

__all__ = [
    "WORKFLOW_MARK",
    "CallableInfo",
    "callable",
    "callables_of",
    "check_callback",
    "check_workflows",
    "wakeup",
]

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__roost_callable__"


@overload
def callable(fn: F, *, readonly: bool = False, validate_result: bool = False) -> F: ...


@overload
def callable(
    fn: None = None, *, readonly: bool = False, validate_result: bool = False
) -> Callable[[F], F]: ...


def callable(
    fn: F | None = None, *, readonly: bool = False, validate_result: bool = False
) -> F | Callable[[F], F]:
    """Mark ``fn`` as callable by clients (RPC): ``@callable`` or ``@callable(readonly=True)``.

    The arguments of a call are validated against the method's annotations before it runs
    (``invalid_arguments`` if they do not fit; see :mod:`roost.actors.arguments`).

    ``readonly`` declares that the method changes nothing: read-only principals may call it (and only
    such methods). For a read-only caller the turn is read-only: ``set_state``, ``emit``, schedules
    and ``self.sql`` writes raise, and the turn is rolled back.

    ``validate_result`` also validates what the method returns (each chunk of a streaming one)
    against its return annotation, and sends its JSON form (a model's fields, say); a result that
    does not fit fails the call with ``handler_error`` and rolls the turn back.
    """

    def mark(f: F) -> F:
        if f.__name__.startswith("_"):
            raise ValueError(f"private method {f.__name__!r} cannot be @callable")
        setattr(f, _MARK, True)
        setattr(f, "__roost_readonly__", readonly)  # noqa: B010
        setattr(f, "__roost_validate_result__", validate_result)  # noqa: B010
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


def check_callback(cls: type, name: str) -> Any:
    """The ``@wakeup`` method ``name`` of an actor class (a wake-up's or a queue item's callback), or
    ValueError."""
    if name.startswith("_"):
        raise ValueError(f"wake-up callback {name!r} is private")
    fn = getattr(cls, name, None)
    if fn is None or not getattr(fn, "__roost_wakeup__", False):
        raise ValueError(f"{name!r} is not a @wakeup method of {cls.__name__}")
    return fn


@dataclass(frozen=True, slots=True)
class CallableInfo:
    name: str
    streaming: bool
    signature: inspect.Signature
    arguments: Arguments  #: binds and validates a call's arguments (built once, at registration)
    readonly: bool = False
    result: Check | None = None  #: validates the result (``validate_result=True``), else None


def callables_of(cls: type) -> dict[str, CallableInfo]:
    """The ``@callable`` methods of an actor class, by name (inherited ones included), each with its
    argument check. Raises ``TypeError`` for an annotation that cannot be resolved or validated."""
    found: dict[str, CallableInfo] = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        fn = getattr(cls, name, None)
        if fn is not None and getattr(fn, _MARK, False):
            streaming = inspect.isasyncgenfunction(fn)
            found[name] = CallableInfo(
                name=name,
                streaming=streaming,
                signature=inspect.signature(fn),
                arguments=Arguments(name, fn, has_self=not _static(cls, name)),
                readonly=bool(getattr(fn, "__roost_readonly__", False)),
                result=result_check(name, fn, streaming)
                if getattr(fn, "__roost_validate_result__", False)
                else None,
            )
    return found


def _static(cls: type, name: str) -> bool:
    """Whether ``cls.name`` is a staticmethod or classmethod (its signature has no ``self``)."""
    return isinstance(inspect.getattr_static(cls, name, None), staticmethod | classmethod)


#: The attribute ``@workflow`` (:mod:`roost.workflows`) sets on a workflow body. A kind runs its
#: bodies only if its class sets ``_roost_runs_workflows`` (``roost.workflows.WorkflowHost`` does).
WORKFLOW_MARK = "__roost_workflow__"


def check_workflows(cls: type) -> None:
    """Refuse a kind with a ``@workflow`` body that does not run workflows (a plain ``Actor``):
    ``start_workflow`` would only fail later, as a callable it does not have."""
    if getattr(cls, "_roost_runs_workflows", False):
        return
    for attr in dir(cls):
        if isinstance(getattr(getattr(cls, attr, None), WORKFLOW_MARK, None), str):
            raise TypeError(
                f"{cls.__name__}.{attr} is a @workflow, but {cls.__name__} does not run workflows: "
                "make it a subclass of roost.workflows.Workflows"
            )
