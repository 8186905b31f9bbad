"""A tool that asks the MCP client in the middle of its call: the user (``elicitation/create``) or
the client's model (``sampling/createMessage``).

A tool is a turn of its actor, and a turn never waits on a client: it would hold the actor's
mailbox, and its writes, for as long as the user takes. So a ``@callable`` that needs the client's
answer **returns the question** instead — :func:`elicit` or :func:`sample`, naming the callable of the
same actor that takes the answer (``then``) and what it needs to carry over (``carry``, JSON). The
MCP route (:func:`roost.transport.mcp_tools.build_server`) sends the request to the client on the
call's own stream, outside any turn, and calls ``then(answer=…, carry=…)`` in a new turn with the
client's answer; ``then`` may ask again (at most :data:`MAX_ASKS` times a call). Each step is a turn,
committed before the next question goes out. Over WebSocket and HTTP the question is the call's
result, as JSON: the caller answers by calling ``then`` itself.

Guarantees (tests in ``tests/test_mcp_server.py``):

- **The question goes to the client that called**, on the call's stream, and its answer to ``then``
  of the same actor with the same principal, checked as any call is.
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
    ``maxTokens`` and any other of its parameters in ``params``, by their MCP names); the answer
    (``{"role", "content", "model", "stopReason"}``) goes to ``then(answer=…, carry=carry)``."""
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


def asked(result: Any) -> Asked | None:
    """The question ``result`` asks, if it is one (:func:`elicit`, :func:`sample`)."""
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
                with warnings.catch_warnings():  # deprecated from 2026-07-28; the handshake-era
                    warnings.simplefilter("ignore", MCPDeprecationWarning)  # sessions served here have it
                    sending = session.create_message(
                        params.messages,
                        max_tokens=params.max_tokens,
                        system_prompt=params.system_prompt,
                        temperature=params.temperature,
                        stop_sequences=params.stop_sequences,
                        metadata=params.metadata,
                        model_preferences=params.model_preferences,
                        related_request_id=ctx.request_id,
                    )
                answer = await sending
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
