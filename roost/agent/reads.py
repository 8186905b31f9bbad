"""Reads: the callables that change nothing (``get_turn``, ``get_run``, ``session``, ``project``).

Each one checks that the caller may read what it asks for (the session's principal), and shows
arguments and errors in their shown form (secrets as digests, errors shortened).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from roost.actors import InvalidArguments
from roost.agent import memory
from roost.agent.context import Part
from roost.agent.errors import AgentNotFound
from roost.agent.records import Records
from roost.agent.status import JobStatus
from roost.workflows.engine import engine_of

if TYPE_CHECKING:
    from roost.actors import Actor

__all__ = ["Reads"]

shown = Records.shown

TURN_KEYS = (
    "turn_id",
    "run_id",
    "session_id",
    "status",
    "needs_confirmation",
    "output_text",
    "trace_id",
    "created_at",
)
RUN_KEYS = (
    "run_id",
    "turn_id",
    "session_id",
    "tenant",
    "principal",
    "status",
    "waiting",
    "mode",
    "trace_id",
    "hops",
    "question",
    "stop_condition",
    "verification_result",
    "verifier",
    "evidence_refs",
    "output",
    "retryable",
    "created_at",
    "updated_at",
    "finished_at",
)


class Reads(Part):
    def turn(self, turn_id: Any) -> dict[str, Any]:
        store = self.store
        turn = store.get("turns", turn_id) if isinstance(turn_id, str) else None
        if turn is None:
            raise AgentNotFound(message=f"no turn {turn_id!r}")
        self.guard(self.run(turn["run_id"])["principal"], write=False)
        items = store.select("items", "turn_id = ?", (turn_id,), order="step_index")
        return {
            **{k: turn[k] for k in TURN_KEYS},
            "input_text": memory.short(turn["input_text"], 1000),
            "error": memory.short(turn["error"]),
            "items": [
                {
                    "item_id": i["item_id"],
                    "step_index": i["step_index"],
                    "tool_name": i["tool_name"],
                    "args": shown(i["args"]),
                    "approval_mode": i["approval_mode"],
                    "status": i["status"],
                    "result": i["result"],
                    "error": memory.short(i["error"]),
                    "runs": i["runs"],
                }
                for i in items
            ],
        }

    def _leases(self, job_ids: list[str]) -> dict[str, float]:
        """Where the leases of running jobs end now: their workflow steps' (the core moves it at each
        lease check that finds the attempt alive; the job's row has it from its last try's start or
        report)."""
        if not job_ids:
            return {}
        marks = ", ".join("?" * len(job_ids))
        sql = "SELECT workflow_id, wake_at FROM roost_wf_steps WHERE position = 0"
        sql += f" AND workflow_id IN ({marks})"
        rows = self.store.rows(sql, job_ids)
        return {str(r[0]): float(r[1]) for r in rows if r[1] is not None}

    def run_card(self, run_id: Any) -> dict[str, Any]:
        run = self.run(run_id)
        self.guard(run["principal"], write=False)
        jobs = self.store.select("jobs", "run_id = ?", (run_id,), order="created_at")
        leases = self._leases([j["job_id"] for j in jobs if j["status"] == JobStatus.RUNNING])
        return {
            **{k: run[k] for k in RUN_KEYS},
            "error": memory.short(run["error"], 500),
            "jobs": [
                {
                    "job_id": j["job_id"],
                    "item_id": j["item_id"],
                    "kind": j["job_kind"],
                    "tool": j["tool_name"],
                    "status": j["status"],
                    "attempt": j["attempt"],
                    "max_attempts": j["max_attempts"],
                    "progress": j["progress"],
                    "lease_expires_at": leases.get(j["job_id"], j["lease_expires_at"]),
                    "error": memory.short(j["error"]),
                    # tokens a model step used, as its endpoint reported them (None: not reported)
                    "usage": j["result"].get("usage") if isinstance(j["result"], dict) else None,
                }
                for j in jobs
            ],
            # the text each model step streamed so far (docs/design.md, *Streamed model output*)
            "messages": [
                {
                    "message_id": m["message_id"],
                    "hop": m["hop"],
                    "status": m["status"],
                    "text": m["text"],
                    "chars": m["chars"],
                    "error": memory.short(m["error"]),
                }
                for m in self.orchestrator.streams.of_run(run["run_id"])
            ],
            "capability_sessions": self.orchestrator.capabilities.cards(run_id),
            "workspace": next(iter(self.orchestrator.workspaces.cards(run_id)), None),
            "delegations": self.orchestrator.delegations.of_run(run_id),
            "workflow": self._workflow(run_id),
        }

    def run_history(self, run_id: Any, after: Any, limit: Any) -> dict[str, Any]:
        """A page of the run's workflow history (none for a run begun before runs were workflows)."""
        run = self.run(run_id)
        self.guard(run["principal"], write=False)
        if (
            isinstance(after, bool)
            or not isinstance(after, int)
            or isinstance(limit, bool)
            or not isinstance(limit, int)
        ):
            raise InvalidArguments(message="after and limit must be integers")
        engine = engine_of(cast("Actor", self.agent))
        if engine.store.get(run["run_id"]) is None:
            return {"entries": [], "next": None}
        return engine.history(run["run_id"], after, limit)

    def _workflow(self, run_id: str) -> dict[str, Any] | None:
        """The run's workflow as the core has it (None: a run of an earlier release has none)."""
        store = engine_of(cast("Actor", self.agent)).store
        wf = store.get(run_id)
        if wf is None:
            return None
        steps = store.steps(run_id)
        last = steps[-1].to_json(result=False) if steps else None
        return {"status": str(wf.status), "waiting": wf.waiting, "steps": len(steps), "last_step": last}

    def session(self, session_id: Any) -> dict[str, Any]:
        if not isinstance(session_id, str) or not 0 < len(session_id) <= 128:
            raise InvalidArguments(message="session_id must be a string of 1 to 128 characters")
        row = self.store.get("sessions", session_id)
        if row is not None:  # a session nobody opened is an empty card
            self.guard(row["principal"], write=False)
        card = memory.session_card(self.store, session_id, self.agent.seq, dict(self.agent.profile))
        caps = self.orchestrator.capabilities
        card["capability_sessions"] = [c for t in card["open_turns"] for c in caps.cards(t["run_id"])]
        return card

    def project(self) -> dict[str, Any]:
        return self.orchestrator.project.read()
