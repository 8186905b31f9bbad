"""Idempotency records bounded in bytes (roost.actors.callkeys): the sizes of an actor's records sum to
at most ``call_keys_bytes`` (4 MiB by default), the oldest pruned first in the recording transaction;
the running total agrees with the records (high, never low, while a replaced key's bytes wait to be
pruned past); an outcome larger than the whole budget is answered once
and never run again (``idempotency_result_unavailable``); a file from before the records were each
caller's own is migrated."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from roost.actors import KEYS_BYTES, Actor, IdempotencyResultUnavailable, RpcError, callable
from roost.actors.callkeys import KEY_WINDOW, caller_of, record_size
from roost.storage import ActorFile, actor_path
from roost.storage.migrations import FRAMEWORK_MIGRATIONS, apply_migrations, current_version
from tests.runtime_support import make_kit


class Big(Actor):
    """Returns results of the size asked for; ``fail`` raises an error with a message of that size."""

    kind = "big"
    initial_state = {"runs": 0}
    call_keys_bytes: ClassVar[int | None] = 10_000

    @callable
    async def make(self, size: int) -> str:
        self.set_state({"runs": self.state["runs"] + 1})
        return "x" * size

    @callable
    async def fail(self, size: int) -> None:
        raise RpcError("nope", "y" * size)


class Roomy(Big):
    """``Big`` with the default budget."""

    kind = "roomy"
    call_keys_bytes = None


async def make(kit: Any, kind: str, name: str, size: int, key: str) -> Any:
    result, _ = await kit.registry.call(kind, name, "make", [size], {}, idempotency_key=key)
    return result


def records(kit: Any, kind: str, name: str) -> tuple[list[str], int, int]:
    """The keys kept (oldest first), their sizes' sum, and the running total."""
    host = kit.registry.hosts[(kind, name)]
    keys = [k for (k,) in host.file.conn.execute("SELECT key FROM roost_call_keys ORDER BY id")]
    summed = int(host.file.conn.execute("SELECT coalesce(sum(size), 0) FROM roost_call_keys").fetchone()[0])
    return keys, summed, int(host.call_keys.total())


def runs(kit: Any, kind: str, name: str) -> int:
    runs_: int = kit.registry.hosts[(kind, name)].state["runs"]
    return runs_


async def test_the_records_of_an_actor_are_bounded_in_bytes_oldest_pruned_first(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Big)
    async with kit:
        for i in range(10):  # 10 records of ~3 KB against a 10,000-byte budget: the newest 3 fit
            assert await make(kit, "big", "b", 3_000, f"k{i}") == "x" * 3_000
        keys, summed, total = records(kit, "big", "b")
        assert keys == ["k7", "k8", "k9"]
        assert summed == total <= 10_000
        assert summed == 3 * record_size(caller_of(None, None), "k9", orjson.dumps("x" * 3_000).decode())
        assert await make(kit, "big", "b", 3_000, "k9") == "x" * 3_000
        assert runs(kit, "big", "b") == 10, "a kept key answers without running"
        await make(kit, "big", "b", 3_000, "k0")
        assert runs(kit, "big", "b") == 11, "a key pruned for bytes runs the call again"


async def test_the_records_of_a_kind_are_bounded_to_4_mib_by_default(tmp_path: Path) -> None:
    kit, _ = make_kit(tmp_path, Roomy)
    async with kit:
        for i in range(20):  # 20 results of 256 KiB: 5 MiB
            await make(kit, "roomy", "r", 256 * 1024, f"k{i}")
        keys, summed, total = records(kit, "roomy", "r")
    assert KEYS_BYTES == 4 * 1024 * 1024
    assert summed == total <= KEYS_BYTES
    assert keys == [f"k{i}" for i in range(5, 20)], "15 fit in 4 MiB with their overhead"


async def test_the_running_total_of_the_record_sizes_is_the_sum_of_the_records_kept(tmp_path: Path) -> None:
    kit, clock = make_kit(tmp_path, Big)
    Big.call_keys_kept = 4
    try:
        async with kit:
            for i in range(6):  # pruned by count
                await make(kit, "big", "t", 100 * i, f"c{i}")
            for i in range(3):  # errors
                with pytest.raises(RpcError):
                    await kit.registry.call("big", "t", "fail", [500], {}, idempotency_key=f"e{i}")
            keys, summed, total = records(kit, "big", "t")
            assert (keys, summed) == (["c5", "e0", "e1", "e2"], total)
            clock.advance(KEY_WINDOW)  # past the window: replaced under its key, the rest pruned by age
            await make(kit, "big", "t", 4_000, "e2")
            await make(kit, "big", "t", 4_000, "n1")
            await make(kit, "big", "t", 4_000, "n2")  # and by bytes: e2 goes
            keys, summed, total = records(kit, "big", "t")
            assert (keys, summed) == (["n1", "n2"], total)
    finally:
        Big.call_keys_kept = None


async def test_a_key_replaced_past_the_window_counts_high_until_the_records_before_it_are_pruned(
    tmp_path: Path,
) -> None:
    kit, clock = make_kit(tmp_path, Big)
    async with kit:
        for i in range(10):
            await make(kit, "big", "h", 10, f"k{i}")
        clock.advance(KEY_WINDOW)
        old = records(kit, "big", "h")[1] // 10
        await make(kit, "big", "h", 10, "k9")  # k9 runs again; 8 of the 9 before it are pruned by age
        keys, summed, total = records(kit, "big", "h")
        assert keys == ["k8", "k9"]
        assert total == summed + old, "the old k9 is still counted: high, never low"
        await make(kit, "big", "h", 10, "next")  # k8 is pruned: past the hole
        keys, summed, total = records(kit, "big", "h")
        assert (keys, total) == (["k9", "next"], summed)
        assert runs(kit, "big", "h") == 12


async def test_an_outcome_larger_than_the_whole_budget_is_answered_once_and_a_retry_is_refused(
    tmp_path: Path,
) -> None:
    kit, _ = make_kit(tmp_path, Big)
    async with kit:
        await make(kit, "big", "o", 3_000, "small")
        assert await make(kit, "big", "o", 20_000, "huge") == "x" * 20_000, "the first call gets it"
        for _ in range(2):
            with pytest.raises(IdempotencyResultUnavailable) as info:
                await make(kit, "big", "o", 20_000, "huge")
            assert info.value.code == "idempotency_result_unavailable"
            assert "ran once" in info.value.message
        assert runs(kit, "big", "o") == 2, "the retry never ran the call again"
        with pytest.raises(RpcError) as failed:
            await kit.registry.call("big", "o", "fail", [20_000], {}, idempotency_key="loud")
        assert failed.value.message == "y" * 20_000
        with pytest.raises(IdempotencyResultUnavailable):
            await kit.registry.call("big", "o", "fail", [20_000], {}, idempotency_key="loud")
        keys, summed, total = records(kit, "big", "o")
    assert keys == ["small", "huge", "loud"], "a record that says the call ran is small"
    assert summed == total <= 10_000


def test_a_file_from_before_keys_were_each_callers_own_is_migrated_and_its_records_dropped(
    tmp_path: Path,
) -> None:
    path = actor_path(tmp_path, "big", "m")
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    apply_migrations(conn, "roost", FRAMEWORK_MIGRATIONS[:3])
    conn.execute(
        "INSERT INTO roost_call_keys (key, fingerprint, ok, outcome, created_at) VALUES ('k', 'f', 1, '1', 0)"
    )
    conn.execute("COMMIT")
    conn.close()
    file = ActorFile.open(path, "big", "m")
    try:
        assert current_version(file.conn, "roost") == len(FRAMEWORK_MIGRATIONS) >= 4
        columns = [r[1] for r in file.conn.execute("PRAGMA table_info(roost_call_keys)")]
        assert columns[:3] == ["id", "caller", "key"]
        assert {"size", "upto"} <= set(columns)
        assert columns[-1] == "outcome", "the small columns come first: pruning never reads an outcome"
        assert file.conn.execute("SELECT count(*) FROM roost_call_keys").fetchone()[0] == 0
    finally:
        file.close()
