"""The parallel shape's branches: ``step.parallel(name, {branch: fn})`` (the join, in
:mod:`roost.workflows.step`) starts them here; here too is the engine's side of a branch (its fence,
its result's turn, its lease).

One position of the body holds the join: a step row of kind ``parallel`` and one row per branch in
``roost_wf_branches``. Each branch is an outside attempt of its own (``fn(attempt)`` in the process's
runner, concurrently with its siblings), with its own idempotency key
``{workflow}:{nonce}:{generation}:{position}:{branch}:{attempt}``, lease, retry policy and timeout.

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
from dataclasses import replace
from typing import Any, NoReturn, Protocol

from roost.actors import Actor
from roost.workflows.model import (
    MAX_BRANCHES,
    MAX_LOST_RUNS,
    MAX_NAME,
    StepAttempt,
    StepFailed,
    StepKind,
    StepStatus,
    clean_error,
    short,
)
from roost.workflows.runner import Outcome, RunKey, fenced, reporter, runner
from roost.workflows.store import BranchRow, WorkflowRow, WorkflowStore, encode
from roost.workflows.wakes import schedule_wake

__all__ = [
    "BranchEngine",
    "BranchFn",
    "branch_lease",
    "check_branches",
    "fail_join",
    "finish_branch",
    "holds_branch",
    "start_branch",
]

#: A branch: ``fn(attempt)`` awaited outside turns, like ``step.external``'s function.
BranchFn = Callable[[StepAttempt], Awaitable[Any]]


class BranchEngine(Protocol):
    """What a branch needs of the engine of its actor (:class:`roost.workflows.engine.Engine`)."""

    @property
    def actor(self) -> Actor: ...

    @property
    def store(self) -> WorkflowStore: ...

    @property
    def lease(self) -> float: ...

    @property
    def now(self) -> float: ...

    def of(self, actor: Actor) -> BranchEngine:
        """The engine of ``actor`` (the live instance a later turn runs on)."""

    async def advance(self, wid: str) -> None: ...


def _lease_key(prefix: str, gen: int, pos: int, branch: str, attempt: int, run: int) -> str:
    """The key of a branch run's first lease wake-up (``prefix``: the workflow's step prefix, nonce
    included, as :func:`~roost.workflows.step.lease_key`)."""
    return f"roost-wf-branch-lease:{prefix}:{gen}:{pos}:{attempt}:{run}:{branch}"


def check_branches(branches: Mapping[str, BranchFn]) -> None:
    """1 to :data:`MAX_BRANCHES` branches, each named by 1 to :data:`MAX_NAME` characters."""
    if not 1 <= len(branches) <= MAX_BRANCHES:
        raise ValueError(f"a parallel step has 1 to {MAX_BRANCHES} branches, got {len(branches)}")
    for b in branches:
        if not isinstance(b, str) or not 1 <= len(b) <= MAX_NAME or "\x00" in b:
            raise ValueError(f"a branch name is 1 to {MAX_NAME} characters without NUL, got {b!r}")


def fail_join(
    engine: BranchEngine, wf: WorkflowRow, pos: int, name: str, r: BranchRow, now: float
) -> NoReturn:
    """A branch failed for good: the join fails (``StepFailed``), its live siblings are cancelled in
    this process (their later results are fenced off: the join is no longer running)."""
    store, actor = engine.store, engine.actor
    error = short(f"branch {r.branch!r}: {r.error or 'failed'}")
    store.put_branch(
        wf.id, pos, r.branch, r.ord, StepStatus.FAILED, now, attempt=r.attempt, run=r.run,
        retryable=False, error=r.error,
    )  # fmt: skip
    store.put_step(wf.id, pos, name, StepKind.PARALLEL, StepStatus.FAILED, now, error=error)
    store.log(
        wf.id, wf.generation, "step_failed", now, position=pos, name=name, attempt=r.attempt,
        detail={"branch": r.branch, "error": error},
    )  # fmt: skip
    runner(actor.extension.process).cancel(actor.kind, actor.name, wf.id, pos)
    raise StepFailed(name, error)


async def start_branch(
    engine: BranchEngine,
    wf: WorkflowRow,
    pos: int,
    name: str,
    branch: str,
    ord: int,
    at: tuple[int, int],
    fn: BranchFn,
    timeout: float | None,
    kept: list[str],
    now: float,
) -> None:
    """Start run ``at`` (``(attempt, run)``) of ``branch``: its row, its history line (with the
    branches ``kept``), its lease wake-up, its task."""
    attempt, run = at
    actor, lease, store = engine.actor, engine.lease, engine.store
    before = store.branch(wf.id, pos, branch)
    store.put_branch(
        wf.id, pos, branch, ord, StepStatus.RUNNING, now, attempt=attempt, run=run, wake_at=now + lease
    )
    store.set_branch_progress(wf.id, pos, branch, None, None)  # the report shown is the running run's
    of = engine.of
    fence = (wf.id, wf.generation, pos, branch, attempt, run)

    nonce = wf.nonce  # the run's fence: of this workflow, not of one started again under its id

    def current(a: Actor) -> bool:
        return holds_branch(of(a), *fence, nonce)

    def write(a: Actor, report: Callable[[float], str], kept: str | None) -> None:
        engine = of(a)
        engine.store.set_branch_progress(wf.id, pos, branch, report(engine.now), kept)

    what = f"run {run} of attempt {attempt} of branch {branch!r} of {name!r}"
    turns = fenced(actor.extension.process, actor.kind, actor.name, current, what)
    ticket = StepAttempt(
        wf.id, f"{name}/{branch}", f"{wf.step_prefix}:{wf.generation}:{pos}:{branch}", attempt, run,
        before.checkpoint if before is not None else None, reporter(turns, write), turns,
    )  # fmt: skip
    store.log(
        wf.id, wf.generation, "attempt_started", now, position=pos, name=name, attempt=attempt,
        detail={"branch": branch, "run": run, "idempotency_key": ticket.idempotency_key, "kept": kept},
    )  # fmt: skip
    payload = {"why": "branch_lease", "id": wf.id, "gen": wf.generation, "pos": pos, "branch": branch}
    payload |= {"attempt": attempt, "run": run, "nonce": wf.nonce}
    await schedule_wake(
        actor, now + lease, payload, key=_lease_key(wf.step_prefix, wf.generation, pos, branch, attempt, run)
    )
    key: RunKey = (actor.kind, actor.name, wf.id, wf.generation, pos, attempt, run, branch)

    async def claimed(a: Actor) -> bool:
        return current(a)

    def finish(outcome: Outcome) -> Callable[[Actor], Awaitable[None]]:
        async def record(a: Actor) -> None:
            await finish_branch(of(a), *fence, outcome, nonce)

        return record

    runner(actor.extension.process).spawn(key, lambda: fn(ticket), timeout, claimed, finish)


# -- the engine's side ------------------------------------------------------------------------------
def holds_branch(
    engine: BranchEngine,
    wid: str,
    gen: int,
    pos: int,
    branch: str,
    attempt: int,
    run: int,
    nonce: str | None = None,
) -> bool:
    """Whether run ``(attempt, run)`` of ``branch`` of the join at ``pos`` is current: the same
    generation (of the workflow drawn with ``nonce``, when given), the workflow not finished, the
    join running, the branch running that run."""
    store = engine.store
    wf = store.get(wid)
    if wf is None or wf.generation != gen or wf.status.terminal:
        return False
    if nonce is not None and wf.nonce != nonce:
        return False
    rec = store.step(wid, pos)
    if rec is None or rec.kind is not StepKind.PARALLEL or rec.status is not StepStatus.RUNNING:
        return False
    row = store.branch(wid, pos, branch)
    return row is not None and row.status is StepStatus.RUNNING and (row.attempt, row.run) == (attempt, run)


async def finish_branch(
    engine: BranchEngine,
    wid: str,
    gen: int,
    pos: int,
    branch: str,
    attempt: int,
    run: int,
    outcome: Outcome,
    nonce: str | None = None,
) -> None:
    """Record a branch run's outcome (fenced): its result is kept in its row (a pending write of the
    join) before the advance that may complete the join."""
    if not holds_branch(engine, wid, gen, pos, branch, attempt, run, nonce):
        return
    if outcome.error:
        outcome = replace(outcome, error=clean_error(engine.actor, wid, outcome.error))
    store, now = engine.store, engine.now
    wf = store.get(wid)
    assert wf is not None
    await engine.actor.cancel_schedule(_lease_key(wf.step_prefix, gen, pos, branch, attempt, run))
    row = store.branch(wid, pos, branch)
    assert row is not None
    if outcome.ok:
        try:
            text = encode(outcome.result, f"the result of branch {branch!r}")
        except Exception as exc:
            outcome = Outcome(False, error=clean_error(engine.actor, wid, short(str(exc))), retryable=False)
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


def _step_name(engine: BranchEngine, wid: str, pos: int) -> str | None:
    rec = engine.store.step(wid, pos)
    return None if rec is None else rec.name


async def branch_lease(engine: BranchEngine, payload: dict[str, Any]) -> None:
    """A branch run's lease is up: if this process's runner still runs it, look again a lease later;
    otherwise it was lost with its process: ``lost`` (or ``failed`` after ``MAX_LOST_RUNS``), then
    advance, which runs it again under the same key."""
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
