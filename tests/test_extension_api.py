"""The extension API (``roost.actors.extension``): what a runtime layered on actors may use."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from roost.actors import Actor, callable
from roost.actors.errors import NotInTurn
from roost.actors.extension import Process, TurnContext
from roost.scheduler import FakeClock
from roost.storage import Migration
from roost.testing import ActorKit


class _Timed(Actor):
    kind = "ext_timed"
    clock: ClassVar[FakeClock]

    @callable
    async def readings(self) -> list[float]:
        first = self.extension.now
        self.clock.advance(5.0)  # time moves while the turn runs
        return [first, self.extension.now, self.extension.process.clock.now()]


async def test_the_turns_time_is_one_reading_taken_when_the_turn_began(tmp_path: Path) -> None:
    clock = FakeClock()
    _Timed.clock = clock
    async with ActorKit([_Timed], tmp_path, clock=clock) as kit:
        start = clock.now()
        first, again, moved = await kit.call("ext_timed", "t1", "readings")
        assert first == again == start
        assert moved == start + 5.0
        nxt, _, _ = await kit.call("ext_timed", "t1", "readings")
        assert nxt == start + 5.0  # the next turn reads the clock anew


class _Worker:
    made: ClassVar[int] = 0

    def __init__(self, process: Process) -> None:
        type(self).made += 1
        self.process = process
        self.live_at_stop: int | None = None
        self.registry_hosts: Any = None

    async def stop(self) -> None:
        self.live_at_stop = len(self.registry_hosts)


class _UsesService(Actor):
    kind = "ext_service"

    @callable
    async def worker_id(self) -> int:
        ctx: TurnContext = self.extension
        return id(ctx.process.service("worker", _Worker))


async def test_a_service_is_created_once_per_process_and_stopped_before_its_actors_drain(
    tmp_path: Path,
) -> None:
    _Worker.made = 0
    async with ActorKit([_UsesService], tmp_path) as kit:
        ids = {await kit.call("ext_service", name, "worker_id") for name in ("a", "b", "c")}
        assert len(ids) == 1
        assert _Worker.made == 1
        worker = kit.registry.process.service("worker", _Worker)
        assert id(worker) in ids
        assert worker.process is kit.registry.process
        worker.registry_hosts = kit.registry.hosts
    assert worker.live_at_stop == 3  # the actors were still live when the service stopped


class Ledger(Actor):
    """A kind with a component of its own, as a layer on top declares one."""

    kind = "ledger"
    components: ClassVar[Sequence[tuple[str, Sequence[Migration]]]] = (
        ("ledger", ("CREATE TABLE roost_ledger (n INTEGER, at REAL, trace TEXT)",)),
    )

    @callable
    async def record(self, times: int) -> list[Any]:
        ext = self.extension
        db = ext.connection()
        for n in range(times):
            db.execute("INSERT INTO roost_ledger VALUES (?, ?, ?)", (n, ext.now, ext.trace_id))
        return [list(row) for row in db.execute("SELECT n, at, trace FROM roost_ledger ORDER BY rowid")]


async def test_a_turns_records_share_one_reading_and_one_trace_id_in_the_layers_own_table(
    tmp_path: Path,
) -> None:
    clock = FakeClock(start=1_000.0)
    async with ActorKit([Ledger], tmp_path / "data", clock=clock) as kit:
        first = await kit.call("ledger", "l1", "record", 3)
        clock.advance(5.0)
        second = await kit.call("ledger", "l1", "record", 1)
    assert len({at for _, at, _ in first}) == 1  # every record of one turn carries the same time ...
    traces = {trace for _, _, trace in first}
    assert len(traces) == 1  # ... and the same trace id
    assert first[0][1] == 1_000.0
    assert second[-1][1] == 1_005.0  # the fake clock moved the next turn's reading
    assert second[-1][2] not in traces  # a new turn, a new trace id


class _Checkpointer(Actor):
    kind = "ext_checkpoint"
    kept: ClassVar[list[Actor]] = []

    @callable
    async def keep(self) -> int:
        type(self).kept.append(self)
        self.set_state({"n": 1})
        self.extension.checkpoint()  # in a turn: commits what the turn did so far
        self.set_state({"n": 2})
        return 2


async def test_checkpoint_is_for_turns_only_and_outside_one_changes_nothing(tmp_path: Path) -> None:
    async with ActorKit([_Checkpointer], tmp_path) as kit:
        assert await kit.call("ext_checkpoint", "c", "keep") == 2
        await kit.settle()
        (actor,) = _Checkpointer.kept
        host = kit.registry.hosts[("ext_checkpoint", "c")]
        assert host.idle
        with pytest.raises(NotInTurn):
            actor.extension.checkpoint()
        with pytest.raises(NotInTurn):
            actor.extension.connection()
        assert host.idle  # no transaction was opened: the actor can still go dormant
        assert not host.file.in_transaction


class _Parts(Actor):
    kind = "ext_parts"
    initial_state = {"n": 0}
    migrations = ("CREATE TABLE rows (v TEXT NOT NULL)",)

    @callable
    async def partly(self) -> list[str]:
        self.sql.execute("INSERT INTO rows VALUES ('kept')")
        part = self.extension.savepoint("part")
        self.sql.execute("INSERT INTO rows VALUES ('undone')")
        self.set_state({"n": 99})
        self.emit({"undone": True})
        part.rollback()
        self.set_state({"n": self.state["n"] + 1})
        return [str(r[0]) for r in self.sql.execute("SELECT v FROM rows")]

    @callable(readonly=True)
    async def rows(self) -> list[str]:
        return [str(r[0]) for r in self.sql.execute("SELECT v FROM rows")]


async def test_a_savepoint_undoes_a_part_of_a_turn_alone(tmp_path: Path) -> None:
    async with ActorKit([_Parts], tmp_path) as kit:
        c = kit.connect("ext_parts", "p1")
        assert await c.call("partly") == ["kept"]
        state = await c.wait_for(lambda f: f["type"] == "state")
        assert state["state"] == {"n": 1}  # the state as of the rollback, then the turn's own change
        assert not [f for f in c.frames if f["type"] == "event"]  # the undone event never went out
        assert await kit.call("ext_parts", "p1", "rows") == ["kept"]
        with pytest.raises(NotInTurn):
            kit.registry.hosts[("ext_parts", "p1")].actor.extension.savepoint("outside")
