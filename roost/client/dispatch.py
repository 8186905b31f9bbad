"""``Dispatcher``: what the client does with each received frame (synchronous, no I/O).

The connection task hands every frame after the welcome to ``Dispatcher.dispatch``, in arrival
order. Updates go through ``ResumeState`` (dedup) and then to every ``Updates`` subscriber and the
``on_state``/``on_event`` callbacks; call replies go to the connection's pending calls; ``error``
frames are kept (the last ``ERRORS_KEPT``) and logged. Being pure, it can be driven by hand in
tests with any sequence of frames.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable

from .calls import Registry
from .errors import ProtocolViolation, RpcError
from .frames import JSON, Frame, decode_frame
from .logs import logger
from .resume import UPDATE_TYPES, ResumeState
from .updates import DEFAULT_QUEUE_SIZE, Updates

#: How many ``error`` frames are kept.
ERRORS_KEPT = 100

PayloadCallback = Callable[[JSON, int], None]
FrameCallback = Callable[[Frame], None]


class Dispatcher:
    """Routes frames to the resume state, subscribers, callbacks and pending calls."""

    def __init__(
        self,
        resume: ResumeState,
        *,
        on_state: PayloadCallback | None = None,
        on_event: PayloadCallback | None = None,
        on_error: FrameCallback | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        label: str = "",
    ) -> None:
        self.resume = resume
        self.errors: deque[Frame] = deque(maxlen=ERRORS_KEPT)
        self._on_state = on_state
        self._on_event = on_event
        self._on_error = on_error
        self._queue_size = queue_size
        self._label = label
        self._subscribers: weakref.WeakSet[Updates] = weakref.WeakSet()
        self._ended = False

    def subscribe(self, maxsize: int | None = None) -> Updates:
        """A new subscriber of the frames delivered from now on (already ended after ``end``)."""
        updates = Updates(maxsize or self._queue_size, on_close=self._subscribers.discard)
        if self._ended:
            updates.end()
        else:
            self._subscribers.add(updates)
        return updates

    def end(self) -> None:
        """End every subscriber, present and future (the client stopped)."""
        self._ended = True
        for updates in list(self._subscribers):
            updates.end()
        self._subscribers.clear()

    def dispatch(self, pending: Registry, raw: str | bytes) -> None:
        """Process one received frame; ``pending`` holds the calls of its connection.

        Raises ``ProtocolViolation`` for a frame that breaks the client's guarantees (not a JSON
        object, a ``state``/``event`` without a valid ``seq``, a second welcome). Frames of an
        unknown type are logged and ignored (forward compatibility).
        """
        frame = decode_frame(raw)
        kind = frame.get("type")
        if kind in UPDATE_TYPES:
            if self.resume.on_frame(frame):
                self._deliver(frame)
        elif kind in ("rpc_chunk", "rpc_result", "pong", "auth_result"):
            self._reply(pending, frame)
        elif kind == "error":
            self.record_error(frame)
        elif kind == "welcome":
            raise ProtocolViolation("a second welcome on the same connection")
        else:
            logger.warning("%s: ignoring a frame of unknown type %r", self._label, kind)

    def record_error(self, frame: Frame) -> None:
        """Keep and log an ``error`` frame (also used for those before the welcome)."""
        self.errors.append(frame)
        logger.warning("%s: error frame %s: %s", self._label, frame.get("code"), frame.get("message"))
        if self._on_error is not None:
            guarded(self._on_error, frame)

    def _deliver(self, frame: Frame) -> None:
        for updates in list(self._subscribers):
            updates.put(frame)
        kind = frame["type"]
        if kind == "state" and self._on_state is not None:
            guarded(self._on_state, frame["state"], frame["seq"])
        elif kind == "event" and self._on_event is not None:
            guarded(self._on_event, frame["event"], frame["seq"])

    def _reply(self, registry: Registry, frame: Frame) -> None:
        call_id = frame.get("id")
        pending = registry.get(call_id) if isinstance(call_id, str) else None
        if pending is None:
            logger.debug("%s: reply to an unknown or abandoned call %r", self._label, call_id)
            return
        kind = frame["type"]
        if kind == "rpc_chunk":
            pending.chunk(frame.get("chunk"))
        elif kind == "pong" or frame.get("ok") is True:
            pending.resolve(frame.get("exp" if kind == "auth_result" else "result"))
        else:
            error = frame.get("error")
            if isinstance(error, dict):
                pending.fail(RpcError(str(error.get("code")), str(error.get("message"))))
            else:
                pending.fail(RpcError("invalid_reply", f"rpc_result without ok or error: {frame}"))


def guarded(callback: Callable[..., None], *args: object) -> None:
    """Call an application callback; log and swallow its exception."""
    try:
        callback(*args)
    except Exception:
        logger.exception("client callback %r failed", callback)
