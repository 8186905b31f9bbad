"""The durable FIFO queue per actor (``roost.actors.queue``, ``roost.actors.queue_runs``; docs/design.md,
*Durable queue*), in process over real SQLite files.

Time moves only by ``FakeClock.advance``. Most tests run without the dispatcher (``scheduler=False``)
and drain the queue themselves with ``kit.fire_due`` (a ``Wake``, as the dispatcher would deliver), so
that which item ran when is the test's to decide; the restart tests keep the dispatcher on, because
draining without anyone asking is what they prove. Effects are counted from the actor's own table, and
the order items started in from a log the callback appends to. One actor name per test.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import pytest

from roost.actors import Actor, QueueItem, RetryPolicy, RpcError, callable, wakeup
from roost.actors.queue import KEPT_FINISHED, PRUNE_STEP
from roost.scheduler import FakeClock
from roost.testing import ActorKit, queue_rows, until
from roost.transport import admin

T0 = 1_800_000_000.0
#: Retries 1 s apart at most (full jitter of a 1 s cap): one advance of 2 s always reaches the next.
FAST = {"max_attempts": 3, "base": 1.0, "cap": 1.0}


class Worker(Actor):
    """Enqueues items on request; ``work`` writes its effect row, then fails as often as the test says
    (the failed attempt's row is rolled back with it), or hangs on an event the test holds."""

    kind = "qworker"
    initial_state = {"done": 0}
    migrations = ("CREATE TABLE effects (id INTEGER PRIMARY KEY, tag TEXT, item TEXT, attempt INTEGER)",)

    failures: ClassVar[dict[str, int]] = {}  # tag -> how many more attempts raise
    started: ClassVar[list[tuple[str, int]]] = []  # (tag, attempt), in the order attempts began
    hang: ClassVar[set[str]] = set()  # tags whose callback waits forever
    seen: ClassVar[list[dict[str, Any]]] = []  # what each callback was told of its item

    @callable
    async def add(self, tag: str, retry: dict[str, float] | None = None, timeout: float | None = None) -> str:
        policy = RetryPolicy(int(retry["max_attempts"]), retry["base"], retry["cap"]) if retry else None
        return await self.enqueue("work", {"tag": tag}, retry=policy, timeout=timeout)

    @callable
    async def add_many(self, tags: list[str]) -> list[str]:
        return [await self.enqueue("work", {"tag": t}, retry=RetryPolicy(**FAST)) for t in tags]  # type: ignore[arg-type]

    @callable
    async def add_then_fail(self, tag: str) -> None:
        await self.enqueue("work", {"tag": tag})
        raise RpcError("refused", "the turn fails after its enqueue")

    @callable
    async def add_raw(self, callback: str, payload: Any = None) -> str:
        return await self.enqueue(callback, payload)

    @callable
    async def cancel(self, item_id: str) -> bool:
        return await self.cancel_queued(item_id)

    @callable
    async def queue(self, include_finished: bool = False) -> list[dict[str, Any]]:
        return [i.to_json() for i in await self.list_queue(include_finished=include_finished)]

    @callable
    async def item(self, item_id: str) -> dict[str, Any] | None:
        found = await self.get_queued(item_id)
        return None if found is None else found.to_json()

    @callable
    async def dead(self) -> list[dict[str, Any]]:
        return [i.to_json() for i in await self.queue_dead_letters()]

    @callable
    async def effects(self) -> list[list[Any]]:
        return [list(r) for r in self.sql.execute("SELECT tag, item, attempt FROM effects ORDER BY id")]

    @wakeup
    async def work(self, payload: dict[str, str], item: QueueItem) -> None:
        tag = payload["tag"]
        Worker.started.append((tag, item.attempt))
        Worker.seen.append({"id": item.id, "attempt": item.attempt, "key": item.idempotency_key})
        self.sql.execute(
            "INSERT INTO effects (tag, item, attempt) VALUES (?, ?, ?)", (tag, item.id, item.attempt)
        )
        self.set_state({"done": self.state["done"] + 1})
        if tag.startswith("then-"):  # enqueues a follow-up from inside its own callback
            await self.enqueue("work", {"tag": tag.removeprefix("then-")})
        if tag in Worker.hang:
            await asyncio.Event().wait()
        left = Worker.failures.get(tag, 0)
        if left > 0:
            Worker.failures[tag] = left - 1
            raise RuntimeError(f"{tag} fails ({left} left)")

    @wakeup
    def plain(self) -> None:
        """A callback that takes nothing."""
        self.sql.execute("INSERT INTO effects (tag) VALUES ('plain')")

    @callable
    async def not_a_wakeup(self) -> None:
        """Not marked ``@wakeup``: refused as a queue callback."""


class Boom(BaseException):
    """Not an ``Exception``: the item's turn is rolled back as a whole, its attempt mark kept."""


class Aborting(Worker):
    kind = "qabort"

    @wakeup
    async def explode(self) -> None:
        self.sql.execute("INSERT INTO effects (tag) VALUES ('boom')")
        raise Boom


class SmallWorker(Worker):
    kind = "qsmall"
    queue_limit = 3
    queue_payload_bytes = 100


@pytest.fixture(autouse=True)
def _reset() -> None:
    Worker.failures.clear()
    Worker.started.clear()
    Worker.hang.clear()
    Worker.seen.clear()


def kit_for(tmp_path: Path, clock: FakeClock, *, scheduler: bool = False) -> ActorKit:
    return ActorKit([Worker, SmallWorker, Aborting], tmp_path, clock=clock, scheduler=scheduler)


def tags(effects: list[list[Any]]) -> list[str]:
    return [e[0] for e in effects]


# -- order -------------------------------------------------------------------------------------------------
async def test_items_run_in_fifo_order_each_in_its_own_turn(tmp_path: Path) -> None:
    """Five items enqueued in one turn run in the order enqueued, one turn each; after the drain the
    live queue is empty and every kept item is done, after one attempt."""
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        ids = await kit.call("qworker", "fifo", "add_many", ["a", "b", "c", "d", "e"])
        assert await kit.fire_due("qworker", "fifo") == 5
        assert tags(await kit.call("qworker", "fifo", "effects")) == ["a", "b", "c", "d", "e"]
        assert await kit.call("qworker", "fifo", "queue") == []
        kept = await kit.call("qworker", "fifo", "queue", True)
        assert [(i["id"], i["status"], i["attempts"]) for i in kept] == [(i, "done", 1) for i in ids]


async def test_item_n_plus_1_never_starts_before_item_n_finished(tmp_path: Path) -> None:
    """The head fails twice and waits for its retries; the item behind it does not start until the
    head has succeeded: the head blocks the queue."""
    clock = FakeClock(T0)
    Worker.failures["a"] = 2
    async with kit_for(tmp_path, clock) as kit:
        await kit.call("qworker", "block", "add_many", ["a", "b"])
        assert await kit.fire_due("qworker", "block") == 1  # a's first attempt; b waits behind it
        assert Worker.started == [("a", 1)]
        assert await kit.fire_due("qworker", "block") == 0  # a waits for its retry: nothing runs
        clock.advance(2)
        await kit.fire_due("qworker", "block")
        assert Worker.started == [("a", 1), ("a", 2)]
        clock.advance(2)
        await kit.fire_due("qworker", "block")
        assert Worker.started == [("a", 1), ("a", 2), ("a", 3), ("b", 1)]
        # the failed attempts' writes were rolled back: one effect each, from the attempt that passed
        assert await kit.call("qworker", "block", "effects") == [
            ["a", Worker.seen[2]["id"], 3],
            ["b", Worker.seen[3]["id"], 1],
        ]


async def test_an_item_enqueued_by_a_callback_goes_to_the_end(tmp_path: Path) -> None:
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        await kit.call("qworker", "chain", "add_many", ["then-z", "b"])
        await kit.fire_due("qworker", "chain")
        assert tags(await kit.call("qworker", "chain", "effects")) == ["then-z", "b", "z"]


# -- turns and commits -------------------------------------------------------------------------------------
async def test_enqueue_in_a_rolled_back_turn_enqueues_nothing(tmp_path: Path) -> None:
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        with pytest.raises(RpcError) as err:
            await kit.call("qworker", "rolled", "add_then_fail", "x")
        assert err.value.code == "refused"
        assert await kit.call("qworker", "rolled", "queue", True) == []
        assert await kit.fire_due("qworker", "rolled") == 0
        assert await kit.call("qworker", "rolled", "effects") == []


async def test_writes_of_an_item_commit_once_with_its_completion(tmp_path: Path) -> None:
    """An item whose callback writes and then fails twice leaves exactly one effect row and one state
    change, from its third attempt; its record says it took three attempts and what failed before."""
    clock = FakeClock(T0)
    Worker.failures["once"] = 2
    async with kit_for(tmp_path, clock) as kit:
        item_id = await kit.call("qworker", "once", "add", "once", FAST)
        for _ in range(3):
            await kit.fire_due("qworker", "once")
            clock.advance(2)
        assert await kit.call("qworker", "once", "effects") == [["once", item_id, 3]]
        assert (await kit.registry.snapshot("qworker", "once"))[0] == {"done": 1}
        item = await kit.call("qworker", "once", "item", item_id)
        assert (item["status"], item["attempts"]) == ("done", 3)
        assert item["last_error"] == "RuntimeError: once fails (1 left)"  # what the retry was about


async def test_a_callback_gets_its_item_with_attempt_and_idempotency_key(tmp_path: Path) -> None:
    """``item.idempotency_key`` is the item's id on every attempt (an outside system dedups a retry);
    ``item.attempt`` counts from 1."""
    clock = FakeClock(T0)
    Worker.failures["k"] = 1
    async with kit_for(tmp_path, clock) as kit:
        item_id = await kit.call("qworker", "keys", "add", "k", FAST)
        await kit.fire_due("qworker", "keys")
        clock.advance(2)
        await kit.fire_due("qworker", "keys")
        assert Worker.seen == [
            {"id": item_id, "attempt": 1, "key": item_id},
            {"id": item_id, "attempt": 2, "key": item_id},
        ]


async def test_a_callback_that_takes_nothing_is_called_with_nothing(tmp_path: Path) -> None:
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        await kit.call("qworker", "plain", "add_raw", "plain")
        await kit.fire_due("qworker", "plain")
        assert tags(await kit.call("qworker", "plain", "effects")) == ["plain"]


# -- failures ---------------------------------------------------------------------------------------------
async def test_a_failing_item_becomes_a_dead_letter_and_the_queue_moves_on(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    Worker.failures["bad"] = 99
    async with kit_for(tmp_path, clock) as kit:
        c = kit.connect("qworker", "dead")
        bad = await kit.call("qworker", "dead", "add", "bad", {"max_attempts": 2, "base": 1, "cap": 1})
        await kit.call("qworker", "dead", "add", "good")
        await kit.fire_due("qworker", "dead")
        clock.advance(2)
        await kit.fire_due("qworker", "dead")
        assert Worker.started == [("bad", 1), ("bad", 2), ("good", 1)]
        [letter] = await kit.call("qworker", "dead", "dead")
        assert (letter["id"], letter["status"], letter["attempts"]) == (bad, "dead", 2)
        assert letter["last_error"] == "RuntimeError: bad fails (98 left)"
        assert letter["payload"] == {"tag": "bad"}
        event = await c.wait_for(lambda f: f["type"] == "event" and f["event"]["type"] == "queue_dead")
        assert event["event"] == {
            "type": "queue_dead",
            "item_id": bad,
            "callback": "work",
            "attempts": 2,
            "error": "RuntimeError: bad fails (98 left)",
        }
        assert tags(await kit.call("qworker", "dead", "effects")) == ["good"]


async def test_an_attempt_past_its_timeout_is_rolled_back_and_retried(tmp_path: Path) -> None:
    """The attempt's timeout runs on the runtime's clock: advancing it past the timeout ends the hung
    callback, rolls its writes back and counts the attempt (error ``timeout``)."""
    clock = FakeClock(T0)
    Worker.hang.add("slow")
    async with kit_for(tmp_path, clock) as kit:
        item_id = await kit.call("qworker", "slow", "add", "slow", FAST, 5.0)
        wake = asyncio.ensure_future(kit.fire_due("qworker", "slow"))
        await until(lambda: Worker.started == [("slow", 1)])
        await clock.armed(1)
        clock.advance(5)
        await wake
        item = await kit.call("qworker", "slow", "item", item_id)
        assert (item["status"], item["attempts"], item["last_error"]) == ("pending", 1, "timeout")
        assert await kit.call("qworker", "slow", "effects") == []


async def test_an_attempt_its_turn_did_not_survive_counts_as_interrupted(tmp_path: Path) -> None:
    """An attempt whose whole turn is rolled back (as a killed process leaves it) is counted, since its
    mark was committed before the callback ran: it fails as ``interrupted``, and at ``max_attempts`` the
    item is dead and the queue moves on, instead of the same attempt running again and again."""
    clock = FakeClock(T0)
    async with kit_for(tmp_path, clock) as kit:
        boom = await kit.call("qabort", "boom", "add_raw", "explode")
        after = await kit.call("qabort", "boom", "add", "after")
        await kit.fire_due("qabort", "boom")  # default policy: retried after a backoff
        item = await kit.call("qabort", "boom", "item", boom)
        assert (item["status"], item["attempts"]) == ("pending", 1)
        assert item["last_error"].startswith("interrupted")
        for _ in range(5):
            clock.advance(300)
            await kit.fire_due("qabort", "boom")
        [letter] = await kit.call("qabort", "boom", "dead")
        assert (letter["id"], letter["attempts"]) == (boom, 5)
        assert [i["status"] for i in [await kit.call("qabort", "boom", "item", after)]] == ["done"]
        assert tags(await kit.call("qabort", "boom", "effects")) == ["after"]


# -- cancel ---------------------------------------------------------------------------------------------
async def test_cancel_a_pending_item(tmp_path: Path) -> None:
    """A pending item that is cancelled never runs; cancelling a head waiting for its retry unblocks
    the queue. Cancelling a finished or unknown item is False and changes nothing."""
    clock = FakeClock(T0)
    Worker.failures["a"] = 99
    async with kit_for(tmp_path, clock) as kit:
        a, b, c = await kit.call("qworker", "cancel", "add_many", ["a", "b", "c"])
        await kit.fire_due("qworker", "cancel")  # a fails once, waits for its retry
        assert await kit.call("qworker", "cancel", "cancel", b) is True
        assert await kit.call("qworker", "cancel", "cancel", a) is True  # the waiting head
        await kit.fire_due("qworker", "cancel")
        assert Worker.started == [("a", 1), ("c", 1)]
        assert await kit.call("qworker", "cancel", "cancel", c) is False  # done
        assert await kit.call("qworker", "cancel", "cancel", "q-nope") is False
        kept = await kit.call("qworker", "cancel", "queue", True)
        assert [(i["id"], i["status"]) for i in kept] == [(a, "cancelled"), (b, "cancelled"), (c, "done")]


# -- bounds and refusals --------------------------------------------------------------------------------
async def test_payload_over_the_limit_is_refused_with_payload_too_large(tmp_path: Path) -> None:
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        with pytest.raises(RpcError) as err:
            await kit.call("qsmall", "big", "add", "x" * 200)
        assert err.value.code == "payload_too_large"
        assert "over the queue's 100" in err.value.message
        assert await kit.call("qsmall", "big", "queue", True) == []


async def test_queue_over_its_limit_is_refused_with_queue_full(tmp_path: Path) -> None:
    """At ``queue_limit`` live items an enqueue is refused and adds nothing; once the queue drains,
    enqueues are taken again."""
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        await kit.call("qsmall", "full", "add_many", ["a", "b", "c"])
        with pytest.raises(RpcError) as err:
            await kit.call("qsmall", "full", "add", "d")
        assert err.value.code == "queue_full"
        assert len(await kit.call("qsmall", "full", "queue")) == 3
        await kit.fire_due("qsmall", "full")
        await kit.call("qsmall", "full", "add", "d")
        await kit.fire_due("qsmall", "full")
        assert tags(await kit.call("qsmall", "full", "effects")) == ["a", "b", "c", "d"]


async def test_enqueue_refuses_a_callback_that_is_not_a_wakeup(tmp_path: Path) -> None:
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        for name in ("not_a_wakeup", "_private", "missing"):
            with pytest.raises(RpcError) as err:
                await kit.call("qworker", "refuse", "add_raw", name)
            assert err.value.code == "handler_error"
        assert await kit.call("qworker", "refuse", "queue", True) == []


async def test_finished_items_kept_are_bounded(tmp_path: Path) -> None:
    """Done items are pruned to the newest ``KEPT_FINISHED`` (give or take the pruning's step)."""
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        for _ in range(13):
            await kit.call("qworker", "bound", "add_many", ["x"] * 100)
            while await kit.fire_due("qworker", "bound"):
                pass
        assert len(await kit.call("qworker", "bound", "effects")) == 1300
    kept = queue_rows(tmp_path, "qworker", "bound")  # every row the file keeps
    assert KEPT_FINISHED <= len(kept) <= KEPT_FINISHED + 100
    assert {r.status for r in kept} == {"done"}


async def test_finished_items_kept_are_bounded_whichever_items_finish(tmp_path: Path) -> None:
    """Pruning runs at any finish: with every second item cancelled and the others done, the done
    and cancelled rows stay within ``KEPT_FINISHED`` positions (plus the pruning's step) of the
    newest. Before, only a done item at a position that is a multiple of 100 pruned, so this kept
    all 1300."""
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        for _ in range(13):
            ids = await kit.call("qworker", "bound", "add_many", ["x"] * 100)
            for item_id in ids[1::2]:
                assert await kit.call("qworker", "bound", "cancel", item_id) is True
            while await kit.fire_due("qworker", "bound"):
                pass
        assert len(await kit.call("qworker", "bound", "effects")) == 650
    kept = queue_rows(tmp_path, "qworker", "bound")
    assert KEPT_FINISHED <= len(kept) <= KEPT_FINISHED + PRUNE_STEP
    assert {r.status for r in kept} == {"done", "cancelled"}


# -- restarts and the alarm --------------------------------------------------------------------------------
async def test_the_queue_drains_without_a_new_enqueue_after_a_restart(tmp_path: Path) -> None:
    """Cloudflare's flaw, absent: items left when the process stopped (the head waiting for its retry,
    two behind it) are run by a new process on the same data directory, by the actor's alarm alone:
    no call, no enqueue. The dispatcher is on; the test only moves the clock."""
    clock = FakeClock(T0)
    Worker.failures["a"] = 1
    async with kit_for(tmp_path, clock, scheduler=True) as kit:
        await kit.call("qworker", "restart", "add_many", ["a", "b", "c"])
        await until(lambda: Worker.started == [("a", 1)])
        await kit.settle()
    assert Worker.started == [("a", 1)]  # b and c wait behind a, whose retry is due later

    clock.advance(2)
    async with kit_for(tmp_path, clock, scheduler=True) as kit:
        await until(lambda: len(Worker.started) == 4, timeout=10)
        assert Worker.started == [("a", 1), ("a", 2), ("b", 1), ("c", 1)]
        assert tags(await kit.call("qworker", "restart", "effects")) == ["a", "b", "c"]


async def test_an_enqueue_wakes_the_actor_through_its_alarm(tmp_path: Path) -> None:
    """With the dispatcher on, an enqueued item runs without any test-driven wake."""
    async with kit_for(tmp_path, FakeClock(T0), scheduler=True) as kit:
        await kit.call("qworker", "alarm", "add", "a")
        await until(lambda: Worker.started == [("a", 1)])


# -- inspect ---------------------------------------------------------------------------------------------
async def test_inspect_shows_the_queue(tmp_path: Path) -> None:
    """``roost inspect`` (offline here) shows the queue: counts by status, the head, the live items and
    the finished ones with their attempts and errors."""
    clock = FakeClock(T0)
    Worker.failures["a"] = 1
    async with kit_for(tmp_path, clock) as kit:
        a, b = await kit.call("qworker", "seen", "add_many", ["a", "b"])
        done = await kit.call("qworker", "seen", "add_many", [])
        assert done == []
        await kit.fire_due("qworker", "seen")  # a failed once, waits
    report = admin.inspect_actor(tmp_path, "qworker", "seen")
    queue = report["queue"]
    assert queue["counts"] == {"pending": 2, "running": 0, "done": 0, "dead": 0, "cancelled": 0}
    assert queue["head"]["id"] == a
    assert [(i["id"], i["attempts"], i["last_error"]) for i in queue["live"]] == [
        (a, 1, "RuntimeError: a fails (1 left)"),
        (b, 0, None),
    ]
    assert queue["finished"] == []
    assert queue["live"][0]["enqueued_at"] == admin.iso_time(T0)
    assert report["schema_versions"]["queue"] == 2  # the table, then the partial index of finished rows
    exported = admin.export_actor(tmp_path, "qworker", "seen")["tables"]["roost_queue"]
    assert [(r["id"], r["payload"], r["retry_at"] is not None) for r in exported] == [
        (a, {"tag": "a"}, True),
        (b, {"tag": "b"}, False),
    ]


async def test_inspect_of_a_live_actor_shows_its_queue(tmp_path: Path) -> None:
    """``roost inspect --server`` reads the actor in one of its turns: the same queue report."""
    async with kit_for(tmp_path, FakeClock(T0)) as kit:
        [a] = await kit.call("qworker", "live", "add_many", ["a"])
        live = await admin.inspect_live(kit.registry, "qworker", "live")
        assert live["queue"]["counts"]["pending"] == 1
        assert live["queue"]["head"]["id"] == a
        await kit.fire_due("qworker", "live")
        live = await admin.inspect_live(kit.registry, "qworker", "live")
        assert live["queue"]["counts"]["done"] == 1
        assert [(i["id"], i["status"]) for i in live["queue"]["finished"]] == [(a, "done")]
