"""``roost token``: issue a signed access token with ``$ROOST_SECRET``."""

from __future__ import annotations

import argparse
import math
import os

from roost.cli.errors import UsageError
from roost.cli.options import positive_float, text
from roost.transport.tokens import TokenSigner

__all__ = ["add_parser", "signer_from_env"]


def signer_from_env() -> TokenSigner | None:
    """The signer of ``$ROOST_SECRET`` (comma-separated secrets, the first signs), or None if unset.
    Raises :class:`UsageError` for a secret too short to be safe."""
    secret = os.environ.get("ROOST_SECRET")
    if not secret:
        return None
    try:
        return TokenSigner([s.strip() for s in secret.split(",") if s.strip()])
    except ValueError as exc:
        raise UsageError(f"ROOST_SECRET: {exc}") from None


def _token(args: argparse.Namespace) -> int:
    signer = signer_from_env()
    if signer is None:
        raise UsageError("set ROOST_SECRET (at least 32 bytes) to issue tokens")
    if not (args.ttl > 0 and math.isfinite(args.ttl)):  # a token that has already expired, or never will
        raise UsageError(f"--ttl must be a positive number of seconds, got {args.ttl:g}")
    print(
        signer.issue(
            args.sub,
            ttl=args.ttl,
            tenant=args.tenant,
            kinds=args.kind or None,
            names=args.name or None,
            read_only=args.read_only,
            admin=args.admin,
        )
    )
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tok = sub.add_parser("token", help="issue a signed access token (needs $ROOST_SECRET)")
    tok.add_argument("sub", type=text(256), help="the principal's id")
    tok.add_argument("--tenant", type=text(128), help="the tenant the principal belongs to (default: none)")
    tok.add_argument("--kind", action="append", help="allowed kind (repeat; default: all)")
    tok.add_argument("--name", action="append", help="allowed name pattern (repeat; default: all)")
    tok.add_argument("--read-only", action="store_true", help="may read, never write")
    tok.add_argument("--admin", action="store_true", help="may use /admin (backup)")
    tok.add_argument(
        "--ttl", type=positive_float, default=3600.0, help="seconds until it expires (more than 0)"
    )
    tok.set_defaults(func=_token)
