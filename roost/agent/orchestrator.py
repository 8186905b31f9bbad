"""The orchestrator: one run's state machine (docs/design.md, *Agent runtime*).

Every method runs inside a turn of the agent, so each transition commits together with its events.
It talks to the other modules through their contracts only: policy (pre-checks, grants), memory
(session, summary, recent turns), catalog (tools), execution (inline steps, job records), models (one
step), telemetry (events), payloads (through telemetry's ``clean``).

Guarantees (tests in ``tests/test_agent_runtime.py``):

- **A completed step is never run again**: its status and result commit with its effects; ``advance``
  only ever runs items that are not completed, and ``continue_run`` resets only those.
- **Paused runs survive anything**: waiting for an approval, input or the project's heavy slot is a
  row; the call that ends the wait (``approve``, ``provide_input``, the slot's release) advances the run
  in its own turn, whatever happened to the process or the connection in between.
- **Done is a checked fact**: a run ends only through verification, which records
  ``verification_result``, ``verifier`` and ``evidence_refs``; it is ``completed`` only if it passed.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors.errors import InvalidArguments
from roost.agent import memory, policy
from roost.agent.background import JobSpec, Outcome, runner_for
from roost.agent.catalog import InvalidToolCall, NeedInput, Tool, ToolContext
from roost.agent.errors import AgentNotFound, InvalidTransition, PolicyRefused, ScopeRefused
from roost.agent.execution import ACTIVE_JOB, Execution
from roost.agent.models import ModelError, ModelRequest, ModelStep, StepRecord
from roost.agent.payloads import PayloadError, error_line, has_secret, is_secret_key
from roost.agent.store import Row, Store, new_id
from roost.agent.telemetry import Telemetry

shown = Telemetry.shown

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from roost.agent.agent import Agent

__all__ = ["FINISHED", "Orchestrator"]

FINISHED = ("completed", "failed", "canceled")
MAX_GRANT_TTL = 366 * 86_400.0
MAX_SCOPE_BYTES = 16_384
_MAX_STEPS_PER_ADVANCE = 1000


class Orchestrator:
    def __init__(self, agent: Agent, telemetry: Telemetry) -> None:
        self.agent = agent
        self.telemetry = telemetry
        self.execution = Execution(agent)
        #: Runs the project's heavy slot was handed to during this turn; advanced before it ends.
        self._released: list[str] = []

    @property
    def store(self) -> Store:
        return self.telemetry.store()

    @property
    def now(self) -> float:
        return self.agent._host._now

    @property
    def project_id(self) -> str:
        return self.agent.name

    def _event(self, event_type: str, run: Row, **kw: Any) -> int:
        return self.telemetry.event(event_type, run, **kw)

    def _run(self, run_id: str) -> Row:
        run = self.store.get("runs", run_id) if isinstance(run_id, str) else None
        if run is None:
            raise AgentNotFound(message=f"no run {run_id!r}")
        self.telemetry.run_id = run["run_id"]  # what follows concerns this run (and its secrets)
        return run

    def _set_run(self, run: Row, **values: Any) -> Row:
        self.store.update("runs", run["run_id"], updated_at=self.now, **values)
        run.update(values)
        return run

    def _set_turn(self, run: Row, **values: Any) -> None:
        self.store.update("turns", run["turn_id"], updated_at=self.now, **values)

    def _guard(self, owner: str | None, *, write: bool) -> None:
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

    def _default_session(self) -> str:
        """A caller's own session when it names none: derived from its principal with the agent's
        secret salt, so that nobody can open it first under another principal."""
        principal = self.agent.principal
        if principal is None:
            return "default"
        key = memory.principal_key(principal)
        return "~" + hashlib.sha256(f"{self.telemetry.salt()}\0{key}".encode()).hexdigest()[:24]

    def _err(self, text: str | None, limit: int = 200) -> str | None:
        """Free text for a record or an event: cleaned first, then shortened (never the reverse,
        which could cut a credential below the length its pattern recognises)."""
        return memory.short(self.telemetry.clean_text(text), limit) if text is not None else None

    # -- requests ----------------------------------------------------------------------------------
    async def start_turn(self, text: Any, session_id: str | None, background: bool) -> dict[str, Any]:
        agent = self.agent
        cfg = agent.settings()
        principal = agent.principal
        text = policy.precheck(text, principal, cfg.max_input_chars)
        turn_id, run_id = new_id("turn"), new_id("run")
        self.telemetry.run_id = run_id  # a new run knows no secrets yet: nothing else is scrubbed
        if session_id is None:
            session_id = self._default_session()
        elif not isinstance(session_id, str) or not 0 < len(session_id) <= 128:
            raise InvalidArguments(message="session_id must be a string of 1 to 128 characters")
        elif session_id.startswith("~") and principal is not None:
            raise InvalidArguments(message="session ids starting with ~ are reserved")
        if not isinstance(background, bool):
            raise InvalidArguments(message="background must be true or false")
        clean = self.telemetry.clean(text)
        if not isinstance(clean, str):  # a request is never long enough for the blob store
            clean = str(clean)
        now = self.now
        store = self.store
        session = memory.ensure_session(store, session_id, principal, now)
        self._guard(session["principal"], write=True)
        request = self.telemetry.keep(text)  # what the local planner reads (credentials kept)
        trace_id = agent._host.trace_id
        store.insert(
            "turns",
            {
                "turn_id": turn_id,
                "run_id": run_id,
                "session_id": session_id,
                "input_text": clean,
                "normalized_command": {"text": " ".join(clean.lower().split()), "background": background},
                "status": "created",
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
            "status": "in_progress",
            "waiting": None,
            "mode": "background" if background else "sync",
            "trace_id": trace_id,
            "inputs": [],
            "stop_condition": agent.stop_condition,
            "evidence_refs": [],
            "created_at": now,
            "updated_at": now,
        }
        store.insert("runs", run)
        run = self._run(run_id)
        store.update(
            "sessions", session_id, active_turn_id=turn_id, turns=session["turns"] + 1, updated_at=now
        )
        self._event("turn_started", run, status="created", payload={"input": clean, "session_id": session_id})
        if background:
            await agent.schedule(0, "agent_advance", {"run_id": run_id})
        else:
            await self.advance(run_id)
        return self.reply(run_id)

    def reply(self, run_id: str) -> dict[str, Any]:
        run = self._run(run_id)
        out = {
            "turn_id": run["turn_id"],
            "run_id": run_id,
            "status": run["status"],
            "waiting": run["waiting"],
        }
        if run["status"] in FINISHED:
            out["output"] = run["output"]
            out["verification_result"] = run["verification_result"]
            out["error"] = memory.short(run["error"])
        return out

    # -- the state machine -------------------------------------------------------------------------
    async def advance(self, run_id: str) -> None:
        """Take ``run`` as far as it goes inside this turn, then every run its steps released."""
        await self._advance_one(run_id)
        await self._drain_released()

    async def _drain_released(self) -> None:
        while self._released:
            await self._advance_one(self._released.pop(0))

    async def _advance_one(self, run_id: str) -> None:
        for _ in range(_MAX_STEPS_PER_ADVANCE):
            run = self._run(run_id)
            if run["status"] != "in_progress" or run["waiting"]:
                return
            store = self.store
            if store.scalar(
                "SELECT 1 FROM roost_agent_jobs WHERE run_id = ? AND status IN (?, ?, ?)",
                (run_id, *ACTIVE_JOB),
            ):
                return  # a job owns the next step; its end advances the run
            items = store.select(
                "items",
                "run_id = ? AND status NOT IN ('completed', 'skipped')",
                (run_id,),
                order="step_index",
            )
            if items:
                if not await self._step(run, items[0]):
                    return
                continue
            if run["model_done"]:
                await self._finish(run)
                return
            if not await self._model_step(run):
                return
        raise RuntimeError("advance did not settle")  # a bug: plans are bounded by max_tool_hops

    async def _step(self, run: Row, item: Row) -> bool:
        """Start or run one item; True if the run can go on at once."""
        if item["status"] not in ("pending",):
            return False
        tool = self.agent.catalog().get(item["tool_name"])
        if policy.needs_approval(tool.approval_mode) and item["grant_id"] is None:
            grant = policy.find_grant(
                self.store,
                session_id=run["session_id"],
                project_id=self.project_id,
                tool_name=tool.name,
                mode=tool.approval_mode,
                args=item["args"],
                now=self.now,
            )
            if grant is None:
                self._request_approval(run, item, tool)
                return False
            self.store.update("items", item["item_id"], grant_id=grant["grant_id"], updated_at=self.now)
            self._event(
                "approval_granted",
                run,
                item_id=item["item_id"],
                status="reused",
                payload={"grant_id": grant["grant_id"], "tool": tool.name, "expires_at": grant["expires_at"]},
            )
        if tool.heavy and not self._take_heavy(run):
            return False
        self._set_turn(run, status="running")
        self.store.update(
            "items", item["item_id"], status="running", runs=item["runs"] + 1, updated_at=self.now
        )
        if tool.background:
            job = await self.execution.start_job(run, item, tool.name, item["args"])
            self._event(
                "tool_started",
                run,
                item_id=item["item_id"],
                status="running",
                payload={
                    "tool": tool.name,
                    "args": shown(item["args"]),
                    "job_id": job["job_id"],
                    "attempt": 1,
                },
            )
            return False
        self._event(
            "tool_started",
            run,
            item_id=item["item_id"],
            status="running",
            payload={"tool": tool.name, "args": shown(item["args"])},
        )
        try:
            result = await self.execution.run_inline(run, item, tool)
        except NeedInput as need:
            self._ask(run, need.prompt, item)
            return False
        except Exception as exc:
            self._item_failed(run, item, tool, error_line(exc), retryable=False)
            return False
        return self._item_completed(run, item, tool, result)

    def _item_completed(self, run: Row, item: Row, tool: Tool, result: Any) -> bool:
        """Record a step's result (after the payload policy); False if it cannot be stored."""
        try:
            clean = self.telemetry.clean(result)
        except (PayloadError, TypeError) as exc:
            self._item_failed(run, item, tool, f"result not storable: {exc}", retryable=False)
            return False
        self.store.update(
            "items", item["item_id"], status="completed", result=clean, error=None, updated_at=self.now
        )
        self._event(
            "tool_completed",
            run,
            item_id=item["item_id"],
            status="completed",
            payload={"tool": tool.name, "result": clean},
        )
        if tool.heavy:
            self._release_heavy(run["run_id"])
        return True

    def _item_failed(self, run: Row, item: Row, tool: Tool, error: str, *, retryable: bool) -> None:
        error = self._err(error, 500) or "failed"
        self.store.update("items", item["item_id"], status="failed", error=error, updated_at=self.now)
        self._event(
            "tool_failed",
            run,
            item_id=item["item_id"],
            status="failed",
            payload={"tool": tool.name, "error": error, "retryable": retryable, "will_retry": False},
        )
        self._fail(run, f"{tool.name} failed: {error}", retryable=retryable)

    async def _model_step(self, run: Row) -> bool:
        cfg = self.agent.settings()
        if run["hops"] >= cfg.max_tool_hops:
            self._fail(run, f"stopped after max_tool_hops ({cfg.max_tool_hops}) model steps", retryable=False)
            return False
        model = self.agent.model()
        if not model.inline:
            await self.execution.start_job(run, None, "model", {"hop": run["hops"]})
            return False
        try:
            step = await model.step(self.model_request(run, original=True))
        except ModelError as exc:
            self._model_failed(run, str(exc), exc.retryable, will_retry=False)
            return False
        return self._record_model_step(run, step)

    def model_request(self, run: Row, *, original: bool = False) -> ModelRequest:
        """What a model step sees. ``original``: the request as typed, credentials included — only
        for a model that runs here (the local planner), never one behind the network."""
        agent = self.agent
        store = self.store
        turn = store.get("turns", run["turn_id"])
        text = turn["input_text"] if turn else ""
        if original and run.get("request") is not None:
            text = str(self.telemetry.original(run["request"]))
        session = store.get("sessions", run["session_id"])
        items = store.select("items", "run_id = ?", (run["run_id"],), order="step_index")
        return ModelRequest(
            text=text,
            inputs=shown(list(run["inputs"])),
            summary=session["summary"] if session else "",
            recent_turns=memory.recent_turns(
                store, run["session_id"], agent.settings().recent_turns, before=run["turn_id"]
            ),
            tools=agent.catalog().specs(),
            steps=[
                StepRecord(
                    item_id=i["item_id"],
                    tool=i["tool_name"],
                    args=shown(i["args"]),
                    status=i["status"],
                    result=i["result"],
                )
                for i in items
            ],
            hop=run["hops"],
        )

    def _record_model_step(self, run: Row, step: ModelStep) -> bool:
        if step.ask:
            self._ask(run, step.ask, None)
            return False
        if not step.tool_calls:
            self._set_run(run, model_done=1, model_text=step.text or "")
            return True
        catalog = self.agent.catalog()
        try:
            checked = [(c.name, catalog.check(c.name, c.args)) for c in step.tool_calls]
        except InvalidToolCall as exc:
            self._fail(run, f"the model asked for an invalid step: {exc}", retryable=True)
            return False
        try:
            kept = [(name, self.telemetry.keep(args)) for name, args in checked]
        except PayloadError as exc:
            self._fail(run, f"the model asked for a step that cannot be stored: {exc}", retryable=False)
            return False
        base = self.store.scalar(
            "SELECT coalesce(max(step_index) + 1, 0) FROM roost_agent_items WHERE run_id = ?",
            (run["run_id"],),
        )
        now = self.now
        planned = []
        for offset, (name, args) in enumerate(kept):
            tool = catalog.get(name)
            row = {
                "item_id": new_id("item"),
                "run_id": run["run_id"],
                "turn_id": run["turn_id"],
                "step_index": base + offset,
                "tool_name": name,
                "args": args,
                "approval_mode": tool.approval_mode,
                "status": "pending",
                "created_at": now,
                "updated_at": now,
            }
            self.store.insert("items", row)
            planned.append(
                {
                    "item_id": row["item_id"],
                    "step_index": row["step_index"],
                    "tool": name,
                    "args": shown(row["args"]),
                    "approval_mode": tool.approval_mode,
                    "background": tool.background,
                }
            )
        self._set_run(run, hops=run["hops"] + 1)
        self._set_turn(run, status="planned")
        self._event("plan_ready", run, status="planned", payload={"hop": run["hops"], "items": planned})
        return True

    def _model_failed(self, run: Row, error: str, retryable: bool, *, will_retry: bool, **extra: Any) -> None:
        self._event(
            "model_step_failed",
            run,
            status="retrying" if will_retry else "failed",
            payload={"error": self._err(error), "retryable": retryable, "will_retry": will_retry, **extra},
        )
        if not will_retry:
            self._fail(run, f"model step failed: {error}", retryable=retryable)

    def _ask(self, run: Row, question: str, item: Row | None) -> None:
        self._release_heavy(run["run_id"])  # nobody waits on the project while we wait on the user
        self._set_run(run, waiting="input", question=self._err(question, 1000))
        self._set_turn(run, status="awaiting_input")
        if item is not None:
            self.store.update("items", item["item_id"], status="pending", updated_at=self.now)
        self._event(
            "input_requested",
            run,
            item_id=item["item_id"] if item else None,
            status="waiting_for_input",
            payload={"question": self._err(question, 1000)},
        )

    # -- approvals ---------------------------------------------------------------------------------
    def _request_approval(self, run: Row, item: Row, tool: Tool) -> None:
        now = self.now
        scope = policy.proposed_scope(item["args"], tool.approval_mode)
        approval = {
            "approval_id": new_id("appr"),
            "run_id": run["run_id"],
            "turn_id": run["turn_id"],
            "item_id": item["item_id"],
            "session_id": run["session_id"],
            "project_id": self.project_id,
            "tool_name": tool.name,
            "mode": tool.approval_mode,
            "args": item["args"],
            "proposed_scope": scope,
            "status": "pending",
            "created_at": now,
        }
        self.store.insert("approvals", approval)
        self.store.update("items", item["item_id"], status="awaiting_approval", updated_at=now)
        self._set_run(run, waiting="approval")
        self._set_turn(run, status="awaiting_approval", needs_confirmation=1)
        self.store.update(
            "sessions", run["session_id"], pending_approval_id=approval["approval_id"], updated_at=now
        )
        self._event(
            "approval_requested",
            run,
            item_id=item["item_id"],
            status="awaiting_approval",
            payload={
                "approval_id": approval["approval_id"],
                "tool": tool.name,
                "mode": tool.approval_mode,
                "args": shown(item["args"]),
                "proposed_scope": shown(scope),
                "default_ttl_s": self.agent.settings().approval_ttl_s,
            },
        )

    async def approve(self, approval_id: Any, decision: Any, scope: Any, ttl_s: Any) -> dict[str, Any]:
        store = self.store
        appr = store.get("approvals", approval_id) if isinstance(approval_id, str) else None
        if appr is None:
            raise AgentNotFound(message=f"no approval {approval_id!r}")
        run = self._run(appr["run_id"])
        self._guard(run["principal"], write=True)
        if appr["status"] != "pending":
            raise InvalidTransition(message=f"approval {approval_id} is already {appr['status']}")
        if decision not in ("grant", "deny"):
            raise InvalidArguments(message='decision must be "grant" or "deny"')
        now = self.now
        store.update("sessions", run["session_id"], pending_approval_id=None, updated_at=now)
        if decision == "deny":
            store.update("approvals", approval_id, status="denied", decided_at=now)
            store.update(
                "items", appr["item_id"], status="skipped", error="denied by the user", updated_at=now
            )
            self._event(
                "approval_denied",
                run,
                item_id=appr["item_id"],
                status="denied",
                payload={"approval_id": approval_id, "tool": appr["tool_name"]},
            )
            self._set_run(run, waiting=None)
            self._fail(
                run, f"approval denied for {appr['tool_name']}", retryable=False, verification="blocked"
            )
            return self.reply(run["run_id"])
        if scope is None:
            scope = appr["proposed_scope"]
        else:
            scope = self._scope_from_client(scope)
        if not policy.scope_covers(scope, appr["args"]):
            raise ScopeRefused(message="the scope does not cover the arguments of the step awaiting approval")
        ttl = self.agent.settings().approval_ttl_s if ttl_s is None else ttl_s
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_GRANT_TTL:
            raise InvalidArguments(message=f"ttl_s must be a number of seconds in (0, {MAX_GRANT_TTL}]")
        grant = {
            "grant_id": new_id("grant"),
            "approval_id": approval_id,
            "session_id": appr["session_id"],
            "project_id": appr["project_id"],
            "tool_name": appr["tool_name"],
            "mode": appr["mode"],
            "scope": scope,
            "expires_at": now + float(ttl),
            "created_at": now,
        }
        store.insert("grants", grant)
        store.update("approvals", approval_id, status="granted", grant_id=grant["grant_id"], decided_at=now)
        store.update("items", appr["item_id"], status="pending", grant_id=grant["grant_id"], updated_at=now)
        self._set_run(run, waiting=None)
        self._set_turn(run, status="running")
        self._event(
            "approval_granted",
            run,
            item_id=appr["item_id"],
            status="granted",
            payload={
                "approval_id": approval_id,
                "grant_id": grant["grant_id"],
                "tool": appr["tool_name"],
                "scope": shown(scope),
                "expires_at": grant["expires_at"],
            },
        )
        await self.advance(run["run_id"])
        return self.reply(run["run_id"])

    def _scope_from_client(self, scope: Any) -> dict[str, Any]:
        """A scope as sent by a client, in the form arguments are kept in: a plain secret value (under
        a secret-looking name, or looking like a credential) becomes its digest, exact match only."""
        if not isinstance(scope, dict):
            raise InvalidArguments(
                message="scope must be an object mapping argument names to what is allowed"
            )
        try:
            size = len(orjson.dumps(scope))
        except (TypeError, orjson.JSONEncodeError):
            raise InvalidArguments(message="scope must be JSON") from None
        if size > MAX_SCOPE_BYTES:
            raise InvalidArguments(message=f"scope larger than {MAX_SCOPE_BYTES} bytes")
        out: dict[str, Any] = {}
        for key, value in scope.items():
            secret = (
                isinstance(value, str) and value not in ("*",) and (is_secret_key(key) or has_secret(value))
            )
            out[key] = {"eq": self.telemetry.digest(value)} if secret else value
        return out

    # -- the project's heavy slot -------------------------------------------------------------------
    def _project(self) -> Row:
        row = self.store.get("project", self.project_id)
        if row is None:
            row = {
                "project_id": self.project_id,
                "settings": {},
                "files": [],
                "heavy_run_id": None,
                "heavy_since": None,
                "updated_at": self.now,
            }
            self.store.insert("project", row)
        return row

    def _take_heavy(self, run: Row) -> bool:
        project = self._project()
        holder = project["heavy_run_id"]
        if holder not in (None, run["run_id"]):
            other = self.store.get("runs", holder)
            if other is not None and other["status"] not in FINISHED:
                self._set_run(run, status="queued", waiting="project")
                self._event("run_queued", run, status="queued", payload={"behind_run_id": holder})
                return False
        if holder != run["run_id"]:
            self.store.update(
                "project",
                self.project_id,
                heavy_run_id=run["run_id"],
                heavy_since=self.now,
                updated_at=self.now,
            )
        return True

    def _release_heavy(self, run_id: str) -> None:
        project = self._project()
        if project["heavy_run_id"] != run_id:
            return
        self.store.update(
            "project", self.project_id, heavy_run_id=None, heavy_since=None, updated_at=self.now
        )
        waiting = self.store.select("runs", "waiting = 'project'", order="ordinal LIMIT 1")
        if waiting:
            nxt = self._set_run(waiting[0], status="in_progress", waiting=None)
            self._event("run_started", nxt, status="in_progress", payload={"after_run_id": run_id})
            self._released.append(nxt["run_id"])

    # -- jobs (called from the worker's turns) -----------------------------------------------------
    def job_begin(self, job_id: str, attempt: int, worker_id: str) -> JobSpec | None:
        return self.execution.begin(job_id, attempt, worker_id, self._executor)

    def _executor(self, job: Row, run: Row) -> Callable[[ToolContext], Awaitable[Any]]:
        if job["job_kind"] == "model":
            model = self.agent.model()
            request = self.model_request(run)

            async def model_step(ctx: ToolContext) -> Any:
                step = await model.step(request)
                return step.model_dump(mode="json")

            return model_step
        tool = self.agent.catalog().get(job["tool_name"])
        args = tool.validate(self.telemetry.original(job["args"]))

        async def tool_step(ctx: ToolContext) -> Any:
            return await tool.fn(ctx, args)

        return tool_step

    def job_heartbeat(self, job_id: str, attempt: int, worker_id: str) -> bool:
        return self.execution.heartbeat(job_id, attempt, worker_id)

    async def job_progress(
        self,
        job_id: str,
        attempt: int,
        worker_id: str,
        done: int,
        total: int,
        message: str,
        checkpoint: Any = None,
    ) -> bool:
        kept = self.telemetry.keep(checkpoint) if checkpoint is not None else None
        job = self.execution.progress(job_id, attempt, worker_id, done, total, message, kept)
        if job is None:
            return False
        run = self._run(job["run_id"])
        self._event(
            "tool_progress",
            run,
            item_id=job["item_id"],
            status="running",
            payload={
                "tool": job["tool_name"],
                "job_id": job_id,
                "attempt": attempt,
                **{k: v for k, v in job["progress"].items() if k != "checkpoint"},
            },
        )
        return True

    async def job_finish(self, job_id: str, attempt: int, worker_id: str, outcome: Outcome) -> None:
        job = self.execution._current(job_id, attempt, worker_id)
        if job is None:
            return  # fenced: cancelled, or another attempt holds the lease
        run = self._run(job["run_id"])
        now = self.now
        store = self.store
        if outcome.status == "ok":
            try:
                clean = self.telemetry.clean(outcome.result)
                step = ModelStep.model_validate(outcome.result) if job["job_kind"] == "model" else None
            except (PayloadError, TypeError, ValueError) as exc:
                # not storable: a failure of the step, not of the worker (retrying would not help)
                outcome = Outcome("failed", error=f"result not storable: {exc}", retryable=False)
                await self._job_failed(run, job, outcome)
                await self.advance(run["run_id"])
                return
            store.update("jobs", job_id, status="completed", result=clean, lease_owner=None, updated_at=now)
            if step is not None:
                self._record_model_step(run, step)
            else:
                item = store.get("items", job["item_id"])
                assert item is not None
                self._item_completed(run, item, self.agent.catalog().get(job["tool_name"]), outcome.result)
        elif outcome.status == "input":
            store.update(
                "jobs", job_id, status="failed", error="needs input", lease_owner=None, updated_at=now
            )
            item = store.get("items", job["item_id"]) if job["item_id"] else None
            self._ask(run, outcome.error or "input needed", item)
        else:
            await self._job_failed(run, job, outcome)
        await self.advance(run["run_id"])

    async def _job_failed(self, run: Row, job: Row, outcome: Outcome) -> None:
        cfg = self.agent.settings()
        attempt = job["attempt"]
        error = self._err(outcome.error or outcome.status, 500)
        store = self.store
        now = self.now
        if outcome.retryable and attempt < job["max_attempts"]:
            delay = min(cfg.job_backoff_cap, cfg.job_backoff * 2 ** (attempt - 1))
            store.update(
                "jobs", job["job_id"], status="retry_wait", error=error, lease_owner=None, updated_at=now
            )
            await self.agent.schedule(delay, "agent_retry", {"job_id": job["job_id"], "attempt": attempt})
            payload = {
                "error": error,
                "attempt": attempt,
                "retryable": True,
                "will_retry": True,
                "retry_in_s": delay,
            }
            if job["job_kind"] == "model":
                self._model_failed(run, error or "", True, will_retry=True, attempt=attempt, retry_in_s=delay)
            else:
                self._event(
                    "tool_failed",
                    run,
                    item_id=job["item_id"],
                    status="retrying",
                    payload={"tool": job["tool_name"], **payload},
                )
            return
        store.update(
            "jobs",
            job["job_id"],
            status="failed",
            error=error,
            retryable=int(outcome.retryable),
            lease_owner=None,
            updated_at=now,
        )
        if job["job_kind"] == "model":
            self._model_failed(run, error or "", outcome.retryable, will_retry=False, attempt=attempt)
            return
        item = store.get("items", job["item_id"])
        assert item is not None
        tool = self.agent.catalog().get(job["tool_name"])
        if tool.heavy:
            self._release_heavy(run["run_id"])
        self._item_failed(
            run,
            item,
            tool,
            f"{error} (attempt {attempt} of {job['max_attempts']})",
            retryable=outcome.retryable,
        )

    async def lease_check(self, job_id: str, attempt: int) -> None:
        """The wake-up at a lease's end: renewed → wait for the new end; expired → retry or fail."""
        job = self.store.get("jobs", job_id)
        if job is None or job["status"] != "running" or job["attempt"] != attempt:
            return
        now = self.now
        if job["lease_expires_at"] > now:
            await self.agent.schedule(
                job["lease_expires_at"] - now, "agent_lease", {"job_id": job_id, "attempt": attempt}
            )
            return
        run = self._run(job["run_id"])
        if attempt < job["max_attempts"]:
            if job["job_kind"] == "tool":
                self._event(
                    "tool_failed",
                    run,
                    item_id=job["item_id"],
                    status="retrying",
                    payload={
                        "tool": job["tool_name"],
                        "error": "lease expired (worker lost)",
                        "attempt": attempt,
                        "retryable": True,
                        "will_retry": True,
                        "retry_in_s": 0,
                    },
                )
            claimed = await self.execution.claim(job)
            self._job_restarted(run, claimed)
            return
        await self._job_failed(
            run, job, Outcome("failed", error="lease expired (worker lost)", retryable=True)
        )
        await self.advance(run["run_id"])

    async def retry(self, job_id: str, attempt: int) -> None:
        """The wake-up after a failed attempt's backoff: claim the next attempt."""
        job = self.store.get("jobs", job_id)
        if job is None or job["status"] != "retry_wait" or job["attempt"] != attempt:
            return
        run = self._run(job["run_id"])
        if run["status"] != "in_progress":
            self.store.update("jobs", job_id, status="canceled", updated_at=self.now)
            return
        claimed = await self.execution.claim(job)
        self._job_restarted(run, claimed)

    def _job_restarted(self, run: Row, job: Row) -> None:
        if job["job_kind"] == "tool":
            self._event(
                "tool_started",
                run,
                item_id=job["item_id"],
                status="running",
                payload={
                    "tool": job["tool_name"],
                    "args": shown(job["args"]),
                    "job_id": job["job_id"],
                    "attempt": job["attempt"],
                },
            )

    # -- user control ------------------------------------------------------------------------------
    async def cancel(self, turn_id: Any) -> dict[str, Any]:
        store = self.store
        turn = store.get("turns", turn_id) if isinstance(turn_id, str) else None
        if turn is None:
            raise AgentNotFound(message=f"no turn {turn_id!r}")
        run = self._run(turn["run_id"])
        self._guard(run["principal"], write=True)
        if run["status"] in FINISHED:
            raise InvalidTransition(message=f"turn {turn_id} already ended ({run['status']})")
        now = self.now
        runner = runner_for(self.agent._host.registry)
        for job in store.select("jobs", "run_id = ? AND status IN (?, ?, ?)", (run["run_id"], *ACTIVE_JOB)):
            store.update(
                "jobs", job["job_id"], status="canceled", cancel_requested=1, lease_owner=None, updated_at=now
            )
            runner.cancel(job["job_id"])
            if job["job_kind"] == "tool":
                self._event(
                    "tool_cancelled",
                    run,
                    item_id=job["item_id"],
                    status="cancelled",
                    payload={
                        "tool": job["tool_name"],
                        "job_id": job["job_id"],
                        "attempt": job["attempt"],
                        "progress": job["progress"],
                    },
                )
        store.execute(
            "UPDATE roost_agent_items SET status = 'skipped', error = 'cancelled', updated_at = ? "
            "WHERE run_id = ? AND status IN ('running', 'awaiting_approval')",
            (now, run["run_id"]),
        )
        store.execute(
            "UPDATE roost_agent_approvals SET status = 'cancelled', decided_at = ? "
            "WHERE run_id = ? AND status = 'pending'",
            (now, run["run_id"]),
        )
        self._set_run(run, status="canceled", waiting=None, finished_at=now)
        self._set_turn(run, status="cancelled")
        store.update("sessions", run["session_id"], updated_at=now)
        self._event("turn_cancelled", run, status="cancelled", payload={})
        self._release_heavy(run["run_id"])
        await self._drain_released()
        return self.reply(run["run_id"])

    async def continue_run(self, run_id: Any) -> dict[str, Any]:
        run = self._run(run_id)
        self._guard(run["principal"], write=True)
        if not (run["status"] == "canceled" or (run["status"] == "failed" and run["retryable"])):
            raise InvalidTransition(
                message=f"run {run_id} is {run['status']}; "
                "only a cancelled or retryable failed run can continue"
            )
        store = self.store
        now = self.now
        last = store.scalar(
            "SELECT max(step_index) FROM roost_agent_items WHERE run_id = ? AND status = 'completed'",
            (run_id,),
        )
        store.execute(
            "UPDATE roost_agent_items SET status = 'pending', error = NULL, grant_id = NULL, updated_at = ? "
            "WHERE run_id = ? AND status != 'completed'",
            (now, run_id),
        )
        self._set_run(
            run,
            status="in_progress",
            waiting=None,
            error=None,
            retryable=0,
            finished_at=None,
            verification_result=None,
        )
        self._set_turn(run, status="running", error=None)
        store.update("sessions", run["session_id"], active_turn_id=run["turn_id"], updated_at=now)
        self._event("run_continued", run, status="in_progress", payload={"after_step_index": last})
        await self.advance(run_id)
        return self.reply(run_id)

    async def provide_input(self, run_id: Any, payload: Any) -> dict[str, Any]:
        run = self._run(run_id)
        self._guard(run["principal"], write=True)
        if run["waiting"] != "input":
            raise InvalidTransition(message=f"run {run_id} is not waiting for input")
        try:
            kept = self.telemetry.keep(payload)
        except (PayloadError, TypeError) as exc:
            raise InvalidArguments(message=f"payload: {exc}") from None
        self._set_run(run, waiting=None, question=None, inputs=[*run["inputs"], kept])
        self._set_turn(run, status="running")
        self._event("input_received", run, status="in_progress", payload={"input": shown(kept)})
        await self.advance(run_id)
        return self.reply(run_id)

    # -- the end -------------------------------------------------------------------------------------
    async def _finish(self, run: Row) -> None:
        store = self.store
        self._event(
            "verification_started", run, status="verifying", payload={"stop_condition": run["stop_condition"]}
        )
        items = store.select("items", "run_id = ?", (run["run_id"],), order="step_index")
        try:
            verdict = await self.agent.verify(run, items)
        except Exception as exc:
            verdict = Verdict("fail", "runtime", [], f"verifier raised {type(exc).__name__}: {exc}")
        clean_refs = self.telemetry.clean(list(verdict.evidence_refs))
        self._set_run(
            run, verification_result=verdict.result, verifier=verdict.verifier, evidence_refs=clean_refs
        )
        self._event(
            "verification_completed",
            run,
            status=verdict.result,
            payload={
                "verification_result": verdict.result,
                "verifier": verdict.verifier,
                "evidence_refs": clean_refs,
                "detail": self._err(verdict.detail, 500),
            },
        )
        if verdict.result in ("pass", "warning"):
            files = [r[5:] for r in verdict.evidence_refs if isinstance(r, str) and r.startswith("file:")]
            if files:
                project = self._project()
                known = list(project["files"])
                known += [f for f in files if f not in known]
                self.store.update("project", self.project_id, files=known[-1000:], updated_at=self.now)
            self._end(run, "completed", output=run["model_text"])
        else:
            self._end(
                run, "failed", error=f"verification {verdict.result}: {verdict.detail}", retryable=False
            )

    def _fail(self, run: Row, error: str, *, retryable: bool, verification: str | None = None) -> None:
        if verification is not None:
            self._set_run(run, verification_result=verification, verifier="runtime")
        self._end(run, "failed", error=error, retryable=retryable)

    def _end(
        self,
        run: Row,
        status: str,
        *,
        output: str | None = None,
        error: str | None = None,
        retryable: bool = False,
    ) -> None:
        now = self.now
        store = self.store
        error = self._err(error, 500)
        self._set_run(
            run,
            status=status,
            waiting=None,
            output=output,
            error=error,
            retryable=int(retryable),
            finished_at=now,
        )
        turn_status = "completed" if status == "completed" else "failed"
        self._set_turn(run, status=turn_status, output_text=output, error=error)
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
        if status != "completed":
            payload = {
                "error": error,
                "retryable": retryable,
                "verification_result": run.get("verification_result"),
            }
        self._event(
            "turn_completed" if status == "completed" else "turn_failed",
            run,
            status=turn_status,
            payload=payload,
        )
        self._release_heavy(run["run_id"])

    # -- reads -----------------------------------------------------------------------------------------
    def get_turn(self, turn_id: Any) -> dict[str, Any]:
        store = self.store
        turn = store.get("turns", turn_id) if isinstance(turn_id, str) else None
        if turn is None:
            raise AgentNotFound(message=f"no turn {turn_id!r}")
        self._guard(self._run(turn["run_id"])["principal"], write=False)
        items = store.select("items", "turn_id = ?", (turn_id,), order="step_index")
        return {
            **{
                k: turn[k]
                for k in (
                    "turn_id",
                    "run_id",
                    "session_id",
                    "status",
                    "needs_confirmation",
                    "output_text",
                    "trace_id",
                    "created_at",
                )
            },
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

    def get_run(self, run_id: Any) -> dict[str, Any]:
        run = self._run(run_id)
        self._guard(run["principal"], write=False)
        jobs = self.store.select("jobs", "run_id = ?", (run_id,), order="created_at")
        keys = (
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
        return {
            **{k: run[k] for k in keys},
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
                    "lease_expires_at": j["lease_expires_at"],
                    "error": memory.short(j["error"]),
                }
                for j in jobs
            ],
        }

    def session(self, session_id: Any) -> dict[str, Any]:
        if not isinstance(session_id, str) or not 0 < len(session_id) <= 128:
            raise InvalidArguments(message="session_id must be a string of 1 to 128 characters")
        row = self.store.get("sessions", session_id)
        if row is not None:  # a session nobody opened is an empty card
            self._guard(row["principal"], write=False)
        return memory.session_card(self.store, session_id, self.agent.seq, dict(self.agent.profile))

    def project(self) -> dict[str, Any]:
        """The project (this agent): its settings, the files its verified runs produced, the heavy
        operation running now and the runs queued behind it."""
        project = self.store.get("project", self.project_id) or {  # read only: nothing created here
            "project_id": self.project_id,
            "settings": {},
            "files": [],
            "heavy_run_id": None,
            "heavy_since": None,
        }
        queued = self.store.select("runs", "waiting = 'project'", order="ordinal")
        return {
            "project_id": project["project_id"],
            "settings": project["settings"],
            "files": project["files"],
            "heavy_run_id": project["heavy_run_id"],
            "heavy_since": project["heavy_since"],
            "queued_run_ids": [r["run_id"] for r in queued],
        }


class Verdict:
    """What verification found: ``result`` pass|fail|warning|blocked, who checked, and the evidence."""

    __slots__ = ("detail", "evidence_refs", "result", "verifier")

    def __init__(self, result: str, verifier: str, evidence_refs: list[str], detail: str = "") -> None:
        if result not in ("pass", "fail", "warning", "blocked"):
            raise ValueError("result must be pass, fail, warning or blocked")
        self.result = result
        self.verifier = verifier
        self.evidence_refs = evidence_refs
        self.detail = detail
