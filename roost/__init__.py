"""Roost: named, stateful, durable actors over WebSockets, each with its own SQLite file.

The public API a user writes against::

    from roost import Actor, callable, wakeup, create_app
    from roost.agent import Agent, tool          # the durable agent runtime
    from roost.client import Client              # the Python client
    from roost.testing import ...                # the test kit

Subpackages, lowest layer first (``docs/design.md`` draws them): :mod:`roost.storage` (files, the
directory, migrations), :mod:`roost.scheduler` (time, triggers, the wake-up dispatcher),
:mod:`roost.actors` (the actor runtime), :mod:`roost.agent` (the agent runtime, on the actors'
extension API), :mod:`roost.protocol` (the wire protocol's pure parts), :mod:`roost.transport` (the
Starlette app, the WebSocket endpoint, HTTP routes), :mod:`roost.client` (the Python client, which
knows only the wire protocol), :mod:`roost.testing` (the test kit), :mod:`roost.examples` (the kinds a
bare ``roost serve`` hosts, and the demos) and :mod:`roost.cli` (the ``roost`` command).
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, loaded on first use (see __getattr__)
    from roost.actors import (
        ANONYMOUS,
        Actor,
        ActorDamaged,
        ActorError,
        ActorNotFound,
        ActorRef,
        ActorUnavailable,
        CallTimeout,
        Connection,
        DeadLetter,
        InvalidActorAddress,
        Misfire,
        Principal,
        Registry,
        Reject,
        RetryPolicy,
        RoostError,
        RpcError,
        RuntimeConfig,
        Schedule,
        UnknownKind,
        callable,
        wakeup,
    )
    from roost.transport import Authenticate, CloseCode, RoostApp, allow_all, create_app

try:
    __version__ = version("roost")
except PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
    __version__ = "0+unknown"

#: The public names of ``__all__`` that live in :mod:`roost.transport`; the others live in
#: :mod:`roost.actors`. They load on first use, so that ``import roost.storage`` (or the ``roost``
#: command, which must configure websockets before it is imported) does not import the whole server.
_TRANSPORT = ("Authenticate", "CloseCode", "RoostApp", "allow_all", "create_app")


def __getattr__(name: str) -> Any:
    if name not in __all__ or name == "__version__":
        raise AttributeError(f"module 'roost' has no attribute {name!r}")
    value = getattr(import_module("roost.transport" if name in _TRANSPORT else "roost.actors"), name)
    globals()[name] = value
    return value


__all__ = [
    "ANONYMOUS",
    "Actor",
    "ActorDamaged",
    "ActorError",
    "ActorNotFound",
    "ActorRef",
    "ActorUnavailable",
    "Authenticate",
    "CallTimeout",
    "CloseCode",
    "Connection",
    "DeadLetter",
    "InvalidActorAddress",
    "Misfire",
    "Principal",
    "Registry",
    "Reject",
    "RetryPolicy",
    "RoostApp",
    "RoostError",
    "RpcError",
    "RuntimeConfig",
    "Schedule",
    "UnknownKind",
    "__version__",
    "allow_all",
    "callable",
    "create_app",
    "wakeup",
]
