"""Idempotency keys of calls (roost.actors.callkeys): one effect per key, the original outcome again,
keys each caller's own, ``idempotency_conflict`` for another call under a key, and the retention
(count and age) on a fake clock. The bound in bytes is in tests/test_call_key_bounds.py, the crash
between commit and reply in tests/test_call_keys_crash.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from roost.actors import ANONYMOUS, Actor, IdempotencyConflict, Principal, RpcError, callable
from roost.actors.callkeys import KEY_WINDOW
from roost.testing import connect, until
from roost.transport.codec import ProtocolError, parse_client_frame
from tests.runtime_support import make_dormant, make_kit


class Tally(Actor):
    """Counts its effects; ``refuse`` fails on purpose and ``crash`` by a bug, counting attempts."""

    kind = "tally"
    initial_state = {"total": 0}
    call_keys_kept = 3
    attempts: ClassVar[int] = 0
    gate: ClassVar[asyncio.Event]

    @callable
    async def add(self, n: int) -> int:
        self.set_state({"total": self.state["total"] + n})
        total: int = self.state["total"]
        return total

    @callable
    async def refuse(self) -> None:
        type(self).attempts += 1
        self.set_state({"total": self.state["total"] + 1000})  # rolled back with the turn
        raise RpcError("no_way", f"refused, attempt {type(self).attempts}")

    @callable
    async def add_when_open(self, n: int) -> int:
        await self.gate.wait()
        return await self.add(n)

    @callable(readonly=True)
    async def total(self) -> int:
        type(self).attempts += 1
        total: int = self.state["total"]
        return total

    @callable
    async def count(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            yield i


async def keyed(kit: Any, name: str, method: str, *args: Any, key: str, who: Principal | None = None) -> Any:
    result, _ = await kit.registry.call(
        "tally", name, method, list(args), {}, idempotency_key=key, principal=who
    )
    return result


async def test_a_call_sent_twice_under_one_key_runs_once_and_answers_the_same_result_over_http(
    server: str,
) -> None:
    url = f"http://{server}/agents/counter/http-key/rpc/increment"
    async with httpx.AsyncClient() as http:
        first = await http.post(url, json=[5], headers={"Idempotency-Key": "order-17"})
        again = await http.post(url, json=[5], headers={"Idempotency-Key": "order-17"})
        assert (first.status_code, first.json()) == (200, {"ok": True, "result": 5})
        assert (again.status_code, again.content) == (200, first.content)
        other = await http.post(url, json=[5], headers={"Idempotency-Key": "order-18"})
        assert other.json() == {"ok": True, "result": 10}, "another key is another call"
        state = (await http.get(f"http://{server}/agents/counter/http-key")).json()["state"]
    assert state == {"count": 10}


async def test_another_call_under_a_recorded_key_is_an_idempotency_conflict_and_changes_nothing(
    server: str,
) -> None:
    base = f"http://{server}/agents/counter/conflict"
    async with httpx.AsyncClient() as http:
        await http.post(f"{base}/rpc/increment", json=[5], headers={"Idempotency-Key": "k"})
        r = await http.post(f"{base}/rpc/increment", json=[6], headers={"Idempotency-Key": "k"})
        assert (r.status_code, r.json()["error"]["code"]) == (409, "idempotency_conflict")
        r = await http.post(f"{base}/rpc/increment", json=[1], headers={"Idempotency-Key": "x" * 129})
        assert (r.status_code, r.json()["error"]["code"]) == (400, "bad_frame")
        state = (await http.get(base)).json()["state"]
    assert state == {"count": 5}


async def test_an_rpc_frame_with_an_idempotency_key_runs_once_over_websocket(server: str) -> None:
    async with connect(f"ws://{server}/agents/counter/ws-key?subscribe=none") as ws:
        await ws.recv()  # welcome
        frame = {"type": "rpc", "method": "increment", "args": [2], "idempotency_key": "once"}
        replies = []
        for call_id in ("a", "b"):
            await ws.send({**frame, "id": call_id})
            replies.append(await ws.recv())
        assert [(r["id"], r["ok"], r["result"]) for r in replies] == [("a", True, 2), ("b", True, 2)]
        await ws.send({**frame, "id": "c", "args": [3]})
        conflict = await ws.recv()
        assert (conflict["ok"], conflict["error"]["code"]) == (False, "idempotency_conflict")
        assert (await ws.rpc("get"))["result"] == 2


def test_an_idempotency_key_is_a_string_of_1_to_128_characters() -> None:
    base = '{"type":"rpc","id":"1","method":"m","idempotency_key":%s}'
    assert parse_client_frame(base % '"k"').idempotency_key == "k"  # type: ignore[union-attr]
    assert parse_client_frame(base % "null").idempotency_key is None  # type: ignore[union-attr]
    assert parse_client_frame(base % f'"{"k" * 128}"').idempotency_key == "k" * 128  # type: ignore[union-attr]
    for bad in ('""', f'"{"k" * 129}"', "7", "[]", "{}"):
        with pytest.raises(ProtocolError) as info:
            parse_client_frame(base % bad)
        assert info.value.code == "bad_frame"


async def test_a_key_recorded_with_an_error_answers_the_same_error_without_running_again(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Tally)
    Tally.attempts = 0
    async with kit:
        with pytest.raises(RpcError) as first:
            await keyed(kit, "e", "refuse", key="r1")
        with pytest.raises(RpcError) as again:
            await keyed(kit, "e", "refuse", key="r1")
        assert (again.value.code, again.value.message) == ("no_way", "refused, attempt 1")
        assert (first.value.code, first.value.message) == (again.value.code, again.value.message)
        assert Tally.attempts == 1
        assert await kit.call("tally", "e", "total") == 0, "the failed turn was rolled back"


async def test_a_retry_that_arrives_while_the_first_call_runs_waits_for_it_and_gets_its_result(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Tally)
    Tally.gate = asyncio.Event()
    async with kit:
        first = asyncio.create_task(keyed(kit, "w", "add_when_open", 3, key="slow"))
        hosts = kit.registry.hosts
        await until(lambda: ("tally", "w") in hosts and hosts[("tally", "w")].in_turn, message="running")
        retry = asyncio.create_task(keyed(kit, "w", "add_when_open", 3, key="slow"))
        await until(lambda: hosts[("tally", "w")].queued == 1, message="the retry waits in the mailbox")
        assert not first.done()
        assert not retry.done()
        Tally.gate.set()
        assert await first == 3
        assert await retry == 3
        assert await kit.call("tally", "w", "total") == 3, "one effect"


async def test_call_keys_survive_the_actor_going_dormant(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Tally)
    async with kit:
        assert await keyed(kit, "d", "add", 4, key="dormant") == 4
        await make_dormant(kit, clock, "tally", "d")
        assert await keyed(kit, "d", "add", 4, key="dormant") == 4
        assert await kit.call("tally", "d", "total") == 4


async def test_call_keys_are_kept_for_the_newest_count_and_at_most_the_key_window(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Tally)
    async with kit:
        for i in (1, 2, 3, 4):  # Tally keeps 3: k1 goes when k4 is recorded
            assert await keyed(kit, "r", "add", 1, key=f"k{i}") == i
        assert await keyed(kit, "r", "add", 1, key="k2") == 2, "k2 is still kept"
        assert await keyed(kit, "r", "add", 1, key="k1") == 5, "k1 was pruned: the call runs again"
        host = kit.registry.hosts[("tally", "r")]
        keys = [k for (k,) in host.file.conn.execute("SELECT key FROM roost_call_keys ORDER BY id")]
        assert keys == ["k3", "k4", "k1"]
        clock.advance(KEY_WINDOW - 1)
        assert await keyed(kit, "r", "add", 1, key="k4") == 4, "within the window"
        clock.advance(1)
        assert await keyed(kit, "r", "add", 1, key="k4") == 6, "past the window: runs again"
        assert await keyed(kit, "r", "add", 1, key="k4") == 6
        keys = [k for (k,) in host.file.conn.execute("SELECT key FROM roost_call_keys ORDER BY id")]
        assert keys == ["k4"], "the records past the window were pruned with the new one"


async def test_a_key_on_a_read_only_call_is_ignored_and_on_a_streaming_call_refused(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Tally)
    Tally.attempts = 0
    async with kit:
        await kit.registry.call("tally", "ro", "add", [0], {})  # a read-only call creates no actor
        assert await keyed(kit, "ro", "total", key="t") == 0
        assert await keyed(kit, "ro", "total", key="t") == 0
        assert Tally.attempts == 2, "a read-only call runs each time"
        with pytest.raises(RpcError) as info:
            await keyed(kit, "ro", "count", 3, key="s")
        assert info.value.code == "invalid_arguments"
        host = kit.registry.hosts[("tally", "ro")]
        assert host.file.conn.execute("SELECT count(*) FROM roost_call_keys").fetchone()[0] == 0


async def test_keys_are_each_callers_own_two_principals_use_one_key_independently(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Tally)
    alice, bob = Principal("alice"), Principal("bob")
    async with kit:
        assert await keyed(kit, "p", "add", 1, key="order-17", who=bob) == 1, "bob uses the key first"
        assert await keyed(kit, "p", "add", 10, key="order-17", who=alice) == 11, "no conflict for alice"
        assert await keyed(kit, "p", "add", 10, key="order-17", who=alice) == 11, "alice's own record"
        assert await keyed(kit, "p", "add", 1, key="order-17", who=bob) == 1, "bob's own record"
        with pytest.raises(IdempotencyConflict):
            await keyed(kit, "p", "add", 2, key="order-17", who=bob)
        assert await kit.call("tally", "p", "total") == 11


async def test_one_principal_id_in_two_tenants_is_two_callers(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Tally)
    async with kit:
        t1, t2 = Principal("alice", tenant="t1"), Principal("alice", tenant="t2")
        assert await keyed(kit, "t", "add", 5, key="k", who=t1) == 5
        assert await keyed(kit, "t", "add", 5, key="k", who=t2) == 10, "t2's alice runs her own call"
        assert await keyed(kit, "t", "add", 5, key="k", who=Principal("alice")) == 15, "no tenant is a third"
        assert await keyed(kit, "t", "add", 5, key="k", who=t1) == 5


async def test_anonymous_callers_are_one_principal(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Tally)
    async with kit:
        assert await keyed(kit, "a", "add", 3, key="shared", who=ANONYMOUS) == 3
        other = Principal("anonymous")  # another anonymous client, of another address
        assert await keyed(kit, "a", "add", 3, key="shared", who=other) == 3, "the same record answers"
        assert await kit.call("tally", "a", "total") == 3
