"""A tool that asks the MCP client in the middle of its call: the user (``elicitation/create``) or
the client's model (``sampling/createMessage``).

A tool is a turn of its actor, and a turn never waits on a client: it would hold the actor's
mailbox, and its writes, for as long as the user takes. So a ``@callable`` that needs the client's
answer **returns the question** instead — :func:`elicit` or :func:`sample`, naming the callable of the
same actor that takes the answer (``then``) and what it needs to carry over (``carry``, JSON). The
kind declares which of its callables ask and which callable takes each one's answer, in its class
attribute ``mcp_asks`` (``{"asker": "continuation", ...}``, :func:`declared`). The MCP route
(:func:`roost.transport.mcp_tools.build_server`) sends the question to the client on the call's own
stream, outside any turn, and calls ``then(answer=…, carry=…)`` in a new turn with the client's
answer; a continuation that is itself an asker may ask again (at most :data:`MAX_ASKS` questions a
call). Each step is a turn, committed before the next question goes out. Over WebSocket and HTTP the
question is the call's result, as JSON: the caller answers by calling ``then`` itself (there the
answer and ``carry`` are the caller's word, as any argument is).

Guarantees (tests in ``tests/test_mcp_server.py``):

- **Only a declared asker asks**: the result of any other callable is data, whatever it holds (a
  stored value shaped like a question is not sent to the client), and its ``then`` must be the one
  declared for it.
- **A continuation takes only the client's answer over MCP**: it is not listed in ``tools/list``
  and a direct ``tools/call`` of it is refused, so its ``answer`` and ``carry`` come from the
  question's own round (``carry`` never leaves the server there).
- **The question goes to the client that called, after ``then`` is allowed**: the continuation is
  checked for the session's principal before the client is asked; the answer goes to the same actor
  with the same principal.
- **Bounded**: an answer over :data:`MAX_ANSWER` bytes of JSON, more than :data:`MAX_ASKS` questions,
  a client that does not declare the capability, a refused request or no answer within
  :data:`ASK_TIMEOUT_S` end the call with an error result saying why; the actor and the session go on.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning

__all__ = [
    "ASK",
    "ASK_TIMEOUT_S",
    "MAX_ANSWER",
    "MAX_ASKS",
    "AskFailed",
    "Asked",
    "ask_client",
    "asked",
    "declared",
    "elicit",
    "sample",
]

#: The key of a result that asks the client (:func:`elicit`, :func:`sample`).
ASK = "mcp_ask"
#: Questions one tool call may ask.
MAX_ASKS = 8
#: The largest answer taken from a client (bytes of JSON).
MAX_ANSWER = 65_536
#: Seconds a question waits for the client's answer.
ASK_TIMEOUT_S = 600.0


def elicit(message: str, schema: Mapping[str, Any], then: str, carry: Any = None) -> dict[str, Any]:
    """A tool's result that asks the client's user (``elicitation/create`` with ``message`` and the
    requested ``schema``, a JSON Schema of an object); the answer (``{"action": "accept"|"decline"|
    "cancel", "content": {...}}``) goes to the callable ``then`` of the same actor, as
    ``then(answer=…, carry=carry)``."""
    return {
        ASK: {"elicit": {"message": message, "requestedSchema": dict(schema)}},
        "then": then,
        "carry": carry,
    }


def sample(
    messages: list[dict[str, Any]], max_tokens: int, then: str, carry: Any = None, **params: Any
) -> dict[str, Any]:
    """A tool's result that asks the client's model (``sampling/createMessage`` with ``messages``,
    ``maxTokens`` and, in ``params`` by their MCP names, ``systemPrompt``, ``includeContext``,
    ``temperature``, ``stopSequences``, ``metadata``, ``modelPreferences``; sampling with tools is
    not offered); the answer (``{"role", "content", "model", "stopReason"}``) goes to
    ``then(answer=…, carry=carry)``."""
    question = {"messages": messages, "maxTokens": max_tokens, **params}
    return {ASK: {"sample": question}, "then": then, "carry": carry}


@dataclass(frozen=True, slots=True)
class Asked:
    """A question a tool's result asks: ``what`` (``elicit`` or ``sample``), its parameters, and
    the callable that takes the answer."""

    what: str
    params: dict[str, Any]
    then: str
    carry: Any


def declared(cls: type, callables: Mapping[str, Any]) -> dict[str, str]:
    """The kind's ``mcp_asks`` (asker → continuation), checked against its ``callables``: each name
    a callable of the kind, each continuation taking ``answer`` and ``carry``. Raises ``TypeError``
    naming what is wrong."""
    asks: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a subclass adds to (or changes) what its bases declare
        own = klass.__dict__.get("mcp_asks")
        if own is None:
            continue
        if not isinstance(own, Mapping):
            raise TypeError(f"{klass.__name__}.mcp_asks must map an asking callable to its continuation")
        asks.update({str(k): str(v) for k, v in own.items()})
    for asker, then in asks.items():
        for name in (asker, then):
            if name not in callables:
                raise TypeError(f"{cls.__name__}.mcp_asks: {name!r} is not a @callable of the kind")
        if callables[asker].streaming:
            raise TypeError(f"{cls.__name__}.mcp_asks: {asker!r} streams, and a streaming method cannot ask")
        params = callables[then].arguments.signature.parameters
        if "answer" not in params or "carry" not in params:
            raise TypeError(f"{cls.__name__}.mcp_asks: {then!r} must take answer and carry")
    continuations = set(asks.values())
    for asker in asks:
        if asker in continuations and not any(k != asker and v == asker for k, v in asks.items()):
            raise TypeError(
                f"{cls.__name__}.mcp_asks: {asker!r} continues only itself, so nothing can start it"
            )
    return asks


def asked(result: Any) -> Asked | None:
    """The question ``result`` asks, if it is one (:func:`elicit`, :func:`sample`); only a declared
    asker's result is looked at (:func:`declared`)."""
    if not isinstance(result, Mapping) or not isinstance(result.get(ASK), Mapping):
        return None
    question, then = result[ASK], result.get("then")
    if len(question) != 1 or not isinstance(then, str):
        return None
    ((what, params),) = question.items()
    if what not in ("elicit", "sample") or not isinstance(params, Mapping):
        return None
    return Asked(what, dict(params), then, result.get("carry"))


class AskFailed(Exception):
    """The client could not answer: the call ends with this message as its error."""


async def ask_client(ctx: ServerRequestContext[Any, Any], question: Asked) -> Any:
    """Send ``question`` to the client on the call's stream and return its answer (JSON). Raises
    :class:`AskFailed` saying why there is none (see the module doc)."""
    session = ctx.session
    if question.what == "elicit":
        wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    else:
        wanted = types.ClientCapabilities(sampling=types.SamplingCapability())
    if not session.check_client_capability(wanted):
        name = "elicitation" if question.what == "elicit" else "sampling"
        raise AskFailed(f"the client does not support {name}, which this tool needs")
    try:
        async with asyncio.timeout(ASK_TIMEOUT_S):
            if question.what == "elicit":
                answer: Any = await session.elicit_form(
                    str(question.params.get("message", "")),
                    question.params.get("requestedSchema", {"type": "object", "properties": {}}),
                    related_request_id=ctx.request_id,
                )
            else:
                params = types.CreateMessageRequestParams.model_validate(question.params)
                if params.tools or params.tool_choice:
                    raise AskFailed("sampling with tools is not offered")
                with warnings.catch_warnings():  # deprecated from 2026-07-28; the handshake-era
                    warnings.simplefilter("ignore", MCPDeprecationWarning)  # sessions served here have it
                    sending = session.create_message(
                        params.messages,
                        max_tokens=params.max_tokens,
                        system_prompt=params.system_prompt,
                        include_context=params.include_context,
                        temperature=params.temperature,
                        stop_sequences=params.stop_sequences,
                        metadata=params.metadata,
                        model_preferences=params.model_preferences,
                        related_request_id=ctx.request_id,
                    )
                answer = await sending
    except AskFailed:
        raise
    except TimeoutError:
        raise AskFailed(f"the client did not answer within {ASK_TIMEOUT_S:g} s") from None
    except (ValueError, TypeError) as exc:  # a question the SDK will not send (its own checks)
        raise AskFailed(f"the tool's question is not valid: {str(exc)[:300]}") from None
    except Exception as exc:  # the client refused the request, or the session ended
        raise AskFailed(f"the client refused: {str(exc)[:300]}") from None
    dumped = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
    if len(orjson.dumps(dumped)) > MAX_ANSWER:
        raise AskFailed(f"the client's answer is over {MAX_ANSWER} bytes")
    return dumped
