"""Kinds with workflows, for ``tests/test_workflows*.py`` and ``tests/workflow_app.py``.

``Shop`` keeps its in-turn effects in its own table (``effects``: one row per effect), so a test
counts them; its outside step appends a line to a file (the path in the workflow's input) naming the
idempotency key it was given, so a test counts those too.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from roost.actors import RetryPolicy, callable
from roost.storage import Migration
from roost.workflows import NonRetryable, Step, StepAttempt, StepFailed, Workflows, workflow

__all__ = ["Relay", "Shop"]


class Shop(Workflows):
    kind = "shop"
    initial_state = {"orders": 0}
    migrations: ClassVar[Sequence[Migration]] = (
        "CREATE TABLE effects (id INTEGER PRIMARY KEY, step TEXT NOT NULL, note TEXT)",
    )
    workflow_lease = 0.5

    #: Failures the next attempts of ``flaky`` raise (set by a test in process).
    flaky_failures = 0

    def effect(self, step: str, note: str | None = None) -> int:
        self.sql.execute("INSERT INTO effects (step, note) VALUES (?, ?)", (step, note))
        count: int = self.sql.scalar("SELECT count(*) FROM effects WHERE step = ?", (step,))
        return count

    @callable(readonly=True)
    async def effects(self) -> dict[str, int]:
        rows = self.sql.execute("SELECT step, count(*) FROM effects GROUP BY step")
        return {str(r[0]): int(r[1]) for r in rows}

    @callable
    async def start_then_fail(self, spec: dict[str, Any]) -> None:
        """Start an ``order`` workflow (it spawns its outside step) and then fail the turn."""
        await self.start_workflow("order", spec, "doomed")
        raise RuntimeError("the turn that started it fails")

    # -- workflows ------------------------------------------------------------------------------
    @workflow
    async def chain(self, step: Step, n: int) -> int:
        """``n`` in-turn steps, each one write."""
        total = 0
        for i in range(n):
            total += await step.do(f"write-{i}", partial(self.effect, f"write-{i}"))
        return total

    @workflow
    async def order(self, step: Step, spec: dict[str, Any]) -> dict[str, Any]:
        """reserve (in turn) → charge (outside, appends to ``spec['ledger']``) → ship (in turn)."""
        await step.do("reserve", lambda: self.effect("reserve"))
        receipt = await step.external(
            "charge",
            lambda a: _charge(Path(spec["ledger"]), a, spec.get("hold"), int(spec.get("fail", 0))),
            timeout=spec.get("timeout"),
            retry=RetryPolicy(max_attempts=int(spec.get("attempts", 5)), base=1.0, cap=8.0),
        )
        await step.do("ship", lambda: self.effect("ship", receipt["key"]))
        return {"receipt": receipt}

    @workflow
    async def nap(self, step: Step, spec: dict[str, Any]) -> str:
        await step.do("before", lambda: self.effect("before"))
        await step.sleep("nap", float(spec["seconds"]))
        await step.do("after", lambda: self.effect("after"))
        return "rested"

    @workflow
    async def paid(self, step: Step, spec: dict[str, Any]) -> Any:
        await step.do("invoice", lambda: self.effect("invoice"))
        try:
            payment = await step.wait_for_event("payment", timeout=spec.get("timeout"))
        except TimeoutError:
            await step.do("expire", lambda: self.effect("expire"))
            return "expired"
        await step.do("settle", lambda: self.effect("settle"))
        return payment

    @workflow
    async def gated(self, step: Step, spec: dict[str, Any]) -> dict[str, Any]:
        decision = await step.approval(
            "manager", timeout=spec.get("timeout"), approvers=spec.get("approvers")
        )
        if decision.approved:
            await step.do("release", lambda: self.effect("release"))
        return {"approved": decision.approved, "by": decision.by, "note": decision.note}

    @workflow
    async def keyed(self, step: Step, _: Any) -> dict[str, Any]:
        """Each in-turn step's ``step.idempotency_key``, read inside it (the second fails once); what
        reading it outside a step says."""
        try:
            outside = step.idempotency_key
        except RuntimeError as exc:
            outside = str(exc)

        def again() -> str:
            key = step.idempotency_key
            if Shop.flaky_failures > 0:
                Shop.flaky_failures -= 1
                raise RuntimeError("not yet")
            return key

        first = await step.do("first", lambda: step.idempotency_key)
        second = await step.do("second", again, retry=RetryPolicy(max_attempts=2, base=1.0, cap=1.0))
        return {"outside": outside, "first": first, "second": second}

    @workflow
    async def flaky(self, step: Step, spec: dict[str, Any]) -> int:
        policy = RetryPolicy(max_attempts=int(spec["attempts"]), base=1.0, cap=8.0)

        def attempt() -> int:
            self.effect("flaky-attempt")  # rolled back when the attempt raises
            if Shop.flaky_failures > 0:
                Shop.flaky_failures -= 1
                raise RuntimeError("not yet")
            return self.effect("flaky")

        try:
            return int(await step.do("flaky", attempt, retry=policy))
        except StepFailed:
            await step.do("gave-up", lambda: self.effect("gave-up"))
            return -1

    @workflow
    async def stall(self, step: Step, spec: dict[str, Any]) -> str:
        """a (in turn) → a short sleep → b (in turn: writes, then on its first run creates
        ``spec['marker']`` and hangs inside the turn, so a test kills the server mid-step) → c."""
        await step.do("a", lambda: self.effect("a"))
        await step.sleep("gap", float(spec.get("gap", 0.2)))

        async def b() -> int:
            count = self.effect("b")
            try:
                fd = os.open(spec["marker"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return count
            os.close(fd)
            await asyncio.Event().wait()
            return count

        await step.do("b", b)
        await step.do("c", lambda: self.effect("c"))
        return "done"

    @workflow
    async def fatal(self, step: Step, _: Any) -> str:
        def boom() -> None:
            raise NonRetryable("card declined")

        await step.do("charge", boom)
        return "unreachable"

    @workflow
    async def slow(self, step: Step, spec: dict[str, Any]) -> str:
        async def forever() -> None:
            await asyncio.Event().wait()

        try:
            await step.do("hang", forever, timeout=float(spec["timeout"]), retry=RetryPolicy(max_attempts=1))
        except StepFailed as exc:
            return exc.error
        return "finished"

    @workflow
    async def shifty(self, step: Step, spec: dict[str, Any]) -> str:
        """Names its first step otherwise when ``Shop.shift`` is set: a nondeterministic body."""
        first = "first-b" if Shop.shift else "first"
        await step.do(first, lambda: self.effect(first))
        if Shop.shrink:
            return "short"
        await step.sleep("pause", 10)
        await step.do("second", lambda: self.effect("second"))
        return "done"

    shift = False
    shrink = False

    @workflow
    async def parallel(self, step: Step, _: Any) -> Any:
        """Two steps awaited at once: not allowed (steps run one at a time)."""

        async def slow() -> int:
            await asyncio.sleep(0)
            return 1

        return await asyncio.gather(step.do("one", slow), step.do("two", slow))

    @workflow
    async def bulky(self, step: Step, size: int) -> int:
        for i in range(3):
            await step.do(f"bulk-{i}", partial(str.__mul__, "x", size))
        return size

    @workflow
    async def big(self, step: Step, size: int) -> str:
        try:
            await step.do("huge", lambda: "x" * size)
        except StepFailed as exc:
            return exc.error
        return "kept"

    @workflow
    async def batch(self, step: Step, spec: dict[str, Any]) -> dict[str, Any]:
        """One outside step that processes ``spec['items']`` items, a line each in ``spec['ledger']``,
        saving a checkpoint after each; its first run stops for ever after ``spec['hold_at']``."""
        return dict(await step.external("items", lambda a: _items(Path(spec["ledger"]), a, spec)))


async def _items(ledger: Path, attempt: StepAttempt, spec: dict[str, Any]) -> dict[str, Any]:
    items, start = int(spec["items"]), int(attempt.checkpoint or 0)
    for i in range(start, items):
        with ledger.open("a") as f:
            f.write(f"item={i + 1} run={attempt.run} pid={os.getpid()}\n")
        await attempt.progress(i + 1, items, f"item {i + 1}", checkpoint=i + 1)
        if attempt.run == 1 and i + 1 == spec.get("hold_at"):
            await asyncio.Event().wait()
    return {"started_from": start, "run": attempt.run}


def _charge(ledger: Path, attempt: StepAttempt, hold: bool | None, fail: int) -> Any:
    """The outside effect: a line with the attempt's key appended to ``ledger``; then, with ``hold``,
    the first run of the first attempt never ends (a test kills the server, or its lease is lost); the
    first ``fail`` attempts raise."""

    async def go() -> dict[str, Any]:
        with ledger.open("a") as f:
            f.write(f"{attempt.idempotency_key} run={attempt.run} pid={os.getpid()}\n")
        if hold and attempt.run == 1 and attempt.attempt == 1:
            await asyncio.Event().wait()
        if attempt.attempt <= fail:
            raise ConnectionError("the payment service is down")
        return {"key": attempt.idempotency_key, "run": attempt.run}

    return go()


class Relay(Workflows):
    """Sends events to a ``shop`` from its own turns (actor to actor)."""

    kind = "relay"

    @callable
    async def forward(self, shop: str, workflow_id: str, name: str, payload: Any) -> Any:
        return await self.actor("shop", shop).call("send_event", workflow_id, name, payload)
