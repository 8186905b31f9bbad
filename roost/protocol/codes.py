"""WebSocket close codes Roost uses, and which of them a client must not retry.

One documented mapping from failure to close code (``docs/protocol.md``, *Close codes*).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["TERMINAL_CLOSE_CODES", "CloseCode", "is_terminal"]


class CloseCode(IntEnum):
    """WebSocket close codes with a meaning in ``docs/protocol.md`` (*Close codes*), for the server
    and the clients alike. 1002 and 1006 are never sent by Roost: a client sees 1006 when the
    connection drops without a close frame, 1002 when the peer broke RFC 6455."""

    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    UNSUPPORTED_DATA = 1003
    ABNORMAL_CLOSURE = 1006
    INVALID_PAYLOAD = 1007
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    SERVICE_RESTART = 1012
    TRY_AGAIN_LATER = 1013
    BAD_ADDRESS = 4400
    UNAUTHENTICATED = 4401
    FORBIDDEN = 4403
    UNKNOWN_KIND = 4404


#: Close codes after which a client stops instead of reconnecting. Every other code (1001, 1006,
#: 1011, 1013, network errors, ...) is transient. The whole 4400-4499 range is terminal, not only
#: the codes listed in protocol.md, because it mirrors HTTP 4xx: "the request itself is wrong".
TERMINAL_CLOSE_CODES: frozenset[int] = frozenset(
    {CloseCode.NORMAL, CloseCode.MESSAGE_TOO_BIG, *range(4400, 4500)}
)


def is_terminal(code: int | None) -> bool:
    """Whether a close code means "stop, do not reconnect" (else: back off and reconnect)."""
    return code is not None and code in TERMINAL_CLOSE_CODES
