"""Approvals: a step whose tool needs one waits for ``approve``; a grant covers a scope of arguments
in one session and project until it expires, and is reused by later steps it covers.

Guarantees (tests in ``tests/test_agent_policy.py`` and ``tests/test_agent_runtime.py``):

- **A grant covers what it says and no more**: a step runs without asking only if an unexpired grant
  of its session, project, tool and mode covers its arguments (:func:`roost.agent.policy.scope_covers`);
  a scope sent by a client must cover the step awaiting approval.
- **A secret in a scope is matched, never kept**: a plain secret value in a client's scope becomes
  its salted digest (exact match only), the form arguments are kept in.
"""

from __future__ import annotations

from typing import Any

import orjson

from roost.actors import InvalidArguments
from roost.agent import policy
from roost.agent.catalog import Tool
from roost.agent.context import Part
from roost.agent.errors import AgentNotFound, InvalidTransition, ScopeRefused
from roost.agent.payloads import has_secret, is_secret_key
from roost.agent.records import Records
from roost.agent.status import (
    FINISHED,
    ApprovalStatus,
    EventStatus,
    ItemStatus,
    TurnStatus,
    VerificationResult,
    Waiting,
)
from roost.agent.store import Row, new_id

__all__ = ["MAX_GRANT_TTL", "MAX_SCOPE_BYTES", "Approvals"]

MAX_GRANT_TTL = 366 * 86_400.0
MAX_SCOPE_BYTES = 16_384

shown = Records.shown


class Approvals(Part):
    def reuse_grant(self, run: Row, item: Row, tool: Tool) -> bool:
        """Attach an unexpired grant that covers ``item`` to it; False when there is none."""
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
            return False
        self.store.update("items", item["item_id"], grant_id=grant["grant_id"], updated_at=self.now)
        self.event(
            "approval_granted",
            run,
            item_id=item["item_id"],
            status=EventStatus.REUSED,
            payload={"grant_id": grant["grant_id"], "tool": tool.name, "expires_at": grant["expires_at"]},
        )
        return True

    def request(self, run: Row, item: Row, tool: Tool) -> str:
        """Pause the run for an approval of ``item``; the approval's id."""
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
            "status": ApprovalStatus.PENDING,
            "created_at": now,
        }
        self.store.insert("approvals", approval)
        self.store.update("items", item["item_id"], status=ItemStatus.AWAITING_APPROVAL, updated_at=now)
        self.set_run(run, waiting=Waiting.APPROVAL)
        self.set_turn(run, status=TurnStatus.AWAITING_APPROVAL, needs_confirmation=1)
        self.store.update(
            "sessions", run["session_id"], pending_approval_id=approval["approval_id"], updated_at=now
        )
        self.event(
            "approval_requested",
            run,
            item_id=item["item_id"],
            status=EventStatus.AWAITING_APPROVAL,
            payload={
                "approval_id": approval["approval_id"],
                "tool": tool.name,
                "mode": tool.approval_mode,
                "args": shown(item["args"]),
                "proposed_scope": shown(scope),
                "default_ttl_s": self.agent.settings().approval_ttl_s,
            },
        )
        self.orchestrator.capabilities.awaiting_approval(run, item, approval["approval_id"], tool.name)
        return str(approval["approval_id"])

    async def decide(self, approval_id: Any, decision: Any, scope: Any, ttl_s: Any) -> dict[str, Any]:
        """``approve``: deny (the run fails, ``blocked``) or grant (the run goes on) a pending approval."""
        store = self.store
        orc = self.orchestrator
        appr = store.get("approvals", approval_id) if isinstance(approval_id, str) else None
        if appr is None:
            raise AgentNotFound(message=f"no approval {approval_id!r}")
        run = self.run(appr["run_id"])
        self.guard(run["principal"], write=True)
        if run["status"] in FINISHED:
            raise InvalidTransition(
                message=f"run {run['run_id']} is {run['status']}: its approvals are closed"
            )
        if appr["status"] != ApprovalStatus.PENDING:
            raise InvalidTransition(message=f"approval {approval_id} is already {appr['status']}")
        if decision not in ("grant", "deny"):
            raise InvalidArguments(message='decision must be "grant" or "deny"')
        now = self.now
        store.update("sessions", run["session_id"], pending_approval_id=None, updated_at=now)
        if decision == "deny":
            store.update("approvals", approval_id, status=ApprovalStatus.DENIED, decided_at=now)
            store.update(
                "items",
                appr["item_id"],
                status=ItemStatus.SKIPPED,
                error="denied by the user",
                updated_at=now,
            )
            self.event(
                "approval_denied",
                run,
                item_id=appr["item_id"],
                status=EventStatus.DENIED,
                payload={"approval_id": approval_id, "tool": appr["tool_name"]},
            )
            self.set_run(run, waiting=None)
            orc.runs.fail(
                run,
                f"approval denied for {appr['tool_name']}",
                retryable=False,
                verification=VerificationResult.BLOCKED,
            )
            await orc.loop.decided(run["run_id"], approval_id, False)
            await orc.steps.drain_released()  # the slot it held moves on; its end reaches on_run_end
            return orc.runs.reply(run["run_id"])
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
        store.update(
            "approvals",
            approval_id,
            status=ApprovalStatus.GRANTED,
            grant_id=grant["grant_id"],
            decided_at=now,
        )
        store.update(
            "items", appr["item_id"], status=ItemStatus.PENDING, grant_id=grant["grant_id"], updated_at=now
        )
        self.set_run(run, waiting=None)
        self.set_turn(run, status=TurnStatus.RUNNING)
        self.event(
            "approval_granted",
            run,
            item_id=appr["item_id"],
            status=EventStatus.GRANTED,
            payload={
                "approval_id": approval_id,
                "grant_id": grant["grant_id"],
                "tool": appr["tool_name"],
                "scope": shown(scope),
                "expires_at": grant["expires_at"],
            },
        )
        await orc.loop.decided(run["run_id"], approval_id, True)
        await orc.steps.drain_released()
        return orc.runs.reply(run["run_id"])

    def cancel_pending(self, run: Row) -> None:
        """The run was cancelled: its pending approvals are ``cancelled``."""
        self.store.execute(
            "UPDATE roost_agent_approvals SET status = ?, decided_at = ? WHERE run_id = ? AND status = ?",
            (ApprovalStatus.CANCELLED, self.now, run["run_id"], ApprovalStatus.PENDING),
        )

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
            out[key] = {"eq": self.records.digest(value)} if secret else value
        return out
