"""Models: the deterministic planner, and the HTTP model against a local fake chat-completions server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from roost.agent import AgentConfig, ModelError, ModelRequest, OpenAICompatibleModel
from roost.agent.agent import Agent
from roost.agent.models import Model
from roost.examples.docs_agent import DocsAgent
from roost.testing import ActorKit
from tests.agent_support import drive, event_types, events
from tests.support import serve_in_process


class FakeChat:
    """A scripted chat-completions endpoint: each request takes the next answer of the script."""

    def __init__(self) -> None:
        self.script: list[tuple[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.handle, methods=["POST"])])

    async def handle(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append({"body": body, "auth": request.headers.get("authorization")})
        kind, value = self.script.pop(0) if self.script else ("status", 500)
        if kind == "sleep":
            await asyncio.sleep(value)
            return JSONResponse(text_answer("too late"))
        if kind == "status":
            return Response("upstream trouble", status_code=value)
        if kind == "raw":
            return Response(value, media_type="application/json")
        return JSONResponse(value)


def tool_answer(name: str, args: dict[str, Any]) -> dict[str, Any]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(args).decode()},
    }
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}


def text_answer(text: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


@pytest.fixture
async def chat() -> AsyncIterator[tuple[FakeChat, str]]:
    fake = FakeChat()
    async with serve_in_process(fake.app) as addr:
        yield fake, f"http://{addr}/v1"


MODEL_URL: dict[str, str] = {}


class HttpDocs(DocsAgent):
    kind = "httpdocs"
    config = AgentConfig(heartbeat_interval=0.5, lease_ttl=2.0, job_max_attempts=2, job_backoff=0.5)

    def make_model(self) -> Model:
        return OpenAICompatibleModel(
            MODEL_URL["url"], api_key="sk-test-key-000000000000", model="fake", timeout=0.5
        )


async def test_http_model_tool_call_round_trip(chat: tuple[FakeChat, str], data_dir: Path) -> None:
    """The model asks for a tool, sees its result, answers: a run over HTTP, with the model steps as
    background jobs."""
    fake, url = chat
    MODEL_URL["url"] = url
    fake.script = [("json", tool_answer("collect_documents", {})), ("json", text_answer("Six documents."))]
    async with ActorKit([HttpDocs], data_dir) as kit:
        c = kit.connect("httpdocs", "h")
        reply = await c.call("turn", "how many documents are there?")
        assert reply["status"] == "in_progress"
        await drive(kit, lambda: "turn_completed" in event_types(c), io_wait=0.01)
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed"
        assert run["output"] == "Six documents."
        assert [j["kind"] for j in run["jobs"]] == ["model", "model"]
    first, second = (r["body"] for r in fake.requests)
    assert {t["function"]["name"] for t in first["tools"]} == {
        "collect_documents",
        "analyze_documents",
        "generate_report",
    }
    assert first["messages"][-1] == {"role": "user", "content": "how many documents are there?"}
    tool_msg = second["messages"][-1]
    assert tool_msg["role"] == "tool"
    assert orjson.loads(tool_msg["content"])["count"] == 6
    assert second["messages"][-2]["tool_calls"][0]["id"] == tool_msg["tool_call_id"]
    assert fake.requests[0]["auth"] == "Bearer sk-test-key-000000000000"


@pytest.mark.parametrize(
    ("answer", "retryable"),
    [
        (("status", 500), True),
        (("status", 503), True),
        (("status", 429), True),
        (("sleep", 2.0), True),  # longer than the model's 0.5 s timeout
        (("status", 400), False),
        (("raw", b"{not json"), False),
        (("json", {"choices": []}), False),
    ],
)
async def test_http_model_failures_are_model_errors(
    chat: tuple[FakeChat, str], answer: tuple[str, Any], retryable: bool
) -> None:
    fake, url = chat
    fake.script = [answer]
    model = OpenAICompatibleModel(url, timeout=0.5)
    with pytest.raises(ModelError) as err:
        await model.step(ModelRequest(text="hi"))
    assert err.value.retryable is retryable


async def test_http_model_unreachable_is_retryable() -> None:
    model = OpenAICompatibleModel("http://127.0.0.1:9/v1", timeout=0.5)  # discard port: refused
    with pytest.raises(ModelError) as err:
        await model.step(ModelRequest(text="hi"))
    assert err.value.retryable


async def test_timeouts_and_500s_fail_the_step_retryably_never_the_server(
    chat: tuple[FakeChat, str], data_dir: Path
) -> None:
    """A 500, then a timeout: each a failed model step (retried once, then the run fails marked
    retryable). The agent keeps answering; once the model is back, ``continue_run`` completes."""
    fake, url = chat
    MODEL_URL["url"] = url
    fake.script = [("status", 500), ("sleep", 2.0)]
    async with ActorKit([HttpDocs], data_dir) as kit:
        c = kit.connect("httpdocs", "h")
        reply = await c.call("turn", "count the documents")
        await drive(kit, lambda: "turn_failed" in event_types(c), io_wait=0.01)
        failed = [e["payload"] for e in events(c) if e["event_type"] == "model_step_failed"]
        assert [f["will_retry"] for f in failed] == [True, False]
        assert "HTTP 500" in failed[0]["error"]
        assert "timed out" in failed[1]["error"]
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "failed"
        assert run["retryable"] == 1
        assert (await c.call("session", "anonymous"))["active_turn"] is None  # still serving
        fake.script = [("json", text_answer("Nothing to do."))]
        await c.call("continue_run", reply["run_id"])
        await drive(kit, lambda: "turn_completed" in event_types(c), io_wait=0.01)
        assert (await c.call("get_run", reply["run_id"]))["output"] == "Nothing to do."


class Plain(Agent):
    kind = "plain"


async def test_planner_without_tools_answers_and_the_default_verification_passes(data_dir: Path) -> None:
    async with ActorKit([Plain], data_dir) as kit:
        c = kit.connect("plain", "p")
        out = await c.call("turn", "anything")
        assert out["waiting"] == "input"
        done = await c.call("provide_input", out["run_id"], "still anything")
        assert done["status"] == "completed"
        assert done["output"] == "I have no tool for that request."
        assert done["verification_result"] == "pass"


async def test_max_tool_hops_from_config_stops_a_model_that_never_ends(
    chat: tuple[FakeChat, str], data_dir: Path
) -> None:
    fake, url = chat
    MODEL_URL["url"] = url

    class Loop(HttpDocs):
        kind = "loop"
        config = AgentConfig(heartbeat_interval=0.5, lease_ttl=2.0, max_tool_hops=2)

    fake.script = [("json", tool_answer("collect_documents", {}))] * 5
    async with ActorKit([Loop], data_dir) as kit:
        c = kit.connect("loop", "l")
        reply = await c.call("turn", "go")
        await drive(kit, lambda: "turn_failed" in event_types(c), io_wait=0.01)
        run = await c.call("get_run", reply["run_id"])
        assert "max_tool_hops (2)" in run["error"]
        assert run["hops"] == 2
    assert len(fake.requests) == 2  # not asked a third time
