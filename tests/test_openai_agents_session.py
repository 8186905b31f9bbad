"""``roost.integrations.openai_agents``: the OpenAI Agents SDK's ``Session`` on a Roost actor, with the
SDK's real ``Runner`` and a scripted model (tests/openai_agents_support.py).

The session contract tests are ported from the SDK's repository (openai/openai-agents-python):
``tests/memory/test_session.py`` at commit 063581f55d08951b5684008ef12408261bd25377 and
``tests/memory/test_session_limit.py`` at commit 4ab9228b2b489b140bda1659914e713f2fa3cddd; each keeps
its upstream name (``sqlite_session`` read as ``session``) and runs against both sessions, ``RoostSession``
over a real ``roost serve roost.integrations.openai_agents:app`` process and ``LocalSession`` over an
``ActorKit``. Left out: the ``run_sync`` runner method (it drives an event loop of its own in a
thread; the session is the same either way), the tests of SQLiteSession's own machinery (closing its
worker threads' connections, the lock shared by instances on one file; a Roost session has neither),
``test_session_memory_with_explicit_instance_parametrized`` (for us the same test as the basic one),
``test_session_add_items_exception_propagates_in_streamed`` (it replaces ``add_items`` by a failing
function: a test of the Runner, not of a session) and ``test_session_settings_resolve`` (the SDK's
``SessionSettings`` alone). The threads of ``test_sqlite_session_concurrent_access`` are concurrent
tasks here. The other files of ``tests/memory/`` test other sessions (OpenAI's conversations and
compaction, files, encryption, trimming) and are not ported.

Then Roost's own guarantees (the module's docstring): durable across a SIGKILL between two
``Runner.run`` turns, one effect per call across a crash between commit and reply, the bounds, and
the SDK kept out of ``import roost``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import RunConfig, TResponseInputItem
from agents.memory import Session, SessionSettings

from roost.integrations.openai_agents import (
    LocalSession,
    RoostSession,
    SessionItems,
)
from roost.testing import ActorKit
from tests.openai_agents_support import RUNNER_METHODS, ScriptedModel, run
from tests.support import ServerProcess

APP = "roost.integrations.openai_agents:app"

MakeSession = Callable[..., Session]


@pytest.fixture(scope="module")
def roost_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One ``roost serve`` of the session kind for the module's tests (each uses its own session ids)."""
    server = ServerProcess(tmp_path_factory.mktemp("sessions") / "data", app=APP).start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(params=["roost", "local"])
async def make_session(
    request: pytest.FixtureRequest, data_dir: Path
) -> AsyncIterator[Callable[..., Session]]:
    """``make_session(session_id=None, session_settings=None)``: a new session of the parametrized sort,
    on a session id of its own unless one is given."""
    made: list[RoostSession] = []

    def fresh(session_id: str | None) -> str:
        return session_id or f"s-{uuid.uuid4().hex[:12]}"

    if request.param == "roost":
        server: ServerProcess = request.getfixturevalue("roost_server")

        def remote(session_id: str | None = None, session_settings: SessionSettings | None = None) -> Session:
            session = RoostSession(fresh(session_id), server.http, session_settings=session_settings)
            made.append(session)
            return session

        yield remote
        for session in made:
            await session.close()
    else:
        async with ActorKit([SessionItems], data_dir) as kit:

            def local(
                session_id: str | None = None, session_settings: SessionSettings | None = None
            ) -> Session:
                return LocalSession(fresh(session_id), kit.registry, session_settings=session_settings)

            yield local


def contents(items: list[TResponseInputItem]) -> list[Any]:
    return [item.get("content") for item in items]


# -- ported: tests/memory/test_session.py, the Runner with a session --------------------------------------


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
async def test_session_memory_basic_functionality_parametrized(
    runner_method: str, make_session: MakeSession
) -> None:
    session = make_session()
    model = ScriptedModel()
    model.script("San Francisco", "California")
    first = await run(runner_method, model, "What city is the Golden Gate Bridge in?", session=session)
    assert first.final_output == "San Francisco"
    second = await run(runner_method, model, "What state is it in?", session=session)
    assert second.final_output == "California"
    sent = model.last_input  # the whole conversation, then the new question
    assert len(sent) == 3
    assert sent[0]["content"] == "What city is the Golden Gate Bridge in?"  # type: ignore[typeddict-item]
    assert sent[-1]["content"] == "What state is it in?"  # type: ignore[typeddict-item]


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
async def test_session_memory_disabled_parametrized(runner_method: str) -> None:
    model = ScriptedModel()
    model.script("Hello", "I don't remember")
    await run(runner_method, model, "Hi there")
    await run(runner_method, model, "Do you remember what I said?")
    assert len(model.last_input) == 1  # without a session, only the new message


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
async def test_session_memory_different_sessions_parametrized(
    runner_method: str, make_session: MakeSession
) -> None:
    cats, dogs = make_session(), make_session()
    model = ScriptedModel()
    model.script("I like cats", "I like dogs", "Yes, you mentioned cats")
    await run(runner_method, model, "I like cats", session=cats)
    await run(runner_method, model, "I like dogs", session=dogs)
    result = await run(runner_method, model, "What did I say I like?", session=cats)
    assert result.final_output == "Yes, you mentioned cats"
    said = [item.get("content") for item in model.last_input if item.get("role") == "user"]
    assert said == ["I like cats", "What did I say I like?"]  # nothing of the other session


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
async def test_session_memory_appends_list_input_by_default(
    runner_method: str, make_session: MakeSession
) -> None:
    session = make_session()
    history: list[TResponseInputItem] = [
        {"role": "user", "content": "Earlier message"},
        {"role": "assistant", "content": "Saved reply"},
    ]
    await session.add_items(history)
    new: list[TResponseInputItem] = [{"role": "user", "content": "Test message"}]
    model = ScriptedModel()
    model.script("This should run")
    await run(runner_method, model, new, session=session)
    assert model.last_input == history + new


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
async def test_session_callback_prepared_input(runner_method: str, make_session: MakeSession) -> None:
    session = make_session()
    history: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi, I'm here to assist you."},
    ]
    await session.add_items(history)

    def users_only(
        stored: list[TResponseInputItem], new: list[TResponseInputItem]
    ) -> list[TResponseInputItem]:
        return [item for item in stored if item.get("role") == "user"] + new

    new: list[TResponseInputItem] = [{"role": "user", "content": "What your name?"}]
    model = ScriptedModel()
    model.script("I'm gpt-4o")
    config = RunConfig(session_input_callback=users_only)
    await run(runner_method, model, new, session=session, run_config=config)
    assert model.last_input == [history[0], new[0]]


async def test_runner_with_session_settings_override(make_session: MakeSession) -> None:
    session = make_session(session_settings=SessionSettings(limit=100))
    await session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)])
    model = ScriptedModel()
    model.script("Got it")
    config = RunConfig(session_settings=SessionSettings(limit=2))
    await run("run", model, "New question", session=session, run_config=config)
    assert contents(model.last_input) == ["Turn 8", "Turn 9", "New question"]


# -- ported: tests/memory/test_session.py, the session alone ----------------------------------------------


async def test_sqlite_session_memory_direct(make_session: MakeSession) -> None:
    session = make_session()
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
    ]
    await session.add_items(items)
    assert await session.get_items() == items
    await session.clear_session()
    assert await session.get_items() == []


async def test_sqlite_session_memory_pop_item(make_session: MakeSession) -> None:
    session = make_session()
    assert await session.pop_item() is None
    await session.add_items(
        [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
            {"role": "user", "content": "How are you?"},
        ]
    )
    assert len(await session.get_items()) == 3
    assert await session.pop_item() == {"role": "user", "content": "How are you?"}
    assert contents(await session.get_items()) == ["Hello", "Hi there!"]
    assert await session.pop_item() == {"role": "assistant", "content": "Hi there!"}
    assert await session.pop_item() == {"role": "user", "content": "Hello"}
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_session_memory_pop_different_sessions(make_session: MakeSession) -> None:
    one, two = make_session(), make_session()
    await one.add_items([{"role": "user", "content": "Session 1 message"}])
    await two.add_items(
        [
            {"role": "user", "content": "Session 2 message 1"},
            {"role": "user", "content": "Session 2 message 2"},
        ]
    )
    popped = await two.pop_item()
    assert popped is not None
    assert popped.get("content") == "Session 2 message 2"
    assert contents(await one.get_items()) == ["Session 1 message"]
    assert contents(await two.get_items()) == ["Session 2 message 1"]


async def test_sqlite_session_get_items_with_limit(make_session: MakeSession) -> None:
    session = make_session()
    said = [f"{who} {n}" for n in range(1, 4) for who in ("Message", "Response")]
    await session.add_items(
        [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i, text in enumerate(said)]
    )
    assert contents(await session.get_items()) == said
    assert contents(await session.get_items(limit=2)) == said[-2:]
    assert contents(await session.get_items(limit=4)) == said[-4:]
    assert contents(await session.get_items(limit=10)) == said  # more than there are: all
    assert await session.get_items(limit=0) == []


async def test_sqlite_session_unicode_content(make_session: MakeSession) -> None:
    session = make_session()
    said = ["こんにちは", "😊👍", "Привет"]
    await session.add_items([{"role": "user", "content": text} for text in said])
    assert contents(await session.get_items()) == said


async def test_sqlite_session_special_characters_and_sql_injection(make_session: MakeSession) -> None:
    session = make_session()
    said = [
        "O'Reilly",
        "DROP TABLE sessions;",
        '"SELECT * FROM users WHERE name = "admin";"',
        "Robert'); DROP TABLE students;--",
        "Normal message",
    ]
    await session.add_items([{"role": "user", "content": text} for text in said])
    assert contents(await session.get_items()) == said


async def test_sqlite_session_concurrent_access(make_session: MakeSession) -> None:
    session = make_session()
    await asyncio.gather(
        *(session.add_items([{"role": "user", "content": f"Message {i}"}]) for i in range(10))
    )
    assert sorted(contents(await session.get_items())) == sorted(f"Message {i}" for i in range(10))


async def test_session_settings_default(make_session: MakeSession) -> None:
    session = make_session()
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit is None


async def test_session_settings_constructor(make_session: MakeSession) -> None:
    session = make_session(session_settings=SessionSettings(limit=5))
    assert session.session_settings is not None
    assert session.session_settings.limit == 5


async def test_get_items_uses_session_settings_limit(make_session: MakeSession) -> None:
    session = make_session(session_settings=SessionSettings(limit=3))
    await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(5)])
    assert contents(await session.get_items()) == ["Message 2", "Message 3", "Message 4"]


async def test_get_items_explicit_limit_overrides_session_settings(make_session: MakeSession) -> None:
    session = make_session(session_settings=SessionSettings(limit=5))
    await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(10)])
    assert contents(await session.get_items(limit=2)) == ["Message 8", "Message 9"]


# -- ported: tests/memory/test_session_limit.py ------------------------------------------------------------


async def turns(method: str, model: ScriptedModel, session: Session, count: int) -> None:
    for n in range(1, count + 1):
        model.script(f"Reply {n}")
        await run(method, model, f"Message {n}", session=session)


def limited(limit: int | None) -> RunConfig:
    return RunConfig(session_settings=SessionSettings(limit=limit))


def reply_text(item: TResponseInputItem) -> str:
    content: Any = item.get("content")
    text: str = content[0]["text"]  # an assistant message's content is a list of parts
    return text


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
async def test_session_limit_parameter(runner_method: str, make_session: MakeSession) -> None:
    session, model = make_session(), ScriptedModel()
    await turns(runner_method, model, session, 3)
    assert len(await session.get_items()) == 6
    model.script("Reply 4")
    await run(runner_method, model, "Message 4", session=session, run_config=limited(2))
    sent = model.last_input
    assert len(sent) == 3
    assert sent[0].get("content") == "Message 3"
    assert reply_text(sent[1]) == "Reply 3"
    assert sent[2].get("content") == "Message 4"


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
async def test_session_limit_zero(runner_method: str, make_session: MakeSession) -> None:
    session, model = make_session(), ScriptedModel()
    await turns(runner_method, model, session, 2)
    model.script("Reply 3")
    await run(runner_method, model, "Message 3", session=session, run_config=limited(0))
    assert contents(model.last_input) == ["Message 3"]


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
async def test_session_limit_none_gets_all_history(runner_method: str, make_session: MakeSession) -> None:
    session, model = make_session(), ScriptedModel()
    await turns(runner_method, model, session, 5)
    assert len(await session.get_items()) == 10
    model.script("Reply 6")
    await run(runner_method, model, "Message 6", session=session, run_config=limited(None))
    assert len(model.last_input) == 11
    assert model.last_input[0].get("content") == "Message 1"
    assert model.last_input[-1].get("content") == "Message 6"


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
async def test_session_limit_larger_than_history(runner_method: str, make_session: MakeSession) -> None:
    session, model = make_session(), ScriptedModel()
    await turns(runner_method, model, session, 1)
    model.script("Reply 2")
    await run(runner_method, model, "Message 2", session=session, run_config=limited(100))
    sent = model.last_input
    assert len(sent) == 3
    assert sent[0].get("content") == "Message 1"
    assert reply_text(sent[1]) == "Reply 1"
    assert sent[2].get("content") == "Message 2"


async def test_session_limit_negative_returns_empty(make_session: MakeSession) -> None:
    session = make_session()
    await session.add_items([{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}])
    assert await session.get_items(limit=-1) == []
    assert await session.get_items(limit=0) == []
    assert len(await session.get_items(limit=1)) == 1
    assert len(await session.get_items()) == 2
