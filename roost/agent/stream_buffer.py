"""The worker's side of a streamed model step: deltas gathered into batches, each batch one turn.

A :class:`StreamBuffer` receives the text deltas of a model's stream in order and hands them on in
batches to ``flush`` (a turn of the agent that commits the batch and logs one ``model_delta``;
docs/design.md, *Streamed model output*). A batch goes when ``count`` deltas are pending or
``interval`` seconds have passed since the first of them, whichever is first; :meth:`close` sends
what is left.

Guarantees (tests in ``tests/test_stream_output.py``):

- **A secret split across deltas is redacted whole**: a batch never ends inside what may be the start
  of a credential — an unfinished word, a ``password:`` or ``Bearer`` still waiting for its value, an
  open PEM block, an open quoted value — so the turn's redaction sees every credential in one piece.
  What is held back goes with the next batch (or at :meth:`close`); at most :data:`MAX_HELD`
  characters are held.
- **Batches keep the stream's order and lose nothing**: flushes run one at a time, in order; the
  concatenation of the flushed texts is the stream's text.
- **A batch is bounded**: at most :data:`MAX_BATCH` characters, however large the model's deltas.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

__all__ = ["MAX_HELD", "StreamBuffer", "safe_cut"]

#: Past this many pending characters a batch goes even if its end may cut a credential (a "word" this
#: long is not text a reader waits for; the base64 runs it could be are blobbed by the policy anyway).
MAX_HELD = 4096
#: A batch holds at most this many characters: more pending text goes as several batches (so no one
#: event is large, whatever size of delta the model yields).
MAX_BATCH = 4096

#: A tail that waits for the value that follows it: ``password =``, ``api_key:``, ``Bearer``, ``Basic``.
_WAITING = re.compile(
    r"(?i)(?:\b(?:bearer|basic)|\b(?:password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|"
    r"client[_\-]?secret)\s*[=:]?)\s*$"
)
#: An assignment whose quoted value is still open: ``password="my pass``.
_OPEN_QUOTE = re.compile(
    r"(?i)\b(?:password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|client[_\-]?secret)"
    r"\s*[=:]\s*(?:\"[^\"]*|'[^']*)$"
)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z ]*PRIVATE KEY-----")


def safe_cut(text: str) -> int:
    """How much of ``text`` can be sent now: everything before what may still become a credential."""
    begin = None
    for m in _PEM_BEGIN.finditer(text):
        begin = m.start()
    if begin is not None and not _PEM_END.search(text, begin):
        return begin
    # up to the last whitespace: the word after it may be unfinished
    cut = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"))
    if cut < 0:
        return 0
    cut += 1
    head = text[:cut]
    quoted = _OPEN_QUOTE.search(head)
    if quoted is not None:
        return quoted.start()
    waiting = _WAITING.search(head)
    if waiting is not None:
        return waiting.start()
    return cut


class StreamBuffer:
    """Gathers a stream's text deltas and flushes them in batches (see the module doc)."""

    def __init__(
        self,
        flush: Callable[[str], Awaitable[None]],
        *,
        count: int,
        interval: float,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._flush = flush
        self._count = count
        self._interval = interval
        self._sleep = sleep
        self._pending: list[str] = []
        self._held = ""  # sent with the next batch: it may be the start of a credential
        self._chars = 0  # characters pending
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        self._sleeping = False
        self._error: BaseException | None = None  # a timed flush that failed: raised by the next call
        #: Characters handed to ``flush`` so far.
        self.sent = 0

    async def add(self, text: str) -> None:
        """One delta. May wait for a batch to be committed (the stream waits with it: back-pressure)."""
        self._raise()
        if not text:
            return
        self._pending.append(text)
        self._chars += len(text)
        if len(self._pending) >= self._count or self._chars >= MAX_BATCH:
            await self._send(final=False)
        elif self._timer is None or self._timer.done():
            self._sleeping = True  # until it has slept: close() may cancel it
            self._timer = asyncio.get_running_loop().create_task(self._later(), name="roost.stream.batch")

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    async def _later(self) -> None:
        try:
            await self._sleep(self._interval)
        finally:
            self._sleeping = False  # from here on it is a flush: close() waits for it
        try:
            await self._send(final=False)
        except Exception as exc:  # the stream's task raises it at its next add or close
            self._error = exc

    async def _send(self, *, final: bool) -> None:
        async with self._lock:
            text = self._held + "".join(self._pending)
            self._pending.clear()
            self._chars = 0
            cut = len(text) if final or len(text) > MAX_HELD else safe_cut(text)
            self._held = text[cut:]
            start = 0
            while start < cut:
                end = min(cut, start + MAX_BATCH)
                if end < cut:  # a batch that is not the last ends where no credential can be cut
                    end = start + (safe_cut(text[start:end]) or MAX_BATCH)
                await self._flush(text[start:end])
                self.sent += end - start
                start = end

    async def close(self) -> None:
        """The stream ended: send everything left, held text included."""
        await self._stop_timer(flushing_too=False)
        self._raise()
        await self._send(final=True)

    async def abandon(self) -> None:
        """The stream failed or was cancelled: stop the timer, even mid-flush; what is pending is
        not sent."""
        await self._stop_timer(flushing_too=True)

    async def _stop_timer(self, *, flushing_too: bool) -> None:
        """Cancel the timer while it sleeps (or, ``flushing_too``, whatever it does) and wait for it."""
        timer, self._timer = self._timer, None
        if timer is None:
            return
        if self._sleeping or flushing_too:
            timer.cancel()
        await asyncio.wait((timer,))
