"""A streamed model step of an agent with the HTTP model, against the local fake chat-completions
server (tests/fake_llm.py): what a user reads of it in ``get_run`` and its events."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from roost.agent import AgentConfig, OpenAICompatibleModel
from roost.agent.agent import Agent
from roost.agent.models import Model
from roost.testing import ActorKit
from tests.agent_support import drive, event_types, events
from tests.fake_llm import DONE, Event, FakeLLM, Reply, finish, text, usage


class Streamer(Agent):
    kind = "streamer"
    streams = True
    config = AgentConfig(
        heartbeat_interval=0.5, lease_ttl=2.0, job_backoff=0.5, job_max_attempts=3, model_timeout=2.0
    )
    url: ClassVar[str] = ""

    def make_model(self) -> Model:
        return OpenAICompatibleModel(type(self).url, api_key="sk-test-key-000000000000", model="fake")


async def test_a_429_before_the_stream_is_retried_and_the_usage_reaches_get_run(data_dir: Path) -> None:
    """The endpoint answers 429 first: the model step's job tries again (``model_step_failed`` with
    ``will_retry``); its second try streams "Hello there, world" and reports its usage, which
    ``get_run`` shows on the job, with the message's whole text."""
    async with FakeLLM() as llm:
        Streamer.url = llm.url
        llm.script(
            Reply(status=429, body={"error": {"message": "slow down"}}),
            Reply(events=[*text("Hello ", "there, ", "world"), finish(), usage(11, 7), DONE]),
        )
        async with ActorKit([Streamer], data_dir) as kit:
            c = kit.connect("streamer", "s")
            reply = await c.call("turn", "say hello")
            await drive(kit, lambda: "turn_completed" in event_types(c), io_wait=0.01)
            run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "completed"
        assert run["output"] == "Hello there, world"
        (job,) = run["jobs"]
        assert (job["kind"], job["attempt"], job["status"]) == ("model", 2, "completed")
        assert job["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        (message,) = run["messages"]
        assert (message["status"], message["text"]) == ("completed", "Hello there, world")
        (failed,) = [e["payload"] for e in events(c) if e["event_type"] == "model_step_failed"]
        assert failed["will_retry"] is True
        assert "429" in failed["error"]
        assert len(llm.requests) == 2


async def test_a_malformed_chunk_fails_its_run_and_another_actors_stream_goes_on(data_dir: Path) -> None:
    """Actor ``b`` streams, held at a gate mid-answer; actor ``a``'s stream sends a word, then a
    chunk that is not JSON: ``a``'s run fails, not retryable, saying why, its message
    ``interrupted`` with the word its readers got; ``b``'s stream, released, completes whole."""
    async with FakeLLM() as llm:
        Streamer.url = llm.url
        gate = Event(gate=True, raw=": held\n\n")
        llm.script(
            Reply(events=[*text("steady ", "and "), gate, *text("whole"), finish(), DONE]),
            Reply(events=[*text("half "), Event(delay=0.5, raw="data: {not json\n\n")]),
        )
        async with ActorKit([Streamer], data_dir) as kit:
            b = kit.connect("streamer", "b")
            steady = await b.call("turn", "talk")
            await drive(kit, lambda: llm.waiting == 1, io_wait=0.01)
            a = kit.connect("streamer", "a")
            broken = await a.call("turn", "talk")
            await drive(kit, lambda: "turn_failed" in event_types(a), io_wait=0.01)
            llm.release()
            await drive(kit, lambda: "turn_completed" in event_types(b), io_wait=0.01)
            failed = await a.call("get_run", broken["run_id"])
            seen = [e["payload"] for e in events(a) if e["event_type"] == "model_delta"]
            done = await b.call("get_run", steady["run_id"])
        assert failed["status"] == "failed"
        assert not failed["retryable"]
        assert "malformed model stream" in failed["error"]
        assert "not JSON" in failed["error"]
        (message,) = failed["messages"]
        assert message["status"] == "interrupted"
        assert [p["text"] for p in seen] == ["half "]  # committed before the bad chunk came
        assert message["text"] == "half "  # what its readers got, no more
        assert done["status"] == "completed"
        assert done["output"] == "steady and whole"
