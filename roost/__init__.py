"""Roost: named, stateful, durable actors over WebSockets, each with its own SQLite file.

The public API a user writes against::

    from roost import Actor, callable, wakeup, create_app
    from roost.agent import Agent, tool          # the durable agent runtime
    from roost.client import Client              # the Python client
    from roost.testing import ...                # the test kit

Subpackages, lowest layer first (``docs/design.md`` draws them): :mod:`roost.storage` (files, the
directory, migrations), :mod:`roost.scheduler` (time, triggers, the wake-up dispatcher),
:mod:`roost.actors` (the actor runtime), :mod:`roost.agent` (the agent runtime, on the actors'
extension API), :mod:`roost.transport` (the Starlette app, the WebSocket endpoint, the CLI),
:mod:`roost.client` (the Python client, which knows only the wire protocol) and
:mod:`roost.examples` (the kinds a bare ``roost serve`` hosts, and the demos).
"""

from importlib.metadata import PackageNotFoundError, version

from roost.actors import (
    ANONYMOUS,
    Actor,
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

__all__ = [
    "ANONYMOUS",
    "Actor",
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
