"""The fixtures of the MCP conformance suite (``@modelcontextprotocol/conformance``, server mode),
served by Roost: ``roost serve roost.examples.mcp_conformance:app``, then point the suite at
``http://127.0.0.1:PORT/mcp/conformance/fixture`` (one actor) or ``/mcp/conformance`` (one per session).

The tools are the ``@callable`` methods of one actor kind, ``conformance``; the prompts, the static
resources, the resource template and the completions are the app's (``app.mcp.extras``). The tools
that ask the client in the middle of a call (``sampling/createMessage``, ``elicitation/create``)
return their question (:mod:`roost.transport.mcp_asks`): a tool is an actor's turn, and a turn does
not wait on a client, so the answer comes to a second callable (``sampled``, ``elicited``).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import orjson
from typing_extensions import TypedDict

from roost.actors import Actor, callable
from roost.transport.app import create_app
from roost.transport.mcp_asks import elicit, sample
from roost.transport.mcp_tools import Prompt, ResourceTemplate, StaticResource

__all__ = ["PNG", "WAV", "Conformance", "app"]

#: A 1x1 red pixel.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
#: A WAV file of no samples (a 44-byte header).
WAV = base64.b64encode(
    b"RIFF"
    + struct.pack("<I", 36)
    + b"WAVEfmt "
    + struct.pack("<IHHIIHH", 16, 1, 1, 44100, 88200, 2, 16)
    + b"data\0\0\0\0"
).decode()


class address(TypedDict, total=False):  # its name is the schema's $defs key
    street: str
    city: str


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


class Conformance(Actor):
    """The conformance suite's tools, as one actor's callables; its state counts the calls."""

    kind = "conformance"
    initial_state = {"calls": 0}
    #: The tools that ask the client, and the callable that takes each one's answer (mcp_asks).
    mcp_asks: ClassVar[dict[str, str]] = {
        "test_sampling": "sampled",
        "test_elicitation": "elicited",
        "test_elicitation_sep1034_defaults": "elicited",
        "test_elicitation_sep1330_enums": "elicited",
    }

    def _count(self) -> None:
        self.set_state({"calls": self.state["calls"] + 1})

    @callable
    async def test_simple_text(self) -> dict[str, Any]:
        """Returns a simple text content block."""
        self._count()
        return _text("This is a simple text response for testing.")

    @callable
    async def test_image_content(self) -> dict[str, Any]:
        """Returns an image content block (a 1x1 PNG)."""
        return {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}

    @callable
    async def test_audio_content(self) -> dict[str, Any]:
        """Returns an audio content block (a WAV file)."""
        return {"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}

    @callable
    async def test_embedded_resource(self) -> dict[str, Any]:
        """Returns an embedded resource."""
        resource = {
            "uri": "test://embedded-resource",
            "mimeType": "text/plain",
            "text": "This is an embedded resource content.",
        }
        return {"content": [{"type": "resource", "resource": resource}]}

    @callable
    async def test_multiple_content_types(self) -> dict[str, Any]:
        """Returns text, an image and an embedded resource."""
        resource = {
            "uri": "test://mixed-content-resource",
            "mimeType": "application/json",
            "text": orjson.dumps({"test": "data", "value": 123}).decode(),
        }
        return {
            "content": [
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": resource},
            ]
        }

    @callable
    async def test_tool_with_logging(self) -> AsyncIterator[dict[str, Any]]:
        """Sends three log messages at info level, then answers."""
        for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
            yield {"log": "info", "data": text}
        yield _text("Tool with logging executed successfully")

    @callable
    async def test_tool_with_progress(self) -> AsyncIterator[dict[str, Any]]:
        """Reports progress 0, 50 and 100 of 100, then answers."""
        for done in (0, 50, 100):
            yield {"progress": done, "total": 100}
        yield _text("Tool with progress executed successfully")

    @callable
    async def test_error_handling(self) -> None:
        """Always fails."""
        raise RuntimeError("This tool intentionally returns an error for testing")

    @callable
    async def test_reconnection(self) -> dict[str, Any]:
        """Answers (the SSE polling scenario's tool)."""
        return _text("Reconnection test completed successfully")

    # -- tools that ask the client (roost.transport.mcp_asks): the question is the result, the
    # answer goes to the callable it names, in a turn of its own
    @callable
    async def test_sampling(self, prompt: str) -> dict[str, Any]:
        """Asks the client's model to answer the prompt (sampling/createMessage)."""
        message = {"role": "user", "content": {"type": "text", "text": prompt}}
        return sample([message], 100, then="sampled")

    @callable
    async def sampled(self, answer: dict[str, Any], carry: Any = None) -> dict[str, Any]:
        """Takes the client's model's answer to ``test_sampling``."""
        self._count()
        content = answer.get("content")
        text = content.get("text", "") if isinstance(content, dict) else ""
        return _text(f"LLM response: {text}")

    @callable
    async def test_elicitation(self, message: str) -> dict[str, Any]:
        """Asks the client's user for a username and an email (elicitation/create)."""
        schema = {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        }
        return elicit(message, schema, then="elicited", carry="User response")

    @callable
    async def elicited(self, answer: dict[str, Any], carry: Any = None) -> dict[str, Any]:
        """Takes the user's answer to an elicitation of this actor."""
        self._count()
        action, content = answer.get("action"), orjson.dumps(answer.get("content", {})).decode()
        if carry == "User response":
            return _text(f"User response: action={action}, content={content}")
        return _text(f"Elicitation completed: action={action}, content={content}")

    @callable
    async def test_elicitation_sep1034_defaults(self) -> dict[str, Any]:
        """Asks the user with a default for every primitive type (SEP-1034)."""
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": True},
            },
        }
        return elicit("Please review your profile", schema, then="elicited")

    @callable
    async def test_elicitation_sep1330_enums(self) -> dict[str, Any]:
        """Asks the user with each of the five enum shapes (SEP-1330)."""
        options = ["option1", "option2", "option3"]
        titled = [{"const": f"value{i}", "title": t} for i, t in enumerate(("First", "Second", "Third"), 1)]
        schema = {
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "enum": options},
                "titledSingle": {
                    "type": "string",
                    "oneOf": [{**o, "title": f"{o['title']} Option"} for o in titled],
                },
                "legacyEnum": {
                    "type": "string",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"],
                },
                "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
                "titledMulti": {
                    "type": "array",
                    "items": {"anyOf": [{**o, "title": f"{o['title']} Choice"} for o in titled]},
                },
            },
        }
        return elicit("Choose your options", schema, then="elicited")

    @callable
    async def json_schema_2020_12_tool(self, name: str | None = None, address: address | None = None) -> Any:
        """Tool with JSON Schema 2020-12 features."""
        return {"name": name, "address": address}

    @callable(readonly=True)
    async def calls(self) -> int:
        """How many times test_simple_text was called."""
        count: int = self.state["calls"]
        return count


def _message(content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": content}


def _with_args(args: dict[str, str]) -> list[dict[str, Any]]:
    text = f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'"
    return [_message({"type": "text", "text": text})]


def _with_resource(args: dict[str, str]) -> list[dict[str, Any]]:
    resource = {
        "uri": args["resourceUri"],
        "mimeType": "text/plain",
        "text": "Embedded resource content for testing.",
    }
    return [
        _message({"type": "resource", "resource": resource}),
        _message({"type": "text", "text": "Please process the embedded resource above."}),
    ]


def _with_image(args: dict[str, str]) -> list[dict[str, Any]]:
    return [
        _message({"type": "image", "data": PNG, "mimeType": "image/png"}),
        _message({"type": "text", "text": "Please analyze the image above."}),
    ]


def _complete(ref: dict[str, Any], argument: str, value: str) -> list[str]:
    candidates = ["paris", "park", "party"]
    return [c for c in candidates if c.startswith(value)] or candidates


app = create_app([Conformance])
extras = app.mcp.extras
extras.prompts += [
    Prompt(
        "test_simple_prompt",
        "A simple prompt without arguments",
        lambda args: [_message({"type": "text", "text": "This is a simple prompt for testing."})],
    ),
    Prompt(
        "test_prompt_with_arguments",
        "A prompt with required arguments",
        _with_args,
        (("arg1", "First test argument", True), ("arg2", "Second test argument", True)),
    ),
    Prompt(
        "test_prompt_with_embedded_resource",
        "A prompt that includes an embedded resource",
        _with_resource,
        (("resourceUri", "URI of the resource to embed", True),),
    ),
    Prompt("test_prompt_with_image", "A prompt that includes image content", _with_image),
]
extras.resources += [
    StaticResource(
        "test://static-text",
        "Static text resource",
        lambda: {"text": "This is the content of the static text resource."},
    ),
    StaticResource("test://static-binary", "Static binary resource", lambda: {"blob": PNG}, "image/png"),
    StaticResource(
        "test://watched-resource", "A resource to subscribe to", lambda: {"text": "Watched resource"}
    ),
]
extras.templates.append(
    ResourceTemplate(
        "test://template/{id}/data",
        "Template resource",
        lambda values: {
            "text": orjson.dumps(
                {"id": values["id"], "templateTest": True, "data": f"Data for ID: {values['id']}"}
            ).decode()
        },
        "application/json",
    )
)
extras.complete = _complete
