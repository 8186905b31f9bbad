"""The wire protocol's pure parts, below every other layer but storage: no asyncio, no sockets.

:mod:`roost.protocol.frames` builds every frame the server sends (and holds the one
``PROTOCOL_VERSION``); :mod:`roost.protocol.resume` decides how a connection resumes from its cursor.
Both the actor runtime (whose log stores encoded frames) and the transport use them; ``docs/protocol.md``
is the written protocol.
"""

from roost.protocol.codes import TERMINAL_CLOSE_CODES, CloseCode, is_terminal
from roost.protocol.frames import PROTOCOL_VERSION
from roost.protocol.resume import Resume, ResumeMode, decide_resume

__all__ = [
    "PROTOCOL_VERSION",
    "TERMINAL_CLOSE_CODES",
    "CloseCode",
    "Resume",
    "ResumeMode",
    "decide_resume",
    "is_terminal",
]
