"""The orchestrator: one agent's runs, as a state machine (docs/design.md, *Agent runtime*).

Every method runs inside a turn of the agent, so each transition commits together with its events.
The orchestrator is the face of its parts, one concern each (:mod:`roost.agent.context`):

- :attr:`~Orchestrator.runs` — turns and runs: start, cancel, continue, input, the end;
- :attr:`~Orchestrator.loop` — each run's workflow on the core: its body, the model/tool loop;
- :attr:`~Orchestrator.steps` — the pieces of a run: items, model steps, waits;
- :attr:`~Orchestrator.approvals` — approvals and grants;
- :attr:`~Orchestrator.project` — the project's files and heavy slot;
- :attr:`~Orchestrator.jobs` — the job lifecycle on the workflow core (start, an attempt's turns, its end);
- :attr:`~Orchestrator.execution` — tool contexts and inline steps;
- :attr:`~Orchestrator.verification` — the run's end through its stop condition;
- :attr:`~Orchestrator.reads` — the read-only callables;
- :attr:`~Orchestrator.capabilities` — the capability sessions of MCP servers;
- :attr:`~Orchestrator.streams` — streamed model output (messages and ``model_delta`` events);
- :attr:`~Orchestrator.contexts` — compaction and reset of a session's context.
- :attr:`~Orchestrator.workspaces` — the runs' sandbox workspaces.
- :attr:`~Orchestrator.delegations` — steps handed to worker agents, and tasks taken as one.

A run that ends (completed, failed or cancelled) is handed to :meth:`roost.agent.Agent.on_run_end`
once the part that ended it is done (:meth:`Orchestrator.settle`), in the same turn.

The parts talk to the other modules through their contracts only: policy, memory, catalog, models,
records (store and payload policy), telemetry (events). They see the agent and each other through
:mod:`roost.agent.interfaces` (:class:`~roost.agent.interfaces.AgentHost`,
:class:`~roost.agent.interfaces.OrchestratorApi`), which this class and :class:`roost.agent.Agent`
satisfy: the agent imports the orchestrator, the orchestrator its parts, and nothing imports back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roost.agent.approvals import Approvals
from roost.agent.capabilities import Capabilities
from roost.agent.compaction import Contexts
from roost.agent.delegation import Delegations
from roost.agent.execution import Execution
from roost.agent.interfaces import Verdict
from roost.agent.jobs import JobLifecycle
from roost.agent.loop import Loop
from roost.agent.project import Project
from roost.agent.reads import Reads
from roost.agent.records import Records
from roost.agent.runs import Runs
from roost.agent.status import FINISHED
from roost.agent.steps import Steps
from roost.agent.streaming import Streams
from roost.agent.telemetry import Telemetry
from roost.agent.verification import Verification
from roost.agent.workspaces import Workspaces

if TYPE_CHECKING:
    from roost.agent.interfaces import AgentHost

__all__ = ["FINISHED", "Orchestrator", "Verdict"]


class Orchestrator:
    """One agent's runtime: its records, its timeline, and the parts (see the module doc)."""

    def __init__(self, agent: AgentHost, records: Records, telemetry: Telemetry) -> None:
        self.agent = agent
        self.records = records
        self.telemetry = telemetry
        self.project = Project(self)
        self.execution = Execution(self)
        self.steps = Steps(self)
        self.loop = Loop(self)
        self.approvals = Approvals(self)
        self.jobs = JobLifecycle(self)
        self.verification = Verification(self)
        self.runs = Runs(self)
        self.reads = Reads(self)
        self.capabilities = Capabilities(self)
        self.streams = Streams(self)
        self.contexts = Contexts(self)
        self.workspaces = Workspaces(self)
        self.delegations = Delegations(self)
        #: Runs that ended in this turn and are not yet handed to ``agent.on_run_end``.
        self.ended: list[str] = []

    async def settle(self) -> None:
        """Hand each run that ended to ``agent.on_run_end`` (which may start or end others)."""
        while self.ended:
            run_id = self.ended.pop(0)
            run = self.records.store().get("runs", run_id)
            if run is not None and run["status"] in FINISHED:  # not an id a rolled-back turn left
                await self.delegations.run_ended(run)  # its workers cancelled; its origin told
                await self.agent.on_run_end(run)
                await self.contexts.after_run(run)  # a turn boundary: compaction's triggers
