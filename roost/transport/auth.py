"""Authentication hook: ``authenticate(conn) -> Principal | None``.

``conn`` is the Starlette ``HTTPConnection`` (a ``WebSocket`` or a ``Request``). Returning ``None``
refuses: close code 4401 for a WebSocket, HTTP 401 otherwise. The hook may be sync or async. The
default, :func:`allow_all`, lets everyone in as the anonymous principal, and the app says so in its log
at start-up.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from starlette.requests import HTTPConnection

from roost.actors import ANONYMOUS, Principal

__all__ = ["Authenticate", "allow_all", "run_authenticate"]

Authenticate = Callable[[HTTPConnection], Awaitable[Principal | None] | Principal | None]


def allow_all(conn: HTTPConnection) -> Principal:
    """The default: everyone is the anonymous principal."""
    return ANONYMOUS


async def run_authenticate(hook: Authenticate, conn: HTTPConnection) -> Principal | None:
    result = hook(conn)
    if inspect.isawaitable(result):
        return await result
    return result
