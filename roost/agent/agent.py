"""``Agent``: an actor with a durable agent runtime. Subclass it, give it tools, and serve it.

::

    from roost.agent import Agent, tool, ToolContext
    from pydantic import BaseModel

    class Greet(BaseModel):
        who: str = "world"

    @tool(keywords=("greet", "hello"))
    async def greet(ctx: ToolContext, args: Greet) -> str:
        \"\"\"Say hello.\"\"\"
        return f"hello, {args.who}"

    class Greeter(Agent):
        kind = "greeter"
        tools = (greet,)

Callables (over the WebSocket or in process): ``turn(text, session_id=None, background=False)``,
``approve(approval_id, decision, scope=None, ttl_s=None)``, ``cancel(turn_id)``, ``get_turn(turn_id)``,
``session(session_id)``, ``get_run(run_id)``, ``continue_run(run_id)``, ``provide_input(run_id, payload)``,
``project()``.
Events are frames of the actor's log: ``{"type":"event","seq":…,"event":{"event_type":…,…}}``.

Override :meth:`verify` to check that a run really did what it was asked (the default passes when
every step completed), :meth:`make_model` to choose the model, ``profile`` to describe the agent in
session cards, ``stop_condition`` to say what verification checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from roost.actors import ActorNotFound, callable, wakeup
from roost.agent import mcp_agent
from roost.agent.background import job_runner, run_attempt
from roost.agent.capabilities import CAPABILITY_MIGRATIONS
from roost.agent.catalog import Catalog, Tool, defined_tools
from roost.agent.config import AgentConfig, ConfigError, check_tools, config_source, load_config
from roost.agent.context_ops import CONTEXT_WORKFLOW
from roost.agent.context_rows import CONTEXT_MIGRATIONS, OpKind
from roost.agent.delegation import CANCEL_WORKFLOW, DELEGATION_MIGRATIONS
from roost.agent.interfaces import Verdict
from roost.agent.jobs import JOB_WORKFLOW
from roost.agent.loop import RUN_WORKFLOW
from roost.agent.mcp_config import McpServer
from roost.agent.models import DeterministicPlanner, Model
from roost.agent.openai import OpenAICompatibleModel
from roost.agent.orchestrator import Orchestrator
from roost.agent.payloads import BlobStore
from roost.agent.records import Records
from roost.agent.sandbox import SandboxSpec
from roost.agent.sandbox_rows import SANDBOX_MIGRATIONS
from roost.agent.status import ItemStatus
from roost.agent.store import AGENT_MIGRATIONS, Row
from roost.agent.streaming import STREAM_MIGRATIONS
from roost.agent.telemetry import Telemetry
from roost.storage import Migration
from roost.workflows import WORKFLOW_COMPONENT, Step, WorkflowHost, workflow

__all__ = ["Agent"]


class Agent(WorkflowHost):
    """Base class of agent kinds. See the module doc."""

    components: ClassVar[Sequence[tuple[str, Sequence[Migration]]]] = (
        ("agent", AGENT_MIGRATIONS),
        ("stream", STREAM_MIGRATIONS),
        ("capability", CAPABILITY_MIGRATIONS),
        ("context", CONTEXT_MIGRATIONS),
        ("sandbox", SANDBOX_MIGRATIONS),
        ("delegation", DELEGATION_MIGRATIONS),
        WORKFLOW_COMPONENT,  # each background job is a workflow (roost.agent.jobs)
    )
    page_size: ClassVar[int] = 4096  # runs, plans and payloads make rows of kilobytes
    #: The tools of this kind (see :func:`roost.agent.tool`).
    tools: ClassVar[Sequence[Tool]] = ()
    #: MCP servers whose tools join the catalog (with those of ``[agent.mcp_servers.NAME]``; see
    #: :mod:`roost.agent.mcp_config`).
    mcp_servers: ClassVar[Sequence[McpServer]] = ()
    #: Settings; ``None`` reads ``roost.toml`` (see :mod:`roost.agent.config`) once per kind.
    config: ClassVar[AgentConfig | None] = None
    #: What verification checks, recorded on every run.
    stop_condition: ClassVar[str] = "every plan step completed"
    #: Shown in session cards.
    profile: ClassVar[dict[str, Any]] = {}
    #: Stream model output: each model step is a background job whose text reaches the log as
    #: ``model_delta`` events while the model produces it (docs/design.md, *Streamed model output*).
    streams: ClassVar[bool] = False
    #: Each run's sandbox workspace: its manifest, permissions profile, disposition after a restart
    #: and limits (docs/design.md, *Sandbox workspaces*); None: runs have no workspace.
    sandbox: ClassVar[SandboxSpec | None] = None
    #: The deterministic model of this kind (the default ``model = "planner"``).
    planner: ClassVar[type[DeterministicPlanner]] = DeterministicPlanner

    _catalog: ClassVar[Catalog | None] = None
    _model: Model | None
    #: This agent's runtime (its runs, steps, approvals, jobs...): what the callables below and the
    #: background worker's turns use.
    orchestrator: Orchestrator
    #: Where heavy values go (``<data_dir>/blobs``), shared by every agent of the process.
    blobs: BlobStore
    #: The agent's timeline (events in the actor's log).
    telemetry: Telemetry

    def __init__(self) -> None:
        cfg = self.settings()
        ext = self.extension
        self.blobs = BlobStore(ext.process.data_dir / "blobs")
        records = Records(ext, self.blobs, cfg.blob_threshold, cfg.payload_limit)
        self.telemetry = Telemetry(ext, records)
        self.orchestrator = Orchestrator(self, records, self.telemetry)
        self._model = None
        job_runner(ext.process).ensure_started(cfg.heartbeat_interval, cfg.lease_ttl)

    # -- configuration -------------------------------------------------------------------------------
    @classmethod
    def settings(cls) -> AgentConfig:
        if cls.config is None:
            cls.config = load_config()
        assert cls.config is not None
        return cls.config

    @classmethod
    def on_register(cls) -> None:
        """Refuse the kind (:class:`~roost.agent.config.ConfigError`) when its settings hold a
        ``[agent.tools.NAME]`` table of no defined tool, or a key its tool does not declare, or an
        MCP server declared twice or badly. No I/O: the MCP servers are asked for their tools when
        the registry starts (:meth:`on_registry_start`)."""
        for t in cls.tools:  # a lead delegating to its own kind would nest without end
            if getattr(t.fn, "worker_kind", None) == cls.kind:
                raise ConfigError(f"{cls.__name__}: tool {t.name!r} delegates to its own kind {cls.kind!r}")
        known = {**defined_tools(), **{t.name: frozenset(t.settings) for t in cls.tools}}
        check_tools(cls.settings(), known, config_source())
        if cls.settings().model == "openai" and cls.make_model is Agent.make_model:
            OpenAICompatibleModel.check_env(config_source())  # refused at start, not at the first turn
        mcp_agent.servers(cls.mcp_servers, cls.settings(), config_source())

    @classmethod
    def on_registry_start(cls) -> None:
        """List the kind's MCP servers' tools into its catalog, in the registry's worker thread, so
        that an app made on a running event loop never waits on a server (a server that cannot be
        asked is logged and left out: :func:`roost.agent.mcp_agent.listed_tools`)."""
        if mcp_agent.servers(cls.mcp_servers, cls.settings(), config_source()):
            cls.catalog()

    @classmethod
    def catalog(cls) -> Catalog:
        if cls.__dict__.get("_catalog") is None:
            servers = mcp_agent.servers(cls.mcp_servers, cls.settings(), config_source())
            listed = mcp_agent.listed_tools(servers, config_source(), cls.__qualname__, cls.settings())
            cls._catalog = Catalog([*cls.tools, *listed])
        assert cls._catalog is not None
        return cls._catalog

    def model(self) -> Model:
        if self._model is None:
            self._model = self.make_model()
        return self._model

    def make_model(self) -> Model:
        """The model of this agent: the deterministic planner, or the HTTP model (``model = "openai"``)."""
        cfg = self.settings()
        if cfg.model == "openai":
            return OpenAICompatibleModel.from_env(
                timeout=cfg.model_timeout, stream_idle_timeout=cfg.model_stream_idle_timeout
            )
        return self.planner(
            self.catalog(),
            pace=cfg.stream_pace,
            sleep=self.extension.process.clock.sleep,
            streams=self.streams,
        )

    async def verify(self, run: Row, items: list[Row]) -> Verdict:
        """Check the run's stop condition. Default: every step completed (the runtime's own gate)."""
        done = [i for i in items if i["status"] == ItemStatus.COMPLETED]
        if len(done) == len(items):
            return Verdict("pass", "runtime", [f"item:{i['item_id']}" for i in done], "every step completed")
        return Verdict("fail", "runtime", [], f"{len(items) - len(done)} step(s) did not complete")

    async def on_run_end(self, run: Row) -> None:
        """A run ended (``run["status"]``: completed, failed or cancelled), in the turn that ended it,
        after its rows and events. Default: nothing (the chat agent answers its next message here)."""

    # -- the protocol ---------------------------------------------------------------------------------
    @callable
    async def turn(
        self, text: str, session_id: str | None = None, background: bool = False
    ) -> dict[str, Any]:
        """Start a turn. The reply carries ``turn_id`` and ``run_id``, the run's ``status`` and, when
        the run finished within this call (every step inline), its ``output``."""
        return await self.orchestrator.runs.start(text, session_id, background)

    @callable
    async def approve(
        self, approval_id: str, decision: str, scope: dict[str, Any] | None = None, ttl_s: float | None = None
    ) -> dict[str, Any]:
        """Grant or deny a pending approval; a grant covers ``scope`` (default: the step's exact
        arguments) in this session and project until ``ttl_s`` seconds from now."""
        return await self.orchestrator.approvals.decide(approval_id, decision, scope, ttl_s)

    @callable
    async def cancel(self, turn_id: str) -> dict[str, Any]:
        """Stop a turn: its job is cancelled, its run is ``cancelled`` (``continue_run`` can resume it)."""
        return await self.orchestrator.runs.cancel(turn_id)

    @callable(readonly=True)
    async def get_turn(self, turn_id: str) -> dict[str, Any]:
        return self.orchestrator.reads.turn(turn_id)

    @callable(readonly=True)
    async def get_run(self, run_id: str) -> dict[str, Any]:
        return self.orchestrator.reads.run_card(run_id)

    @callable(readonly=True)
    async def run_history(self, run_id: str, after: int = 0, limit: int = 100) -> dict[str, Any]:
        """A page of the history of the run's workflow (the core's: steps completed, waits, events
        received, replays with how many steps were kept): ``{"entries", "next"}``."""
        return self.orchestrator.reads.run_history(run_id, after, limit)

    @callable(readonly=True)
    async def session(self, session_id: str) -> dict[str, Any]:
        """The scene for a reconnecting client: active turn, pending approval, cursor, profile, summary."""
        return self.orchestrator.reads.session(session_id)

    @callable(readonly=True)
    async def project(self) -> dict[str, Any]:
        """The project: settings, files of verified runs, the heavy operation and the queue behind it."""
        return self.orchestrator.reads.project()

    @callable
    async def continue_run(self, run_id: str) -> dict[str, Any]:
        """Resume a cancelled (or retryable failed) run after its last completed step."""
        return await self.orchestrator.runs.continue_run(run_id)

    @callable
    async def provide_input(self, run_id: str, payload: Any) -> dict[str, Any]:
        """Answer a run paused ``waiting_for_input``."""
        return await self.orchestrator.runs.provide_input(run_id, payload)

    @callable
    async def compact(self, session_id: str | None = None) -> dict[str, Any]:
        """Compact the session's context: its older turns replaced, for the model, by a summary
        (docs/design.md, *Compaction and reset*). Replies with the operation, ``pending`` until its
        summary is recorded (event ``context_compacted``)."""
        return await self.orchestrator.contexts.request(OpKind.COMPACT, session_id)

    @callable
    async def reset(self, session_id: str | None = None, note: str | None = None) -> dict[str, Any]:
        """Reset the session's context: a fresh one (a new ``context_id``) seeded by a structured
        hand-off (state, next steps, open approvals, evaluation, evidence; ``note`` added). Replies
        with the operation, ``pending`` until its hand-off is recorded (event ``context_reset``)."""
        return await self.orchestrator.contexts.request(OpKind.RESET, session_id, note)

    @callable(readonly=True)
    async def context(
        self, session_id: str | None = None, before: str | None = None, limit: int = 20
    ) -> dict[str, Any]:
        """What the model sees of the session now, and a page of its compactions and resets (newest
        first, each with its range and artifact)."""
        return self.orchestrator.contexts.card(session_id, before, limit)

    # -- background jobs on the workflow core (roost.agent.jobs) ---------------------------------------
    workflow_announce = False  # the jobs' workflows are the runtime's machinery: events say what happens
    #: A run's steps: a model step or an inline call takes one, a background call two, an approval or
    #: an answer to a question two more; ``max_tool_hops`` (at most 100) bounds the model steps, not
    #: the calls each plans, so a run is given room for 100 hops of 100 background calls and more.
    workflow_max_steps = 50_000

    def workflow_lease_seconds(self) -> float:
        """A job attempt's lease: the agent's ``lease_ttl``."""
        return float(self.settings().lease_ttl)

    @workflow(name=RUN_WORKFLOW)
    async def _run(self, step: Step, spec: dict[str, Any]) -> Any:
        """A run: the model/tool loop (roost.agent.loop)."""
        return await self.orchestrator.loop.body(step, str(spec["run_id"]), bool(spec.get("adopted")))

    @workflow(name=CONTEXT_WORKFLOW)
    async def _context_op(self, step: Step, spec: dict[str, Any]) -> Any:
        """A compaction or reset of a session's context (roost.agent.compaction)."""
        return await self.orchestrator.contexts.body(step, str(spec["op_id"]))

    @workflow(name=CANCEL_WORKFLOW)
    async def _cancel_tasks(self, step: Step, spec: dict[str, Any]) -> Any:
        """A run's cancel carried to the workers of its open tasks (roost.agent.delegation)."""
        return await self.orchestrator.delegations.cancel_body(step, list(spec["tasks"]))

    @workflow(name=JOB_WORKFLOW)
    async def _job(self, step: Step, spec: dict[str, Any]) -> Any:
        """A background job: one outside step, its attempts under the job's retry policy."""
        job_id = str(spec["job_id"])
        job = self.orchestrator.records.store().get("jobs", job_id)
        policy = self.orchestrator.jobs.retry_policy(job) if job is not None else None
        return await step.external("attempt", lambda attempt: run_attempt(attempt, job_id), retry=policy)

    def workflow_clean(self, workflow_id: str, text: str) -> str:
        """A job's or a run's error as the payload policy has it written: credentials and the
        run's secrets redacted."""
        return self.orchestrator.jobs.clean_error(workflow_id, text)

    def on_workflow_history(self, workflow_id: str, entry: dict[str, Any]) -> None:
        if workflow_id.startswith("job_"):  # a run's own history is the core's alone
            self.orchestrator.jobs.heard(workflow_id, entry)

    async def on_workflow_end(self, workflow: dict[str, Any]) -> None:
        if workflow["name"] == JOB_WORKFLOW:
            await self.orchestrator.jobs.ended(workflow)
        elif workflow["name"] == RUN_WORKFLOW:
            await self.orchestrator.loop.ended(workflow)
        elif workflow["name"] == CONTEXT_WORKFLOW:
            await self.orchestrator.contexts.ended(workflow)
        elif workflow["name"] == CANCEL_WORKFLOW:
            self.orchestrator.delegations.cancel_ended(workflow)

    @wakeup
    async def workflow_wake(self, payload: dict[str, Any]) -> None:
        """A wake-up of a run's or a job's workflow; then the runs the heavy slot was handed to go
        on and the runs that ended reach ``on_run_end``, as after every entry of the runtime."""
        await super().workflow_wake(payload)
        await self.orchestrator.steps.drain_released()

    # -- delegation: tasks between agents of this process (roost.agent.delegation) ----------------------
    @callable
    async def take_task(
        self, origin_kind: str, origin_name: str, task_id: str, text: str, depth: int = 1
    ) -> dict[str, Any]:
        """Take a task of another agent (in process only): its run, started now as a background
        turn, or the one started for the same ``task_id`` before; ``depth``: how deep in delegation
        it is (refused past 4)."""
        out = await self.orchestrator.delegations.take(origin_kind, origin_name, task_id, text, depth)
        await self.orchestrator.steps.drain_released()
        return out

    @callable
    async def cancel_task(self, task_id: str) -> str:
        """Cancel a task taken (in process only): ``cancelled``, ``ended``, or ``not started`` (and
        it never will be)."""
        out = await self.orchestrator.delegations.cancel(task_id)
        await self.orchestrator.steps.drain_released()
        return out

    @callable
    async def task_report(
        self, task_id: str, status: str, progress: int, output: Any = None, error: str | None = None
    ) -> bool:
        """A worker's report on a task of this agent's (in process only); whether it was news."""
        return self.orchestrator.delegations.report(task_id, status, progress, output, error)

    @wakeup
    async def delegation_report(self, payload: dict[str, Any]) -> None:
        """A report on a task this agent took, sent to the task's origin (retried until taken)."""
        kind, name = payload["origin"]
        origin = self.actor(str(kind), str(name))
        try:  # a read first: an origin deleted since is not made again by a report
            await origin.call("project")
        except ActorNotFound:  # nobody waits for the task any more: its run is stopped
            await self.orchestrator.delegations.cancel(str(payload["task_id"]))
            await self.orchestrator.steps.drain_released()
            return
        await origin.call(
            "task_report", payload["task_id"], payload["status"], payload["progress"],
            payload.get("output"), payload.get("error"),
        )  # fmt: skip

    # -- wake-ups of the runtime --------------------------------------------------------------------
    @wakeup
    async def agent_lease(self, payload: dict[str, Any]) -> None:
        """A lease wake-up of a job begun by an earlier release: it moves onto the workflow core."""
        await self.orchestrator.jobs.adopt(str(payload["job_id"]))

    @wakeup
    async def agent_retry(self, payload: dict[str, Any]) -> None:
        """A retry wake-up of a job begun by an earlier release: as :meth:`agent_lease`."""
        await self.orchestrator.jobs.adopt(str(payload["job_id"]))

    @wakeup
    async def agent_advance(self, payload: dict[str, Any]) -> None:
        """A background run's start, set by an earlier release: advanced now."""
        await self.orchestrator.loop.poke(str(payload["run_id"]))
        await self.orchestrator.steps.drain_released()

    @wakeup
    async def agent_context(self, payload: dict[str, Any]) -> None:
        """The wake-up of a context operation begun by an earlier release: it moves onto the
        workflow core (roost.agent.context_ops)."""
        await self.orchestrator.contexts.adopt(str(payload["op_id"]))

    @wakeup
    async def agent_context_redo(self, payload: dict[str, Any]) -> None:
        """A redo wake-up of an earlier release's context operation: as :meth:`agent_context`."""
        await self.orchestrator.contexts.adopt(str(payload["op_id"]))
