"""The resume and dedup state machine of protocol.md's *Resume* section (pure: no I/O).

``ResumeState`` is fed every welcome and every ``state``/``event``/``message`` frame, in the order
received, and says which frames to deliver to the application. Its guarantees:

- **Dedup by seq.** A ``state``/``event`` frame is delivered only if its ``seq`` is greater than
  the last delivered one (``last_seq``), which then becomes that ``seq``. So no ``seq`` is ever
  delivered twice and delivered seqs strictly increase, across any number of reconnects
  (unless the server's history goes back in time, see below).
- **No lost seq on reconnect.** ``query_cursor()`` is always ``last_seq``: the next connection asks
  the server for exactly the frames after the last one delivered. A ``replay`` welcome keeps
  ``last_seq``, so the replayed frames are delivered; ``fresh`` and ``snapshot`` welcomes move
  ``last_seq`` to ``welcome.cursor`` (the welcome's state already includes everything up to it).
- **The cursor only goes backwards on the server's word:** a ``snapshot`` (``cursor_ahead``: the
  server's data was restored from an older backup) or a ``fresh`` welcome. Seqs after that belong
  to the server's new history.
- **``state`` never goes back in time.** It is the newest state known, at ``state_seq``. During a
  replay the welcome's state (at ``welcome.cursor``) is newer than the replayed ``state`` frames:
  those are still delivered in order, but do not overwrite ``state``.

Frames other than ``state``/``event`` carry no ``seq``: ``message`` frames are always delivered.
A welcome that contradicts the rules (a ``replay`` the client did not ask for, or from a cursor
the server cannot have) raises ``ProtocolViolation``: the client cannot then keep its guarantees.
"""

from __future__ import annotations

from .errors import ProtocolViolation
from .frames import JSON, Frame, ResumeMode, Welcome, frame_seq

#: Frame types that ``ResumeState.on_frame`` accepts.
UPDATE_TYPES: frozenset[str] = frozenset({"state", "event", "message"})


class ResumeState:
    """Tracks the last processed ``seq`` and the newest known actor state of one client."""

    def __init__(self, cursor: int | None = None) -> None:
        if cursor is not None and cursor < 0:
            raise ValueError(f"cursor must be >= 0, got {cursor}")
        self._last_seq = cursor
        #: ``state``/``event`` frames received again (seq not above the last processed one), dropped.
        self.duplicates = 0
        self._state: JSON = None
        self._state_seq: int | None = None
        self._welcome: Welcome | None = None

    @property
    def last_seq(self) -> int | None:
        """The last processed ``seq`` (``None`` before the first welcome if no cursor was given)."""
        return self._last_seq

    @property
    def state(self) -> JSON:
        """The newest known actor state (``None`` before the first welcome)."""
        return self._state

    @property
    def state_seq(self) -> int | None:
        """The ``seq`` at which ``state`` is the actor's state."""
        return self._state_seq

    @property
    def welcome(self) -> Welcome | None:
        """The last welcome applied."""
        return self._welcome

    @property
    def replaying(self) -> bool:
        """Whether frames logged before the last welcome may still arrive (``last_seq`` is behind).

        With a subscription that excludes some kinds this may stay true until a live frame
        arrives, since the newest logged frame may be of a kind this connection does not receive.
        """
        welcome = self._welcome
        return welcome is not None and (self._last_seq or 0) < welcome.cursor

    def query_cursor(self) -> int | None:
        """The ``cursor`` query parameter for the next connection (``None``: omit it)."""
        return self._last_seq

    def on_welcome(self, welcome: Welcome) -> None:
        """Apply a connection's welcome (protocol.md, *Resume*)."""
        if welcome.resume is ResumeMode.REPLAY:
            last = self._last_seq
            if last is None:
                raise ProtocolViolation("resume 'replay' on a connection without a cursor")
            if last > welcome.cursor:
                raise ProtocolViolation(
                    f"resume 'replay' from cursor {last} beyond the actor's cursor {welcome.cursor}"
                )
            if last < welcome.oldest - 1:
                raise ProtocolViolation(
                    f"resume 'replay' from cursor {last} older than retention (oldest {welcome.oldest})"
                )
        else:
            self._last_seq = welcome.cursor
        self._state = welcome.state
        self._state_seq = welcome.cursor
        self._welcome = welcome

    def on_frame(self, frame: Frame) -> bool:
        """Whether to deliver a ``state``, ``event`` or ``message`` frame; updates the state.

        Raises ``ProtocolViolation`` before any welcome or for a ``state``/``event`` without a
        valid ``seq`` or without its payload, ``ValueError`` for other frame types.
        """
        kind = frame.get("type")
        if kind not in UPDATE_TYPES:
            raise ValueError(f"not an update frame: {kind!r}")
        if self._welcome is None:
            raise ProtocolViolation(f"{kind} frame before the welcome")
        if kind == "message":
            return True
        seq = frame_seq(frame)
        if kind not in frame:  # the payload field is named like the type: "state", "event"
            raise ProtocolViolation(f"{kind} frame {seq} without {kind!r}")
        if self._last_seq is not None and seq <= self._last_seq:
            self.duplicates += 1
            return False
        self._last_seq = seq
        if kind == "state" and (self._state_seq is None or seq > self._state_seq):
            self._state = frame["state"]
            self._state_seq = seq
        return True
