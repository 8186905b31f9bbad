"""The chat agent: a durable, paged, bounded history; answers streamed; the message-concurrency
policies; tool calls through the catalog and approvals; cancellation (roost/agent/chat.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from roost.actors import RpcError
from roost.agent import AgentConfig, ChatAgent, ChatMessage, ToolContext, tool
from roost.testing import ActorKit, KitConnection
from roost.transport import admin
from tests.agent_support import drive, events

CHAT = AgentConfig(
    heartbeat_interval=0.5,
    lease_ttl=2.0,
    job_backoff=0.5,
    stream_batch_count=2,
    stream_batch_interval=0.05,
    stream_pace=0.01,
)


class Chat(ChatAgent):
    kind = "chatq"
    config = CHAT


class Latest(Chat):
    kind = "chatl"
    message_concurrency = "latest"


class Merge(Chat):
    kind = "chatm"
    message_concurrency = "merge"
    asked: ClassVar[list[str]] = []

    async def on_chat_message(self, message: ChatMessage) -> str:
        type(self).asked.append(message.content)
        return message.content


class Drop(Chat):
    kind = "chatd"
    message_concurrency = "drop"


class Small(Chat):
    kind = "chats"
    max_persisted_messages = 4


class Path_(BaseModel):
    path: str = "notes.txt"


@tool(approval_mode="mutating", keywords=("delete",))
async def delete_file(ctx: ToolContext, args: Path_) -> dict[str, Any]:
    """Delete a file of the project."""
    return {"summary": f"deleted {args.path}"}


class Tools(Chat):
    kind = "chatt"
    tools = (delete_file,)


KINDS = [Chat, Latest, Merge, Drop, Small, Tools]


def types(conn: KitConnection) -> list[str]:
    return [e["event_type"] for e in events(conn)]


def ended_count(conn: KitConnection) -> int:
    return sum(t in ("turn_completed", "turn_failed", "turn_cancelled") for t in types(conn))


async def history(conn: KitConnection, **kw: Any) -> list[dict[str, Any]]:
    page = await conn.call("messages", **kw)
    messages: list[dict[str, Any]] = page["messages"]
    return messages


async def test_send_streams_an_answer_and_the_history_keeps_both_messages(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatq", "a")
        reply = await c.call("send", "hello roost")
        assert reply["status"] == "streaming"
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
        deltas = [e["payload"] for e in events(c) if e["event_type"] == "model_delta"]
        assert len(deltas) > 1
        streamed = "".join(d["text"] for d in deltas)
        user, answer = await history(c)
        assert (user["role"], user["content"], user["status"]) == ("user", "hello roost", "answered")
        assert answer["message_id"] == reply["message_id"]
        assert answer["status"] == "completed"
        assert answer["content"] == streamed
        assert "hello roost" in streamed


async def test_queue_answers_each_message_in_turn_without_overlap(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatq", "a")
        first = await c.call("send", "first message")
        second = await c.call("send", "second message")
        assert second["status"] == "queued"
        await drive(kit, lambda: ended_count(c) == 2, step=0.01)
        evs = events(c)
        first_end = next(i for i, e in enumerate(evs) if e["event_type"] == "turn_completed")
        second_run = next(m["run_id"] for m in await history(c) if m["message_id"] == second["message_id"])
        second_deltas = [
            i for i, e in enumerate(evs) if e["event_type"] == "model_delta" and e["run_id"] == second_run
        ]
        assert second_deltas
        assert min(second_deltas) > first_end  # the second answer began after the first ended
        answers = [m for m in await history(c) if m["role"] == "assistant"]
        assert [a["message_id"] for a in answers] == [first["message_id"], second["message_id"]]
        assert [a["status"] for a in answers] == ["completed", "completed"]
        assert "second message" in answers[1]["content"]


async def test_latest_cancels_the_running_answer_and_keeps_its_text(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatl", "a")
        first = await c.call("send", "a long question that takes a while to answer word by word")
        await drive(kit, lambda: "model_delta" in types(c), step=0.01)
        second = await c.call("send", "never mind, this instead")
        assert second["status"] == "streaming"
        await drive(kit, lambda: ended_count(c) == 2, step=0.01)
        by_id = {m["message_id"]: m for m in await history(c)}
        assert by_id[first["message_id"]]["status"] == "cancelled"
        assert by_id[first["message_id"]]["content"]  # what had streamed stays
        assert by_id[second["message_id"]]["status"] == "completed"
        assert "turn_cancelled" in types(c)


async def test_merge_answers_every_message_that_arrived_meanwhile_in_one_run(data_dir: Path) -> None:
    Merge.asked.clear()
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatm", "a")
        await c.call("send", "one")
        await c.call("send", "two")
        third = await c.call("send", "three")
        await drive(kit, lambda: ended_count(c) == 2, step=0.01)
        assert Merge.asked == ["one", "two\nthree"]
        answers = [m for m in await history(c) if m["role"] == "assistant"]
        assert [a["status"] for a in answers] == ["completed", "merged", "completed"]
        assert answers[2]["message_id"] == third["message_id"]
        assert answers[1]["run_id"] == answers[2]["run_id"]


async def test_drop_refuses_to_answer_while_an_answer_streams(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatd", "a")
        await c.call("send", "one")
        dropped = await c.call("send", "two")
        assert dropped["status"] == "dropped"
        assert dropped["run_id"] is None
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
        for _ in range(10):
            await drive(kit, lambda: True, step=0.05)
        assert types(c).count("turn_started") == 1
        statuses = [(m["role"], m["status"]) for m in await history(c)]
        assert statuses == [
            ("user", "answered"),
            ("assistant", "completed"),
            ("user", "dropped"),
            ("assistant", "dropped"),
        ]


async def test_the_history_is_read_in_pages(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatd", "a")  # drop: three sends, one answer
        for text in ("one", "two", "three"):
            await c.call("send", text)
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
        page = await c.call("messages", limit=4)
        assert len(page["messages"]) == 4
        older = await c.call("messages", limit=4, before=page["next_before"])
        assert len(older["messages"]) == 2
        assert older["next_before"] is None
        ordinals = [m["ordinal"] for m in older["messages"] + page["messages"]]
        assert ordinals == sorted(ordinals)
        assert len(set(ordinals)) == 6
        with pytest.raises(RpcError):
            await c.call("messages", limit=0)


async def test_past_max_persisted_messages_the_oldest_are_deleted(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chats", "a")
        for n, text in enumerate(("one", "two", "three"), start=1):
            await c.call("send", text)
            await drive(kit, lambda n=n: ended_count(c) == n, step=0.01)  # type: ignore[misc]
        kept = await history(c, limit=50)
        assert [(m["role"], m["status"]) for m in kept] == [
            ("user", "answered"),
            ("assistant", "completed"),
        ] * 2
        assert [m["content"] for m in kept if m["role"] == "user"] == ["two", "three"]


async def test_two_tabs_on_one_chat_see_the_same_stream(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        a = kit.connect("chatq", "shared")
        b = kit.connect("chatq", "shared")
        await a.call("send", "both of you, listen")
        await drive(kit, lambda: ended_count(a) == 1 and ended_count(b) == 1, step=0.01)

        def stream(conn: KitConnection) -> list[tuple[int, str]]:
            return [
                (e["payload"]["offset"], e["payload"]["text"])
                for e in events(conn)
                if e["event_type"] == "model_delta"
            ]

        assert stream(a) == stream(b)
        assert stream(a)


async def test_cancel_mid_stream_ends_the_answer_cancelled(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatq", "a")
        reply = await c.call("send", "tell me a long story about actors and their files please")
        await drive(kit, lambda: "model_delta" in types(c), step=0.01)
        await c.call("cancel", reply["turn_id"])
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
        (_, answer) = await history(c)
        assert answer["status"] == "cancelled"


async def test_a_chat_tool_call_goes_through_approvals(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatt", "a")
        reply = await c.call("send", "please delete the notes")
        await drive(kit, lambda: "approval_requested" in types(c), step=0.01)
        approval = next(e for e in events(c) if e["event_type"] == "approval_requested")
        await c.call("approve", approval["payload"]["approval_id"], "grant")
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
        answer = next(m for m in await history(c) if m["message_id"] == reply["message_id"])
        assert answer["status"] == "completed"
        assert "deleted notes.txt" in answer["content"]


async def test_send_refuses_an_empty_message(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatq", "a")
        with pytest.raises(RpcError):
            await c.call("send", "   ")
        assert await history(c) == []


async def test_a_secret_in_a_message_is_redacted_in_the_history_and_the_answer(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatq", "a")
        await c.call("send", "my token is ghp_abcdefghijklmnopqrstuvwxyz0123456789 keep it")
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
        messages = await history(c)
        assert all("ghp_" not in m["content"] for m in messages)
        assert "[redacted]" in messages[0]["content"]
        assert all("ghp_" not in str(e) for e in events(c))


async def test_the_history_is_exported_and_deleted_with_the_agent(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatq", "gone")
        await c.call("send", "remember this")
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
    exported = admin.export_actor(data_dir, "chatq", "gone")
    rows = exported["tables"]["roost_agent_chat_messages"]
    assert [r["content"] for r in rows if r["role"] == "user"] == ["remember this"]
    admin.delete_actor(data_dir, "chatq", "gone")
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatq", "gone")
        assert await history(c) == []


async def test_a_denied_approval_ends_the_answer_and_the_next_message_is_answered(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatt", "a")
        first = await c.call("send", "please delete the notes")
        await drive(kit, lambda: "approval_requested" in types(c), step=0.01)
        second = await c.call("send", "something else then")
        assert second["status"] == "queued"
        approval = next(e for e in events(c) if e["event_type"] == "approval_requested")
        await c.call("approve", approval["payload"]["approval_id"], "deny")
        await drive(kit, lambda: types(c).count("turn_completed") == 1, step=0.01)
        by_id = {m["message_id"]: m for m in await history(c)}
        assert by_id[first["message_id"]]["status"] == "failed"
        assert by_id[first["message_id"]]["content"].startswith("failed: ")  # why, not an empty answer
        assert "denied" in by_id[first["message_id"]]["content"]
        assert by_id[second["message_id"]]["status"] == "completed"


class Picky(Chat):
    kind = "chatp"

    async def on_chat_message(self, message: ChatMessage) -> str:
        if "bad" in message.content:
            raise ValueError("the hook refused it")
        return message.content


async def test_a_hook_that_fails_for_a_queued_message_fails_that_answer_only(data_dir: Path) -> None:
    async with ActorKit([Picky], data_dir) as kit:
        c = kit.connect("chatp", "a")
        first = await c.call("send", "first question")
        bad = await c.call("send", "bad one")
        third = await c.call("send", "third")
        await drive(kit, lambda: types(c).count("turn_completed") == 2, step=0.01)
        by_id = {m["message_id"]: m for m in await history(c)}
        assert by_id[first["message_id"]]["status"] == "completed"
        assert by_id[bad["message_id"]]["status"] == "failed"
        assert "the hook refused it" in by_id[bad["message_id"]]["content"]
        assert by_id[third["message_id"]]["status"] == "completed"


async def test_a_long_answer_is_stored_whole(data_dir: Path) -> None:
    long = " ".join(f"word{i}" for i in range(600))  # the answer echoes it: over the blob threshold
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatq", "a")
        reply = await c.call("send", long[:3990])
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
        answer = next(m for m in await history(c) if m["message_id"] == reply["message_id"])
        streamed = "".join(e["payload"]["text"] for e in events(c) if e["event_type"] == "model_delta")
        assert len(answer["content"]) > 4000
        assert answer["content"] == streamed


async def test_stop_cancels_a_queued_answer_before_it_starts_and_a_streaming_one(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatq", "a")
        first = await c.call("send", "a question that takes a while to answer word by word")
        queued = await c.call("send", "never mind this one")
        assert (await c.call("stop", queued["message_id"]))["status"] == "cancelled"
        await drive(kit, lambda: "model_delta" in types(c), step=0.01)
        await c.call("stop", first["message_id"])
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
        for _ in range(10):
            await drive(kit, lambda: True, step=0.05)
        assert types(c).count("turn_started") == 1  # the queued answer never started
        statuses = {m["message_id"]: m["status"] for m in await history(c)}
        assert statuses[first["message_id"]] == "cancelled"
        assert statuses[queued["message_id"]] == "cancelled"
        with pytest.raises(RpcError):
            await c.call("stop", first["message_id"])


async def test_pruning_never_deletes_an_open_answer_or_its_message(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chats", "a")  # keeps 4 messages
        for text in ("one", "two", "three"):
            await c.call("send", text)  # the first streams, two wait
        kept = await history(c)
        assert [m["content"] for m in kept if m["role"] == "user"] == ["one", "two", "three"]
        await drive(kit, lambda: ended_count(c) == 3, step=0.01)
        assert [m["status"] for m in await history(c) if m["role"] == "assistant"][-1] == "completed"


async def test_merged_messages_are_answered(data_dir: Path) -> None:
    async with ActorKit(KINDS, data_dir) as kit:
        c = kit.connect("chatm", "a")
        for text in ("one", "two", "three"):
            await c.call("send", text)
        await drive(kit, lambda: ended_count(c) == 2, step=0.01)
        assert {m["status"] for m in await history(c) if m["role"] == "user"} == {"answered"}


class Lookup(BaseModel):
    city: str


@tool(keywords=("weather",))
async def forecast(ctx: ToolContext, args: Lookup) -> str:
    """Tomorrow's weather."""
    return f"sunny in {args.city}"


class Weather(Chat):
    kind = "chatw"
    tools = (forecast,)


async def test_the_deterministic_model_says_how_to_give_a_tools_arguments(data_dir: Path) -> None:
    async with ActorKit([Weather], data_dir) as kit:
        c = kit.connect("chatw", "a")
        plain = await c.call("send", "what's the weather in Paris?")
        await drive(kit, lambda: ended_count(c) == 1, step=0.01)
        given = await c.call("send", 'the weather {"city": "Paris"}')
        await drive(kit, lambda: ended_count(c) == 2, step=0.01)
        by_id = {m["message_id"]: m for m in await history(c)}
        assert by_id[plain["message_id"]]["status"] == "completed"  # an answer, not a failed run
        assert "as a JSON object after its name or keyword" in by_id[plain["message_id"]]["content"]
        assert "sunny in Paris" in by_id[given["message_id"]]["content"]
