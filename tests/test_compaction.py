"""Compaction and reset of a session's context with the deterministic model (roost/agent/compaction.py):
exact summaries, what the model sees afterwards, the hand-off of a reset, the triggers from
``roost.toml``, the redaction of a secret, and the history kept, read and exported."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
from pydantic import BaseModel

from roost.actors import Principal, RpcError
from roost.agent import AgentConfig, ChatAgent, ToolContext, tool
from roost.agent.agent import Agent
from roost.agent.config import Budget, ConfigError, ContextConfig, load_config
from roost.agent.models import DeterministicPlanner, ModelRequest, ModelStep
from roost.testing import ActorKit, KitConnection
from roost.transport import admin
from roost.workflows.engine import engine_of
from tests.agent_support import drive, event_types, events


class Nothing(BaseModel):
    pass


@tool(keywords=("note",))
async def note(ctx: ToolContext, args: Nothing) -> dict[str, Any]:
    """Take a note."""
    return {"summary": "noted"}


@tool(approval_mode="mutating", keywords=("erase",))
async def erase(ctx: ToolContext, args: Nothing) -> dict[str, Any]:
    """Erase the notes."""
    return {"summary": "erased"}


class Recording(DeterministicPlanner):
    """The deterministic planner, keeping every request it was asked (what the model saw)."""

    seen: ClassVar[list[ModelRequest]] = []

    async def step(self, request: ModelRequest) -> ModelStep:
        type(self).seen.append(request)
        return await super().step(request)


COMPACT = AgentConfig(context=ContextConfig(compact=Budget(messages=4), keep_recent=1))


class Notes(Agent):
    kind = "notes"
    config = COMPACT
    tools = (note, erase)
    planner = Recording


class Manual(Notes):
    kind = "manual"
    config = AgentConfig(context=ContextConfig(keep_recent=0))


class ChatNotes(ChatAgent):
    kind = "chatnotes"
    config = AgentConfig(
        stream_batch_count=2,
        stream_batch_interval=0.05,
        stream_pace=0.01,
        context=ContextConfig(compact=Budget(messages=4), keep_recent=1),
    )


KINDS = [Notes, Manual, ChatNotes]


def of_type(conn: KitConnection, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(conn) if e["event_type"] == kind]


async def turns(conn: KitConnection, *texts: str, session: str = "s") -> list[str]:
    ids = []
    for text in texts:
        reply = await conn.call("turn", text, session_id=session)
        assert reply["status"] == "completed", reply
        ids.append(reply["turn_id"])
    return ids


SUMMARY_1_2 = (
    "user: note alpha one\nassistant: Done. note: noted.\nuser: note beta two\nassistant: Done. note: noted."
)


async def test_a_message_budget_compacts_the_older_turns_into_an_exact_summary(data_dir: Path) -> None:
    Recording.seen.clear()
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("notes", "a")
        t1, t2, t3 = await turns(c, "note alpha one", "note beta two", "note gamma three")
        await drive(kit, lambda: "context_compacted" in event_types(c))
        (requested,) = of_type(c, "context_requested")
        assert requested["payload"]["op"]["trigger"] == "messages"
        (done,) = of_type(c, "context_compacted")
        op = done["payload"]["op"]
        assert op["range"]["turn_ids"] == [t1, t2]  # keep_recent = 1: the third stays visible
        assert op["artifact"] == {"summary": SUMMARY_1_2}
        assert done["payload"]["visible"]["turn_ids"] == [t3]
        Recording.seen.clear()
        await turns(c, "note delta four")
        first = Recording.seen[0]
        assert first.summary == SUMMARY_1_2  # what the model sees instead of turns 1 and 2
        assert [t["input"] for t in first.recent_turns] == ["note gamma three"]
        for turn_id in (t1, t2):  # the full history stays readable
            assert (await c.call("get_turn", turn_id))["status"] == "completed"


async def test_compaction_keeps_the_context_and_carries_the_summary_before(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("manual", "a")
        await turns(c, "note alpha one", "note beta two")
        first = await c.call("compact", "s")
        assert first["status"] == "pending"
        await drive(kit, lambda: len(of_type(c, "context_compacted")) == 1)
        await turns(c, "note gamma three", "note delta four")
        await c.call("compact", "s")
        await drive(kit, lambda: len(of_type(c, "context_compacted")) == 2)
        card = await c.call("context", "s")
        newest, oldest = card["ops"]
        assert newest["context_id"] == oldest["context_id"]  # the same context, compacted twice
        assert (oldest["generation"], newest["generation"]) == (1, 2)
        assert card["context"]["summary"] == newest["artifact"]["summary"]
        assert newest["artifact"]["summary"].startswith("user: note alpha one\n")  # the summary before
        assert "user: note gamma three" in newest["artifact"]["summary"]
        assert card["context"]["turn_ids"] == []  # keep_recent = 0: every ended turn summarised


async def test_a_reset_starts_a_fresh_context_from_a_structured_hand_off(data_dir: Path) -> None:
    Recording.seen.clear()
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("manual", "a")
        t1, t2 = await turns(c, "note alpha one", "note beta two")
        paused = await c.call("turn", "erase everything", session_id="s")
        assert paused["waiting"] == "approval"
        (asked,) = of_type(c, "approval_requested")
        op = await c.call("reset", "s", note="continue with the erase")
        assert op["op"] == "reset"
        await drive(kit, lambda: "context_reset" in event_types(c))
        (done,) = of_type(c, "context_reset")
        op = done["payload"]["op"]
        assert op["range"]["turn_ids"] == [t1, t2]
        handoff = op["artifact"]
        assert op["new_context_id"] != op["context_id"]
        assert handoff["state"] == SUMMARY_1_2
        assert handoff["note"] == "continue with the erase"
        assert [s["run_id"] for s in handoff["next_steps"]] == [paused["run_id"]]
        assert handoff["next_steps"][0]["steps_left"] == ["erase"]
        assert handoff["open_approvals"][0]["approval_id"] == asked["payload"]["approval_id"]
        assert [e["verification_result"] for e in handoff["evaluation"]] == ["pass", "pass"]
        assert handoff["evidence_refs"]  # the summarised runs' evidence
        assert handoff["survived"] == {
            "turns_summarised": 2,
            "open_run_ids": [paused["run_id"]],
            "open_approval_ids": [asked["payload"]["approval_id"]],
            "evidence_refs": len(handoff["evidence_refs"]),
        }
        # the open approval survived the reset: granting it finishes the paused run
        reply = await c.call("approve", asked["payload"]["approval_id"], "grant")
        assert reply["status"] == "completed"
        Recording.seen.clear()
        await turns(c, "note epsilon")
        seen = Recording.seen[0]
        assert seen.summary.startswith(f"Hand-off from context {op['context_id']}:\n{SUMMARY_1_2}")
        assert "Open approval" in seen.summary
        assert [t["input"] for t in seen.recent_turns] == ["erase everything"]


async def test_explicit_calls_are_refused_while_a_run_steps_and_with_nothing_to_compact(
    data_dir: Path,
) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("manual", "a")
        with pytest.raises(RpcError) as unknown:
            await c.call("reset", "s")
        assert unknown.value.code == "not_found"
        await turns(c, "note alpha one", "note beta two")
        one = await c.call("compact", "s")
        again = await c.call("compact", "s")  # the pending one is answered, not a second started
        assert again["op_id"] == one["op_id"]
        with pytest.raises(RpcError) as bad:
            await c.call("reset", "s", note=7)
        assert bad.value.code == "invalid_arguments"
        await drive(kit, lambda: "context_compacted" in event_types(c))
        assert len(of_type(c, "context_compacted")) == 1
        with pytest.raises(RpcError) as nothing:
            await c.call("compact", "s")  # every ended turn is summarised already
        assert nothing.value.code == "invalid_transition"
        background = await c.call("turn", "note gamma", session_id="s", background=True)
        assert background["status"] == "in_progress"  # its steps wait for a wake-up: it steps
        with pytest.raises(RpcError) as busy:
            await c.call("reset", "s")
        assert busy.value.code == "invalid_transition"
        assert "running" in busy.value.message


async def test_a_secret_in_the_history_never_reaches_the_summary(data_dir: Path) -> None:
    secret = "hunter2-very-secret-value"
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("manual", "a")
        await turns(c, f"note the password: {secret} please", "note beta two")
        await c.call("compact", "s")
        await drive(kit, lambda: "context_compacted" in event_types(c))
        card = await c.call("context", "s")
        summary = card["ops"][0]["artifact"]["summary"]
        assert "[redacted]" in summary
        assert secret not in summary
        assert secret not in str(card)
        assert secret not in str(events(c))
    exported = admin.export_actor(data_dir, "manual", "a")
    assert secret not in str(exported["tables"]["roost_agent_context_ops"])
    assert secret not in str(exported["tables"]["roost_agent_contexts"])


async def test_the_history_and_the_artifacts_are_exported_and_deleted_with_the_agent(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("manual", "a")
        t1, t2 = await turns(c, "note alpha one", "note beta two")
        await c.call("compact", "s")
        await drive(kit, lambda: "context_compacted" in event_types(c))
    exported = admin.export_actor(data_dir, "manual", "a")
    (op,) = exported["tables"]["roost_agent_context_ops"]
    assert op["status"] == "done"
    assert orjson.loads(op["artifact"]) == {"summary": SUMMARY_1_2}
    (ctx,) = exported["tables"]["roost_agent_contexts"]
    assert ctx["summary"] == SUMMARY_1_2
    assert {t["turn_id"] for t in exported["tables"]["roost_agent_turns"]} == {t1, t2}  # nothing deleted
    admin.delete_actor(data_dir, "manual", "a")
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("manual", "a")
        card = await c.call("context", "s")
        assert card["ops"] == []
        assert card["context"]["summary"] is None


async def test_a_chat_agents_history_is_compacted_with_its_message_range(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatnotes", "a")
        for text in ("first question here", "second question here", "third question here"):
            await c.call("send", text, session_id="s")
        await drive(kit, lambda: "context_compacted" in event_types(c), step=0.01)
        (done,) = of_type(c, "context_compacted")
        op = done["payload"]["op"]
        page = await c.call("messages", session_id="s")
        ordinals = [m["ordinal"] for m in page["messages"]]
        assert op["range"]["message_range"] == [ordinals[0], ordinals[3]]  # two questions, two answers
        summary = op["artifact"]["summary"]
        assert summary.startswith("user: first question here\nassistant: You wrote 3 words:")
        assert "user: second question here" in summary
        assert "third question" not in summary
        assert len(page["messages"]) == 6  # the messages themselves are all kept


def test_the_budgets_come_from_roost_toml(tmp_path: Path) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text(
        '[agent.context]\nkeep_recent = 3\nsummary_prompt = "Sum it up."\n'
        "[agent.context.compact]\ntokens = 500\n[agent.context.reset]\nhops = 9\n"
    )
    loaded = load_config(cfg).context
    assert loaded.compact == Budget(tokens=500)
    assert loaded.reset == Budget(hops=9)
    assert (loaded.keep_recent, loaded.summary_prompt) == (3, "Sum it up.")
    cfg.write_text("[agent.context.compact]\nmesages = 5\n")
    with pytest.raises(ConfigError, match="mesages"):
        load_config(cfg)


async def test_a_run_open_during_a_reset_stays_visible_until_a_later_operation_summarises_it(
    data_dir: Path,
) -> None:
    Recording.seen.clear()
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("manual", "a")
        paused = await c.call("turn", "erase everything", session_id="s")  # the session's first run
        (asked,) = of_type(c, "approval_requested")
        t2, t3 = await turns(c, "note alpha one", "note beta two")
        await c.call("reset", "s")
        await drive(kit, lambda: "context_reset" in event_types(c))
        (done,) = of_type(c, "context_reset")
        assert done["payload"]["op"]["range"]["turn_ids"] == [t2, t3]
        assert done["payload"]["visible"]["carried_run_ids"] == [paused["run_id"]]
        await c.call("approve", asked["payload"]["approval_id"], "grant")  # it ends after the reset
        Recording.seen.clear()
        (t4,) = await turns(c, "note gamma")
        assert [t["input"] for t in Recording.seen[0].recent_turns] == ["erase everything"]  # not lost
        await c.call("compact", "s")
        await drive(kit, lambda: "context_compacted" in event_types(c))
        (compacted,) = of_type(c, "context_compacted")
        assert compacted["payload"]["op"]["range"]["turn_ids"] == [paused["turn_id"], t4]
        assert compacted["payload"]["visible"]["carried_run_ids"] == []
        assert "user: erase everything" in compacted["payload"]["op"]["artifact"]["summary"]


async def test_only_the_sessions_principal_compacts_resets_or_reads_its_context(data_dir: Path) -> None:
    alice, mallory = Principal("alice"), Principal("mallory")
    alice_ro = Principal("alice", claims={"read_only": True})
    async with ActorKit(KINDS, data_dir) as kit:
        a = kit.connect("manual", "p", principal=alice)
        m = kit.connect("manual", "p", principal=mallory)
        r = kit.connect("manual", "p", principal=alice_ro)
        await turns(a, "note alpha one", session="alice-s")
        for conn, method in [(m, "compact"), (m, "reset"), (m, "context"), (r, "compact"), (r, "reset")]:
            with pytest.raises(RpcError) as refused:
                await conn.call(method, "alice-s")
            assert refused.value.code == "policy_refused", (method, conn.conn.principal)
        assert (await r.call("context", "alice-s"))["ops"] == []  # reading is fine


async def test_the_operations_are_read_in_pages_newest_first(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("manual", "a")
        made = []
        for n in range(3):
            await turns(c, f"note number {n}")
            made.append((await c.call("compact", "s"))["op_id"])
            await drive(kit, lambda: len(of_type(c, "context_compacted")) == len(made))
        first = await c.call("context", "s", limit=2)
        assert [o["op_id"] for o in first["ops"]] == made[:0:-1]
        second = await c.call("context", "s", before=first["next_before"], limit=2)
        assert [o["op_id"] for o in second["ops"]] == made[:1]
        assert second["next_before"] is None
        with pytest.raises(RpcError) as bad:
            await c.call("context", "s", limit=0)
        assert bad.value.code == "invalid_arguments"


async def test_an_operation_is_a_workflow_and_one_of_an_earlier_release_moves_onto_the_core(
    data_dir: Path,
) -> None:
    """A compaction is a workflow of its agent (``roost.context``, the op's id). One left pending
    by an earlier release (no workflow, its ``agent_context`` wake-up due) gets its workflow when
    that wake-up fires, and completes."""
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("manual", "a")
        await turns(c, "note alpha one", "note beta two")

        async def as_before(actor: Any) -> str:
            rows = (
                actor.extension.connection()
                .execute("SELECT op_id FROM roost_agent_context_ops WHERE status = 'pending'")
                .fetchall()
            )
            ((op_id,),) = rows
            engine_of(actor).store.delete(op_id)  # an earlier release made no workflow
            await actor.schedule(0, "agent_context", {"op_id": op_id})
            return str(op_id)

        pending = await c.call("compact", "s")
        assert pending["status"] == "pending"

        def workflow_of(op_id: str) -> Any:
            async def read(actor: Any) -> Any:
                wf = engine_of(actor).store.get(op_id)
                return None if wf is None else (wf.name, str(wf.status))

            return kit.registry.run("manual", "a", read)

        assert await workflow_of(pending["op_id"]) == ("roost.context", "running")
        await drive(kit, lambda: len(of_type(c, "context_compacted")) == 1)
        assert await workflow_of(pending["op_id"]) == ("roost.context", "completed")
        await turns(c, "note gamma three")
        again = await c.call("compact", "s")
        op_id = await kit.registry.run("manual", "a", as_before)
        assert op_id == again["op_id"]
        assert await workflow_of(op_id) is None
        await drive(kit, lambda: len(of_type(c, "context_compacted")) == 2)
        assert await workflow_of(op_id) == ("roost.context", "completed")
