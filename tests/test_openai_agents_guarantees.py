"""The guarantees of ``roost.integrations.openai_agents`` (its docstring, numbered as there) beyond the
SDK's own session tests (tests/test_openai_agents_session.py): real ``roost serve`` processes killed
with SIGKILL, a TCP proxy that loses replies (tests/tcp_proxy.py), the bounds, and the SDK kept out
of ``import roost``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import TResponseInputItem
from agents.memory import Session

from roost.client import TerminalClose
from roost.integrations.openai_agents import (
    KIND,
    MAX_BATCH_BYTES,
    MAX_ITEM_BYTES,
    MAX_ITEMS,
    MAX_SESSION_BYTES,
    LocalSession,
    RoostSession,
    SessionItems,
    SessionLimitExceeded,
)
from roost.testing import ActorKit, until
from tests.integration_support import FAST, check_import_is_lazy, restarted, token_server
from tests.openai_agents_support import ScriptedModel, run
from tests.support import ServerProcess, directory_row, get_json
from tests.tcp_proxy import TcpProxy

APP = "roost.integrations.openai_agents:app"


def session_id() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


async def stored(server: ServerProcess, sid: str) -> dict[str, Any]:
    """The session actor's state over HTTP (``{}`` for an actor never created)."""
    got = await get_json(f"{server.http}/agents/{KIND}/{sid}")
    state: dict[str, Any] = got.get("state", {})
    return state


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server for the tests that leave it running (each uses its own session ids)."""
    process = ServerProcess(tmp_path_factory.mktemp("shared") / "data", app=APP).start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def server(data_dir: Path) -> Iterator[ServerProcess]:
    """A server of the test's own, to kill."""
    process = ServerProcess(data_dir, app=APP).start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
async def kit(data_dir: Path) -> AsyncIterator[ActorKit]:
    async with ActorKit([SessionItems], data_dir) as kit:
        yield kit


# -- 1. The Session contract -------------------------------------------------------------------------------


async def test_the_session_contract_both_sessions_are_the_sdks_session_protocol(kit: ActorKit) -> None:
    assert isinstance(RoostSession(session_id()), Session)
    assert isinstance(LocalSession(session_id(), kit.registry), Session)


async def test_the_session_contract_a_session_never_written_is_empty(
    shared: ServerProcess, kit: ActorKit
) -> None:
    async with RoostSession(session_id(), shared.http, backoff=FAST) as session:
        assert await session.get_items() == []
        assert await session.pop_item() is None
    local = LocalSession(session_id(), kit.registry)
    assert await local.get_items(limit=3) == []
    assert not kit.registry.exists(KIND, local.session_id), "a read in process creates nothing"


async def test_the_session_contract_a_ws_url_and_an_http_url_reach_one_session(shared: ServerProcess) -> None:
    sid = session_id()
    async with RoostSession(sid, f"ws://{shared.addr}/", backoff=FAST) as by_ws:
        await by_ws.add_items([{"role": "user", "content": "over ws"}])
    async with RoostSession(sid, f"http://{shared.addr}", backoff=FAST) as by_http:
        assert await by_http.get_items() == [{"role": "user", "content": "over ws"}]


# -- 2. Durable --------------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_durable_two_runner_turns_with_a_sigkill_between_keep_the_conversation(
    server: ServerProcess,
) -> None:
    sid = session_id()
    model = ScriptedModel()
    model.script("San Francisco", "California")
    async with RoostSession(sid, server.http, backoff=FAST) as session:
        first = await run("run", model, "What city is the Golden Gate Bridge in?", session=session)
        assert first.final_output == "San Francisco"
        server.kill()  # SIGKILL: no shutdown code runs
        again = restarted(server)
        try:
            second = await run("run", model, "What state is it in?", session=session)
            assert second.final_output == "California"
        finally:
            again.kill()
    sent = model.last_input  # the first turn's question and answer, then the new question
    assert [item.get("role") for item in sent] == ["user", "assistant", "user"]
    assert sent[0].get("content") == "What city is the Golden Gate Bridge in?"
    assert sent[1]["content"][0]["text"] == "San Francisco"  # type: ignore[typeddict-item,index]
    assert sent[2].get("content") == "What state is it in?"


# -- 3. One effect per call --------------------------------------------------------------------------------


@pytest.mark.slow
async def test_one_effect_per_call_add_items_resent_after_a_sigkill_between_commit_and_reply_adds_once(
    server: ServerProcess,
) -> None:
    sid = session_id()
    proxy = await TcpProxy(server.addr).start()
    try:
        async with RoostSession(sid, f"ws://{proxy.addr}", backoff=FAST, timeout=60) as session:
            await session.add_items([{"role": "user", "content": "first"}])
            proxy.mute()  # the reply to the next add_items is lost on the way
            adding = asyncio.create_task(session.add_items([{"role": "assistant", "content": "second"}]))

            async def committed() -> bool:
                return (await stored(server, sid)).get("items") == 2

            await until(committed, message="the add_items committed")
            assert not adding.done(), "its reply never arrived"
            server.kill()  # between the commit and a reply the client got
            proxy.mute(False)
            again = restarted(server)
            try:
                await adding  # sent again with its key: answered with the recorded outcome
                assert await session.get_items() == [
                    {"role": "user", "content": "first"},
                    {"role": "assistant", "content": "second"},
                ], "added once"
                assert (await stored(again, sid))["items"] == 2
            finally:
                again.kill()
    finally:
        await proxy.close()


# -- 4. Bounded --------------------------------------------------------------------------------------------


def padded(size: int) -> TResponseInputItem:
    """A user message whose JSON is ``size`` bytes."""
    bare = len('{"role":"user","content":""}')
    return {"role": "user", "content": "x" * (size - bare)}


@pytest.fixture(params=["roost", "local"])
async def session(
    request: pytest.FixtureRequest, kit: ActorKit
) -> AsyncIterator[RoostSession | LocalSession]:
    if request.param == "local":
        yield LocalSession(session_id(), kit.registry)
        return
    shared: ServerProcess = request.getfixturevalue("shared")
    async with RoostSession(session_id(), shared.http, backoff=FAST) as remote:
        yield remote


async def test_bounded_an_item_over_max_item_bytes_is_refused_and_nothing_is_added(
    session: RoostSession | LocalSession,
) -> None:
    await session.add_items([padded(MAX_ITEM_BYTES)])  # at the bound: taken
    with pytest.raises(SessionLimitExceeded, match="item 1 is") as refused:
        await session.add_items([{"role": "user", "content": "kept out"}, padded(MAX_ITEM_BYTES + 1)])
    assert refused.value.code == "item_too_large"
    assert len(await session.get_items()) == 1


async def test_bounded_an_add_items_over_max_batch_bytes_is_refused_and_nothing_is_added(
    session: RoostSession | LocalSession,
) -> None:
    per = MAX_BATCH_BYTES // 4
    await session.add_items([padded(per)] * 4)  # at the bound: taken
    with pytest.raises(SessionLimitExceeded) as refused:
        await session.add_items([padded(per)] * 4 + [padded(16)])
    assert refused.value.code == "batch_too_large"
    assert len(await session.get_items()) == 4


async def test_bounded_a_session_holds_at_most_max_items_items(session: RoostSession | LocalSession) -> None:
    tiny: TResponseInputItem = {"role": "user", "content": ""}
    await session.add_items([tiny] * MAX_ITEMS)
    with pytest.raises(SessionLimitExceeded, match="at most") as refused:
        await session.add_items([tiny])
    assert refused.value.code == "session_full"
    await session.pop_item()  # room for one again
    await session.add_items([tiny])
    assert len(await session.get_items()) == MAX_ITEMS


async def test_bounded_a_trimming_session_drops_its_oldest_items_to_take_new_ones(
    session: RoostSession | LocalSession,
) -> None:
    """With ``trim``, a full session keeps taking items: the oldest go, in the same turn, until the
    new ones fit — by count and by bytes; nothing is refused and the order is kept."""
    session.trim = True
    items: list[TResponseInputItem] = [{"role": "user", "content": str(n)} for n in range(MAX_ITEMS)]
    await session.add_items(items)
    await session.add_items([{"role": "user", "content": "new"}] * 3)
    held = await session.get_items()
    assert len(held) == MAX_ITEMS
    assert [h["content"] for h in held[:2]] == ["3", "4"]  # type: ignore[typeddict-item]
    assert held[-1]["content"] == "new"  # type: ignore[typeddict-item]
    await session.clear_session()
    per = MAX_SESSION_BYTES // 8
    for n in range(4):
        pair = [padded(per - 12) | {"id": f"{n}{half}"} for half in "ab"]  # ',"id":"0a"' is 10 bytes
        await session.add_items(pair)  # type: ignore[arg-type]
    await session.add_items([padded(32)])  # 8 items of per - 2 bytes: 16 bytes over with these 32
    held = await session.get_items()
    assert [h.get("id") for h in held[:2]] == ["0b", "1a"]  # only the oldest went
    assert len(held) == 8


async def test_bounded_a_session_holds_at_most_max_session_bytes(
    session: RoostSession | LocalSession,
) -> None:
    per = MAX_SESSION_BYTES // 8
    for _ in range(4):
        await session.add_items([padded(per)] * 2)  # 8 items: at the bound
    with pytest.raises(SessionLimitExceeded) as refused:
        await session.add_items([padded(32)])
    assert refused.value.code == "session_full"
    assert len(await session.get_items()) == 8  # the whole session in one reply


async def test_bounded_the_actor_refuses_past_a_bound_whoever_calls_it(shared: ServerProcess) -> None:
    """Not only the session's own check: a plain HTTP call past a bound is refused by the actor."""
    url = f"{shared.http}/agents/{KIND}/{session_id()}/rpc/add_items"
    async with httpx.AsyncClient() as http:
        big = await http.post(url, json=[[padded(MAX_ITEM_BYTES + 1)]])
        assert big.json()["error"]["code"] == "item_too_large"
        bad = await http.post(url, json=[["not an item"]])
        assert bad.json()["error"]["code"] == "invalid_arguments"
        ok = await http.post(url, json=[[{"role": "user", "content": "still serving"}]])
        assert ok.json() == {"ok": True, "result": 1}


# -- 5. Sessions are apart ---------------------------------------------------------------------------------


async def test_sessions_are_apart_each_session_id_is_its_own_actor_file(
    kit: ActorKit, data_dir: Path
) -> None:
    one, two = LocalSession(session_id(), kit.registry), LocalSession(session_id(), kit.registry)
    await one.add_items([{"role": "user", "content": "one"}])
    await two.add_items([{"role": "user", "content": "two"}])
    await two.clear_session()
    assert await one.get_items() == [{"role": "user", "content": "one"}]
    assert await two.get_items() == []
    rows = [directory_row(data_dir, KIND, s.session_id) for s in (one, two)]
    assert all(rows)
    assert rows[0] != rows[1]


# -- access and packaging ----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_token_is_presented_on_every_connection_and_none_is_refused(data_dir: Path) -> None:
    with token_server(data_dir, APP) as (server, token):
        sid = session_id()
        async with RoostSession(sid, server.http, token=token, backoff=FAST) as session:
            await session.add_items([{"role": "user", "content": "hello"}])
            assert len(await session.get_items()) == 1
        async with RoostSession(sid, server.http, backoff=FAST) as anonymous:
            with pytest.raises(TerminalClose) as refused:
                await anonymous.get_items()
            assert refused.value.code == 4401
        assert token not in "".join(server.log)


def test_import_roost_does_not_import_the_sdk() -> None:
    check_import_is_lazy("openai_agents", "agents")
