"""Turns and runs: a turn is one request of a session; its run is what the runtime does about it.

This part starts a turn, stops it (``cancel``), takes it up again (``continue_run``,
``provide_input``) and ends it; the steps in between are :mod:`roost.agent.steps`.

Guarantees (tests in ``tests/test_agent_runtime.py``):

- **A completed step is never run again**: ``continue_run`` resets only the items that are not
  completed, and resumes after the last completed one.
- **Cancel stops everything the run owns**: its jobs (their workflows cancelled, their attempts'
  tasks stopped at once), its running and awaiting items (``skipped``), its pending approvals, and the
  project's heavy slot; the run is ``cancelled`` and ``continue_run`` can resume it.
- **Only the session's principal** (tenant and id) may read or change its runs.
"""

from __future__ import annotations

import hashlib
from typing import Any

from roost.actors import InvalidArguments
from roost.agent import memory, policy
from roost.agent.context import Part
from roost.agent.errors import AgentNotFound, InvalidTransition
from roost.agent.payloads import PayloadError
from roost.agent.records import Records
from roost.agent.status import FINISHED, EventStatus, ItemStatus, RunStatus, TurnStatus, Waiting
from roost.agent.store import Row, new_id

__all__ = ["Runs"]

shown = Records.shown
#: The items a run's end stops (skipped): the one running, and one waiting for its approval.
_STOPPED_ITEMS = (ItemStatus.RUNNING, ItemStatus.AWAITING_APPROVAL)


class Runs(Part):
    def _default_session(self) -> str:
        """A caller's own session when it names none: derived from its principal with the agent's
        secret salt, so that nobody can open it first under another principal."""
        principal = self.agent.principal
        if principal is None:
            return "default"
        key = memory.principal_key(principal)
        return "~" + hashlib.sha256(f"{self.records.salt()}\0{key}".encode()).hexdigest()[:24]

    def session_for(self, session_id: Any, *, write: bool = True) -> str:
        """The session a request names (its caller's own when None), checked: a valid id, not a
        reserved one, and, if it exists, the caller's (PolicyRefused otherwise)."""
        principal = self.agent.principal
        if session_id is None:
            session_id = self._default_session()
        elif not isinstance(session_id, str) or not 0 < len(session_id) <= 128:
            raise InvalidArguments(message="session_id must be a string of 1 to 128 characters")
        elif session_id.startswith("~") and principal is not None and session_id != self._default_session():
            raise InvalidArguments(message="session ids starting with ~ are reserved")
        row = self.store.get("sessions", session_id)
        if row is not None:
            self.guard(row["principal"], write=write)
        return str(session_id)

    def precheck(self, text: Any) -> str:
        """A request's pre-checks (roost.agent.policy): refused with a clear error, else the text."""
        return policy.precheck(text, self.agent.principal, self.agent.settings().max_input_chars)

    # -- requests ----------------------------------------------------------------------------------
    async def start(self, text: Any, session_id: str | None, background: bool) -> dict[str, Any]:
        """``turn``: a new turn and its run, advanced now (or by a wake-up when ``background``)."""
        agent = self.agent
        principal = agent.principal
        text = self.precheck(text)
        turn_id, run_id = new_id("turn"), new_id("run")
        self.records.concern(run_id)  # a new run knows no secrets yet: nothing else is scrubbed
        session_id = self.session_for(session_id)
        if not isinstance(background, bool):
            raise InvalidArguments(message="background must be true or false")
        clean = self.records.clean(text)
        if not isinstance(clean, str):  # a request is never long enough for the blob store
            clean = str(clean)
        now = self.now
        store = self.store
        session = memory.ensure_session(store, session_id, principal, now)
        self.guard(session["principal"], write=True)
        request = self.records.keep(text)  # what the local planner reads (credentials kept)
        trace_id = agent.extension.trace_id
        store.insert(
            "turns",
            {
                "turn_id": turn_id,
                "run_id": run_id,
                "session_id": session_id,
                "input_text": clean,
                "normalized_command": {"text": " ".join(clean.lower().split()), "background": background},
                "status": TurnStatus.CREATED,
                "trace_id": trace_id,
                "created_at": now,
                "updated_at": now,
            },
        )
        ordinal = store.scalar("SELECT coalesce(max(ordinal), 0) + 1 FROM roost_agent_runs")
        run: Row = {
            "run_id": run_id,
            "ordinal": ordinal,
            "turn_id": turn_id,
            "session_id": session_id,
            "tenant": principal.tenant if principal else None,
            "principal": memory.principal_key(principal) if principal else None,
            "request": request,
            "status": RunStatus.IN_PROGRESS,
            "waiting": None,
            "mode": "background" if background else "sync",
            "trace_id": trace_id,
            "inputs": [],
            "stop_condition": agent.stop_condition,
            "evidence_refs": [],
            "on_core": 1,
            "created_at": now,
            "updated_at": now,
        }
        store.insert("runs", run)
        run = self.run(run_id)
        store.update(
            "sessions", session_id, active_turn_id=turn_id, turns=session["turns"] + 1, updated_at=now
        )
        self.event(
            "turn_started",
            run,
            status=EventStatus.CREATED,
            payload={"input": clean, "session_id": session_id},
        )
        await self.orchestrator.loop.start(run_id, background=background)
        await self.orchestrator.steps.drain_released()
        return self.reply(run_id)

    def reply(self, run_id: str) -> dict[str, Any]:
        """What every call that changes a run answers: ids (the session's too, so that a caller that
        named none, over HTTP say, can ask for its card), status, wait, and the outcome if ended."""
        run = self.run(run_id)
        out = {
            "turn_id": run["turn_id"],
            "run_id": run_id,
            "session_id": run["session_id"],
            "status": run["status"],
            "waiting": run["waiting"],
        }
        if run["status"] in FINISHED:
            out["output"] = run["output"]
            out["verification_result"] = run["verification_result"]
            out["error"] = memory.short(run["error"])
        return out

    # -- user control ------------------------------------------------------------------------------
    async def cancel(self, turn_id: Any) -> dict[str, Any]:
        """``cancel``: stop the turn and everything its run owns (see the module doc)."""
        store = self.store
        orc = self.orchestrator
        turn = store.get("turns", turn_id) if isinstance(turn_id, str) else None
        if turn is None:
            raise AgentNotFound(message=f"no turn {turn_id!r}")
        run = self.run(turn["run_id"])
        self.guard(run["principal"], write=True)
        if run["status"] in FINISHED:
            raise InvalidTransition(message=f"turn {turn_id} already ended ({run['status']})")
        now = self.now
        await self.stop_owned(run, "cancelled")
        await orc.loop.cancel(run["run_id"])
        self.set_run(run, status=RunStatus.CANCELLED, waiting=None, finished_at=now)
        self.set_turn(run, status=TurnStatus.CANCELLED)
        store.update("sessions", run["session_id"], updated_at=now)
        self.event("turn_cancelled", run, status=EventStatus.CANCELLED, payload={})
        orc.ended.append(run["run_id"])
        orc.capabilities.close_run(run)
        orc.workspaces.close_run(run)
        orc.project.release_heavy(run["run_id"])
        await orc.steps.drain_released()
        return self.reply(run["run_id"])

    async def stop_owned(self, run: Row, why: str) -> None:
        """Stop what the run owns, as its end (a cancel, a failed workflow) requires: its jobs
        cancelled, its streaming messages too, its running and awaiting items skipped (``why``),
        its pending approvals cancelled."""
        orc = self.orchestrator
        await orc.jobs.cancel_run(run)
        orc.streams.cancel_run(run)
        self.store.execute(
            "UPDATE roost_agent_items SET status = ?, error = ?, updated_at = ? "
            "WHERE run_id = ? AND status IN (?, ?)",
            (
                ItemStatus.SKIPPED,
                why,
                self.now,
                run["run_id"],
                ItemStatus.RUNNING,
                ItemStatus.AWAITING_APPROVAL,
            ),
        )
        orc.approvals.cancel_pending(run)

    async def continue_run(self, run_id: Any) -> dict[str, Any]:
        """``continue_run``: a cancelled or retryable failed run goes on after its last completed step."""
        run = self.run(run_id)
        self.guard(run["principal"], write=True)
        if not (
            run["status"] == RunStatus.CANCELLED or (run["status"] == RunStatus.FAILED and run["retryable"])
        ):
            raise InvalidTransition(
                message=f"run {run_id} is {run['status']}; "
                "only a cancelled or retryable failed run can continue"
            )
        self.orchestrator.loop.check_continuable(run)
        store = self.store
        now = self.now
        last = store.scalar(
            "SELECT max(step_index) FROM roost_agent_items WHERE run_id = ? AND status = ?",
            (run_id, ItemStatus.COMPLETED),
        )
        store.execute(
            "UPDATE roost_agent_items SET status = ?, error = NULL, grant_id = NULL, updated_at = ? "
            "WHERE run_id = ? AND status != ?",
            (ItemStatus.PENDING, now, run_id, ItemStatus.COMPLETED),
        )
        self.set_run(
            run,
            status=RunStatus.IN_PROGRESS,
            waiting=None,
            error=None,
            retryable=0,
            finished_at=None,
            verification_result=None,
        )
        self.set_turn(run, status=TurnStatus.RUNNING, error=None)
        store.update("sessions", run["session_id"], active_turn_id=run["turn_id"], updated_at=now)
        self.event("run_continued", run, status=EventStatus.IN_PROGRESS, payload={"after_step_index": last})
        await self.orchestrator.loop.rewind(run_id)
        await self.orchestrator.steps.drain_released()
        return self.reply(run_id)

    async def provide_input(self, run_id: Any, payload: Any) -> dict[str, Any]:
        """``provide_input``: answer a run waiting for input; it goes on."""
        run = self.run(run_id)
        self.guard(run["principal"], write=True)
        if run["waiting"] != Waiting.INPUT:
            raise InvalidTransition(message=f"run {run_id} is not waiting for input")
        if self.orchestrator.capabilities.answer(run, payload):  # an MCP server asked (mcp_tools)
            await self.orchestrator.loop.input_given(run_id)
            await self.orchestrator.steps.drain_released()
            return self.reply(run_id)
        try:
            kept = self.records.keep(payload)
        except (PayloadError, TypeError) as exc:
            raise InvalidArguments(message=f"payload: {exc}") from None
        self.set_run(run, waiting=None, question=None, inputs=[*run["inputs"], kept])
        self.set_turn(run, status=TurnStatus.RUNNING)
        self.event("input_received", run, status=EventStatus.IN_PROGRESS, payload={"input": shown(kept)})
        await self.orchestrator.loop.input_given(run_id)
        await self.orchestrator.steps.drain_released()
        return self.reply(run_id)

    # -- the end -------------------------------------------------------------------------------------
    def fail(self, run: Row, error: str, *, retryable: bool, verification: str | None = None) -> None:
        """End the run ``failed`` (``verification``, if given, is recorded by the runtime's verifier)."""
        if verification is not None:
            self.set_run(run, verification_result=verification, verifier="runtime")
        self.end(run, RunStatus.FAILED, error=error, retryable=retryable)

    def end(
        self,
        run: Row,
        status: RunStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        retryable: bool = False,
    ) -> None:
        """End the run ``completed`` or ``failed``: the run, its turn, its session's summary, one
        ``turn_completed`` or ``turn_failed`` event, and the project's heavy slot released."""
        now = self.now
        store = self.store
        error = self.err(error, 500)
        self.set_run(
            run,
            status=status,
            waiting=None,
            output=output,
            error=error,
            retryable=int(retryable),
            finished_at=now,
        )
        completed = status == RunStatus.COMPLETED
        turn_status = TurnStatus.COMPLETED if completed else TurnStatus.FAILED
        self.set_turn(run, status=turn_status, output_text=output, error=error)
        session = store.get("sessions", run["session_id"])
        turn = store.get("turns", run["turn_id"])
        if session is not None and turn is not None:
            active = session["active_turn_id"]
            store.update(
                "sessions",
                run["session_id"],
                summary=memory.summarize(session["summary"], turn, turn_status, output or error),
                active_turn_id=None if active == run["turn_id"] else active,
                updated_at=now,
            )
        payload = {"output": output, "verification_result": run.get("verification_result")}
        if not completed:
            payload = {
                "error": error,
                "retryable": retryable,
                "verification_result": run.get("verification_result"),
            }
        self.event(
            "turn_completed" if completed else "turn_failed",
            run,
            status=EventStatus.COMPLETED if completed else EventStatus.FAILED,
            payload=payload,
        )
        self.orchestrator.capabilities.close_run(run)
        self.orchestrator.workspaces.close_run(run)
        self.orchestrator.project.release_heavy(run["run_id"])
        self.orchestrator.ended.append(run["run_id"])
