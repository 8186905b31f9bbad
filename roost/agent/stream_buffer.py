"""The worker's side of a streamed model step: deltas gathered into batches, each batch one turn.

A :class:`StreamBuffer` receives the text deltas of a model's stream in order and hands them on in
batches to ``flush`` (a turn of the agent that commits the batch and logs one ``model_delta``;
docs/design.md, *Streamed model output*). A batch goes when ``count`` deltas are pending or
``interval`` seconds have passed since the first of them, whichever is first; :meth:`close` sends
what is left.

Guarantees (tests in ``tests/test_stream_output.py``):

- **A credential split across deltas is redacted whole**: a batch never ends inside what may be the start
  of a credential — an unfinished token (a batch ends only after a character no credential contains:
  whitespace, prose punctuation, any non-ASCII letter, so text without spaces streams too), a
  ``password:`` or ``Bearer`` still waiting for its value, an open quoted value, a PEM block from its
  first dashes to its ``-----END …-----`` — so the turn's redaction sees every credential in one
  piece. What is held back goes with the next batch (or at :meth:`close`); at most :data:`MAX_HELD`
  characters are held (:data:`MAX_PEM` for a PEM block).
- **A secret the run was given is never cut** (:func:`secret_cut`): whatever characters it holds
  (a space, ``&``), a batch does not end inside what may be one of the run's secrets (the vault's,
  as known when the batch goes), so the turn's scrub of the run's secrets sees it whole.
- **A batch is due within** ``interval`` **of its first delta**, also when that delta arrives while
  the batch before it is being committed.
- **Batches keep the stream's order and lose nothing**: flushes run one at a time, in order; the
  concatenation of the flushed texts is the stream's text.
- **A batch is bounded**: at most :data:`MAX_BATCH` characters, however large the model's deltas.
- **Where a batch may end is found from its tail**: :func:`safe_cut` reads the end of the text
  (what may still become a credential is at its end), not the whole batch again for every pattern,
  so its cost does not grow with the batch, nor quadratically with a long run of whitespace.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from roost.agent.models import (
    ModelError,
    ModelRequest,
    ModelStep,
    StreamEnd,
    StreamingModel,
    TextDelta,
    ToolCallDelta,
)

if TYPE_CHECKING:
    from roost.agent.config import AgentConfig
    from roost.scheduler.clock import Clock, TimerHandle

__all__ = [
    "MAX_BATCH",
    "MAX_HELD",
    "MAX_PEM",
    "YIELD_EVERY",
    "StreamBuffer",
    "safe_cut",
    "secret_cut",
    "stream_step",
]

#: Past this many pending characters a batch goes even if its end may cut a credential (a "word" this
#: long is not text a reader waits for).
MAX_HELD = 4096
#: An open PEM block is held this long at most (a 4096-bit RSA key is about 3,300 characters).
MAX_PEM = 16_384
#: A batch holds at most this many characters: more pending text goes as several batches (so no one
#: event is large, whatever size of delta the model yields).
MAX_BATCH = 4096

#: Characters a credential may be made of: a batch ends only after a character that is not one of them
#: (whitespace, punctuation of prose, any non-ASCII letter), so no token is cut.
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+/=:@%")
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
#: The start of a PEM block, as far as it has come: ``-``… up to ``-----BEGIN RSA PRIVATE KEY-----``.
_PEM_START = re.compile(r"-----BEGIN\b|-{1,5}(?:B(?:E(?:G(?:I(?:N)?)?)?)?)?$")
_PEM_END = re.compile(r"-----END [A-Z ]*-----")


#: The longest keyword of :data:`_WAITING` and :data:`_OPEN_QUOTE` (``client_secret``): a match of
#: either starts at most this many characters before the end of its keyword.
_KEYWORD_MAX = 13
_ASSIGN = "=:"


def _space_before(text: str, end: int) -> int:
    """Where the run of whitespace (``\\s``) that ends at ``end`` starts."""
    while end > 0 and text[end - 1].isspace():
        end -= 1
    return end


def _keyword_end(text: str, end: int, *, assign: bool) -> int:
    """Where the keyword of an assignment (``keyword \\s* [=:] \\s*``, the sign optional unless
    ``assign``) that ends at ``end`` must end; -1 if there is no sign where one is needed. It is the
    start of the longest such run, so a keyword cannot end before it."""
    end = _space_before(text, end)
    if end > 0 and text[end - 1] in _ASSIGN:
        return _space_before(text, end - 1)
    return -1 if assign else end


def _waiting_at(head: str) -> int | None:
    """Where :data:`_WAITING` first matches ``head`` (None: nowhere), searched from the end only: it
    is anchored at the end, after a keyword and at most a sign and whitespace."""
    m = _WAITING.search(head, max(0, _keyword_end(head, len(head), assign=False) - _KEYWORD_MAX))
    return m.start() if m is not None else None


def _open_quote_at(head: str) -> int | None:
    """Where :data:`_OPEN_QUOTE` first matches ``head`` (None: nowhere), searched from the end only:
    its quote is the last of its kind in ``head``, after a keyword, a sign and whitespace."""
    pos = len(head)
    for quote in "\"'":
        at = head.rfind(quote)
        if at >= 0:
            end = _keyword_end(head, at, assign=True)
            if end >= 0:
                pos = min(pos, end - _KEYWORD_MAX)
    if pos == len(head):
        return None  # no quote after a sign: no open quoted value
    m = _OPEN_QUOTE.search(head, max(0, pos))
    return m.start() if m is not None else None


def _open_pem(text: str, pos: int = 0, end: int | None = None) -> tuple[int, int | None] | None:
    """The first PEM block that starts in ``text[pos:end]`` and is not closed before ``end``: its start
    and where it closes in ``text`` (None: not yet); None if there is no such block."""
    end = len(text) if end is None else end
    while True:
        pos = text.find("-", pos, end)  # every start of a block is a dash: the search begins there
        if pos < 0:
            return None
        m = _PEM_START.search(text, pos, end)
        if m is None:
            return None
        close = _PEM_END.search(text, m.end())
        if close is None or close.end() > end:
            return m.start(), (close.end() if close is not None else None)
        pos = close.end()


def safe_cut(text: str) -> int:
    """How much of ``text`` can be sent now: everything before what may still become a credential."""
    pem = _open_pem(text)
    if pem is not None and len(text) - pem[0] <= MAX_PEM:
        text = text[: pem[0]]  # an open PEM block (or the start of one): held whole
    floor = max((m.end() for m in _PEM_END.finditer(text)), default=0)  # a closed block goes whole
    cut = len(text)
    while cut > floor and text[cut - 1] in _TOKEN_CHARS:
        cut -= 1  # the token at the end may be unfinished
    head = text[:cut]
    quoted = _open_quote_at(head)
    if quoted is not None:
        return quoted
    waiting = _waiting_at(head)
    if waiting is not None:
        return waiting
    return cut


def secret_cut(text: str, cut: int, secrets: Sequence[str]) -> int:
    """``cut`` moved back before any of ``secrets`` that would straddle it: one that starts before
    ``cut`` and, as far as ``text`` goes, goes on past it (a whole one, or the start of one at the
    end of ``text``, which may still become it). Moved again while a move puts another secret across
    the new cut. Each secret costs at most its length in comparisons of ``text``'s tail."""
    moved = True
    while moved:
        moved = False
        for secret in secrets:
            n = len(secret)
            if n < 2:
                continue
            p = max(0, cut - n + 1)
            while (p := text.find(secret[0], p, cut)) >= 0:
                if secret.startswith(text[p : p + n]):  # it starts at p and does not end before cut
                    cut, moved = p, True
                    break
                p += 1
    return cut


def _batch_end(text: str, start: int, end: int, cut: int) -> int:
    """Where a batch of ``text[start:cut]`` that should end near ``end`` ends: after a PEM block it
    holds the start of (the whole block in one batch), else where :func:`safe_cut` allows."""
    pem = _open_pem(text, start, end)
    if pem is not None:
        return cut if pem[1] is None else min(cut, pem[1])
    return start + (safe_cut(text[start:end]) or (end - start))


#: Chunks a stream's reader takes between two yields to the loop at least (see :func:`stream_step`).
YIELD_EVERY = 256


class StreamBuffer:
    """Gathers a stream's text deltas and flushes them in batches (see the module doc)."""

    def __init__(
        self,
        flush: Callable[[str], Awaitable[None]],
        *,
        count: int,
        interval: float,
        clock: Clock,
        secrets: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self._flush = flush
        self._secrets = secrets
        self._count = count
        self._interval = interval
        self._clock = clock
        self._pending: list[str] = []
        self._held = ""  # sent with the next batch: it may be the start of a credential
        self._chars = 0  # characters pending
        self._lock = asyncio.Lock()
        # the batch's timer: a handle on the clock, not a sleeping task (a batch due by count, the
        # common case under load, cancels it for the cost of a flag)
        self._timer: TimerHandle | None = None
        self._flushing: set[asyncio.Task[None]] = set()  # batches due by time, being sent
        self._error: BaseException | None = None  # a timed flush that failed: raised by the next call

    async def add(self, text: str) -> None:
        """One delta. May wait for a batch to be committed (the stream waits with it: back-pressure)."""
        if self.push(text):
            await self.send()

    def push(self, text: str) -> bool:
        """One delta, without waiting: True when its batch is due now by count or size (the caller
        then awaits :meth:`send`), False when it waits for more deltas or for its timer. A delta
        costs no coroutine of its own: :meth:`add` is ``push`` and, when due, ``send``."""
        if self._error is not None:
            raise self._error
        if not text:
            return False
        pending = self._pending
        pending.append(text)
        self._chars += len(text)
        if len(pending) >= self._count or self._chars >= MAX_BATCH:
            timer = self._timer
            if timer is not None:  # the batch goes now: its timer would only contend for the lock
                self._timer = None
                timer.cancel()
            return True
        if self._timer is None:
            clock = self._clock
            self._timer = clock.call_at(clock.monotonic() + self._interval, self._due)
        return False

    async def send(self) -> None:
        """Send the batch that :meth:`push` said is due (what may cut a credential stays held)."""
        await self._send(final=False)

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _due(self) -> None:
        """The timer's callback: the batch is due by time; a task sends it (a delta added from now
        on starts the next timer)."""
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._timed(), name="roost.stream.batch")
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _timed(self) -> None:
        try:
            await self._send(final=False)
        except Exception as exc:  # the stream's task raises it at its next add or close
            self._error = exc

    async def _send(self, *, final: bool) -> None:
        async with self._lock:
            text = self._held + "".join(self._pending)
            self._pending.clear()
            self._chars = 0
            cut = len(text) if final else safe_cut(text)
            secrets = self._secrets() if self._secrets is not None else ()
            if secrets and not final:
                cut = secret_cut(text, cut, secrets)
            held = len(text) - cut
            if held > MAX_PEM or (held > MAX_HELD and _open_pem(text, cut) is None):
                cut = len(text)  # a "word" this long is not text a reader should wait for
            self._held = text[cut:]
            start = 0
            while start < cut:
                end = min(cut, start + MAX_BATCH)
                if end < cut:  # a batch that is not the last ends where no credential can be cut
                    end = _batch_end(text, start, end, cut)
                    if secrets:
                        end = max(start + 1, secret_cut(text[:cut], end, secrets))
                await self._flush(text[start:end])
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
        """Cancel the timer; wait for timed flushes under way (cancelled too when ``flushing_too``)."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        tasks = list(self._flushing)
        if flushing_too:
            for t in tasks:
                t.cancel()
        if tasks:
            await asyncio.wait(tasks)


async def stream_step(
    model: StreamingModel,
    request: ModelRequest,
    flush: Callable[[str], Awaitable[None]],
    clock: Clock,
    cfg: AgentConfig,
    secrets: Callable[[], Sequence[str]] | None = None,
) -> ModelStep:
    """Run one streamed model step in the worker: its text to ``flush`` in batches, its step returned.

    **A stream is bounded**: past ``max_stream_chars`` characters of text and tool-call arguments, or
    ``model_stream_timeout`` seconds (wall clock) from its start, it fails with a ModelError that is
    not retryable (asking again would do the same); what was committed stays shown. **A model that
    never waits shares the loop**: every :data:`YIELD_EVERY` chunks the reader yields to the loop, so
    a stream of empty deltas (which count no characters) ends at its timeout instead of holding the
    loop for ever."""
    buffer = StreamBuffer(
        flush,
        count=cfg.stream_batch_count,
        interval=cfg.stream_batch_interval,
        clock=clock,
        secrets=secrets,
    )
    step: ModelStep | None = None
    chars = chunks = 0
    limit = cfg.max_stream_chars
    push = buffer.push
    try:
        async with asyncio.timeout(cfg.model_stream_timeout):
            async for chunk in model.stream(request):
                chunks += 1
                if not chunks % YIELD_EVERY:
                    await asyncio.sleep(0)  # a model that never waits: the timeout can fire, others run
                # the common chunk first (no isinstance chain), and no coroutine per delta
                if type(chunk) is TextDelta or isinstance(chunk, TextDelta):
                    text = chunk.text
                    if type(text) is not str:
                        raise ModelError("the model yielded a text delta that is not text", retryable=False)
                    chars += len(text)
                    if chars > limit:
                        raise ModelError(f"the model's answer passed {limit} characters", retryable=False)
                    if push(text):
                        await buffer.send()
                elif isinstance(chunk, StreamEnd):
                    step = chunk.step
                elif isinstance(chunk, ToolCallDelta) and type(chunk.arguments) is str:
                    chars += len(chunk.arguments)
                    if chars > limit:
                        raise ModelError(f"the model's tool calls passed {limit} characters", retryable=False)
                else:
                    what = type(chunk).__name__
                    raise ModelError(f"the model yielded {what}, not a chunk", retryable=False)
            await buffer.close()
    except TimeoutError:
        await buffer.abandon()
        raise ModelError(
            f"the model's stream ran past {cfg.model_stream_timeout} s", retryable=False
        ) from None
    except BaseException:
        await buffer.abandon()
        raise
    if step is None:
        raise ModelError("the model's stream ended without its step", retryable=True)
    return step
