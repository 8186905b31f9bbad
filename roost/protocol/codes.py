"""WebSocket close codes Roost uses, and which of them a client must not retry.

One documented mapping from failure to close code (``docs/protocol.md``, *Close codes*).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["TERMINAL_CLOSE_CODES", "CloseCode", "is_terminal"]


class CloseCode(IntEnum):
    NORMAL = 1000
    GOING_AWAY = 1001
    UNSUPPORTED_DATA = 1003
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


#: Codes after which a client must stop instead of reconnecting (plus the whole 4400-4499 range).
TERMINAL_CLOSE_CODES = frozenset({CloseCode.NORMAL, CloseCode.MESSAGE_TOO_BIG})


def is_terminal(code: int) -> bool:
    """Whether a client should give up after this close code (else: back off and reconnect)."""
    return code in TERMINAL_CLOSE_CODES or 4400 <= code <= 4499
