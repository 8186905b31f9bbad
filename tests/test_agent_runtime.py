"""The agent runtime in process: real SQLite files, a fake clock (docs/design.md, *Agent runtime*)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from roost.actors.errors import RpcError
from roost.agent.background import job_runner
from roost.examples.docs_agent import report_path
from roost.storage import actor_path
from roost.testing import ActorKit
from tests.agent_support import (
    Docs,
    Payloads,
    advance,
    drive,
    event_types,
    events,
    items_of,
    log_frames,
)

REQUEST = "analyze the documents and make a report"


def approval_of(evs: list[dict[str, Any]]) -> dict[str, Any]:
    payload: dict[str, Any] = [e for e in evs if e["event_type"] == "approval_requested"][-1]["payload"]
    return payload


async def test_docs_flow_plan_progress_approval_report_verified(data_dir: Path) -> None:
    """The acceptance flow: plan_ready, tool events with progress, approval_requested; approve →
    report written, verified, turn_completed; every event in order, seqs without a gap."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST, session_id="s1")
        assert set(reply) >= {"turn_id", "run_id"}
        assert reply["status"] == "in_progress"
        await drive(kit, lambda: "approval_requested" in event_types(c))
        types = event_types(c)
        assert types[:4] == ["turn_started", "plan_ready", "tool_started", "tool_completed"]
        progress = [e["payload"] for e in events(c) if e["event_type"] == "tool_progress"]
        assert [p["done"] for p in progress] == list(range(7))
        assert progress[-1]["percent"] == 100.0
        assert all(p["total"] == 6 for p in progress)
        plan = next(e for e in events(c) if e["event_type"] == "plan_ready")["payload"]["items"]
        assert [i["tool"] for i in plan] == ["collect_documents", "analyze_documents", "generate_report"]
        approval = approval_of(events(c))
        assert approval["tool"] == "generate_report"
        assert approval["mode"] == "mutating"
        assert (
            approval["args"]
            == approval["proposed_scope"]
            == {"format": "markdown", "title": "Document analysis"}
        )
        result = await c.call("approve", approval["approval_id"], "grant")
        assert result["status"] == "completed"
        assert result["verification_result"] == "pass"
        await kit.settle()
        assert event_types(c)[-6:] == [
            "approval_granted",
            "tool_started",
            "tool_completed",
            "verification_started",
            "verification_completed",
            "turn_completed",
        ]
        seqs = [f["seq"] for f in c.frames if f.get("type") == "event"]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert all(e["trace_id"] == events(c)[0]["trace_id"] for e in events(c))
        run = await c.call("get_run", reply["run_id"])
        assert run["verifier"] == "docs.report_gate"
        assert (
            run["evidence_refs"][0]
            == f"file:reports/{report_path(Path(), 'acme', reply['run_id']).parent.name}/{reply['run_id']}.md"
        )
        turn = await c.call("get_turn", reply["turn_id"])
        assert [i["status"] for i in turn["items"]] == ["completed"] * 3
        assert [i["runs"] for i in turn["items"]] == [1, 1, 1]
    text = report_path(data_dir, "acme", reply["run_id"]).read_text()
    assert all(name in text for name in ("01-onboarding.md", "06-security-checklist.md"))


async def test_grant_is_reused_in_scope_survives_restart_and_expires(data_dir: Path) -> None:
    """A grant survives a restart; a second turn within its scope runs without asking; after expiry
    (fake clock) it asks again; arguments out of its scope ask again; a scope that does not cover the
    step is refused."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        await c.call("turn", REQUEST, session_id="s1")
        await drive(kit, lambda: "approval_requested" in event_types(c))
        approval = approval_of(events(c))
        with pytest.raises(RpcError) as refused:
            await c.call("approve", approval["approval_id"], "grant", {"format": "markdown"})
        assert refused.value.code == "scope_refused"  # "title" is not covered
        await c.call(
            "approve", approval["approval_id"], "grant", {"format": "markdown", "title": "Doc*"}, 3600
        )
        clock = kit.clock
    async with ActorKit([Docs], data_dir, clock=clock) as kit:  # a restart on the same files
        c = kit.connect("docs", "acme")
        second = await c.call("turn", REQUEST, session_id="s1")
        await drive(kit, lambda: event_types(c).count("turn_completed") == 1)
        assert "approval_requested" not in event_types(c)
        reused = [e for e in events(c) if e["event_type"] == "approval_granted"]
        assert reused
        assert reused[0]["status"] == "reused"
        assert (await c.call("get_run", second["run_id"]))["status"] == "completed"
        # the same session, a title outside the glob: asks again
        other = await c.call(
            "turn", "analyze the documents and make a report titled Summary", session_id="s1"
        )
        await drive(kit, lambda: "approval_requested" in event_types(c))
        assert (await c.call("get_run", other["run_id"]))["waiting"] == "approval"
        await c.call("cancel", other["turn_id"])
        # another session: the grant is narrow, it asks
        c.frames.clear()
        await c.call("turn", REQUEST, session_id="s2")
        await drive(kit, lambda: "approval_requested" in event_types(c))
        advance(kit, 3600)  # the grant expires
        c.frames.clear()
        late = await c.call("turn", REQUEST, session_id="s1")
        await drive(kit, lambda: "approval_requested" in event_types(c))
        assert (await c.call("get_run", late["run_id"]))["waiting"] == "approval"


async def test_denied_approval_fails_the_run_blocked(data_dir: Path) -> None:
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: "approval_requested" in event_types(c))
        out = await c.call("approve", approval_of(events(c))["approval_id"], "deny")
        assert out["status"] == "failed"
        assert out["verification_result"] == "blocked"
        assert event_types(c)[-2:] == ["approval_denied", "turn_failed"]
        with pytest.raises(RpcError) as again:
            await c.call("approve", approval_of(events(c))["approval_id"], "grant")
        assert again.value.code == "invalid_transition"
        turn = await c.call("get_turn", reply["turn_id"])
        assert turn["status"] == "failed"
        assert turn["items"][2]["status"] == "skipped"
    assert not report_path(data_dir, "acme", reply["run_id"]).exists()


async def test_cancel_stops_the_job_at_once(data_dir: Path) -> None:
    """``cancel`` during the long job: its attempt's task is stopped in the cancel's turn (no progress
    after), the turn is cancelled and the events say so."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 3)
        out = await c.call("cancel", reply["turn_id"])
        assert out["status"] == "cancelled"
        runner = job_runner(kit.registry.process)
        await drive(kit, lambda: runner.running == 0, step=0.0)
        before = len(c.frames)
        advance(kit, 10)
        await drive(kit, lambda: True)
        assert len(c.frames) == before  # nothing more: the job is stopped
        assert event_types(c)[-2:] == ["tool_cancelled", "turn_cancelled"]
        turn = await c.call("get_turn", reply["turn_id"])
        assert turn["status"] == "cancelled"
        run = await c.call("get_run", reply["run_id"])
        assert run["jobs"][0]["status"] == "cancelled"


async def test_a_run_cancelled_under_the_old_spelling_reads_cancelled_and_continues(data_dir: Path) -> None:
    """Runs and jobs were once written ``canceled``: the agent's schema migration 4 rewrites such a
    file to the one spelling, ``cancelled``, and ``continue_run`` takes the run up as before."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 1)
        await c.call("cancel", reply["turn_id"])
    conn = sqlite3.connect(actor_path(data_dir, "docs", "acme"))
    with conn:  # the file as the runtime wrote it before migration 4
        conn.execute("UPDATE roost_agent_runs SET status = 'canceled' WHERE status = 'cancelled'")
        conn.execute("UPDATE roost_agent_jobs SET status = 'canceled' WHERE status = 'cancelled'")
        conn.execute("DELETE FROM roost_migrations WHERE component = 'agent' AND version >= 4")
        conn.execute("ALTER TABLE roost_agent_jobs DROP COLUMN outcome")  # migration 5's, made again
        conn.execute("ALTER TABLE roost_agent_runs DROP COLUMN on_core")  # and 6's
    conn.close()
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        run = await c.call("get_run", reply["run_id"])
        assert run["status"] == "cancelled"
        assert run["jobs"][0]["status"] == "cancelled"
        again = await c.call("continue_run", reply["run_id"])
        assert again["status"] == "in_progress"


async def test_two_heavy_runs_on_one_project_are_queued_in_order(data_dir: Path) -> None:
    """Documented choice: a second heavy run waits (``run_queued``) until the first one's heavy step
    ends, then starts (``run_started``); at no time do two heavy jobs run on one project."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        first = await c.call("turn", "analyze the documents")
        second = await c.call("turn", "analyze the documents")
        await kit.settle()
        assert (await c.call("get_run", second["run_id"]))["status"] == "queued"
        assert "run_queued" in event_types(c)
        await drive(kit, lambda: event_types(c).count("turn_completed") == 2)
        started = [e for e in events(c) if e["event_type"] == "run_started"]
        assert started
        assert started[0]["run_id"] == second["run_id"]
        assert started[0]["payload"]["after_run_id"] == first["run_id"]
        progress_runs = [e["run_id"] for e in events(c) if e["event_type"] == "tool_progress"]
        switch = progress_runs.index(second["run_id"])
        assert set(progress_runs[:switch]) == {first["run_id"]}
        assert set(progress_runs[switch:]) == {second["run_id"]}  # strictly one after the other


async def test_continue_run_an_hour_later_across_a_restart_resumes_after_the_last_completed_step(
    data_dir: Path,
) -> None:
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 2)
        await c.call("cancel", reply["turn_id"])
        clock = kit.clock
    clock.advance(3600)  # type: ignore[attr-defined]
    async with ActorKit([Docs], data_dir, clock=clock) as kit:
        c = kit.connect("docs", "acme")
        out = await c.call("continue_run", reply["run_id"])
        assert out["status"] == "in_progress"
        continued = next(e for e in events(c) if e["event_type"] == "run_continued")
        assert continued["payload"]["after_step_index"] == 0
        await drive(kit, lambda: "approval_requested" in event_types(c))
        await c.call("approve", approval_of(events(c))["approval_id"], "grant")
        turn = await c.call("get_turn", reply["turn_id"])
        assert turn["status"] == "completed"
        assert [i["runs"] for i in turn["items"]] == [1, 2, 1]  # collect_documents ran once
        with pytest.raises(RpcError) as done:
            await c.call("continue_run", reply["run_id"])
        assert done.value.code == "invalid_transition"


async def test_payload_policy_blob_reference_and_redaction_on_disk(data_dir: Path) -> None:
    """A 1 MB base64 string and an ``api_key`` in a tool result: the SQLite file holds a blob
    reference and a redacted value, never the string or the key; the blob holds the bytes."""
    async with ActorKit([Payloads], data_dir) as kit:
        c = kit.connect("payloads", "p")
        out = await c.call("turn", "make a blob")
        assert out["status"] == "completed"
    frames = log_frames(data_dir, "payloads", "p")
    raw = "\n".join(frames)
    assert "sk-live-0123456789abcdefghij" not in raw
    assert "abcdefghijklmnop0123" not in raw
    assert "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8" not in raw  # the base64's first bytes
    completed = next(orjson.loads(f)["event"] for f in frames if '"tool_completed"' in f)
    result = completed["payload"]["result"]
    assert result["api_key"] == "[redacted]"
    assert result["note"] == "call me with [redacted] please"
    ref = result["image"]["$blob"]
    assert ref.startswith("sha256:")
    assert result["image"]["bytes"] > 1_000_000
    blob = data_dir / "blobs" / ref[7:9] / ref[9:11] / ref[7:]
    assert blob.read_bytes().startswith(b"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8")
    items = items_of(data_dir, "payloads", "p")
    assert "sk-live" not in items[0]["result"]
    assert "$blob" in items[0]["result"]


async def test_provide_input_resumes_a_run_waiting_for_input(data_dir: Path) -> None:
    async with ActorKit([Payloads], data_dir) as kit:
        c = kit.connect("payloads", "p")
        out = await c.call("turn", "please ask me")
        assert out["waiting"] == "input"
        assert event_types(c)[-1] == "input_requested"
        assert events(c)[-1]["payload"]["question"] == "what is your favourite colour?"
        with pytest.raises(RpcError):
            await c.call("continue_run", out["run_id"])
        done = await c.call("provide_input", out["run_id"], "green")
        assert done["status"] == "completed"
        turn = await c.call("get_turn", out["turn_id"])
        assert turn["items"][0]["result"] == {"colour": "green"}
        with pytest.raises(RpcError) as late:
            await c.call("provide_input", out["run_id"], "blue")
        assert late.value.code == "invalid_transition"


async def test_planner_asks_when_nothing_matches_and_plans_from_the_answer(data_dir: Path) -> None:
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        out = await c.call("turn", "hello there")
        assert out["waiting"] == "input"
        assert "collect_documents" in events(c)[-1]["payload"]["question"]
        await c.call("provide_input", out["run_id"], {"text": "collect the documents"})
        run = await c.call("get_run", out["run_id"])
        assert run["status"] == "completed"  # collect only: inline, finished within the call


async def test_synchronous_and_background_runs(data_dir: Path) -> None:
    """Every step inline → the result is in the call's reply; ``background=True`` → the reply carries
    the ids at once and the events follow."""
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        sync = await c.call("turn", "collect the documents")
        assert sync["status"] == "completed"
        assert "6 documents found" in sync["output"]
        bg = await c.call("turn", "collect the documents", background=True)
        assert bg["status"] == "in_progress"
        await drive(kit, lambda: event_types(c).count("turn_completed") == 2)
        assert (await c.call("get_run", bg["run_id"]))["status"] == "completed"


async def test_session_card_is_compact_and_has_no_blobs_or_tracebacks(data_dir: Path) -> None:
    async with ActorKit([Docs, Payloads], data_dir) as kit:
        c = kit.connect("docs", "acme")
        await c.call("turn", REQUEST, session_id="s9")
        await drive(kit, lambda: "approval_requested" in event_types(c))
        card = await c.call("session", "s9")
        assert card["pending_approval"]["tool"] == "generate_report"
        assert card["active_turn"]["status"] == "awaiting_approval"
        assert card["active_turn"]["steps"] == {"done": 2, "total": 3}
        assert card["cursor"] == max(f["seq"] for f in c.frames if f.get("type") in ("event", "state"))
        assert card["profile"]["agent"] == "docs"
        p = kit.connect("payloads", "p")
        failed = await p.call("turn", "boom", session_id="s9")
        assert failed["status"] == "failed"
        pcard = await p.call("session", "s9")
        text = orjson.dumps(pcard).decode()
        assert "Traceback" not in text
        assert len(text) < 2000
        assert "boom" in pcard["summary"]
        turn = await p.call("get_turn", failed["turn_id"])
        assert len(turn["items"][0]["error"]) <= 200
        assert "Traceback" not in turn["items"][0]["error"]


async def test_bad_calls_get_clear_errors(data_dir: Path) -> None:
    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "acme")
        for method, args, code in [
            ("turn", ("",), "policy_refused"),
            ("turn", ("x" * 5000,), "policy_refused"),
            ("turn", (42,), "invalid_arguments"),  # turn(text: str)
            ("get_turn", ("nope",), "not_found"),
            ("get_run", (None,), "invalid_arguments"),  # get_run(run_id: str)
            ("approve", ("nope", "grant"), "not_found"),
            ("cancel", ("nope",), "not_found"),
            ("session", ("",), "invalid_arguments"),
        ]:
            with pytest.raises(RpcError) as err:
                await c.call(method, *args)
            assert err.value.code == code, (method, err.value)
        reply = await c.call("turn", REQUEST)
        await drive(kit, lambda: "approval_requested" in event_types(c))
        approval = approval_of(events(c))["approval_id"]
        bad: list[tuple[str, dict[str, Any], str]] = [
            ("maybe", {}, "invalid_arguments"),
            ("grant", {"ttl_s": -1}, "invalid_arguments"),
            ("grant", {"scope": "everything"}, "invalid_arguments"),
        ]
        for decision, kwargs, code in bad:
            with pytest.raises(RpcError) as err:
                await c.call("approve", approval, decision, **kwargs)
            assert err.value.code == code
        assert (await c.call("get_run", reply["run_id"]))["waiting"] == "approval"  # nothing changed
