"""A fake chat-completions endpoint: a real HTTP/1.1 server on 127.0.0.1 that answers from a script.

Each request to ``…/chat/completions`` takes the next :class:`Reply` of the queue (an empty queue
answers 500): a status and a JSON body, or a stream of :class:`Event` (server-sent events, one HTTP
chunk each) that may pause, wait at a gate the test opens, stop for good (``stall_after``), or lose
the connection (``drop_after``: the socket is aborted, the chunked body left unfinished). Every
request is recorded (:attr:`FakeLLM.requests`). The builders below write the usual events: text
deltas, tool-call deltas in pieces, the finish, the usage event, ``[DONE]``.

In a test (the server runs on the test's loop)::

    async with FakeLLM() as llm:
        llm.script(streamed(*text("Hel", "lo")))
        model = OpenAICompatibleModel(llm.url)

As a process (``python -m tests.fake_llm --port 0 --script replies.json``: the file holds a JSON list
of replies; it prints ``fake chat-completions on http://127.0.0.1:PORT/v1`` once it listens), driven
over HTTP: ``POST /_fake/replies`` (a JSON list) queues more replies, ``POST /_fake/release`` opens
one gate, ``GET /_fake/requests`` lists the requests received.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
from pydantic import BaseModel, Field, TypeAdapter

__all__ = [
    "DONE",
    "Event",
    "FakeLLM",
    "Recorded",
    "Reply",
    "answer",
    "chunk",
    "finish",
    "text",
    "tool_call",
    "usage",
]


class Event(BaseModel):
    """One step of a streamed reply, in order: wait ``delay`` seconds, then for a gate until the test
    releases it, then send ``chunk`` (as ``data: <json>``), ``raw`` (these characters exactly: a
    comment, half a line, bad JSON) or ``[DONE]``."""

    delay: float = 0.0
    gate: bool = False
    chunk: dict[str, Any] | None = None
    raw: str | None = None
    done: bool = False

    def payload(self) -> bytes:
        if self.chunk is not None:
            return b"data: " + orjson.dumps(self.chunk) + b"\n\n"
        if self.done:
            return b"data: [DONE]\n\n"
        return (self.raw or "").encode()


class Reply(BaseModel):
    """One scripted response. With ``events`` (and a 200) it is a stream; otherwise ``body`` is sent
    as JSON (a string as text) with ``status``."""

    status: int = 200
    #: Seconds to wait before the response's head.
    delay: float = 0.0
    body: Any = None
    events: list[Event] = Field(default_factory=list)
    #: Abort the connection after this many events (the chunked body left unfinished).
    drop_after: int | None = None
    #: Send nothing more after this many events, until the server closes.
    stall_after: int | None = None
    content_type: str = "text/event-stream"


class Recorded(BaseModel):
    method: str
    path: str
    headers: dict[str, str]
    body: Any = None


_REPLIES = TypeAdapter(list[Reply])


class FakeLLM:
    """The server; ``async with FakeLLM() as llm`` (or :meth:`start` / :meth:`close`)."""

    def __init__(self, replies: Iterable[Reply] = (), *, port: int = 0) -> None:
        self.replies: deque[Reply] = deque(replies)
        self.requests: list[Recorded] = []
        #: How many streams wait at a gate now.
        self.waiting = 0
        self.port = port
        self._gates = asyncio.Semaphore(0)
        self._closing = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        """The base URL to give the model (``http://127.0.0.1:PORT/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue ``replies``, answered in order."""
        self.replies.extend(replies)

    def release(self, gates: int = 1) -> None:
        """Open ``gates`` gates: the streams waiting at one (or the next to reach one) go on."""
        for _ in range(gates):
            self._gates.release()

    async def start(self) -> FakeLLM:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        """Stop listening; streams still open (stalled, at a gate) end with their connections aborted."""
        self._closing.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FakeLLM:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- the server -------------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            await self._answer(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        request_line, *header_lines = head.rstrip("\r\n").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        body = orjson.loads(raw) if raw else None
        if path == "/_fake/requests":
            await _send(writer, 200, [r.model_dump() for r in self.requests])
        elif path == "/_fake/replies":
            self.script(*_REPLIES.validate_python(body))
            await _send(writer, 200, {"queued": len(self.replies)})
        elif path == "/_fake/release":
            self.release()
            await _send(writer, 200, {"released": 1})
        elif path.endswith("/chat/completions"):
            self.requests.append(Recorded(method=method, path=path, headers=headers, body=body))
            reply = self.replies.popleft() if self.replies else Reply(status=500, body="script exhausted")
            if reply.delay:
                await asyncio.sleep(reply.delay)
            if reply.events and reply.status == 200:
                await self._stream(writer, reply)
            else:
                await _send(writer, reply.status, reply.body)
        else:
            await _send(writer, 404, "not found")

    async def _stream(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: " + reply.content_type.encode() + b"\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        await writer.drain()
        for sent, event in enumerate(reply.events):
            if sent == reply.drop_after:
                writer.transport.abort()
                return
            if sent == reply.stall_after:
                await self._closing.wait()  # cancelled by close() in any case
                return
            if event.delay:
                await asyncio.sleep(event.delay)
            if event.gate:
                self.waiting += 1
                try:
                    await self._gates.acquire()
                finally:
                    self.waiting -= 1
            data = event.payload()
            if data:
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
        if reply.drop_after is not None and reply.drop_after >= len(reply.events):
            writer.transport.abort()
            return
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def _send(writer: asyncio.StreamWriter, status: int, body: Any) -> None:
    if isinstance(body, str):
        content, kind = body.encode(), b"text/plain"
    else:
        content, kind = orjson.dumps(body), b"application/json"
    writer.write(
        b"HTTP/1.1 %d Scripted\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (status, kind, len(content), content)
    )
    await writer.drain()


# -- builders -------------------------------------------------------------------------------------------
def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    delay: float = 0.0,
    gate: bool = False,
) -> Event:
    """One ``chat.completion.chunk`` event of choice 0 (sent after ``delay``, and ``gate``: once released)."""
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish_reason}
    return Event(delay=delay, gate=gate, chunk=_chunk(choices=[choice]))


def _chunk(**fields: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", **fields}


def text(*pieces: str) -> list[Event]:
    """Text deltas, one event each (the first also says the role)."""
    first = {"role": "assistant"}
    return [chunk({**(first if i == 0 else {}), "content": p}) for i, p in enumerate(pieces)]


def tool_call(index: int, call_id: str, name: str, *argument_pieces: str) -> list[Event]:
    """Tool call ``index``: its id and name first (no arguments yet), then each piece of its arguments."""
    first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    events = [chunk({"tool_calls": [first]})]
    for piece in argument_pieces:
        events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    return events


def finish(reason: str = "stop") -> Event:
    return chunk({}, finish_reason=reason)


def usage(prompt: int, completion: int) -> Event:
    """The last event before ``[DONE]`` when ``stream_options.include_usage`` is set."""
    counts = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return Event(chunk=_chunk(choices=[], usage=counts))


#: ``data: [DONE]``.
DONE = Event(done=True)


def answer(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None) -> Reply:
    """A whole (non-streamed) chat completion."""
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    return Reply(body={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


# -- as a process ---------------------------------------------------------------------------------------
async def _main(port: int, replies: list[Reply]) -> None:
    llm = await FakeLLM(replies, port=port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"fake chat-completions on {llm.url}", flush=True)
    with contextlib.suppress(asyncio.CancelledError):
        await stop.wait()
    await llm.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fake_llm", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: 0, any free one)")
    parser.add_argument("--script", type=Path, help="a JSON file: the list of replies, in order")
    args = parser.parse_args(argv)
    asyncio.run(_main(args.port, _REPLIES.validate_json(args.script.read_bytes()) if args.script else []))


if __name__ == "__main__":
    main(sys.argv[1:])
