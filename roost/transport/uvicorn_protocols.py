"""Which uvicorn protocol classes ``roost serve`` runs: Roost's, or uvicorn's own as the fallback.

Roost's two classes (:mod:`roost.transport.uvicorn_http`, :mod:`roost.transport.uvicorn_ws`) are the
one documented exception to "other libraries' public APIs only": they subclass classes from uvicorn's
internal modules, for correctness and safety rather than speed (a handshake timeout against
slowloris; the connection cap applied to WebSocket upgrades too, answered 503; an answer to a
handshake the websockets parser refused, instead of a client left hanging; a close that does not
wait for a client that does not read, and drops it after the close timeout).
So they are used only on the uvicorn versions they were tested with (the pin in ``pyproject.toml``)
and only if what they build on is there; otherwise :func:`choose` falls back to uvicorn's own
``httptools`` and ``websockets-sansio`` protocols, and says so in one log line. Everything else
works the same on the fallback, through plain ASGI (``tests/test_public_paths.py`` serves a call on
both).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import NamedTuple

from roost.actors import INLINE_TURNS, fast_paths_off

__all__ = ["TESTED_UVICORN", "Protocols", "choose", "fast_paths"]

#: The uvicorn versions Roost's protocol classes were tested with: ``>= low, < high``.
TESTED_UVICORN = ((0, 54), (0, 55))

_NEEDS = (
    (
        "uvicorn.protocols.http.httptools_impl",
        "HttpToolsProtocol",
        (
            "connection_made",
            "on_headers_complete",
            "on_response_complete",
            "connection_lost",
            "handle_websocket_upgrade",
        ),
    ),
    (
        "uvicorn.protocols.websockets.websockets_sansio_impl",
        "WebSocketsSansIOProtocol",
        (
            "connection_made",
            "data_received",
            "handle_connect",
            "send_receive_event_to_app",
            "send",
            "keepalive_timeout",
        ),
    ),
)


class Protocols(NamedTuple):
    http: str  #: uvicorn's ``http=`` setting
    ws: str  #: uvicorn's ``ws=`` setting
    fallback: str | None  #: why uvicorn's own protocols are used (None: Roost's are)


ROOST = Protocols(
    "roost.transport.uvicorn_http:RoostHttpToolsProtocol",
    "roost.transport.uvicorn_ws:RoostWebSocketProtocol",
    None,
)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def choose(uvicorn_version: str | None = None) -> Protocols:
    """Roost's protocol classes if this uvicorn is a tested one and has what they build on; else
    uvicorn's own, with the reason in ``fallback``."""
    version = uvicorn_version if uvicorn_version is not None else importlib.metadata.version("uvicorn")
    low, high = TESTED_UVICORN
    if not low <= _version_tuple(version)[:2] < high:
        return Protocols("httptools", "websockets-sansio", f"uvicorn {version} is not a tested version")
    for module_name, class_name, methods in _NEEDS:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            return Protocols("httptools", "websockets-sansio", f"uvicorn has no {module_name}.{class_name}")
        missing = [m for m in methods if not callable(getattr(cls, m, None))]
        if missing:
            return Protocols("httptools", "websockets-sansio", f"{class_name} has no {', '.join(missing)}")
    return ROOST


def fast_paths(protocols: Protocols) -> str:
    """One line saying which fast paths a server on ``protocols`` takes, and why one is off: inline
    turns (``roost.actors.inline``) and the direct frame path (``roost.transport.uvicorn_ws``, Roost's
    WebSocket protocol only)."""
    inline = "on" if INLINE_TURNS.on else f"off ({INLINE_TURNS.why_not})"
    if protocols.fallback is not None:
        direct = f"off ({protocols.fallback})"
    elif (off := fast_paths_off()) is not None:
        direct = f"off ({off})"
    else:
        direct = "on"
    return f"fast paths: inline turns {inline}, direct frames {direct}"
