"""Every failure Roost reports, with its close code and its HTTP status, in one table.

A failure has a wire code (the ``code`` of an ``error`` frame, of a failed ``rpc_result`` and of an
HTTP error body). The same code always means the same thing, whichever way it reaches the client:

- ``close``: the WebSocket close code when the failure ends (or refuses) a connection, ``None`` when it
  never does (the frame is answered and the connection goes on). A failure with a close code may also
  answer a single frame without closing (``forbidden`` for one call, ``overloaded`` for one frame over
  the in-flight bound): the close code applies when the connection itself is refused.
- ``http``: the HTTP status of an HTTP answer carrying that code.

The actor runtime's errors (:mod:`roost.actors.errors`, every ``RpcError`` subclass with its ``code``)
and the transport's own refusals are all here; a code an actor raises itself (``RpcError(code, ...)``)
is not, and gets :data:`OTHER`. ``docs/protocol.md`` (*Errors*) lists the same table;
``tests/test_failures.py`` checks that they agree, and that the close codes are the documented ones.

Guarantees: :func:`failure` is total (any string has an answer); the WebSocket endpoint and the HTTP
routes take close codes and statuses only from here.
"""

from __future__ import annotations

from typing import NamedTuple

from roost.protocol.codes import CloseCode

__all__ = ["FAILURES", "OTHER", "Failure", "close_code", "failure", "http_status"]


class Failure(NamedTuple):
    code: str  #: the wire error code
    http: int  #: the HTTP status of an answer with this code
    close: CloseCode | None  #: the close code when it ends a connection; None: it never does


def _table(*rows: Failure) -> dict[str, Failure]:
    return {row.code: row for row in rows}


#: Wire code → failure. Order follows ``docs/protocol.md``.
FAILURES: dict[str, Failure] = _table(
    # a client frame or request that breaks the protocol: answered, the connection goes on
    Failure("bad_frame", 400, None),
    Failure("unknown_type", 400, None),
    # a call that failed at the actor (roost.actors.errors)
    Failure("method_not_found", 404, None),
    Failure("invalid_arguments", 400, None),
    Failure("invalid_state", 400, None),
    Failure("handler_error", 500, None),
    Failure("timeout", 504, None),
    Failure("reentrant_call", 409, None),
    Failure("idempotency_conflict", 409, None),
    Failure("idempotency_result_unavailable", 409, None),
    # an actor's durable queue refused an item (roost.actors.queue): nothing was enqueued
    Failure("payload_too_large", 413, None),
    Failure("queue_full", 503, None),
    # too much: a frame over the limit closes the connection, an HTTP body over it is refused
    Failure("too_large", 413, CloseCode.MESSAGE_TOO_BIG),
    Failure("overloaded", 503, CloseCode.TRY_AGAIN_LATER),
    Failure("actor_unavailable", 503, CloseCode.TRY_AGAIN_LATER),
    Failure("actor_damaged", 503, CloseCode.INTERNAL_ERROR),
    # the access gate (roost.transport.access)
    Failure("unauthenticated", 401, CloseCode.UNAUTHENTICATED),
    Failure("forbidden", 403, CloseCode.FORBIDDEN),
    Failure("origin_refused", 403, CloseCode.FORBIDDEN),
    Failure("rate_limited", 429, None),
    Failure("creation_limited", 429, CloseCode.TRY_AGAIN_LATER),
    Failure("too_many_connections", 503, CloseCode.TRY_AGAIN_LATER),
    # the address
    Failure("bad_address", 400, CloseCode.BAD_ADDRESS),
    Failure("unknown_kind", 404, CloseCode.UNKNOWN_KIND),
    # HTTP GET of an actor never created, or a read-only HTTP call to one (a connection creates it)
    Failure("not_found", 404, None),
)

#: A code the table does not know (an actor's own ``RpcError(code, ...)``): a client error.
OTHER = Failure("", 400, None)


def failure(code: str) -> Failure:
    """The failure of a wire code; :data:`OTHER` (with that code) for one the table does not know."""
    found = FAILURES.get(code)
    return found if found is not None else OTHER._replace(code=code)


def http_status(code: str) -> int:
    """The HTTP status of an answer with this wire code."""
    found = FAILURES.get(code)
    return found.http if found is not None else OTHER.http


def close_code(code: str) -> CloseCode:
    """The close code of a connection ended by this failure. Raises ``LookupError`` for a failure
    that never ends a connection (asking for one is a bug in the caller)."""
    found = FAILURES.get(code)
    if found is None or found.close is None:
        raise LookupError(f"failure {code!r} never closes a connection")
    return found.close
