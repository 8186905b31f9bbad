"""``Step``: what a workflow body calls, and the replay of one advance.

Each step call takes the next position. A recorded outcome is returned (or its failure raised again)
without running anything: that is the replay. The first position without an outcome runs, or records
that it waits and raises :class:`~roost.workflows.model.Suspend`, which ends the advance.

Guarantees (tests in ``tests/test_workflows.py`` and ``tests/test_workflows_external.py``):

- **A recorded step never runs again**: its stored result is returned, the same JSON, on every replay.
- **An in-turn step's writes commit with its record, or not at all**: ``do`` runs its function under
  a savepoint; a failed attempt is rolled back (SQL, state, events) before its failure is recorded.
- **A divergent replay fails the workflow**: another name or kind at a recorded position, or a body
  that returns before its recorded steps, fails it with reason ``nondeterministic``.
- **Steps run one at a time**: a step called while another of the workflow is running raises.
- **An outside attempt's key is stable**: every run of one attempt gets ``f"{step_id}:{attempt}"``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import orjson

from roost.actors import Actor, RetryPolicy, RpcError
from roost.workflows.fanout import BranchEngine, BranchFn, check_branches, fail_join, start_branch
from roost.workflows.model import (
    STEPS_PER_TURN,
    Approval,
    EventTimeout,
    NonRetryable,
    StepAttempt,
    StepFailed,
    StepKind,
    StepStatus,
    Suspend,
    clean_error,
    error_text,
    short,
)
from roost.workflows.runner import Outcome, RunKey, fenced, reporter, runner
from roost.workflows.store import StepRow, WorkflowRow, WorkflowStore, encode
from roost.workflows.wakes import schedule_wake

__all__ = [
    "DEFAULT_RETRY",
    "Diverged",
    "EngineFace",
    "Step",
    "TooManySteps",
    "approval_event",
    "schedule_wake",
]

#: The retry policy of a step that names none: 5 attempts, full jitter from 1 s, capped at 300 s.
DEFAULT_RETRY = RetryPolicy()


class EngineFace(BranchEngine, Protocol):
    """What a :class:`Step` needs of the engine of its actor (:class:`roost.workflows.engine.Engine`)."""

    #: The positions a body may take (``workflow_max_steps`` of the kind; :data:`MAX_STEPS` by default).
    max_steps: int

    def of(self, actor: Actor) -> EngineFace:
        """The engine of ``actor`` (the live instance a later turn runs on)."""

    def holds(
        self, wid: str, gen: int, pos: int, attempt: int, run: int, nonce: str | None = None
    ) -> bool: ...

    def slot_limit(self, slot: str) -> int: ...

    def slot_free(self, slot: str, wid: str, pos: int) -> bool: ...

    async def finish_external(
        self, wid: str, gen: int, pos: int, attempt: int, run: int, outcome: Outcome, nonce: str | None = None
    ) -> None: ...


class Diverged(BaseException):
    """The body called another step than the one recorded at this position (not catchable by a body's
    ``except Exception``)."""


class TooManySteps(BaseException):
    """The body went past its kind's ``workflow_max_steps`` positions (by default
    :data:`~roost.workflows.model.MAX_STEPS`)."""


def lease_key(prefix: str, gen: int, pos: int, attempt: int, run: int) -> str:
    """The key of the first lease wake-up of an outside run (``prefix``: its workflow's
    :attr:`~roost.workflows.store.WorkflowRow.step_prefix`, nonce included, so that a workflow
    deleted and started again under its id never shares one with a run of the old one): its result's
    turn cancels it, so that a finished step does not wake a dormant actor a lease later for nothing."""
    return f"roost-wf-lease:{prefix}:{gen}:{pos}:{attempt}:{run}"


class Step:
    """A workflow body's handle on its steps, for one advance. Every method is ``async``: await each
    before the next."""

    def __init__(self, engine: EngineFace, wf: WorkflowRow, steps: list[StepRow]) -> None:
        self._engine = engine
        self._actor = engine.actor
        self._store: WorkflowStore = engine.store
        self._wf = wf
        self._steps = {s.position: s for s in steps}
        self._recorded = len(steps)
        self._now = engine.actor.extension.now
        self._pos = 0
        self._busy = False
        self._doing: str | None = None
        self._ran = 0
        #: What the advance waits on when it suspends (``waiting`` of the workflow), and whether a
        #: wake-up at once goes on (the per-turn bound was reached).
        self.waiting: dict[str, Any] | None = None
        self.again = False
        self.replayed = 0

    @property
    def workflow_id(self) -> str:
        return self._wf.id

    @property
    def generation(self) -> int:
        return self._wf.generation

    @property
    def positions(self) -> int:
        """How many step calls the body has made in this advance."""
        return self._pos

    @property
    def recorded(self) -> int:
        return self._recorded

    # -- the step kinds ---------------------------------------------------------------------------
    async def do(
        self,
        name: str,
        fn: Callable[[], Any],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Run ``fn()`` (plain or ``async``) inside this turn, once: its writes (``self.sql``,
        ``set_state``, ``emit``) commit with the step's record. Its result (JSON) is returned now and
        on every replay. A raise rolls the attempt back and retries it after ``retry``'s full-jitter
        backoff (a durable wake-up); ``NonRetryable`` or spent attempts raise ``StepFailed``."""
        pos, rec = self._take(name, StepKind.DO)
        if rec is not None:
            done = self._outcome(rec)
            if done is not _PENDING:
                return done
            if rec.status is StepStatus.RETRY_WAIT and rec.wake_at is not None and rec.wake_at > self._now:
                raise self._suspend(pos, rec.name, StepKind.DO, until=rec.wake_at, why="retry")
        if self._ran >= STEPS_PER_TURN:  # let the mailbox go: a wake-up at once goes on from here
            self.again = True
            await schedule_wake(self._actor, self._now, self._payload("advance"))
            raise Suspend
        attempt = (rec.attempt if rec is not None else 0) + 1
        savepoint = self._actor.extension.savepoint("roost_wf_step")
        self._busy = True
        self._doing = f"{self._wf.step_prefix}:{self._wf.generation}:{pos}:{attempt}"
        try:
            value = fn()
            if inspect.isawaitable(value):
                if timeout is None:
                    value = await value
                else:
                    async with self._actor.extension.process.clock.timeout(timeout):
                        value = await value
            text = encode(value, f"the result of step {name!r}")
        except Exception as exc:
            savepoint.rollback()
            self._busy = False
            error, retryable = _reason(exc, timeout)
            error = clean_error(self._actor, self._wf.id, error) or ""
            self._ran += 1
            return await self._failed(pos, name, StepKind.DO, attempt, 0, error, retryable, retry)
        finally:
            self._busy = False
            self._doing = None
        savepoint.release()
        self._store.put_step(
            self._wf.id, pos, name, StepKind.DO, StepStatus.COMPLETED, self._now, attempt=attempt, result=text
        )
        self._log("step_completed", pos, name, attempt)
        self._ran += 1
        return orjson.loads(text)

    @property
    def idempotency_key(self) -> str:
        """The key of the in-turn step (:meth:`do`) whose function runs now, as an outside step's
        (``{step_id}:{attempt}``): the same when a turn lost with its process runs the attempt
        again, another for the next attempt. For an effect a step's function makes outside SQLite
        (it had better be quick: the turn waits for it). Raises ``RuntimeError`` outside :meth:`do`."""
        if self._doing is None:
            raise RuntimeError("idempotency_key is the running in-turn step's: read it inside step.do")
        return self._doing

    async def external(
        self,
        name: str,
        fn: Callable[[StepAttempt], Awaitable[Any]],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        slot: str | None = None,
    ) -> Any:
        """Run ``await fn(attempt)`` outside turns (HTTP, files, anything SQLite cannot roll back), at
        least once: a run lost with its process runs again with the same ``attempt.idempotency_key``.
        The workflow waits meanwhile; the result is recorded in a turn of its own, and returned here
        on the replay that follows. ``timeout`` bounds each run (on the runtime's clock).

        ``slot`` names a concurrency slot of the actor (``Workflows.workflow_slots``: its name to how
        many steps may run in it at once, across all the actor's workflows). **A slot never runs more
        than its limit**: an attempt starts only when fewer steps of its slot are running and no step
        waits for it from before (oldest first); otherwise the step waits (``waiting`` ``why:
        "slot"``) and is started, in the same turn, by whatever frees a place: a step of the slot
        ending or going to retry, its workflow cancelled or restarted. A rerun of a lost run keeps
        its place; the next attempt after a failure queues again."""
        pos, rec = self._take(name, StepKind.EXTERNAL)
        attempt, run = 1, 1
        queued = False
        if rec is not None:
            done = self._outcome(rec)
            if done is not _PENDING:
                return done
            if rec.status is StepStatus.RUNNING:
                raise self._suspend(pos, name, StepKind.EXTERNAL, why="running", attempt=rec.attempt)
            if rec.status is StepStatus.ATTEMPT_FAILED:
                return await self._failed(
                    pos, name, StepKind.EXTERNAL, rec.attempt, rec.run, rec.error or "", rec.retryable, retry
                )
            if rec.status is StepStatus.RETRY_WAIT:
                if rec.wake_at is not None and rec.wake_at > self._now:
                    raise self._suspend(pos, name, StepKind.EXTERNAL, until=rec.wake_at, why="retry")
                attempt = rec.attempt + 1
            elif rec.status is StepStatus.LOST:
                attempt, run = rec.attempt, rec.run + 1
            elif rec.status is StepStatus.WAITING:  # for a place in its slot (in another, if renamed)
                attempt, run, queued = rec.attempt, rec.run, rec.slot == slot
        if slot is not None:
            self._engine.slot_limit(slot)  # an undeclared slot is the body's error
        lost = rec is not None and rec.status is StepStatus.LOST
        if slot is not None and not lost and not self._engine.slot_free(slot, self._wf.id, pos):
            if not queued:  # its place in the queue: after those that queued before
                self._store.put_step(
                    self._wf.id, pos, name, StepKind.EXTERNAL, StepStatus.WAITING, self._now,
                    attempt=attempt, run=run, slot=slot,
                )  # fmt: skip
                self._store.queue_for_slot(self._wf.id, pos, slot)
                self._log("slot_waiting", pos, name, attempt, {"slot": slot})
            raise self._suspend(pos, name, StepKind.EXTERNAL, why="slot", slot=slot, attempt=attempt)
        checkpoint = rec.checkpoint if rec is not None else None
        await self._start_external(pos, name, attempt, run, fn, timeout, checkpoint, slot)
        raise self._suspend(pos, name, StepKind.EXTERNAL, why="running", attempt=attempt)

    async def parallel(
        self,
        name: str,
        branches: Mapping[str, BranchFn],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run every branch ``await fn(attempt)`` outside turns, concurrently, each an outside step
        of its own (its own idempotency key ``{step_id}:{branch}:{attempt}``, attempts under
        ``retry``, runs bounded by ``timeout``); the results by branch, in the order given. A
        branch's result is kept when it comes (a crash reruns only the branches without one); the
        first branch that fails for good fails the join (``StepFailed``), see
        :mod:`roost.workflows.fanout`."""
        check_branches(branches)
        pos, rec = self._take(name, StepKind.PARALLEL)
        if rec is not None and rec.status in (StepStatus.COMPLETED, StepStatus.FAILED):
            done: dict[str, Any] = self._outcome(rec)  # the recorded results, or the failure raised
            return done
        store, wf, now, engine = self._store, self._wf, self._now, self._engine
        rows = {r.branch: r for r in store.branches(wf.id, pos)}
        if rec is None:
            store.put_step(wf.id, pos, name, StepKind.PARALLEL, StepStatus.RUNNING, now)
            self._log("fanout_started", pos, name, detail={"branches": list(branches)})
        elif set(rows) != set(branches):
            raise Diverged(f"join {name!r} at {pos} was recorded with {sorted(rows)}, now {sorted(branches)}")
        policy = retry or DEFAULT_RETRY
        kept = [b for b in branches if b in rows and rows[b].status is StepStatus.COMPLETED]
        soonest: float | None = None
        for ord, (b, fn) in enumerate(branches.items()):
            r = rows.get(b)
            at: tuple[int, int] | None = (1, 1) if r is None else None
            if r is not None and r.status is StepStatus.ATTEMPT_FAILED:
                if not (r.retryable and r.attempt < policy.max_attempts):
                    fail_join(engine, wf, pos, name, r, now)
                wake = now + policy.delay(r.attempt, self._actor.extension.process.rng)
                store.put_branch(
                    wf.id, pos, b, ord, StepStatus.RETRY_WAIT, now, attempt=r.attempt, run=r.run,
                    error=r.error, wake_at=wake,
                )  # fmt: skip
                self._log(
                    "attempt_failed", pos, name, r.attempt, {"branch": b, "error": r.error, "retry_at": wake}
                )
                await schedule_wake(self._actor, wake, self._payload("retry", pos=pos, branch=b))
                soonest = wake if soonest is None else min(soonest, wake)
            elif r is not None and r.status is StepStatus.FAILED:
                fail_join(engine, wf, pos, name, r, now)
            elif r is not None and r.status is StepStatus.RETRY_WAIT:
                if r.wake_at is not None and r.wake_at > now:
                    soonest = r.wake_at if soonest is None else min(soonest, r.wake_at)
                else:
                    at = (r.attempt + 1, 1)
            elif r is not None and r.status is StepStatus.LOST:
                at = (r.attempt, r.run + 1)
            if at is not None:
                await start_branch(engine, wf, pos, name, b, ord, at, fn, timeout, kept, now)
        rows = {r.branch: r for r in store.branches(wf.id, pos)}
        if all(rows[b].status is StepStatus.COMPLETED for b in branches):
            try:
                text = encode({b: rows[b].result for b in branches}, f"the results of join {name!r}")
            except Exception as exc:
                error = short(str(exc))
                store.put_step(wf.id, pos, name, StepKind.PARALLEL, StepStatus.FAILED, now, error=error)
                self._log("step_failed", pos, name, detail={"error": error})
                raise StepFailed(name, error) from None
            store.put_step(wf.id, pos, name, StepKind.PARALLEL, StepStatus.COMPLETED, now, result=text)
            self._log("step_completed", pos, name, detail={"branches": list(branches)})
            results: dict[str, Any] = orjson.loads(text)
            return results
        joined = {b: str(rows[b].status) for b in branches}
        raise self._suspend(pos, name, StepKind.PARALLEL, until=soonest, why="join", branches=joined)

    async def sleep(self, name: str, seconds: float) -> None:
        """Wait ``seconds`` (measured from the first time this step runs), durably."""
        pos, rec = self._take(name, StepKind.SLEEP)
        await self._sleep(
            pos, name, rec, rec.wake_at if rec is not None and rec.wake_at else self._now + seconds
        )

    async def sleep_until(self, name: str, when: float | datetime) -> None:
        """Wait until ``when`` (epoch seconds or an aware ``datetime``), durably: a wake-up then."""
        at = when.timestamp() if isinstance(when, datetime) else float(when)
        pos, rec = self._take(name, StepKind.SLEEP)
        await self._sleep(pos, name, rec, at)

    async def wait_for_event(self, name: str, *, timeout: float | None = None) -> Any:
        """The payload of the next event ``name`` sent to this workflow (``send_event``); one sent
        before the wait began counts. With ``timeout`` (seconds from the first time this step runs),
        ``EventTimeout`` is raised when none came by then."""
        pos, rec = self._take(name, StepKind.EVENT)
        got = await self._wait(pos, name, StepKind.EVENT, name, rec, timeout)
        return got

    async def approval(
        self, name: str, *, timeout: float | None = None, approvers: Sequence[str] | None = None
    ) -> Approval:
        """Wait for ``approve_step(workflow_id, name, approved, note)`` by a principal that may write
        (a read-only one is refused) and, with ``approvers``, whose id is one of them (anyone else is
        refused ``forbidden``); its :class:`Approval`. ``EventTimeout`` after ``timeout``."""
        if approvers is not None and (
            isinstance(approvers, str)
            or not approvers
            or not all(isinstance(a, str) and a for a in approvers)
        ):
            raise ValueError(f"approvers is a non-empty list of principal ids, got {approvers!r}")
        pos, rec = self._take(name, StepKind.APPROVAL)
        who = {"approvers": sorted(set(approvers))} if approvers is not None else {}
        got = await self._wait(pos, name, StepKind.APPROVAL, approval_event(name), rec, timeout, **who)
        return Approval.of(got)

    # -- replay -----------------------------------------------------------------------------------
    def _take(self, name: str, kind: StepKind) -> tuple[int, StepRow | None]:
        if self._busy:
            raise RuntimeError("steps of one workflow run one at a time: await each step before the next")
        if not isinstance(name, str) or not 1 <= len(name) <= 128:
            raise ValueError(f"a step name is 1 to 128 characters, got {name!r}")
        pos = self._pos
        if pos >= self._engine.max_steps:
            raise TooManySteps(f"more than {self._engine.max_steps} steps")
        self._pos += 1
        rec = self._steps.get(pos)
        if rec is not None and (rec.name != name or rec.kind is not kind):
            raise Diverged(
                f"step {pos} was recorded as {rec.name!r} ({rec.kind}), the body now calls {name!r} ({kind})"
            )
        return pos, rec

    def _outcome(self, rec: StepRow) -> Any:
        """A recorded outcome (returned, or its failure raised), or ``_PENDING``."""
        if rec.status is StepStatus.COMPLETED:
            self.replayed += 1 if rec.position < self._recorded else 0
            return rec.result
        if rec.status is StepStatus.FAILED:
            self.replayed += 1 if rec.position < self._recorded else 0
            error = rec.error or "failed"
            if rec.kind in (StepKind.EVENT, StepKind.APPROVAL):
                raise EventTimeout(rec.name, error)
            raise StepFailed(rec.name, error)
        return _PENDING

    def _suspend(
        self, pos: int, name: str, kind: StepKind, *, until: float | None = None, **more: Any
    ) -> Suspend:
        self.waiting = {"position": pos, "step": name, "kind": str(kind), "until": until, **more}
        return Suspend()

    def _payload(self, why: str, **more: Any) -> dict[str, Any]:
        wf = self._wf
        return {"why": why, "id": wf.id, "gen": wf.generation, "nonce": wf.nonce, **more}

    def _log(self, event: str, pos: int, name: str, attempt: int | None = None, detail: Any = None) -> None:
        self._store.log(
            self._wf.id,
            self._wf.generation,
            event,
            self._now,
            position=pos,
            name=name,
            attempt=attempt,
            detail=detail,
        )

    async def _failed(
        self,
        pos: int,
        name: str,
        kind: StepKind,
        attempt: int,
        run: int,
        error: str,
        retryable: bool,
        retry: RetryPolicy | None,
    ) -> Any:
        """A failed attempt: its backoff as a durable wake-up (suspends), or the step's failure."""
        policy = retry or DEFAULT_RETRY
        store, wid, now = self._store, self._wf.id, self._now
        if retryable and attempt < policy.max_attempts:
            delay = policy.delay(attempt, self._actor.extension.process.rng)
            wake = now + delay
            store.put_step(
                wid,
                pos,
                name,
                kind,
                StepStatus.RETRY_WAIT,
                now,
                attempt=attempt,
                run=run,
                error=error,
                wake_at=wake,
            )
            self._log(
                "attempt_failed", pos, name, attempt, {"error": error, "retry_at": wake, "delay": delay}
            )
            await schedule_wake(self._actor, wake, self._payload("retry", pos=pos))
            raise self._suspend(pos, name, kind, until=wake, why="retry")
        store.put_step(wid, pos, name, kind, StepStatus.FAILED, now, attempt=attempt, run=run, error=error)
        self._log("step_failed", pos, name, attempt, {"error": error})
        raise StepFailed(name, error)

    async def _start_external(
        self,
        pos: int,
        name: str,
        attempt: int,
        run: int,
        fn: Callable[[StepAttempt], Awaitable[Any]],
        timeout: float | None,
        checkpoint: Any,
        slot: str | None,
    ) -> None:
        wf, actor, now = self._wf, self._actor, self._now
        lease = self._engine.lease
        self._store.put_step(
            wf.id,
            pos,
            name,
            StepKind.EXTERNAL,
            StepStatus.RUNNING,
            now,
            attempt=attempt,
            run=run,
            wake_at=now + lease,
            slot=slot,
        )
        self._store.set_progress(wf.id, pos, None, None)  # the report shown is the running attempt's
        key: RunKey = (actor.kind, actor.name, wf.id, wf.generation, pos, attempt, run, "")
        of = self._engine.of
        at = (wf.id, wf.generation, pos, attempt, run)
        nonce = wf.nonce  # the attempt's fence: of this workflow, not of one started again under its id
        process = actor.extension.process

        def current(a: Actor) -> bool:
            return of(a).holds(*at, nonce)

        def write(a: Actor, report: Callable[[float], str], kept: str | None) -> None:
            engine = of(a)
            engine.store.set_progress(wf.id, pos, report(engine.now), kept)

        turns = fenced(process, actor.kind, actor.name, current, f"attempt {attempt} (run {run}) of {name!r}")
        ticket = StepAttempt(
            wf.id, name, f"{wf.step_prefix}:{wf.generation}:{pos}", attempt, run, checkpoint,
            reporter(turns, write), turns,
        )  # fmt: skip
        self._log(
            "attempt_started", pos, name, attempt, {"run": run, "idempotency_key": ticket.idempotency_key}
        )
        await schedule_wake(
            actor,
            now + lease,
            self._payload("lease", pos=pos, attempt=attempt, run=run),
            key=lease_key(wf.step_prefix, wf.generation, pos, attempt, run),
        )

        async def claimed(a: Actor) -> bool:
            return current(a)

        def finish(outcome: Outcome) -> Callable[[Actor], Awaitable[None]]:
            async def record(a: Actor) -> None:
                await of(a).finish_external(*at, outcome, nonce)

            return record

        runner(process).spawn(key, lambda: fn(ticket), timeout, claimed, finish)

    async def _sleep(self, pos: int, name: str, rec: StepRow | None, at: float) -> None:
        if rec is not None and self._outcome(rec) is not _PENDING:
            return
        if at <= self._now:
            self._store.put_step(
                self._wf.id, pos, name, StepKind.SLEEP, StepStatus.COMPLETED, self._now, wake_at=at
            )
            self._log("slept", pos, name, detail={"until": at})
            return
        if rec is None:
            self._store.put_step(
                self._wf.id, pos, name, StepKind.SLEEP, StepStatus.WAITING, self._now, wake_at=at
            )
            self._log("sleeping", pos, name, detail={"until": at})
            await schedule_wake(self._actor, at, self._payload("sleep", pos=pos))
        raise self._suspend(pos, name, StepKind.SLEEP, until=at)

    async def _wait(
        self,
        pos: int,
        name: str,
        kind: StepKind,
        event: str,
        rec: StepRow | None,
        timeout: float | None,
        **more: Any,
    ) -> Any:
        if rec is not None:
            done = self._outcome(rec)
            if done is not _PENDING:
                return done
            deadline = rec.wake_at
        else:
            deadline = None if timeout is None else self._now + timeout
        store, wid, now = self._store, self._wf.id, self._now
        got = store.take_event(wid, event)
        if got is not None:
            payload, by = got
            store.put_step(
                wid, pos, name, kind, StepStatus.COMPLETED, now, result=encode(payload, "an event")
            )
            self._log("event_received", pos, name, detail={"by": by})
            return payload
        if deadline is not None and now >= deadline:
            error = f"no {'approval' if kind is StepKind.APPROVAL else 'event'} {name!r} by the deadline"
            store.put_step(wid, pos, name, kind, StepStatus.FAILED, now, error=error, wake_at=deadline)
            self._log("deadline_passed", pos, name, detail={"deadline": deadline})
            raise EventTimeout(name, error)
        if rec is None:
            store.put_step(wid, pos, name, kind, StepStatus.WAITING, now, wake_at=deadline)
            self._log("waiting", pos, name, detail={"event": event, "deadline": deadline})
            if deadline is not None:
                await schedule_wake(self._actor, deadline, self._payload("deadline", pos=pos))
        raise self._suspend(pos, name, kind, until=deadline, event=event, **more)


_PENDING: Any = object()


def approval_event(name: str) -> str:
    """The event an approval step named ``name`` waits for (only ``approve_step`` sends it)."""
    return f"approval:{name}"


def _reason(exc: Exception, timeout: float | None) -> tuple[str, bool]:
    """The reason of a failed attempt (cut when it is recorded, after its cleaning:
    :func:`~roost.workflows.model.clean_error`), and whether another attempt may help."""
    return _why(exc, timeout)


def _why(exc: Exception, timeout: float | None) -> tuple[str, bool]:
    if isinstance(exc, TimeoutError):
        return f"timeout after {timeout} s", True
    if isinstance(exc, RpcError) and exc.code == "too_large":
        return exc.message, False
    if isinstance(exc, NonRetryable):
        return error_text(exc), False
    if isinstance(exc, TypeError) and "JSON" in str(exc):
        return f"result not JSON: {exc}", False
    return error_text(exc), True
