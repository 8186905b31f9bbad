"""What every part of the orchestrator shares: the agent, its records and timeline, the turn's clock,
and the few helpers on run and turn rows that all of them use.

The orchestrator (:mod:`roost.agent.orchestrator`) is cut by concern into parts — runs
(:mod:`~roost.agent.runs`), steps (:mod:`~roost.agent.steps`), approvals
(:mod:`~roost.agent.approvals`), the project's heavy slot (:mod:`~roost.agent.project`), jobs
(:mod:`~roost.agent.jobs`), verification (:mod:`~roost.agent.verification`), reads
(:mod:`~roost.agent.reads`) — each a :class:`Part` that reaches its siblings through the orchestrator.
A part sees the agent and the orchestrator through their contracts (:mod:`roost.agent.interfaces`):
no part imports a sibling, the orchestrator or the agent, so the package's imports have no cycle.
Every method of every part runs inside a turn of the agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from roost.agent import memory
from roost.agent.errors import AgentNotFound, PolicyRefused
from roost.agent.store import Row, Store

if TYPE_CHECKING:
    from roost.agent.interfaces import AgentHost, OrchestratorApi
    from roost.agent.records import Records
    from roost.agent.telemetry import Telemetry

__all__ = ["Part"]


class Part:
    """One concern of the orchestrator (see the module doc)."""

    def __init__(self, orchestrator: OrchestratorApi) -> None:
        self.orchestrator = orchestrator
        self.agent: AgentHost = orchestrator.agent
        self.records: Records = orchestrator.records
        self.telemetry: Telemetry = orchestrator.telemetry

    @property
    def store(self) -> Store:
        """The current turn's rows."""
        return self.records.store()

    @property
    def now(self) -> float:
        """The turn's clock reading: every record of a turn carries the same time."""
        return self.agent.extension.now

    @property
    def project_id(self) -> str:
        return self.agent.name

    def event(self, event_type: str, run: Row, **kw: Any) -> int:
        return self.telemetry.event(event_type, run, **kw)

    def run(self, run_id: Any, cols: Sequence[str] = ()) -> Row:
        """The run ``run_id`` (what follows concerns it, and its secrets); AgentNotFound if none.
        ``cols``: only those columns (the whole row if none are named)."""
        store = self.store
        if not isinstance(run_id, str):
            run = None
        else:
            run = store.fields("runs", run_id, cols) if cols else store.get("runs", run_id)
        if run is None:
            raise AgentNotFound(message=f"no run {run_id!r}")
        self.records.concern(run["run_id"])
        return run

    def set_run(self, run: Row, **values: Any) -> Row:
        self.store.update("runs", run["run_id"], updated_at=self.now, **values)
        run.update(values)
        return run

    def set_turn(self, run: Row, **values: Any) -> None:
        self.store.update("turns", run["turn_id"], updated_at=self.now, **values)

    def guard(self, owner: str | None, *, write: bool) -> None:
        """Only the principal (tenant and id) a session belongs to may read or change its runs;
        read-only callers change nothing; sessions and runs made by the server itself (no owner)
        are the server's. In-process callers (no principal: server code, wake-ups) are trusted."""
        principal = self.agent.principal
        if principal is None:
            return
        if write and principal.claims.get("read_only"):
            raise PolicyRefused(message="read-only callers cannot change runs")
        if owner != memory.principal_key(principal):
            raise PolicyRefused(message="this session belongs to another principal")

    def err(self, text: str | None, limit: int = 200) -> str | None:
        """Free text for a record or an event: cleaned first, then shortened (never the reverse,
        which could cut a credential below the length its pattern recognises)."""
        return memory.short(self.records.clean_text(text), limit) if text is not None else None
