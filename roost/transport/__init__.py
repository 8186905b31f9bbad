"""Transport: the Starlette app, its WebSocket and HTTP endpoints, the sans-I/O protocol. Knows no SQL."""

from roost.protocol.codes import CloseCode, is_terminal
from roost.transport.app import RoostApp, create_app
from roost.transport.auth import Authenticate, allow_all

__all__ = ["Authenticate", "CloseCode", "RoostApp", "allow_all", "create_app", "is_terminal"]
