"""Compaction with the HTTP model against the local fake chat-completions server (tests/fake_llm.py):
the configurable summarisation prompt, what the endpoint is sent (no secret), a summary call made only
under a committed attempt, a failed summary call retried into one artifact, and a non-retryable one
leaving the context unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import orjson

from roost.actors import wakeup
from roost.agent import AgentConfig, OpenAICompatibleModel
from roost.agent.agent import Agent
from roost.agent.config import Budget, ContextConfig
from roost.agent.models import DeterministicPlanner, Model
from roost.testing import ActorKit, KitConnection
from roost.workflows.runner import runner
from tests.agent_support import advance, drive, event_types, events
from tests.fake_llm import FakeLLM, Reply, answer
from tests.test_compaction_runs import CALLS, count

PROMPT = "Summarise for the test, in one line."


class HttpNotes(Agent):
    kind = "httpnotes"
    config = AgentConfig(
        heartbeat_interval=0.5,
        lease_ttl=2.0,
        job_backoff=0.5,
        job_max_attempts=3,
        model_timeout=2.0,
        context=ContextConfig(keep_recent=0, summary_prompt=PROMPT),
    )
    url: ClassVar[str] = ""

    def make_model(self) -> Model:
        return OpenAICompatibleModel(type(self).url, api_key="sk-test-key-000000000000", model="fake")


def of_type(conn: KitConnection, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(conn) if e["event_type"] == kind]


def summary_calls(llm: FakeLLM) -> list[dict[str, Any]]:
    """The requests that asked for a summary (no tools; the system message is the prompt)."""
    return [r.body for r in llm.requests if r.body["messages"][0]["content"] == PROMPT]


async def two_turns(kit: ActorKit, c: KitConnection, first: str) -> None:
    await c.call("turn", first, session_id="s")
    await drive(kit, lambda: len(of_type(c, "turn_completed")) == 1, io_wait=0.01)
    await c.call("turn", "and a second question", session_id="s")
    await drive(kit, lambda: len(of_type(c, "turn_completed")) == 2, io_wait=0.01)


async def test_the_http_model_summarises_with_the_configured_prompt_and_never_sees_a_secret(
    data_dir: Path,
) -> None:
    secret = "hunter2-very-secret-value"
    async with FakeLLM() as llm:
        HttpNotes.url = llm.url
        llm.script(answer("first answer"), answer("second answer"), answer("They asked two questions."))
        async with ActorKit([HttpNotes], data_dir) as kit:
            c = kit.connect("httpnotes", "a")
            await two_turns(kit, c, f"my password: {secret} is set")
            await c.call("compact", "s")
            await drive(kit, lambda: "context_compacted" in event_types(c), io_wait=0.01)
            (done,) = of_type(c, "context_compacted")
            assert done["payload"]["op"]["artifact"] == {"summary": "They asked two questions."}
        (call,) = summary_calls(llm)
        assert "tools" not in call
        assert call["messages"][0] == {"role": "system", "content": PROMPT}
        transcript = call["messages"][1]["content"]
        assert transcript.startswith("user: my password: [redacted]")
        assert "assistant: second answer" in transcript
        assert secret not in orjson.dumps([r.body for r in llm.requests]).decode()


async def test_a_failed_summary_call_is_retried_and_recorded_once(data_dir: Path) -> None:
    async with FakeLLM() as llm:
        HttpNotes.url = llm.url
        llm.script(answer("first answer"), answer("second answer"), Reply(status=503), answer("The summary."))
        async with ActorKit([HttpNotes], data_dir) as kit:
            c = kit.connect("httpnotes", "b")
            await two_turns(kit, c, "a first question")
            await c.call("compact", "s")
            await drive(kit, lambda: "context_compacted" in event_types(c), io_wait=0.01)
            for _ in range(3):  # the redo wake-ups left fire: nothing more happens
                advance(kit, 5.0)
                await kit.settle()
            card = await c.call("context", "s")
        assert len(summary_calls(llm)) == 2
        (op,) = card["ops"]
        assert (op["status"], op["attempt"]) == ("done", 2)
        assert op["artifact"] == {"summary": "The summary."}
        assert len(of_type(c, "context_compacted")) == 1


async def test_a_summary_the_model_refuses_fails_the_operation_and_keeps_the_context(data_dir: Path) -> None:
    async with FakeLLM() as llm:
        HttpNotes.url = llm.url
        llm.script(answer("first answer"), answer("second answer"), Reply(status=400))
        async with ActorKit([HttpNotes], data_dir) as kit:
            c = kit.connect("httpnotes", "c")
            await two_turns(kit, c, "a first question")
            await c.call("compact", "s")
            await drive(kit, lambda: "context_failed" in event_types(c), io_wait=0.01)
            card = await c.call("context", "s")
            (op,) = card["ops"]
            assert op["status"] == "failed"
            assert "HTTP 400" in op["error"]
            assert card["context"]["summary"] is None  # unchanged: never compacted
            assert len(card["context"]["turn_ids"]) == 2


async def test_a_summary_call_lost_with_its_process_is_asked_again_and_recorded_once(data_dir: Path) -> None:
    """The summary call's task is lost (what a killed process leaves) while the endpoint is slow to
    answer: at the end of its lease the core runs the attempt again, which asks again under the same
    idempotency key; the operation is done once, with the second answer (the lost task records
    nothing)."""
    async with FakeLLM() as llm:
        HttpNotes.url = llm.url
        llm.script(
            answer("first answer"),
            answer("second answer"),
            Reply(delay=5.0, body=answer("The lost summary.").body),
            answer("The real summary."),
        )
        async with ActorKit([HttpNotes], data_dir) as kit:
            c = kit.connect("httpnotes", "d")
            await two_turns(kit, c, "a first question")
            pending = await c.call("compact", "s")
            await drive(kit, lambda: len(summary_calls(llm)) == 1, io_wait=0.01)  # attempt 1 asks
            work = runner(kit.registry.process)
            for task in list(work.tasks.values()):
                task.cancel()
            await drive(kit, lambda: not work.tasks, step=0.0)
            await drive(kit, lambda: "context_compacted" in event_types(c), io_wait=0.01)
            card = await c.call("context", "s")
        keys = [
            r.headers["idempotency-key"] for r in llm.requests if r.body["messages"][0]["content"] == PROMPT
        ]
        assert keys == [pending["op_id"]] * 2
        (op,) = card["ops"]
        assert (op["status"], op["attempt"]) == ("done", 2)
        assert op["artifact"] == {"summary": "The real summary."}
        assert len(of_type(c, "context_compacted")) == 1


class RollsBackOnce(HttpNotes):
    """The first wake-up of its context operation's workflow fails after the operation's work set
    the summary call going: that turn rolls back (the attempt it recorded with it)."""

    kind = "rollsback"
    failures: ClassVar[int] = 1

    @wakeup
    async def workflow_wake(self, payload: dict[str, Any]) -> None:
        await super().workflow_wake(payload)
        if str(payload.get("id", "")).startswith("ctxop_") and type(self).failures:
            type(self).failures -= 1
            raise RuntimeError("the turn fails after its summary call was set going")


async def test_a_summary_call_is_made_only_under_a_committed_attempt(data_dir: Path) -> None:
    """The wake-up turn that set the first attempt's call going rolled back (and the attempt with
    it): that attempt asks nothing. The wake-up's retry records the attempt again and asks once,
    under the operation's idempotency key."""
    RollsBackOnce.failures = 1
    async with FakeLLM() as llm:
        RollsBackOnce.url = llm.url
        llm.script(answer("first answer"), answer("second answer"), answer("The summary."))
        async with ActorKit([RollsBackOnce], data_dir) as kit:
            c = kit.connect("rollsback", "r")
            await two_turns(kit, c, "a first question")
            pending = await c.call("compact", "s")
            ended = ("context_compacted", "context_failed")
            await drive(kit, lambda: any(t in ended for t in event_types(c)), io_wait=0.01)
            for _ in range(3):  # the redo wake-ups left fire: nothing more happens
                advance(kit, 5.0)
                await kit.settle()
            card = await c.call("context", "s")
    assert RollsBackOnce.failures == 0  # the first wake-up's turn did roll back
    (call,) = [r for r in llm.requests if r.body["messages"][0]["content"] == PROMPT]
    assert call.headers["idempotency-key"] == pending["op_id"]
    (op,) = card["ops"]
    assert (op["status"], op["attempt"]) == ("done", 1)
    assert op["artifact"] == {"summary": "The summary."}
    assert len(of_type(c, "context_compacted")) == 1


async def test_an_operation_whose_workflow_fails_otherwise_says_why_not_an_older_attempts_error(
    data_dir: Path,
) -> None:
    """The summary call failed once (503: it waits for its retry); then the agent's model becomes
    one that summarises in the turn, so the operation's body no longer replays its record: the
    operation fails with that reason, not with the 503 of the attempt before."""
    async with FakeLLM() as llm:
        HttpNotes.url = llm.url
        llm.script(answer("first answer"), answer("second answer"), Reply(status=503))
        async with ActorKit([HttpNotes], data_dir) as kit:
            c = kit.connect("httpnotes", "m")
            await two_turns(kit, c, "a first question")
            await c.call("compact", "s")
            await drive(kit, lambda: len(summary_calls(llm)) == 1, io_wait=0.01)

            async def switch(actor: Any) -> None:  # what a restart with another model would do
                actor._model = DeterministicPlanner(actor.catalog())

            await kit.registry.run("httpnotes", "m", switch)
            await drive(kit, lambda: "context_failed" in event_types(c), io_wait=0.01)
            (op,) = (await c.call("context", "s"))["ops"]
        assert op["status"] == "failed"
        assert "was recorded as 'summary' (external)" in op["error"]
        assert "503" not in op["error"]


class HttpSteps(HttpNotes):
    """An HTTP model's run whose steps are compacted after every hop past the first."""

    kind = "httpsteps"
    config = AgentConfig(
        job_backoff=0.5,
        model_timeout=2.0,
        context=ContextConfig(run=Budget(hops=1), keep_recent_steps=0, summary_prompt=PROMPT),
    )
    tools = (count,)


def _count_call(n: int) -> Reply:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "count", "arguments": "{}"}}
    return answer(None, [call])


async def test_an_http_models_run_sees_its_older_steps_as_the_summary_it_was_given(data_dir: Path) -> None:
    """Two calls of ``count`` (2 hops > 1), then the summary call for both (an outside step of the
    operation's workflow, under the configured prompt), then the model's next step sees the summary
    in its system message and no tool message."""
    CALLS.clear()
    async with FakeLLM() as llm:
        HttpSteps.url = llm.url
        llm.script(_count_call(1), _count_call(2), answer("Counted twice."), answer("All counted."))
        async with ActorKit([HttpSteps], data_dir) as kit:
            c = kit.connect("httpsteps", "a")
            reply = await c.call("turn", "count twice", session_id="s")
            await drive(kit, lambda: bool(of_type(c, "turn_completed")), io_wait=0.01)
            run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed"
        assert len(CALLS) == 2
        (summary,) = summary_calls(llm)
        assert summary["messages"][1]["content"].splitlines() == [
            'tool: count {} -> {"summary":"counted 1"}',
            'tool: count {} -> {"summary":"counted 2"}',
        ]
        last = llm.requests[-1].body["messages"]
        assert last[0]["content"].endswith("Earlier steps of this request, summarised: Counted twice.")
        assert [m["role"] for m in last] == ["system", "user"]  # the two steps are in the summary only
        (op,) = [e["payload"]["op"] for e in of_type(c, "context_compacted")]
        assert (op["run_id"], op["hop"], op["artifact"]) == (run["run_id"], 2, {"summary": "Counted twice."})
