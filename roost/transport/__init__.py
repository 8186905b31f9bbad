"""Transport: the Starlette app, its WebSocket and HTTP endpoints, the sans-I/O protocol. Knows no SQL."""

from roost.transport.app import RoostApp, create_app
from roost.transport.auth import Authenticate, allow_all
from roost.transport.close_codes import CloseCode, is_terminal

__all__ = ["Authenticate", "CloseCode", "RoostApp", "allow_all", "create_app", "is_terminal"]
