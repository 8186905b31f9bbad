"""The parallel shape: ``step.parallel(name, {branch: fn})``, a join of outside branches that run at
once, and the engine's side of a branch (its fence, its result's turn, its lease).

One position of the body holds the join: a step row of kind ``parallel`` and one row per branch in
``roost_wf_branches``. Each branch is an outside attempt of its own (``fn(attempt)`` in the process's
runner, concurrently with its siblings), with its own idempotency key
``{workflow}:{generation}:{position}:{branch}:{attempt}``, lease, retry policy and timeout.

Guarantees (tests in ``tests/test_workflows_parallel.py`` and ``tests/test_workflows_parallel_crash.py``):

- **Branches run concurrently**: every branch that can start is started by the same advance.
- **A completed branch is kept**: its result is written to its row in the turn that records it (a
  pending write of the join) and it never runs again, whatever happens to its siblings; after a
  crash only the branches without a result run again (a lost run under the same key).
- **The join state is visible**: ``workflow_status`` shows each branch's status, attempt and run,
  ``workflow_steps`` their results too.
- **Fail fast**: the first branch that fails for good fails the join (``StepFailed`` naming the
  branch); its live siblings are cancelled in this process and their later results not recorded.
- **The branches are part of the replay check**: another set of branch names at a recorded join
  fails the workflow (``nondeterministic``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors import Actor, RetryPolicy
from roost.workflows.model import (
    MAX_BRANCHES,
    MAX_LOST_RUNS,
    MAX_NAME,
    StepAttempt,
    StepFailed,
    StepKind,
    StepStatus,
    short,
)
from roost.workflows.runner import Outcome, RunKey, runner
from roost.workflows.store import BranchRow, encode

if TYPE_CHECKING:
    from roost.workflows.engine import Engine
    from roost.workflows.step import Step

__all__ = ["BranchFn", "branch_lease", "finish_branch", "holds_branch", "join"]

#: A branch: ``fn(attempt)`` awaited outside turns, like ``step.external``'s function.
BranchFn = Callable[[StepAttempt], Awaitable[Any]]


def _lease_key(wid: str, gen: int, pos: int, branch: str, attempt: int, run: int) -> str:
    return f"roost-wf-branch-lease:{wid}:{gen}:{pos}:{attempt}:{run}:{branch}"


def _check(branches: Mapping[str, BranchFn]) -> None:
    if not 1 <= len(branches) <= MAX_BRANCHES:
        raise ValueError(f"a parallel step has 1 to {MAX_BRANCHES} branches, got {len(branches)}")
    for b in branches:
        if not isinstance(b, str) or not 1 <= len(b) <= MAX_NAME or "\x00" in b:
            raise ValueError(f"a branch name is 1 to {MAX_NAME} characters without NUL, got {b!r}")


async def join(
    step: Step,
    name: str,
    branches: Mapping[str, BranchFn],
    retry: RetryPolicy | None,
    timeout: float | None,
) -> dict[str, Any]:
    """The body of :meth:`Step.parallel` (see there)."""
    from roost.workflows.step import DEFAULT_RETRY, Diverged, schedule_wake

    _check(branches)
    pos, rec = step._take(name, StepKind.PARALLEL)
    if rec is not None and rec.status in (StepStatus.COMPLETED, StepStatus.FAILED):
        done: dict[str, Any] = step._outcome(rec)  # the recorded results, or the failure raised
        return done
    store, wf, now = step._store, step._wf, step._now
    rows = {r.branch: r for r in store.branches(wf.id, pos)}
    if rec is None:
        store.put_step(wf.id, pos, name, StepKind.PARALLEL, StepStatus.RUNNING, now)
        step._log("fanout_started", pos, name, detail={"branches": list(branches)})
    elif set(rows) != set(branches):
        raise Diverged(
            f"join {name!r} at {pos} was recorded with branches {sorted(rows)}, now {sorted(branches)}"
        )
    policy = retry or DEFAULT_RETRY
    kept = [b for b in branches if b in rows and rows[b].status is StepStatus.COMPLETED]
    soonest: float | None = None
    for ord, (b, fn) in enumerate(branches.items()):
        r = rows.get(b)
        if r is None:
            await _start(step, pos, name, b, ord, 1, 1, fn, timeout, kept)
            continue
        status = r.status
        if status is StepStatus.ATTEMPT_FAILED:
            if r.retryable and r.attempt < policy.max_attempts:
                wake = now + policy.delay(r.attempt, step._actor.extension.process.rng)
                store.put_branch(
                    wf.id, pos, b, ord, StepStatus.RETRY_WAIT, now, attempt=r.attempt, run=r.run,
                    error=r.error, wake_at=wake,
                )  # fmt: skip
                step._log(
                    "attempt_failed", pos, name, r.attempt, {"branch": b, "error": r.error, "retry_at": wake}
                )
                await schedule_wake(step._actor, wake, step._payload("retry", pos=pos, branch=b))
                soonest = wake if soonest is None else min(soonest, wake)
                continue
            status = StepStatus.FAILED
        if status is StepStatus.FAILED:
            _fail(step, pos, name, r)
        if status is StepStatus.RETRY_WAIT:
            if r.wake_at is not None and r.wake_at > now:
                soonest = r.wake_at if soonest is None else min(soonest, r.wake_at)
            else:
                await _start(step, pos, name, b, ord, r.attempt + 1, 1, fn, timeout, kept)
        elif status is StepStatus.LOST:
            await _start(step, pos, name, b, ord, r.attempt, r.run + 1, fn, timeout, kept)
    rows = {r.branch: r for r in store.branches(wf.id, pos)}
    if all(rows[b].status is StepStatus.COMPLETED for b in branches):
        results = {b: rows[b].result for b in branches}
        try:
            text = encode(results, f"the results of join {name!r}")
        except Exception as exc:
            error = short(str(exc))
            store.put_step(wf.id, pos, name, StepKind.PARALLEL, StepStatus.FAILED, now, error=error)
            step._log("step_failed", pos, name, detail={"error": error})
            raise StepFailed(name, error) from None
        store.put_step(wf.id, pos, name, StepKind.PARALLEL, StepStatus.COMPLETED, now, result=text)
        step._log("step_completed", pos, name, detail={"branches": list(branches)})
        result: dict[str, Any] = orjson.loads(text)
        return result
    raise step._suspend(
        pos, name, StepKind.PARALLEL, until=soonest, why="join",
        branches={b: str(rows[b].status) for b in branches},
    )  # fmt: skip


def _fail(step: Step, pos: int, name: str, r: BranchRow) -> None:
    """A branch failed for good: the join fails, its live siblings are cancelled here."""
    store, wf, actor = step._store, step._wf, step._actor
    error = short(f"branch {r.branch!r}: {r.error or 'failed'}")
    store.put_branch(
        wf.id, pos, r.branch, r.ord, StepStatus.FAILED, step._now, attempt=r.attempt, run=r.run,
        retryable=False, error=r.error,
    )  # fmt: skip
    store.put_step(wf.id, pos, name, StepKind.PARALLEL, StepStatus.FAILED, step._now, error=error)
    step._log("step_failed", pos, name, r.attempt, {"branch": r.branch, "error": error})
    runner(actor.extension.process).cancel(actor.kind, actor.name, wf.id, pos)
    raise StepFailed(name, error)


async def _start(
    step: Step,
    pos: int,
    name: str,
    branch: str,
    ord: int,
    attempt: int,
    run: int,
    fn: BranchFn,
    timeout: float | None,
    kept: list[str],
) -> None:
    from roost.workflows.engine import engine_of
    from roost.workflows.step import schedule_wake

    wf, actor, now, engine = step._wf, step._actor, step._now, step._engine
    lease = engine.lease
    step._store.put_branch(
        wf.id, pos, branch, ord, StepStatus.RUNNING, now, attempt=attempt, run=run, wake_at=now + lease
    )
    ticket = StepAttempt(wf.id, f"{name}/{branch}", f"{wf.id}:{wf.generation}:{pos}:{branch}", attempt, run)
    detail = {"branch": branch, "run": run, "idempotency_key": ticket.idempotency_key, "kept": kept}
    step._log("attempt_started", pos, name, attempt, detail)
    await schedule_wake(
        actor,
        now + lease,
        step._payload("branch_lease", pos=pos, branch=branch, attempt=attempt, run=run),
        key=_lease_key(wf.id, wf.generation, pos, branch, attempt, run),
    )
    key: RunKey = (actor.kind, actor.name, wf.id, wf.generation, pos, attempt, run, branch)
    at = (wf.id, wf.generation, pos, branch, attempt, run)

    async def claimed(a: Actor) -> bool:
        return holds_branch(engine_of(a), *at)

    def finish(outcome: Outcome) -> Callable[[Actor], Awaitable[None]]:
        async def record(a: Actor) -> None:
            await finish_branch(engine_of(a), *at, outcome)

        return record

    runner(actor.extension.process).spawn(key, lambda: fn(ticket), timeout, claimed, finish)


# -- the engine's side ------------------------------------------------------------------------------
def holds_branch(engine: Engine, wid: str, gen: int, pos: int, branch: str, attempt: int, run: int) -> bool:
    """Whether run ``(attempt, run)`` of ``branch`` of the join at ``pos`` is current: the same
    generation, the workflow not finished, the join running, the branch running that run."""
    store = engine.store
    wf = store.get(wid)
    if wf is None or wf.generation != gen or wf.status.terminal:
        return False
    rec = store.step(wid, pos)
    if rec is None or rec.kind is not StepKind.PARALLEL or rec.status is not StepStatus.RUNNING:
        return False
    row = store.branch(wid, pos, branch)
    return row is not None and row.status is StepStatus.RUNNING and (row.attempt, row.run) == (attempt, run)


async def finish_branch(
    engine: Engine, wid: str, gen: int, pos: int, branch: str, attempt: int, run: int, outcome: Outcome
) -> None:
    """Record a branch run's outcome (fenced): its result is kept in its row (a pending write of the
    join) before the advance that may complete the join."""
    if not holds_branch(engine, wid, gen, pos, branch, attempt, run):
        return
    await engine.actor.cancel_schedule(_lease_key(wid, gen, pos, branch, attempt, run))
    store, now = engine.store, engine.now
    row = store.branch(wid, pos, branch)
    assert row is not None
    if outcome.ok:
        try:
            text = encode(outcome.result, f"the result of branch {branch!r}")
        except Exception as exc:
            outcome = Outcome(False, error=short(str(exc)), retryable=False)
        else:
            store.put_branch(
                wid, pos, branch, row.ord, StepStatus.COMPLETED, now, attempt=attempt, run=run, result=text
            )
            store.log(
                wid, gen, "branch_completed", now, position=pos, attempt=attempt,
                name=_step_name(engine, wid, pos), detail={"branch": branch, "run": run},
            )  # fmt: skip
    if not outcome.ok:
        store.put_branch(
            wid, pos, branch, row.ord, StepStatus.ATTEMPT_FAILED, now, attempt=attempt, run=run,
            retryable=outcome.retryable, error=outcome.error,
        )  # fmt: skip
    await engine.advance(wid)


def _step_name(engine: Engine, wid: str, pos: int) -> str | None:
    rec = engine.store.step(wid, pos)
    return None if rec is None else rec.name


async def branch_lease(engine: Engine, payload: dict[str, Any]) -> None:
    """A branch run's lease is up: if this process's runner still runs it, look again a lease later;
    otherwise it was lost with its process: ``lost`` (or ``failed`` after ``MAX_LOST_RUNS``), then
    advance, which runs it again under the same key."""
    from roost.workflows.step import schedule_wake

    wid, gen, pos = str(payload["id"]), int(payload["gen"]), int(payload["pos"])
    branch, attempt, run = str(payload["branch"]), int(payload["attempt"]), int(payload["run"])
    if not holds_branch(engine, wid, gen, pos, branch, attempt, run):
        return
    actor = engine.actor
    key: RunKey = (actor.kind, actor.name, wid, gen, pos, attempt, run, branch)
    if runner(actor.extension.process).alive(key):
        await schedule_wake(actor, engine.now + engine.lease, payload)
        return
    store, now = engine.store, engine.now
    row = store.branch(wid, pos, branch)
    assert row is not None
    name = _step_name(engine, wid, pos)
    store.log(
        wid, gen, "attempt_lost", now, position=pos, name=name, attempt=attempt,
        detail={"branch": branch, "run": run},
    )  # fmt: skip
    if run >= MAX_LOST_RUNS:
        store.put_branch(
            wid, pos, branch, row.ord, StepStatus.ATTEMPT_FAILED, now, attempt=attempt, run=run,
            retryable=False, error=f"lost with its process {run} times",
        )  # fmt: skip
    else:
        store.put_branch(wid, pos, branch, row.ord, StepStatus.LOST, now, attempt=attempt, run=run)
    await engine.advance(wid)
