"""Memory: the session card a reconnecting client gets, its running summary, and what the model sees.

The card is compact on purpose: ids, statuses, short texts. No blob contents, no tracebacks (errors
are one line, at most 200 characters), arguments after the payload policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from roost.actors import Principal
from roost.agent.payloads import display
from roost.agent.status import ApprovalStatus, ItemStatus, RunStatus
from roost.agent.store import Row, Store

__all__ = ["ensure_session", "principal_key", "recent_turns", "session_card", "short", "summarize"]

SUMMARY_LINES = 10


def short(text: Any, limit: int = 200) -> str | None:
    """One line of at most ``limit`` characters (errors and texts in cards and summaries)."""
    if text is None:
        return None
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def principal_key(principal: Principal) -> str:
    """Who owns a session or a run: the principal's id within its tenant."""
    return principal.id if principal.tenant is None else f"{principal.tenant}\x00{principal.id}"


def ensure_session(store: Store, session_id: str, principal: Principal | None, now: float) -> Row:
    row = store.get("sessions", session_id)
    if row is None:
        row = {
            "session_id": session_id,
            "principal": principal_key(principal) if principal else None,
            "profile": {},
            "summary": "",
            "active_turn_id": None,
            "pending_approval_id": None,
            "turns": 0,
            "created_at": now,
            "updated_at": now,
        }
        store.insert("sessions", row)
    return row


def recent_turns(
    store: Store,
    session_id: str,
    limit: int,
    *,
    before: str | None = None,
    after: int = 0,
    carried: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The session's last ``limit`` turns but ``before``; ``after``: only those of runs above that
    ordinal or in ``carried`` (a compacted context's cursor and carried runs, roost.agent.compaction)."""
    where = "session_id = ? AND turn_id != ?"
    params: list[Any] = [session_id, before or ""]
    if after:
        marks = ", ".join("?" * len(carried))
        also = f" OR run_id IN ({marks})" if carried else ""
        where += (
            " AND turn_id IN (SELECT turn_id FROM roost_agent_runs "
            f"WHERE session_id = ? AND (ordinal > ?{also}))"
        )
        params += [session_id, after, *carried]
    rows = store.select("turns", where, params, order=f"created_at DESC LIMIT {int(limit)}")
    return [
        {"input": short(r["input_text"]), "status": r["status"], "output": short(r["output_text"])}
        for r in reversed(rows)
    ]


def summarize(summary: str, turn: Row, status: str, output: str | None) -> str:
    """The session summary with one more line: what was asked and how it ended."""
    line = f"{short(turn['input_text'], 80)} → {status}"
    if output:
        line += f": {short(output, 80)}"
    lines = [*(summary.splitlines() if summary else []), line]
    return "\n".join(lines[-SUMMARY_LINES:])


def session_card(store: Store, session_id: str, cursor: int, profile: dict[str, Any]) -> dict[str, Any]:
    """The scene for a reconnecting client: every open turn of the session (the newest is
    ``active_turn``), every pending approval (the oldest is ``pending_approval``), the cursor, the
    profile and the summary. Built from the runs and approvals themselves, so it cannot drift."""
    row = store.get("sessions", session_id)
    runs = store.select(
        "runs",
        "session_id = ? AND status IN (?, ?)",
        (session_id, RunStatus.QUEUED, RunStatus.IN_PROGRESS),
        order="ordinal",
    )
    approvals = store.select(
        "approvals", "session_id = ? AND status = ?", (session_id, ApprovalStatus.PENDING), order="created_at"
    )
    rank = {r["run_id"]: r["ordinal"] for r in runs}
    approvals.sort(key=lambda a: (a["created_at"], rank.get(a["run_id"], 0)))
    open_turns = [_turn_card(store, run) for run in runs]
    pending = [
        {
            "approval_id": a["approval_id"],
            "turn_id": a["turn_id"],
            "tool": a["tool_name"],
            "mode": a["mode"],
            "args": display(a["args"]),
            "proposed_scope": display(a["proposed_scope"]),
        }
        for a in approvals
    ]
    return {
        "session_id": session_id,
        "cursor": cursor,
        "profile": {**profile, **(row["profile"] if row else {})},
        "summary": row["summary"] if row else "",
        "turns": row["turns"] if row else 0,
        "active_turn": open_turns[-1] if open_turns else None,
        "open_turns": open_turns,
        "pending_approval": pending[0] if pending else None,
        "pending_approvals": pending,
    }


def _turn_card(store: Store, run: Row) -> dict[str, Any]:
    turn = store.get("turns", run["turn_id"])
    items = store.select("items", "run_id = ?", (run["run_id"],), order="step_index")
    current = next((i for i in items if i["status"] not in (ItemStatus.COMPLETED, ItemStatus.SKIPPED)), None)
    job = None
    if current is not None:
        jobs = store.select("jobs", "item_id = ?", (current["item_id"],), order="created_at DESC LIMIT 1")
        job = jobs[0] if jobs else None
    progress = None
    if job is not None:
        progress = {k: v for k, v in job["progress"].items() if k != "checkpoint"}
    return {
        "turn_id": run["turn_id"],
        "run_id": run["run_id"],
        "status": turn["status"] if turn else run["status"],
        "waiting": run["waiting"],
        "input": short(turn["input_text"]) if turn else None,
        "steps": {"done": sum(i["status"] == ItemStatus.COMPLETED for i in items), "total": len(items)},
        "current": None
        if current is None
        else {
            "item_id": current["item_id"],
            "tool": current["tool_name"],
            "status": current["status"],
            "progress": progress,
        },
        "error": short(run["error"]),
    }
