"""The HTTP model: any chat-completions endpoint with tool calls (OpenAI, vLLM, llama.cpp, Ollama …).

``step(request)`` asks for the whole answer in one response; ``stream(request)`` asks for it as
server-sent events (``"stream": true``, usage included) and yields it as it arrives (the contract is
in :mod:`roost.agent.models`). The stream is read by two sans-I/O parts, tested without a network:
:class:`SseDecoder` (bytes in, the ``data`` of each event out) and :class:`ChatStream` (one event's
data in, :data:`~roost.agent.models.ModelChunk` pieces out, then the assembled step).

Every failure is a :class:`~roost.agent.models.ModelError`, whatever the stream yielded before it:

=====================================================================  ===========
outcome                                                                retryable
=====================================================================  ===========
no connection, or no response head within ``timeout``                 yes
HTTP 429 or 5xx before the stream (``Retry-After`` is not read)        yes
any other HTTP status but 200, or a JSON answer to a stream request    no
the connection lost mid-stream                                         yes
no byte for ``stream_idle_timeout`` seconds mid-stream ("stalled")     yes
an ``{"error": …}`` event: server-side or rate limit (by code / type)  yes
an ``{"error": …}`` event of any other kind                            no
a malformed event (not JSON, no ``choices``, a field of the wrong type) no
a tool call's arguments not a JSON object at the end (names the tool)  no
the stream ended with neither ``[DONE]`` nor a ``finish_reason``       yes
=====================================================================  ===========

The API key is sent in the ``Authorization`` header only: no error message holds it (text the
endpoint sent back is quoted with the key blanked out).

**Continuing an answer.** When ``request.partial`` is set it is sent as a last assistant message, so
that an endpoint that continues a prefix goes on from it; the deltas are what follows it. An endpoint
that repeats the prefix before going on has the repeat dropped (the first text is held back only while
it could still be that repeat). The :class:`StreamEnd`'s step holds the whole answer, ``partial``
included, as ``step`` would have answered it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pydantic

from roost.agent.config import ConfigError
from roost.agent.models import (
    ModelChunk,
    ModelError,
    ModelRequest,
    ModelStep,
    StreamEnd,
    SummaryRequest,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    _as_text,
)

__all__ = ["ChatStream", "OpenAICompatibleModel", "SseDecoder"]

#: The longest SSE line accepted (a line is one event's data in practice): past it the stream is
#: malformed, so an endpoint that never ends a line cannot fill the memory.
MAX_LINE = 1 << 20

#: Words in an in-stream error's ``code`` or ``type`` that say trying again may help.
_RETRYABLE_WORDS = ("rate_limit", "server", "overload", "unavailable", "timeout", "internal")


def _env_base_url() -> str | None:
    """The endpoint's base URL from the environment (``ROOST_MODEL_BASE_URL``, else
    ``OPENAI_BASE_URL``)."""
    return os.environ.get("ROOST_MODEL_BASE_URL") or os.environ.get("OPENAI_BASE_URL")


class OpenAICompatibleModel:
    """Any chat-completions endpoint with tool calls; see the module doc for ``stream``'s outcomes.

    ``timeout`` bounds connecting and waiting for the response's head (and, for ``step``, each read);
    ``stream_idle_timeout`` (default: ``timeout``) is the longest a stream may go without a byte.
    """

    inline = False

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str = "gpt-4o-mini",
        timeout: float = 30.0,
        stream_idle_timeout: float | None = None,
        system: str = "You are an agent. Use the tools to do what the user asks, then answer briefly.",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.timeout = timeout
        self.stream_idle_timeout = timeout if stream_idle_timeout is None else stream_idle_timeout
        self.system = system

    @staticmethod
    def check_env(source: object = None) -> None:
        """:class:`~roost.agent.config.ConfigError` unless the environment names an endpoint."""
        if not _env_base_url():
            raise ConfigError(
                f'{source or "roost.toml"}: [agent] model = "openai" needs ROOST_MODEL_BASE_URL (or '
                "OPENAI_BASE_URL): the endpoint's base URL, such as https://api.openai.com/v1 (requests go "
                "to BASE/chat/completions; the key in ROOST_MODEL_API_KEY or OPENAI_API_KEY, the model's "
                "name in ROOST_MODEL, default gpt-4o-mini)"
            )

    @classmethod
    def from_env(
        cls, *, timeout: float = 30.0, stream_idle_timeout: float | None = None
    ) -> OpenAICompatibleModel:
        """``ROOST_MODEL_BASE_URL`` (or ``OPENAI_BASE_URL``), ``ROOST_MODEL_API_KEY`` (or
        ``OPENAI_API_KEY``) and ``ROOST_MODEL`` (the model's name)."""
        base = _env_base_url()
        if not base:
            raise ModelError("set ROOST_MODEL_BASE_URL to use the HTTP model", retryable=False)
        return cls(
            base,
            api_key=os.environ.get("ROOST_MODEL_API_KEY") or os.environ.get("OPENAI_API_KEY"),
            model=os.environ.get("ROOST_MODEL", "gpt-4o-mini"),
            timeout=timeout,
            stream_idle_timeout=stream_idle_timeout,
        )

    def messages(self, request: ModelRequest) -> list[dict[str, Any]]:
        system = self.system
        if request.summary:
            system += f"\nEarlier in this session: {request.summary}"
        if request.steps_summary:
            system += f"\nEarlier steps of this request, summarised: {request.steps_summary}"
        msgs: list[dict[str, Any]] = [{"role": "system", "content": system}]
        msgs.append({"role": "user", "content": request.text})
        for extra in request.inputs:
            msgs.append({"role": "user", "content": _as_text(extra)})
        for s in request.steps:
            call = {"name": s.tool, "arguments": orjson.dumps(s.args).decode()}
            msgs.append(
                {"role": "assistant", "tool_calls": [{"id": s.item_id, "type": "function", "function": call}]}
            )
            msgs.append(
                {"role": "tool", "tool_call_id": s.item_id, "content": orjson.dumps(s.result).decode()}
            )
        if request.partial:  # the answer so far: the endpoint continues it
            msgs.append({"role": "assistant", "content": request.partial})
        return msgs

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": self.messages(request)}
        if request.tools:
            body["tools"] = request.tools
        return body

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _redact(self, text: str) -> str:
        return text.replace(self.api_key, "***") if self.api_key else text

    async def step(self, request: ModelRequest) -> ModelStep:
        body = self._body(request)
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                resp = await client.post(
                    f"{self.base_url}/chat/completions", json=body, headers=self._headers()
                )
        except httpx.TimeoutException:
            raise ModelError(f"model timed out after {self.timeout} s", retryable=True) from None
        except httpx.TransportError as exc:
            raise ModelError(f"model unreachable: {type(exc).__name__}", retryable=True) from None
        if resp.status_code != 200:
            raise _status_error(resp.status_code, self._redact(_error_detail(resp.content)))
        try:
            answer = resp.json()
            message = answer["choices"][0]["message"]
            calls = [
                ToolCall(
                    name=c["function"]["name"],
                    args=orjson.loads(c["function"].get("arguments") or "{}"),
                )
                for c in message.get("tool_calls") or ()
            ]
            usage = Usage.model_validate(answer["usage"]) if isinstance(answer.get("usage"), dict) else None
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelError(f"malformed model answer: {type(exc).__name__}", retryable=False) from None
        text = None if calls else (message.get("content") or "")
        return ModelStep(tool_calls=calls, text=text, usage=usage)

    def summary_messages(self, request: SummaryRequest) -> list[dict[str, Any]]:
        """The summary call's messages: ``request.prompt`` as the system message, the transcript (the
        summary before, then ``role: content`` per message) as the user's."""
        transcript = "\n".join(f"{m.role}: {m.content}" for m in request.messages)
        if request.previous:
            transcript = f"Summary so far:\n{request.previous}\n\nThen:\n{transcript}"
        return [{"role": "system", "content": request.prompt}, {"role": "user", "content": transcript}]

    async def summarize(self, request: SummaryRequest) -> str:
        """A summary of ``request``'s history in one call, no tools, not streamed (roost.agent.compaction);
        its failures are :class:`ModelError` as ``step``'s are. ``request.idempotency_key``, when set,
        is sent as the ``Idempotency-Key`` header."""
        body = {"model": self.model, "messages": self.summary_messages(request)}
        headers = self._headers()
        if request.idempotency_key:
            headers["Idempotency-Key"] = request.idempotency_key
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                resp = await client.post(f"{self.base_url}/chat/completions", json=body, headers=headers)
        except httpx.TimeoutException:
            raise ModelError(f"model timed out after {self.timeout} s", retryable=True) from None
        except httpx.TransportError as exc:
            raise ModelError(f"model unreachable: {type(exc).__name__}", retryable=True) from None
        if resp.status_code != 200:
            raise _status_error(resp.status_code, self._redact(_error_detail(resp.content)))
        try:
            content = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelError(f"malformed model answer: {type(exc).__name__}", retryable=False) from None
        if not isinstance(content, str) or not content.strip():
            raise ModelError("the model's summary is empty", retryable=False)
        return self._redact(content)[: request.max_chars]

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """The step as server-sent events: text and tool-call deltas as they arrive, then the
        :class:`StreamEnd`; any failure a :class:`ModelError` (the module doc's table)."""
        body = {**self._body(request), "stream": True, "stream_options": {"include_usage": True}}
        # connecting and the response's head are bounded by `timeout` below, the body by the idle timeout
        async with httpx.AsyncClient(timeout=httpx.Timeout(self.timeout, read=None)) as client:
            req = client.build_request(
                "POST", f"{self.base_url}/chat/completions", json=body, headers=self._headers()
            )
            try:
                async with asyncio.timeout(self.timeout):
                    resp = await client.send(req, stream=True)
            except (TimeoutError, httpx.TimeoutException):
                raise ModelError(f"model timed out after {self.timeout} s", retryable=True) from None
            except httpx.TransportError as exc:
                raise ModelError(f"model unreachable: {type(exc).__name__}", retryable=True) from None
            try:
                await self._check_head(resp)
                state = ChatStream(request.partial, redact=self._redact)
                async with contextlib.aclosing(self._events(resp)) as events:
                    async for data in events:
                        for chunk in state.feed(data):
                            yield chunk
                        if state.done:  # nothing after [DONE] is read
                            break
                for chunk in state.flush():
                    yield chunk
                yield StreamEnd(step=state.end())
            finally:
                await resp.aclose()

    async def _check_head(self, resp: httpx.Response) -> None:
        if resp.status_code != 200:
            raise _status_error(resp.status_code, self._redact(_error_detail(await self._head_body(resp))))
        kind = resp.headers.get("content-type", "")
        if kind.startswith("application/json"):  # the endpoint ignored "stream": true, or an error
            content = await self._head_body(resp)
            try:
                answer = orjson.loads(content)
            except orjson.JSONDecodeError:
                answer = None
            if isinstance(answer, dict) and "error" in answer:
                raise _stream_error(answer["error"], self._redact)
            raise ModelError(f"the model answered {kind}, not an event stream", retryable=False)

    async def _head_body(self, resp: httpx.Response, limit: int = 4096) -> bytes:
        """At most ``limit`` bytes of a body that is not a stream (an error's), within the idle timeout."""
        content = b""
        try:
            async with asyncio.timeout(self.stream_idle_timeout):
                async for piece in resp.aiter_bytes():
                    content += piece
                    if len(content) >= limit:
                        break
        except (TimeoutError, httpx.HTTPError):
            pass  # the status alone says what happened
        return content[:limit]

    async def _events(self, resp: httpx.Response) -> AsyncGenerator[str, None]:
        """The data of each server-sent event as it arrives; a stall or a lost connection is a
        retryable error."""
        decoder = SseDecoder()
        pieces = resp.aiter_bytes()
        while True:
            try:
                async with asyncio.timeout(self.stream_idle_timeout):
                    piece = await anext(pieces)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise ModelError(
                    f"the model's stream stalled: no data for {self.stream_idle_timeout} s", retryable=True
                ) from None
            except httpx.TransportError as exc:
                raise ModelError(
                    f"the connection to the model was lost mid-stream: {type(exc).__name__}", retryable=True
                ) from None
            except httpx.HTTPError as exc:
                raise ModelError(
                    f"the model's stream could not be read: {type(exc).__name__}", retryable=False
                ) from None
            for data in decoder.feed(piece):
                yield data
        for data in decoder.close():
            yield data


class SseDecoder:
    """Server-sent events, sans-I/O: :meth:`feed` bytes as they arrive, get the ``data`` of each event
    completed by them.

    Guarantees: a line (or a UTF-8 character) split over any number of pieces is decoded whole; lines end
    with ``\\n`` or ``\\r\\n``; comments (``:`` lines, keep-alives) and fields other than ``data`` are
    skipped; an event's ``data`` lines are joined with ``\\n``, and it ends at a blank line;
    :meth:`close` returns an event the stream ended without its blank line (a line without its end
    is dropped); a line longer than :data:`MAX_LINE` is a non-retryable :class:`ModelError`.
    """

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._max_line = max_line

    def feed(self, piece: bytes) -> list[str]:
        self._buffer += piece
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > self._max_line:
            raise ModelError(f"malformed stream: a line longer than {self._max_line} bytes", retryable=False)
        events = []
        for raw in lines:
            line = raw.removesuffix(b"\r").decode("utf-8", errors="replace")
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            field, _, value = line.partition(":")
            if field == "data":
                self._data.append(value.removeprefix(" "))
        return events

    def close(self) -> list[str]:
        events, self._data, self._buffer = (["\n".join(self._data)] if self._data else []), [], b""
        return events


class ChatStream:
    """One streamed chat completion, sans-I/O: :meth:`feed` the data of each event in order, get the
    chunks it carries; then :meth:`flush` and :meth:`end` for the assembled step.

    Guarantees: text deltas are yielded as they come (after ``partial``, see the module doc); tool-call
    deltas are yielded as they come and assembled by ``index``: the first id and name, the arguments
    concatenated, parsed at the end as a JSON object; the usage of the ``usage`` event is the step's;
    ``[DONE]`` sets :attr:`done` and nothing after it is read. Every failure is a :class:`ModelError`
    as in the module doc's table; ``redact`` blanks secrets out of text the endpoint sent.
    """

    def __init__(self, partial: str = "", *, redact: Callable[[str], str] | None = None) -> None:
        self.partial = partial
        self.done = False
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self._redact: Callable[[str], str] = redact or str
        self._text: list[str] = []
        self._held: str | None = "" if partial else None  # text that may still repeat `partial`
        self._calls: dict[int, dict[str, Any]] = {}

    def feed(self, data: str) -> list[ModelChunk]:
        if self.done:
            return []
        if data.strip() == "[DONE]":
            self.done = True
            return []
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise _malformed(f"an event is not JSON: {self._redact(data[:80])!r}") from None
        if not isinstance(event, dict):
            raise _malformed(f"an event is {type(event).__name__}, not a JSON object")
        if event.get("error") is not None:
            raise _stream_error(event["error"], self._redact)
        if event.get("usage") is not None:
            try:
                self.usage = Usage.model_validate(event["usage"])
            except pydantic.ValidationError:
                raise _malformed("its usage is not a set of token counts") from None
        choices = event.get("choices")
        if choices is None and event.get("usage") is not None:
            return []  # a usage event without choices
        if not isinstance(choices, list):
            raise _malformed("an event has no choices")
        out: list[ModelChunk] = []
        for choice in choices:
            if not isinstance(choice, dict):
                raise _malformed("a choice is not a JSON object")
            if choice.get("index", 0) != 0:
                continue  # one answer was asked for
            if choice.get("finish_reason") is not None:
                self.finish_reason = str(choice["finish_reason"])
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise _malformed("a choice's delta is not a JSON object")
            content = delta.get("content")
            if content is not None:
                if not isinstance(content, str):
                    raise _malformed("a delta's content is not text")
                out += self._on_text(content)
            for position, call in enumerate(delta.get("tool_calls") or ()):
                out.append(self._on_call(position, call))
        return out

    def _on_text(self, piece: str) -> list[ModelChunk]:
        if self._held is not None:
            self._held += piece
            if self.partial.startswith(self._held):
                return []  # may still be the endpoint repeating the prefix
            held, self._held = self._held, None
            piece = held.removeprefix(self.partial)
        if not piece:
            return []
        self._text.append(piece)
        return [TextDelta(text=piece)]

    def _on_call(self, position: int, call: Any) -> ToolCallDelta:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(function, dict | None):
            raise _malformed("a tool call delta is not a JSON object")
        function = function or {}
        index, call_id = call.get("index", position), call.get("id")
        name, arguments = function.get("name"), function.get("arguments") or ""
        if type(index) is not int or not all(isinstance(v, str | None) for v in (call_id, name, arguments)):
            raise _malformed("a tool call delta has a field of the wrong type")
        slot = self._calls.setdefault(index, {"id": None, "name": None, "arguments": []})
        slot["id"] = slot["id"] or call_id
        slot["name"] = slot["name"] or name
        slot["arguments"].append(arguments)
        return ToolCallDelta(index=index, id=call_id, name=name, arguments=arguments)

    def flush(self) -> list[ModelChunk]:
        """The text held back as a possible repeat of ``partial`` when the stream ended: a repeat of
        all of it is dropped, anything else is text of the answer."""
        held, self._held = self._held, None
        if held is None or held == self.partial or not held:
            return []
        self._text.append(held)
        return [TextDelta(text=held)]

    def end(self) -> ModelStep:
        """The assembled step, once the stream has ended."""
        if not self.done and self.finish_reason is None:
            raise ModelError("the model's stream ended before the answer did (no [DONE])", retryable=True)
        calls = []
        for index in sorted(self._calls):
            slot = self._calls[index]
            name = slot["name"]
            if not name:
                raise _malformed(f"tool call {index} has no name")
            arguments = "".join(slot["arguments"]) or "{}"
            try:
                args = orjson.loads(arguments)
            except orjson.JSONDecodeError:
                args = None
            if not isinstance(args, dict):
                raise ModelError(
                    f"the model's arguments for tool {name!r} are not a JSON object", retryable=False
                )
            calls.append(ToolCall(name=name, args=args))
        text = self.partial + "".join(self._text)
        return ModelStep(tool_calls=calls, text=None if calls else text, usage=self.usage)


def _malformed(problem: str) -> ModelError:
    return ModelError(f"malformed model stream: {problem}", retryable=False)


def _stream_error(error: Any, redact: Callable[[str], str]) -> ModelError:
    """An ``{"error": …}`` the endpoint sent: retryable when its code or type says server-side or rate
    limit (a number: 429 or 5xx)."""
    if not isinstance(error, dict):
        error = {"message": str(error)}
    code, kind = error.get("code"), error.get("type")
    retryable = isinstance(code, int) and (code == 429 or code >= 500)
    words = " ".join(str(v).lower() for v in (code, kind) if isinstance(v, str))
    retryable = retryable or any(w in words for w in _RETRYABLE_WORDS)
    label = "/".join(str(v) for v in (kind, code) if v is not None) or "error"
    message = redact(str(error.get("message") or "")[:200])
    return ModelError(f"the model reported an error ({label}): {message}".rstrip(": "), retryable=retryable)


def _status_error(status: int, detail: str) -> ModelError:
    suffix = f": {detail}" if detail else ""
    if status >= 500 or status == 429:
        return ModelError(f"model answered HTTP {status}{suffix}", retryable=True)
    return ModelError(f"model refused the request: HTTP {status}{suffix}", retryable=False)


def _error_detail(content: bytes) -> str:
    """The ``error.message`` of an error body, if it has one (at most 200 characters)."""
    try:
        answer = orjson.loads(content)
    except orjson.JSONDecodeError:
        return ""
    error = answer.get("error") if isinstance(answer, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return message[:200] if isinstance(message, str) else ""
