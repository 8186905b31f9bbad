"""A Python client for Roost actors (docs/protocol.md), and ``python -m roost.client``.

``Client`` keeps one WebSocket to one actor open in a background task, reconnects with
full-jitter backoff after transient closes, resumes from the last processed ``seq`` without gaps
or duplicates, and exposes calls (``call``, ``stream``), the actor's state and a stream of
updates::

    async with Client(actor_url("ws://127.0.0.1:8000", "counter", "c1")) as c:
        await c.wait_connected(5)
        print(await c.call("increment", 2), c.state, c.cursor)
        async for frame in c.updates():
            ...

The pure parts (``Backoff``, ``ResumeState``, ``actor_url``, ``Welcome``) are usable on their own.
"""

from .backoff import Backoff
from .calls import CallStream
from .client import Client
from .errors import (
    TERMINAL_CLOSE_CODES,
    CallNotSent,
    CallTimeout,
    ClientClosed,
    ClientError,
    CloseCode,
    ConnectionLost,
    OutcomeUnknown,
    ProtocolViolation,
    ReplyTimeout,
    RpcError,
    SendTimeout,
    TerminalClose,
    is_terminal,
)
from .frames import JSON, Frame, ResumeMode, Welcome
from .messages import MessageText
from .resume import ResumeState
from .updates import Updates
from .urls import actor_url, connect_url, parse_subscribe

__all__ = [
    "JSON",
    "TERMINAL_CLOSE_CODES",
    "Backoff",
    "CallNotSent",
    "CallStream",
    "CallTimeout",
    "Client",
    "ClientClosed",
    "ClientError",
    "CloseCode",
    "ConnectionLost",
    "Frame",
    "MessageText",
    "OutcomeUnknown",
    "ProtocolViolation",
    "ReplyTimeout",
    "ResumeMode",
    "ResumeState",
    "RpcError",
    "SendTimeout",
    "TerminalClose",
    "Updates",
    "Welcome",
    "actor_url",
    "connect_url",
    "is_terminal",
    "parse_subscribe",
]
