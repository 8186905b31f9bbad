"""The direct frame path as the endpoint sees it: the scope extension and the interface (the switch
is :func:`roost.actors.fast_paths_off`, as for inline turns).

The path itself lives in :mod:`roost.transport.uvicorn_ws` (uvicorn's protocol class, which imports
uvicorn's internal modules); the endpoint, the sink and the start-up report import only this module,
so they load, and serve the ASGI way, on any ASGI server and on a uvicorn without those modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["DIRECT", "DirectPath", "offered"]

#: The ASGI scope extension naming the protocol object that offers the direct frame path.
DIRECT = "roost.direct"


@runtime_checkable
class DirectPath(Protocol):
    """What the endpoint uses of a server protocol that offers the direct path."""

    #: Takes a complete text message; returns False to have it queued for ``receive()`` instead.
    frame_handler: Callable[[str], bool] | None

    def write_text(self, text: str) -> bool | None:
        """Write a frame now: True if written, False if the caller must queue it, None if gone."""

    def hand_to_reader(self, message: dict[str, object]) -> None:
        """Queue a message of the endpoint's own for its reader's ``receive()``."""


def offered(scope: Mapping[str, Any]) -> DirectPath | None:
    """The server protocol offering the direct path, if this connection's scope names one."""
    extensions = scope.get("extensions")
    extension = extensions.get(DIRECT) if isinstance(extensions, dict) else None
    protocol = extension.get("protocol") if isinstance(extension, dict) else None
    return protocol if isinstance(protocol, DirectPath) else None
