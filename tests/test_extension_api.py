"""The extension API (``roost.actors.extension``) keeps the promises its docstring makes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from roost.actors import Actor, callable
from roost.actors.extension import Process
from roost.scheduler import FakeClock
from roost.storage import Migration
from roost.testing import ActorKit


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


class Stoppable:
    made: ClassVar[list[Stoppable]] = []

    def __init__(self, process: Process) -> None:
        self.process = process
        self.stopped = False
        type(self).made.append(self)

    async def stop(self) -> None:
        self.stopped = True


class UsesService(Actor):
    kind = "user"

    @callable
    async def touch(self) -> int:
        service = self.extension.process.service("test.stoppable", Stoppable)
        return id(service)


async def test_the_turns_time_is_one_reading_of_the_clock_that_a_fake_clock_moves(tmp_path: Path) -> None:
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


async def test_a_service_is_created_once_per_process_and_stopped_with_the_registry(tmp_path: Path) -> None:
    Stoppable.made.clear()
    async with ActorKit([UsesService], tmp_path / "data") as kit:
        ids = {await kit.call("user", name, "touch") for name in ("a", "b", "c")}
        assert len(ids) == 1
        (service,) = Stoppable.made
        assert service.process.data_dir == tmp_path / "data"
        assert not service.stopped
    assert service.stopped
