"""What a session's context holds and what a reset hands on: the visible turns and their budget, the
summariser's input, and the structured hand-off artifact (docs/design.md, *Compaction and reset*).

Pure functions over the rows of one turn's :class:`~roost.agent.store.Store`; the state machine that
calls them is :mod:`roost.agent.compaction`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from roost.agent import memory
from roost.agent.config import Budget
from roost.agent.models import SummaryMessage
from roost.agent.status import ApprovalStatus, ItemStatus, RunStatus
from roost.agent.store import Row, Store

__all__ = [
    "Measure",
    "ended_runs",
    "handoff",
    "measure",
    "messages_of",
    "open_runs",
    "passed",
    "render",
    "runs_of",
]

#: Runs of a session an operation looks at, at most (a budget passes long before this).
MAX_RUNS = 1000
#: Evidence references a hand-off carries at most.
MAX_EVIDENCE = 50


@dataclass(slots=True, frozen=True)
class Measure:
    """How much of a session's context the model sees: requests and answers, estimated tokens, hops."""

    messages: int
    tokens: int
    hops: int


def ended_runs(store: Store, session_id: str, after: int, carried: Sequence[str] = ()) -> list[Row]:
    """The session's ended runs above ordinal ``after`` or in ``carried``, oldest first, each with its
    turn's texts: the turns of its context that the model sees verbatim."""
    return _runs(store, session_id, after, carried, "status IN (?, ?, ?)", _ENDED)


def open_runs(store: Store, session_id: str) -> list[Row]:
    """The session's runs that have not ended (running, or waiting for approval, input, the project)."""
    return _runs(store, session_id, 0, (), "status IN (?, ?)", (RunStatus.QUEUED, RunStatus.IN_PROGRESS))


def runs_of(store: Store, turn_ids: Sequence[str]) -> list[Row]:
    """The runs of ``turn_ids`` (an operation's range), oldest first, each with its turn's texts."""
    if not turn_ids:
        return []
    marks = ", ".join("?" * len(turn_ids))
    return _with_texts(store, store.select("runs", f"turn_id IN ({marks})", tuple(turn_ids), order="ordinal"))


_ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


def _runs(
    store: Store, session_id: str, after: int, carried: Sequence[str], where: str, params: tuple[str, ...]
) -> list[Row]:
    also = f" OR run_id IN ({', '.join('?' * len(carried))})" if carried else ""
    runs = store.select(
        "runs",
        f"session_id = ? AND (ordinal > ?{also}) AND {where}",
        (session_id, after, *carried, *params),
        order=f"ordinal LIMIT {MAX_RUNS}",
    )
    return _with_texts(store, runs)


def _with_texts(store: Store, runs: list[Row]) -> list[Row]:
    for r in runs:
        turn = store.get("turns", r["turn_id"]) or {}
        r["input_text"] = turn.get("input_text")
        r["output_text"] = turn.get("output_text")
    return runs


def messages_of(runs: list[Row], clean: Callable[[str, str], str]) -> list[SummaryMessage]:
    """The requests and answers of ``runs`` as a summariser sees them: stored after the payload
    policy, and passed through ``clean(run_id, text)`` once more (that run's secrets scrubbed)."""
    out = []
    for r in runs:
        request = clean(r["run_id"], r["input_text"] or "")
        out.append(SummaryMessage(role="user", content=request, turn_id=r["turn_id"]))
        answer = r["output_text"] or r["error"]
        if answer:
            out.append(
                SummaryMessage(role="assistant", content=clean(r["run_id"], answer), turn_id=r["turn_id"])
            )
    return out


def measure(summary: str, runs: list[Row]) -> Measure:
    """The budget of ``summary`` plus ``runs``' turns: tokens are estimated as characters / 4."""
    chars = len(summary)
    messages = 0
    for r in runs:
        messages += 1
        chars += len(r["input_text"] or "")
        answer = r["output_text"] or r["error"]
        if answer:
            messages += 1
            chars += len(answer)
    return Measure(messages, math.ceil(chars / 4), sum(int(r["hops"]) for r in runs))


def step_text(item: Row) -> str:
    """One step of a run as its summariser sees it: ``tool {args} -> result`` (its status when it
    has no result), from the stored (policy-applied) record."""
    args = orjson.dumps(item["args"]).decode() if item["args"] is not None else "{}"
    outcome = orjson.dumps(item["result"]).decode() if item["result"] is not None else item["status"]
    return f"{item['tool_name']} {args} -> {outcome}"


def steps_of(items: list[Row], clean: Callable[[str], str]) -> list[SummaryMessage]:
    """The steps ``items`` of one run as its summariser sees them (role ``tool``), each through
    ``clean`` (the run's secrets scrubbed)."""
    return [
        SummaryMessage(role="tool", content=clean(step_text(i)), turn_id=str(i["turn_id"])) for i in items
    ]


def measure_steps(summary: str, items: list[Row], hops: int) -> Measure:
    """The budget of a run's visible steps: two messages each (the call and its result, as the model
    sees them), tokens estimated as characters / 4 with the summary before them, and ``hops``."""
    chars = len(summary) + sum(len(step_text(i)) for i in items)
    return Measure(2 * len(items), math.ceil(chars / 4), hops)


def passed(budget: Budget | None, seen: Measure) -> str | None:
    """The first bound of ``budget`` that ``seen`` passes (``messages``, ``tokens``, ``hops``), else None."""
    if budget is None:
        return None
    for name in ("messages", "tokens", "hops"):
        bound = getattr(budget, name)
        if bound is not None and getattr(seen, name) > bound:
            return name
    return None


def handoff(
    store: Store,
    session_id: str,
    summarised: list[Row],
    state: str,
    *,
    from_context: str,
    note: str | None,
) -> dict[str, Any]:
    """The structured hand-off of a reset: ``state`` (the summary), ``next_steps`` (open runs and the
    steps they have left), ``open_approvals``, ``evaluation`` (the last ended runs' verification),
    ``evidence_refs``, ``note`` and ``survived`` (what the fresh context carries)."""
    runs = open_runs(store, session_id)
    next_steps = []
    for r in runs:
        items = store.select(
            "items",
            "run_id = ? AND status NOT IN (?, ?)",
            (r["run_id"], ItemStatus.COMPLETED, ItemStatus.SKIPPED),
            order="step_index",
        )
        next_steps.append(
            {
                "run_id": r["run_id"],
                "turn_id": r["turn_id"],
                "request": memory.short(r["input_text"], 200),
                "waiting": r["waiting"],
                "steps_left": [i["tool_name"] for i in items],
            }
        )
    approvals = store.select(
        "approvals", "session_id = ? AND status = ?", (session_id, ApprovalStatus.PENDING), order="created_at"
    )
    open_approvals = [
        {"approval_id": a["approval_id"], "run_id": a["run_id"], "tool": a["tool_name"], "mode": a["mode"]}
        for a in approvals
    ]
    evaluation = [
        {
            "run_id": r["run_id"],
            "status": r["status"],
            "stop_condition": r["stop_condition"],
            "verification_result": r["verification_result"],
            "verifier": r["verifier"],
        }
        for r in summarised[-5:]
    ]
    evidence: list[str] = []
    for r in summarised:
        for ref in r["evidence_refs"] or ():
            if isinstance(ref, str) and ref not in evidence:
                evidence.append(ref)
    evidence = evidence[-MAX_EVIDENCE:]
    return {
        "from_context_id": from_context,
        "state": state,
        "next_steps": next_steps,
        "open_approvals": open_approvals,
        "evaluation": evaluation,
        "evidence_refs": evidence,
        "note": note,
        "survived": {
            "turns_summarised": len(summarised),
            "open_run_ids": [r["run_id"] for r in runs],
            "open_approval_ids": [a["approval_id"] for a in open_approvals],
            "evidence_refs": len(evidence),
        },
    }


def render(h: dict[str, Any]) -> str:
    """A hand-off as the fresh context's model sees it (its summary)."""
    lines = [f"Hand-off from context {h['from_context_id']}:"]
    if h["state"]:  # a string (or, past the blob threshold, its blob reference)
        lines.append(str(h["state"]))
    if h["note"]:
        lines.append(f"Note: {h['note']}")
    for s in h["next_steps"]:
        wait = f" (waiting for {s['waiting']})" if s["waiting"] else ""
        left = ", ".join(s["steps_left"]) or "no step planned"
        lines.append(f"Next: {s['request']}{wait}: {left}")
    for a in h["open_approvals"]:
        lines.append(f"Open approval {a['approval_id']}: {a['tool']} ({a['mode']})")
    for e in h["evaluation"]:
        lines.append(f"Evaluated {e['run_id']}: {e['status']}, {e['verification_result'] or 'unverified'}")
    if h["evidence_refs"]:
        lines.append("Evidence: " + ", ".join(str(ref) for ref in h["evidence_refs"]))
    return "\n".join(lines)
