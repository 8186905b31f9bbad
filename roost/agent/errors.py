"""Errors the agent's callables answer with (their ``code`` goes on the wire)."""

from __future__ import annotations

from roost.actors import RpcError

__all__ = ["AgentNotFound", "InvalidTransition", "PolicyRefused", "ScopeRefused"]


class PolicyRefused(RpcError):
    """The request was refused before anything ran (empty, too long, read-only caller …)."""

    code = "policy_refused"


class AgentNotFound(RpcError, LookupError):
    """No turn, run or approval with that id in this agent."""

    code = "not_found"


class InvalidTransition(RpcError):
    """The call does not fit where the run is (approving a decided approval, continuing a finished run …)."""

    code = "invalid_transition"


class ScopeRefused(RpcError):
    """A grant's scope that does not cover the step it would approve."""

    code = "scope_refused"
