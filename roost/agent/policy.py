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

import orjson

from roost.actors import Principal
from roost.agent.catalog import ApprovalMode
from roost.agent.errors import PolicyRefused
from roost.agent.store import Row, Store

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


_GLOB = frozenset("*?[")


def _literal(value: Any) -> bool:
    """True if ``value`` in a scope means itself (not a glob, a list of choices or an operator)."""
    if isinstance(value, str):
        return not (_GLOB & set(value))
    return not isinstance(value, list | dict)


def proposed_scope(args: dict[str, Any], mode: str = "mutating") -> dict[str, Any]:
    """The scope an approval proposes. ``mutating``: the narrowest scope covering ``args``, each
    argument exactly (values a scope would read as a pattern or a choice are wrapped as
    ``{"eq": value}``). ``confirm_once``: the tool with any arguments (asked once per session and
    project, until the grant expires)."""
    if mode == "confirm_once":
        return {k: "*" for k in args}
    return {k: v if _literal(v) else {"eq": v} for k, v in args.items()}


def _same(a: Any, b: Any) -> bool:
    """JSON equality that tells ``1``, ``1.0`` and ``true`` apart."""
    opt = orjson.OPT_SORT_KEYS
    try:
        return orjson.dumps(a, option=opt) == orjson.dumps(b, option=opt)
    except TypeError:  # not JSON orjson can write (e.g. an integer beyond 64 bits)
        return type(a) is type(b) and bool(a == b)


def _value_covered(allowed: Any, value: Any) -> bool:
    if allowed == "*":
        return True
    if isinstance(allowed, dict):
        if set(allowed) == {"eq"}:
            return _same(allowed["eq"], value)
        if set(allowed) == {"in"} and isinstance(allowed["in"], list):
            return any(_same(a, value) for a in allowed["in"])
        if set(allowed) == {"glob"} and isinstance(allowed["glob"], str):
            return isinstance(value, str) and fnmatch.fnmatchcase(value, allowed["glob"])
        return False  # an unknown operator allows nothing
    if isinstance(allowed, list):
        return any(_same(a, value) for a in allowed)
    if isinstance(allowed, str) and not _literal(allowed):
        return isinstance(value, str) and fnmatch.fnmatchcase(value, allowed)
    return _same(allowed, value)


def scope_covers(scope: Any, args: dict[str, Any]) -> bool:
    """True if every argument is allowed by ``scope``. Per argument, a scope holds ``"*"`` (anything),
    a glob string (``"Doc*"``), a list of allowed values, ``{"eq": v}``, ``{"in": [...]}``,
    ``{"glob": "…"}``, or a plain value (itself). An argument the scope does not name is not covered."""
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
