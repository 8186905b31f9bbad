"""Compaction and reset in a real ``roost serve`` killed with SIGKILL while the summary is being made —
the HTTP model's call in flight, or the deterministic model's turn open: after a restart the operation
completes once — one artifact, the summary begun again (the HTTP call under the attempt the killed
process had committed before it asked, then the next one, both with the operation's idempotency key),
no message lost — and the history shows what was summarised and what was kept."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from roost.storage.paths import actor_path
from roost.testing import WsClient, connect, until
from roost.transport import admin
from tests.fake_llm import DONE, FakeLLM, Recorded, Reply, answer, finish, text
from tests.support import server_process

pytestmark = pytest.mark.slow

PROMPT = "Summarise for the kill test."
CONFIG = f"""
[agent]
model = "openai"
heartbeat_interval = 0.25
lease_ttl = 1.0
model_timeout = 4.0

[agent.context]
keep_recent = 0
summary_prompt = "{PROMPT}"
"""
WAIT = 30.0


def streamed(*pieces: str) -> Reply:
    return Reply(events=[*text(*pieces), finish(), DONE])


def has_event(kind: str) -> Any:
    return lambda f: f.get("type") == "event" and f["event"]["event_type"] == kind


def of_type(peer: WsClient, kind: str) -> list[dict[str, Any]]:
    return [f["event"] for f in peer.frames if f.get("type") == "event" and f["event"]["event_type"] == kind]


def ended(peer: WsClient, n: int) -> Any:
    return lambda f: len(of_type(peer, "turn_completed")) == n


def is_summary(request: Recorded) -> bool:
    return bool(request.body) and request.body["messages"][0]["content"] == PROMPT


def summary_calls(llm: FakeLLM) -> int:
    return sum(1 for r in llm.requests if is_summary(r))


def committed_ops(path: Path) -> list[tuple[str, int]]:
    """The context operations' ``(status, attempt)`` in an actor's file no process holds."""
    with closing(sqlite3.connect(path)) as conn:
        return list(conn.execute("SELECT status, attempt FROM roost_agent_context_ops"))


@pytest.mark.parametrize("op", ["compact", "reset"])
async def test_sigkill_during_the_summary_call_completes_once_after_restart(
    op: str, data_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text(CONFIG)
    async with FakeLLM() as llm:
        env = {"ROOST_MODEL_BASE_URL": llm.url, "ROOST_MODEL": "fake"}
        # two answers, then a summary that never comes (the server dies waiting), then the summary
        llm.script(
            streamed("First ", "answer."),
            streamed("Second ", "answer."),
            Reply(delay=60.0, body=answer("too late").body),
            answer("Two questions, two answers."),
        )
        with server_process(data_dir, "--config", str(cfg), env=env) as srv:
            async with connect(f"{srv.ws}/agents/chat/k") as peer:
                await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
                for n, question in enumerate(("first question", "second question"), start=1):
                    await peer.call("send", question, session_id="s", timeout=WAIT)
                    await peer.wait_for(ended(peer, n), WAIT)
                pending = await peer.call(op, "s", timeout=WAIT)
                assert pending["status"] == "pending"
                await until(lambda: summary_calls(llm) == 1, timeout=WAIT)
                srv.kill()  # SIGKILL while the model is asked for the summary
                cursor = max(int(f["seq"]) for f in peer.frames if "seq" in f)
        # the attempt that asked was durable: the killed process left its record
        assert committed_ops(actor_path(data_dir, "chat", "k")) == [("pending", 1)]
        with server_process(data_dir, "--config", str(cfg), env=env) as srv:
            async with connect(f"{srv.ws}/agents/chat/k?cursor={cursor}") as peer:
                done_type = "context_reset" if op == "reset" else "context_compacted"
                await peer.wait_for(has_event(done_type), WAIT)
                card = await peer.call("context", "s", timeout=WAIT)
                page = await peer.call("messages", session_id="s", timeout=WAIT)
            srv.terminate()
    assert summary_calls(llm) == 2  # the interrupted call was redone ...
    keys = [r.headers.get("idempotency-key") for r in llm.requests if is_summary(r)]
    assert keys == [pending["op_id"]] * 2  # ... under the operation's idempotency key ...
    assert len(of_type(peer, done_type)) == 1  # ... and recorded once
    (row,) = card["ops"]
    assert row["op_id"] == pending["op_id"]
    assert (row["status"], row["attempt"]) == ("done", 2)
    assert row["range"]["message_range"] == [1, 4]  # what was summarised: both questions and answers
    state = row["artifact"]["state"] if op == "reset" else row["artifact"]["summary"]
    assert state == "Two questions, two answers."
    if op == "reset":  # the whole hand-off survived the kill, not only its summary
        handoff = row["artifact"]
        assert (handoff["next_steps"], handoff["open_approvals"], handoff["note"]) == ([], [], None)
        assert [e["status"] for e in handoff["evaluation"]] == ["completed", "completed"]
        assert handoff["survived"] == {
            "turns_summarised": 2,
            "open_run_ids": [],
            "open_approval_ids": [],
            "evidence_refs": len(handoff["evidence_refs"]),
        }
        assert card["context"]["handoff"] == handoff
    assert card["context"]["turn_ids"] == []  # what the model still sees verbatim: nothing
    assert [m["content"] for m in page["messages"]] == [  # what was kept: the whole history
        "first question",
        "First answer.",
        "second question",
        "Second answer.",
    ]
    exported = admin.export_actor(data_dir, "chat", "k")
    assert len(exported["tables"]["roost_agent_context_ops"]) == 1  # no duplicate artifact
    assert len(exported["tables"]["roost_agent_chat_messages"]) == 4


DETERMINISTIC = """
[agent]
stream_pace = 0.01

[agent.context]
keep_recent = 0
"""


async def test_sigkill_inside_the_turn_that_records_a_deterministic_summary_completes_once(
    data_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text(DETERMINISTIC)
    marker = tmp_path / "summarising"
    env = {"ROOST_TEST_MARKER": str(marker)}
    app = "tests.compaction_app:app"
    with server_process(data_dir, "--config", str(cfg), app=app, env=env) as srv:
        async with connect(f"{srv.ws}/agents/slowsum/k") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            for n, question in enumerate(("first question", "second question"), start=1):
                await peer.call("send", question, session_id="s", timeout=WAIT)
                await peer.wait_for(ended(peer, n), WAIT)
            pending = await peer.call("compact", "s", timeout=WAIT)
            await until(marker.exists, timeout=WAIT)  # inside the turn that records the summary
            srv.kill()
            cursor = max(int(f["seq"]) for f in peer.frames if "seq" in f)
    with server_process(data_dir, "--config", str(cfg), app=app, env=env) as srv:
        async with connect(f"{srv.ws}/agents/slowsum/k?cursor={cursor}") as peer:
            await peer.wait_for(has_event("context_compacted"), WAIT)
            card = await peer.call("context", "s", timeout=WAIT)
            page = await peer.call("messages", session_id="s", timeout=WAIT)
        srv.terminate()
    calls = (tmp_path / "summarising.calls").read_text().split()
    assert len(calls) == 2  # begun once in each process; the first one's turn rolled back
    assert calls[0] != calls[1]
    assert len(of_type(peer, "context_compacted")) == 1
    (row,) = card["ops"]
    assert (row["op_id"], row["status"]) == (pending["op_id"], "done")
    assert row["range"]["message_range"] == [1, 4]
    assert row["artifact"]["summary"].startswith("user: first question\nassistant: You wrote 2 words")
    assert [m["role"] for m in page["messages"]] == ["user", "assistant", "user", "assistant"]
    exported = admin.export_actor(data_dir, "slowsum", "k")
    assert len(exported["tables"]["roost_agent_context_ops"]) == 1


async def test_sigkill_inside_a_compaction_of_a_runs_steps_the_run_completes_with_each_step_once(
    data_dir: Path, tmp_path: Path
) -> None:
    """A run of five hops whose steps are compacted after every hop past the first: killed inside
    the turn that records the first summary of its steps (the run waiting for it), the restarted
    server completes the summary once and the run goes on from its next model step — every call of
    ``count`` made once, the summarised steps kept in ``get_turn``."""
    marker = tmp_path / "summarising"
    env = {"ROOST_TEST_MARKER": str(marker)}
    app = "tests.compaction_app:app"
    with server_process(data_dir, app=app, env=env) as srv:
        async with connect(f"{srv.ws}/agents/longrun/k") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            started = await peer.call("turn", "count for a while", session_id="s", timeout=WAIT)
            await until(marker.exists, timeout=WAIT)  # inside the turn that records the summary
            srv.kill()
            cursor = max(int(f["seq"]) for f in peer.frames if "seq" in f)
    counted = (tmp_path / "summarising.count").read_text().split()
    assert len(counted) == 2  # the two steps before the first compaction
    with server_process(data_dir, app=app, env=env) as srv:
        async with connect(f"{srv.ws}/agents/longrun/k?cursor={cursor}") as peer:
            await peer.wait_for(has_event("turn_completed"), WAIT)
            run = await peer.call("get_run", started["run_id"], timeout=WAIT)
            turn = await peer.call("get_turn", started["turn_id"], timeout=WAIT)
            card = await peer.call("context", "s", timeout=WAIT)
        srv.terminate()
    counted = (tmp_path / "summarising.count").read_text().split()
    assert len(counted) == 5
    assert len(set(counted)) == 5
    assert run["status"] == "completed"
    assert [i["item_id"] for i in turn["items"]] == counted  # every step kept, in order
    calls = (tmp_path / "summarising.calls").read_text().split()
    assert len(calls) == 3
    assert calls[0] != calls[1]
    ops = sorted(card["ops"], key=lambda o: o["hop"])
    assert [(o["hop"], o["status"], o["range"]["from_ordinal"], o["range"]["to_ordinal"]) for o in ops] == [
        (2, "done", 0, 1),
        (4, "done", 2, 3),
    ]
    assert ops[1]["artifact"]["summary"].count("tool: count") == 4  # the summary before carried
