"""Exceptions raised by the Roost client, and the one table of close codes that stop it.

Hierarchy::

    ClientError
    ├── RpcError           the server answered a call with ``ok: false``
    ├── CallNotSent        the call was never handed to a socket: it had no effect, retry freely
    │   └── SendTimeout    … because no connection came within its timeout (also a CallTimeout)
    ├── OutcomeUnknown     the call was sent, and no answer came: it may or may not have run
    │   ├── ConnectionLost the connection dropped before the reply (and no resend is left)
    │   └── ReplyTimeout   no reply within the call's timeout (also a CallTimeout)
    ├── CallTimeout        no reply within the call's timeout (also a ``TimeoutError``): raised as
    │                      SendTimeout or ReplyTimeout for a call, as itself for a stream's item
    ├── TerminalClose      the server closed with a code that means "stop" (see ``CloseCode``)
    ├── ClientClosed       the client was closed by its owner
    └── ProtocolViolation  the server sent something protocol.md does not allow

A call with an idempotency key (``Client.call`` gives each one by default) that raised
``OutcomeUnknown`` may be called again with the same key (``call_with(..., idempotency_key=key)``):
the actor runs it at most once and answers the recorded outcome (``docs/protocol.md``, *Idempotency
keys*); the error's ``idempotency_key`` is that key.
"""

from __future__ import annotations

from roost.protocol.codes import TERMINAL_CLOSE_CODES, CloseCode, is_terminal

__all__ = [
    "TERMINAL_CLOSE_CODES",
    "CallNotSent",
    "CallTimeout",
    "ClientClosed",
    "ClientError",
    "CloseCode",
    "ConnectionLost",
    "OutcomeUnknown",
    "ProtocolViolation",
    "ReplyTimeout",
    "RpcError",
    "SendTimeout",
    "TerminalClose",
    "close_code_for_http_status",
    "is_terminal",
]


def close_code_for_http_status(status: int) -> int | None:
    """The terminal close code equivalent to an HTTP status refusing the WebSocket upgrade.

    A server may refuse the handshake with an HTTP response instead of accepting and closing
    (Starlette does this when a WebSocket is closed before ``accept``). protocol.md's 44xx codes
    mirror HTTP 4xx, so ``404`` maps to ``4404`` and so on. 408 and 429 are retryable and map to
    ``None``, like every 5xx status: the client then reconnects with backoff.
    """
    if 400 <= status <= 499 and status not in (408, 429):
        return 4000 + status
    return None


class ClientError(Exception):
    """Base class of every exception raised by ``roost.client``.

    Instances can be copied (``copy.copy``) and pickled: the client raises a fresh copy of a
    shared error (e.g. the ``TerminalClose`` that stopped it) in each waiting task.
    """


class RpcError(ClientError):
    """The server answered a call with ``{"ok": false, "error": {"code", "message"}}``.

    The call reached the actor and failed: its writes were rolled back (``handler_error``) or it
    never ran (``method_not_found``, ``invalid_arguments``, ``overloaded``...).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple[type[RpcError], tuple[str, str]]:
        return (type(self), (self.code, self.message))


class CallTimeout(ClientError, TimeoutError):
    """No reply arrived within the call's timeout. A call raises one of its two subclasses, which
    say whether it was sent: :class:`SendTimeout` (never sent) or :class:`ReplyTimeout` (sent, the
    outcome unknown)."""


class CallNotSent(ClientError):
    """The call was never handed to a socket, so it had no effect: retrying it is safe. Raised at
    once when ``max_queued`` calls already wait for a connection, and as :class:`SendTimeout` when
    no connection came within the call's timeout."""


class OutcomeUnknown(ClientError):
    """The call was sent and no answer came: it may or may not have run and committed.

    ``idempotency_key`` is the key it was sent with (``None``: none). With a key, calling again
    with the same key is safe (the actor runs it at most once, and answers the first outcome);
    without one, retry only calls that are idempotent anyway, or check the actor's state.
    """

    idempotency_key: str | None = None


class SendTimeout(CallTimeout, CallNotSent):
    """No connection came within the call's timeout: the call was never sent."""


class ReplyTimeout(CallTimeout, OutcomeUnknown):
    """The call was sent and no reply came within its timeout: the outcome is unknown."""


class ConnectionLost(OutcomeUnknown):
    """The connection dropped before the reply arrived.

    The request may or may not have reached the actor, and may or may not have been executed and
    committed: the outcome is unknown. A call with an idempotency key is sent again on the next
    connection, with the same key (up to ``resends`` times, within its timeout), and raises this
    only when none is left; a call without one raises it at once.
    """


class TerminalClose(ClientError):
    """The server closed the connection with a terminal code: the client has stopped.

    Raised by pending calls (their outcome is unknown), by every later call and by
    ``wait_connected``. ``code`` is the WebSocket close code, or ``4000 + status`` when the
    server refused the handshake with an HTTP 4xx status (see ``close_code_for_http_status``).
    """

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"connection closed by the server with code {code}: {reason or '-'}")
        self.code = code
        self.reason = reason

    def __reduce__(self) -> tuple[type[TerminalClose], tuple[int, str]]:
        return (type(self), (self.code, self.reason))


class ClientClosed(ClientError):
    """The client was closed (``Client.close`` or leaving ``async with``)."""

    def __init__(self, message: str = "the client is closed") -> None:
        super().__init__(message)


class ProtocolViolation(ClientError):
    """The server sent a frame that protocol.md does not allow (the connection is then dropped)."""
