"""The contracts inside the agent runtime: what the orchestrator's parts need of the agent they run in
(:class:`AgentHost`, and the :class:`Verdict` its ``verify`` returns) and of each other
(:class:`OrchestratorApi`, one protocol per part).

The parts call each other both ways — a step that fails ends its run (:class:`RunsApi`), a run that
starts advances its steps (:class:`StepsApi`), a job's outcome advances its run's steps, a step starts
a job (:class:`JobsApi`) — so they cannot import each other. Each part module imports this module
instead, and reaches its siblings through ``self.orchestrator``, typed :class:`OrchestratorApi`. The
concrete classes satisfy these protocols structurally: :class:`roost.agent.Agent` is an
:class:`AgentHost`, :class:`roost.agent.orchestrator.Orchestrator` an :class:`OrchestratorApi` whose
``runs`` is a :class:`roost.agent.runs.Runs` and so on; mypy checks both where the agent builds its
orchestrator and the orchestrator hands itself to its parts. So the import graph stays a tree: the agent
imports the orchestrator, the orchestrator its parts, the parts :mod:`roost.agent.context` and this
module, which imports none of them.

A protocol lists what a sibling may use, not everything the part does: what the agent's callables
and wake-ups use they take from the concrete orchestrator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from roost.agent.status import VerificationResult

if TYPE_CHECKING:
    from roost.actors import Principal
    from roost.actors.extension import TurnContext
    from roost.agent.catalog import Catalog, Tool, ToolContext
    from roost.agent.config import AgentConfig
    from roost.agent.context_rows import View
    from roost.agent.models import Model, ModelRequest, ModelStep
    from roost.agent.payloads import BlobStore
    from roost.agent.records import Records
    from roost.agent.sandbox import Workspace
    from roost.agent.status import RunStatus
    from roost.agent.store import Row
    from roost.agent.telemetry import Telemetry

__all__ = [
    "AgentHost",
    "ApprovalsApi",
    "CapabilitiesApi",
    "ContextsApi",
    "ExecutionApi",
    "JobsApi",
    "OrchestratorApi",
    "ProjectApi",
    "RunsApi",
    "StepsApi",
    "StreamsApi",
    "Verdict",
    "VerificationApi",
    "WorkspacesApi",
]


class Verdict:
    """What verification found: ``result`` pass|fail|warning|blocked, who checked, and the evidence."""

    __slots__ = ("detail", "evidence_refs", "result", "verifier")

    def __init__(self, result: str, verifier: str, evidence_refs: list[str], detail: str = "") -> None:
        try:
            self.result = VerificationResult(result)
        except ValueError:
            raise ValueError("result must be pass, fail, warning or blocked") from None
        self.verifier = verifier
        self.evidence_refs = evidence_refs
        self.detail = detail


class AgentHost(Protocol):
    """The agent the runtime runs in, as its parts see it (:class:`roost.agent.Agent` is one)."""

    @property
    def kind(self) -> str:
        """The agent's kind: with its name, where a background worker runs its turns."""

    @property
    def name(self) -> str:
        """The agent's name: also its project's id."""

    @property
    def principal(self) -> Principal | None:
        """Who caused this turn (None for in-process callers and wake-ups)."""

    @property
    def seq(self) -> int:
        """The ``seq`` of the newest frame of the agent's log (a session card's cursor)."""

    @property
    def profile(self) -> Mapping[str, Any]:
        """Shown in session cards."""

    @property
    def stop_condition(self) -> str:
        """What verification checks, recorded on every run."""

    @property
    def extension(self) -> TurnContext:
        """The actor layer's extension API: the turn's clock reading, the process."""

    @property
    def streams(self) -> bool:
        """Whether model steps stream (each a background job, its text as ``model_delta`` events)."""

    @property
    def blobs(self) -> BlobStore:
        """Where heavy values (and workspace contents) go."""

    def settings(self) -> AgentConfig: ...

    def catalog(self) -> Catalog: ...

    def model(self) -> Model: ...

    async def schedule(
        self, when: float, callback: str, payload: Any = None, *, key: str | None = None, retry: Any = None
    ) -> object:
        """Wake the agent in ``when`` seconds with the ``@wakeup`` ``callback`` (written in this turn)."""

    async def verify(self, run: Row, items: list[Row]) -> Verdict:
        """Check the run's stop condition."""

    async def on_run_end(self, run: Row) -> None:
        """A run ended (completed, failed or cancelled), in the turn that ended it."""


class RunsApi(Protocol):
    """Turns and runs (:class:`roost.agent.runs.Runs`)."""

    def session_for(self, session_id: Any, *, write: bool = True) -> str:
        """The session a request names (the caller's own when None), checked for the caller."""

    def reply(self, run_id: str) -> dict[str, Any]:
        """What every call that changes a run answers: ids, status, wait, and the outcome if ended."""

    async def start(self, text: Any, session_id: str | None, background: bool) -> dict[str, Any]:
        """``turn``: a new turn and its run."""

    async def cancel(self, turn_id: Any) -> dict[str, Any]:
        """``cancel``: stop the turn and everything its run owns."""

    def fail(self, run: Row, error: str, *, retryable: bool, verification: str | None = None) -> None:
        """End the run ``failed``."""

    async def stop_owned(self, run: Row, why: str) -> None:
        """Stop the run's jobs, streams, running items and pending approvals."""

    def end(
        self,
        run: Row,
        status: RunStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        retryable: bool = False,
    ) -> None:
        """End the run ``completed`` or ``failed``."""


class StepsApi(Protocol):
    """The pieces of a run (:class:`roost.agent.steps.Steps`)."""

    async def drain_released(self) -> None:
        """Advance the runs the project's heavy slot was handed to during this turn."""

    def item_completed(self, run: Row, item: Row, tool: Tool, result: Any) -> bool:
        """Record a step's result (after the payload policy); False if it cannot be stored."""

    def item_failed(self, run: Row, item: Row, tool: Tool, error: str, *, retryable: bool) -> None:
        """A step failed for good: the item, then its run."""

    def model_request(self, run: Row, *, original: bool = False) -> ModelRequest:
        """What the model is asked for the run's next step."""

    def record_model_step(self, run: Row, step: ModelStep) -> bool:
        """Record what a model step decided."""

    def model_failed(self, run: Row, error: str, retryable: bool, *, will_retry: bool, **extra: Any) -> None:
        """Record a failed model step (the run fails unless it is retried)."""

    def ask(self, run: Row, question: str, item: Row | None) -> None:
        """Pause the run ``waiting_for_input``."""

    async def inline_model_step(self, run: Row) -> None:
        """Ask a model that runs here for the run's next step, in this turn, and record it."""

    def tool_started(self, run: Row, item: Row, tool: Tool, job: Row | None) -> None:
        """The ``tool_started`` event of an item that starts now."""


class LoopApi(Protocol):
    """Each run's workflow on the core (:class:`roost.agent.loop.Loop`)."""

    async def start(self, run_id: str, *, background: bool) -> None:
        """The run's workflow, advanced now (or by a wake-up at once)."""

    async def poke(self, run_id: str) -> None:
        """Advance the run."""

    async def notify(self, run_id: str, event: str, payload: Any = None) -> None:
        """Deliver ``event`` (a job's end, input, the heavy slot) to the run's body."""

    async def input_given(self, run_id: str) -> None:
        """``provide_input`` answered the run: its body hears ``input`` if it waits for it."""

    async def decided(self, run_id: str, approval_id: str, approved: bool) -> None:
        """An approval of the run was decided: the body goes on."""

    async def cancel(self, run_id: str) -> None:
        """The run is cancelled: its workflow too."""

    async def rewind(self, run_id: str) -> None:
        """``continue_run``: back to the first step of the piece the run stopped in, then on."""

    def check_continuable(self, run: Row) -> None:
        """InvalidTransition for a run whose workflow is no longer kept."""

    async def model_piece(self, run_id: str) -> dict[str, Any]:
        """A model step of the run; what comes next."""

    async def item_piece(self, run_id: str, item_id: str) -> dict[str, Any]:
        """One planned tool call; what comes next."""

    def after_model(self, run_id: str) -> dict[str, Any]:
        """What a recorded model step leaves the run to do next."""

    def after_item(self, run_id: str, item_id: str) -> dict[str, Any]:
        """What a recorded tool call leaves the run to do next."""


class ApprovalsApi(Protocol):
    """Approvals and grants (:class:`roost.agent.approvals.Approvals`)."""

    def reuse_grant(self, run: Row, item: Row, tool: Tool) -> bool:
        """Attach an unexpired grant that covers ``item``; False when there is none."""

    def request(self, run: Row, item: Row, tool: Tool) -> str:
        """Pause the run for an approval of ``item``; the approval's id."""

    def cancel_pending(self, run: Row) -> None:
        """The run was cancelled: its pending approvals are ``cancelled``."""


class ProjectApi(Protocol):
    """The project's files and heavy slot (:class:`roost.agent.project.Project`)."""

    @property
    def released(self) -> list[str]:
        """Runs the heavy slot was handed to during this turn; the steps part advances them."""

    def take_heavy(self, run: Row) -> bool:
        """Take the slot for ``run``; False (and the run queued) when another run holds it."""

    def release_heavy(self, run_id: str) -> None:
        """Release the slot if ``run_id`` holds it; the oldest queued run takes it."""

    def add_files(self, files: list[str]) -> None:
        """Record files a verified run produced."""

    def read(self) -> dict[str, Any]:
        """The project as the ``project`` callable shows it."""


class JobsApi(Protocol):
    """The job lifecycle (:class:`roost.agent.jobs.JobLifecycle`)."""

    async def start(self, run: Row, item: Row | None, tool_name: str, args: dict[str, Any]) -> Row:
        """A new job for a step (``item``) or a model step (``item`` None): its row and its workflow."""

    async def cancel_run(self, run: Row) -> None:
        """The run is being cancelled: each of its active jobs is ``cancelled``, its workflow too."""


class ExecutionApi(Protocol):
    """Tool contexts and inline steps (:class:`roost.agent.execution.Execution`)."""

    def context(self, run: Row, item_id: str | None, tool_name: str, attempt: int = 1) -> ToolContext:
        """The context of a step of ``run``."""

    async def run_inline(self, run: Row, item: Row, tool: Tool, idempotency_key: str | None = None) -> Any:
        """Run ``tool`` inside this turn, with the idempotency key of its step."""


class VerificationApi(Protocol):
    """The run's end through its stop condition (:class:`roost.agent.verification.Verification`)."""

    async def finish(self, run: Row) -> None:
        """Verify the run and end it."""


class StreamsApi(Protocol):
    """Streamed model output (:class:`roost.agent.streaming.Streams`)."""

    def open(self, run: Row, job: Row) -> str:
        """A model job begins streaming; returns the text its model continues from."""

    def append(self, run: Row, hop: int, text: str) -> None:
        """One committed batch of the stream of ``run``'s model step ``hop``: a ``model_delta``."""

    def committed(self, job: Row) -> int:
        """Characters of the job's message already committed."""

    def finish(self, job: Row) -> str | None:
        """The job's step ended well; its message's text (None if it never streamed)."""

    def interrupt(self, run: Row, job: Row, error: str) -> int:
        """The job failed for good: its message, if any, is interrupted."""

    def cancel_run(self, run: Row) -> None:
        """The run was cancelled: its streaming messages are cancelled."""

    def of_run(self, run_id: str) -> list[Row]:
        """The run's messages in step order."""


class CapabilitiesApi(Protocol):
    """Capability sessions of MCP servers (:class:`roost.agent.capabilities.Capabilities`)."""

    def awaiting_approval(self, run: Row, item: Row, approval_id: str, tool_name: str) -> None:
        """A step waits for an approval: the row of its MCP server (if it is an MCP tool) says so."""

    def lease_lost(self, job: Row) -> None:
        """The job's lease expired: its live capability sessions become ``resumable``."""

    def close_run(self, run: Row) -> None:
        """The run ended: its capability sessions are ``closed``."""

    def answer(self, run: Row, payload: Any) -> bool:
        """``provide_input`` for a run whose MCP session waits; False if none waits."""

    def cards(self, run_id: str) -> list[dict[str, Any]]:
        """The run's capability sessions as ``get_run`` shows them."""


class ContextsApi(Protocol):
    """Compaction and reset of a session's context (:mod:`roost.agent.compaction`)."""

    def view(self, session_id: str) -> View | None:
        """The session's context as the model sees it (None: never compacted or reset)."""

    async def after_run(self, run: Row) -> None:
        """A run ended: check the budgets of the session's context."""

    def run_view(self, run_id: str) -> Row | None:
        """Where a run's own steps stand after a compaction of them (None: never compacted)."""

    async def before_model(self, run: Row) -> str | None:
        """Before a model step: the op id of a compaction of the run's steps to wait for, or None."""


class WorkspacesApi(Protocol):
    """The runs' sandbox workspaces (:class:`roost.agent.workspaces.Workspaces`)."""

    def open(self, run: Row) -> Workspace | None:
        """The run's workspace for the step about to run (None: the agent has no sandbox)."""

    def commit(self, run: Row, item: Row) -> None:
        """The step completed: what it did to the workspace is recorded in this turn."""

    def close_run(self, run: Row) -> None:
        """The run ended: its workspace's final snapshot kept, the directory removed."""

    def cards(self, run_id: str) -> list[dict[str, Any]]:
        """The run's workspace as ``get_run`` shows it."""


class DelegationsApi(Protocol):
    """Steps handed to worker agents (:class:`roost.agent.delegation.Delegations`)."""

    async def run_ended(self, run: Row) -> None:
        """A run ended: its open tasks cancelled (unless it completed); a task's origin told."""

    async def step_done(self, run: Row) -> None:
        """A step of the run completed: a task's origin told its progress."""

    def of_run(self, run_id: str) -> list[dict[str, Any]]:
        """The run's tasks as ``get_run`` shows them."""


class OrchestratorApi(Protocol):
    """The orchestrator as its parts see it (:class:`roost.agent.orchestrator.Orchestrator` is one)."""

    @property
    def agent(self) -> AgentHost: ...

    @property
    def records(self) -> Records: ...

    @property
    def telemetry(self) -> Telemetry: ...

    @property
    def runs(self) -> RunsApi: ...

    @property
    def steps(self) -> StepsApi: ...

    @property
    def loop(self) -> LoopApi: ...

    @property
    def approvals(self) -> ApprovalsApi: ...

    @property
    def project(self) -> ProjectApi: ...

    @property
    def jobs(self) -> JobsApi: ...

    @property
    def execution(self) -> ExecutionApi: ...

    @property
    def verification(self) -> VerificationApi: ...

    @property
    def streams(self) -> StreamsApi: ...

    @property
    def ended(self) -> list[str]:
        """Runs that ended in this turn, not yet handed to ``agent.on_run_end``."""

    async def settle(self) -> None:
        """Hand the runs that ended to ``agent.on_run_end``."""

    @property
    def capabilities(self) -> CapabilitiesApi: ...

    @property
    def contexts(self) -> ContextsApi: ...
    @property
    def workspaces(self) -> WorkspacesApi: ...

    @property
    def delegations(self) -> DelegationsApi: ...
