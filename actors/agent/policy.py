"""Policy: what may run, and which grant allows a step.

- :func:`precheck` refuses a request before anything is written: empty, longer than
  ``max_input_chars``, or from a read-only principal (``claims["read_only"]``).
- Approvals are narrow. A grant is ``(session_id, project_id, tool_name, mode, scope, expires_at)``;
  a step is covered only by a grant of the same session, project, tool and mode, not expired, whose
  scope covers *every* argument of the step (:func:`scope_covers`). The proposed scope of an approval
  is the step's exact arguments (:func:`proposed_scope`).
"""

from __future__ import annotations

import fnmatch
from typing import Any

from actors.agent.catalog import ApprovalMode
from actors.agent.errors import PolicyRefused
from actors.agent.store import Row, Store
from actors.connection import Principal

__all__ = ["find_grant", "needs_approval", "precheck", "proposed_scope", "scope_covers"]


def precheck(text: Any, principal: Principal | None, max_chars: int) -> str:
    """The request text, stripped; raises :class:`PolicyRefused` with the reason."""
    if principal is not None and principal.claims.get("read_only"):
        raise PolicyRefused(message="read-only callers cannot start turns")
    if not isinstance(text, str):
        raise PolicyRefused(message="text must be a string")
    clean: str = text.strip()
    if not clean:
        raise PolicyRefused(message="empty request")
    if len(clean) > max_chars:
        raise PolicyRefused(message=f"request longer than {max_chars} characters")
    return clean


def needs_approval(mode: ApprovalMode) -> bool:
    return mode != "safe_readonly"


def proposed_scope(args: dict[str, Any]) -> dict[str, Any]:
    """The narrowest scope that covers ``args``: each argument, exactly."""
    return dict(args)


def _value_covered(allowed: Any, value: Any) -> bool:
    if allowed == "*":
        return True
    if isinstance(allowed, list):
        return value in allowed
    if isinstance(allowed, str) and isinstance(value, str) and any(c in allowed for c in "*?["):
        return fnmatch.fnmatchcase(value, allowed)
    return bool(allowed == value)


def scope_covers(scope: Any, args: dict[str, Any]) -> bool:
    """True if every argument is allowed by ``scope``: an exact value, a glob string, a list of allowed
    values, or ``"*"``. An argument the scope does not name is not covered."""
    if not isinstance(scope, dict):
        return False
    return all(k in scope and _value_covered(scope[k], v) for k, v in args.items())


def find_grant(
    store: Store,
    *,
    session_id: str,
    project_id: str,
    tool_name: str,
    mode: str,
    args: dict[str, Any],
    now: float,
) -> Row | None:
    """The live grant covering this step, if any (the one expiring last)."""
    rows = store.select(
        "grants",
        "session_id = ? AND project_id = ? AND tool_name = ? AND mode = ? AND expires_at > ?",
        (session_id, project_id, tool_name, mode, now),
        order="expires_at DESC",
    )
    for row in rows:
        if scope_covers(row["scope"], args):
            return row
    return None
