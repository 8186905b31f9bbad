"""Helpers of the sans-I/O connection tests (``tests/test_connection_protocol.py``,
``tests/test_connection_expiry.py``): a protocol for one connection, fed events by hand, and readers of
the actions it returns."""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import Any

import orjson

from roost.actors import ANONYMOUS, Connection, Principal, Registry, RuntimeConfig, Subscriptions
from roost.actors.host import Deliver
from roost.examples.kinds import KINDS
from roost.transport.access import Access
from roost.transport.auth import allow_all
from roost.transport.limits import Limits
from roost.transport.protocol import Action, ConnectionProtocol, Reply
from roost.transport.security import Authorize

NO_LIMITS = Limits(conn_rate=None, principal_rate=None)


class Recorder:
    """A sink that keeps what it is given (the protocol never writes to it: the endpoint does)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed: tuple[int, str] | None = None

    def send_text(self, text: str) -> None:
        self.sent.append(text)

    def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(
    tmp_path: Path,
    *,
    limits: Limits = NO_LIMITS,
    authorize: Authorize | None = None,
    principal: Principal = ANONYMOUS,
    max_in_flight: int = 8,
    max_frame_bytes: int = 1 << 20,
    clock: Clock | None = None,
    access: Access | None = None,
    welcomed: bool = True,
    expires: float | None = None,
) -> ConnectionProtocol:
    """A protocol for a connection of ``principal`` to ``counter/x``, accepted and (by default)
    welcomed; its token expires at ``expires`` on the clock of ``now`` (None: never)."""
    if access is None:
        registry = Registry(KINDS, RuntimeConfig(data_dir=tmp_path / "data"))
        access = Access(registry, allow_all, authorize, None, limits, clock=clock or Clock())
    conn = Connection("c1", Recorder(), principal=principal, subscriptions=Subscriptions())
    gate = access.frame_gate(principal, "counter", "x", "127.0.0.1")
    protocol = ConnectionProtocol(
        conn,
        gate,
        None,
        max_frame_bytes=max_frame_bytes,
        max_in_flight=max_in_flight,
        expires=expires,
    )
    protocol.accept()
    if welcomed:
        protocol.welcomed()
    return protocol


def rpc(call_id: str = "1", method: str = "increment", *args: Any) -> str:
    return orjson.dumps({"type": "rpc", "id": call_id, "method": method, "args": list(args)}).decode()


PING = '{"type":"ping","id":7}'


def reply(action: Action) -> dict[str, Any]:
    """The frame of a ``Reply`` (an answer sent at once)."""
    assert isinstance(action, Reply), action
    decoded: dict[str, Any] = orjson.loads(action.text)
    return decoded


def delivered(action: Action) -> dict[str, Any]:
    """The frame of a ``Deliver`` (queued at the actor, behind earlier inputs)."""
    assert isinstance(action, Deliver), action
    decoded: dict[str, Any] = orjson.loads(action.text)
    return decoded


def run(awaitable: Awaitable[Any]) -> Any:
    """Drive a coroutine that never suspends to its result, without an event loop."""
    assert isinstance(awaitable, Coroutine)
    try:
        awaitable.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine suspended")
