"""Streamed model output, reassembled: the text of each message from its ``model_delta`` events.

An agent that streams logs each model step's text as ``model_delta`` events (docs/protocol.md,
*Streamed model output*): ``{message_id, hop, offset, text}``, ``offset`` counting the characters
(code points) of the message before the delta. :class:`MessageText` folds them::

    texts = MessageText()
    async with Client(url, on_event=lambda ev, seq: print(texts.feed(ev), end="")) as c: ...

Guarantees (tests in ``tests/test_client_messages.py``):

- **Each character once, in order**: a delta whose offset is below what is held is a duplicate and
  adds only what it has beyond it (nothing, for a true repeat); one above it is a gap, counted in
  :attr:`MessageText.gaps` and not appended (the text stays a prefix of the message).
- ``model_stream_restarted`` empties the message: what follows starts again at offset 0.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MessageText"]


class MessageText:
    """The text of every streamed message seen so far, by ``message_id``."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        #: Deltas that started beyond the text held (something was missed).
        self.gaps = 0
        #: Deltas wholly or partly already held (sent twice).
        self.duplicates = 0

    def feed(self, event: Any) -> str:
        """Take one event (the ``event`` object of an event frame); returns the text it adds (empty
        for other events, duplicates and gaps)."""
        if not isinstance(event, dict):
            return ""
        kind = event.get("event_type")
        payload = event.get("payload") or {}
        mid = payload.get("message_id")
        if not isinstance(mid, str):
            return ""
        if kind == "model_stream_restarted":
            self.texts[mid] = ""
            return ""
        if kind != "model_delta":
            return ""
        held = self.texts.get(mid, "")
        offset, text = payload.get("offset"), payload.get("text")
        if not isinstance(offset, int) or not isinstance(text, str):
            return ""
        if offset > len(held):
            self.gaps += 1
            return ""
        if offset < len(held):
            self.duplicates += 1
            text = text[len(held) - offset :]
        self.texts[mid] = held + text
        return text

    def text(self, message_id: str) -> str:
        """What is held of ``message_id`` (empty if nothing)."""
        return self.texts.get(message_id, "")
