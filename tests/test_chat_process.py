"""The default app's ``chat`` kind in a real ``roost serve``: an answer streamed over a WebSocket, a
reader that drops mid-stream, and a SIGKILL mid-stream taken up by ``continue_run``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roost.testing import WsClient, connect
from tests.agent_support import reassemble
from tests.support import server_process

pytestmark = pytest.mark.slow

CONFIG = """
[agent]
heartbeat_interval = 0.25
lease_ttl = 1.0
stream_pace = 0.05
"""
WAIT = 20.0
TEXT = "tell me about durable actors, their files, their logs and their wake-ups"


def deltas(peer: WsClient) -> list[dict[str, Any]]:
    return [
        f["event"]["payload"]
        for f in peer.frames
        if f.get("type") == "event" and f["event"]["event_type"] == "model_delta"
    ]


def has_event(kind: str) -> Any:
    return lambda f: f.get("type") == "event" and f["event"]["event_type"] == kind


def last_seq(peer: WsClient) -> int:
    return max(int(f["seq"]) for f in peer.frames if "seq" in f)


async def test_a_reader_that_drops_mid_stream_resumes_without_gap_or_repeat(
    data_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text(CONFIG)
    with server_process(data_dir, "--config", str(cfg)) as srv:
        async with connect(f"{srv.ws}/agents/chat/drop") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            reply = await peer.call("send", TEXT, timeout=WAIT)
            await peer.wait_for(lambda f: len(deltas(peer)) >= 2, WAIT)
            before, cursor = deltas(peer), last_seq(peer)
        async with connect(f"{srv.ws}/agents/chat/drop?cursor={cursor}") as peer:
            await peer.wait_for(has_event("turn_completed"), WAIT)
            after = deltas(peer)
            page = await peer.call("messages", timeout=WAIT)
        assert after[0]["offset"] == len(reassemble(before))
        answer = next(m for m in page["messages"] if m["message_id"] == reply["message_id"])
        assert reassemble(before + after) == answer["content"]


async def test_sigkill_mid_stream_leaves_the_answer_interrupted_and_continue_run_finishes_it(
    data_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text(CONFIG)
    with server_process(data_dir, "--config", str(cfg)) as srv:
        async with connect(f"{srv.ws}/agents/chat/kill") as peer:
            await peer.wait_for(lambda f: f["type"] == "welcome", WAIT)
            reply = await peer.call("send", TEXT, timeout=WAIT)
            await peer.wait_for(lambda f: len(deltas(peer)) >= 2, WAIT)
            srv.kill()  # SIGKILL, mid-stream
            before, cursor = deltas(peer), last_seq(peer)
    with server_process(data_dir, "--config", str(cfg)) as srv:
        async with connect(f"{srv.ws}/agents/chat/kill?cursor={cursor}") as peer:
            # the lease expires in the new process: the step is interrupted, not redone
            interrupted = await peer.wait_for(has_event("model_stream_interrupted"), WAIT)
            await peer.wait_for(has_event("turn_failed"), WAIT)
            run = await peer.call("get_run", reply["run_id"], timeout=WAIT)
            assert run["status"] == "failed"
            assert run["retryable"]
            (message,) = run["messages"]
            assert message["status"] == "interrupted"
            shown = reassemble(before + deltas(peer))
            assert message["text"] == shown  # what was committed is what readers saw
            assert interrupted["event"]["payload"]["chars"] == len(shown)
            await peer.call("continue_run", reply["run_id"], timeout=WAIT)
            await peer.wait_for(has_event("turn_completed"), WAIT)
            page = await peer.call("messages", timeout=WAIT)
        whole = reassemble(before + deltas(peer))
        answer = next(m for m in page["messages"] if m["message_id"] == reply["message_id"])
        assert answer["status"] == "completed"
        assert whole == answer["content"]  # no gap and no repeat across the kill
        assert whole.startswith(shown)
        assert TEXT in whole
