"""``roost serve``'s options for an identity provider's JWTs (``docs/security.md``, *Tokens from an
identity provider*).

``--jwks FILE|URL --jwt-issuer ISS --jwt-audience AUD`` turns JWT authentication on
(:func:`roost.transport.security.jwt_authenticate`, with :func:`~roost.transport.security.claims_authorize`);
``--jwt-algorithm`` (repeat; default RS256, ES256, EdDSA), ``--jwt-leeway`` (seconds of clock skew,
default 30) and ``--jwt-claim FIELD=CLAIM`` (repeat: which claim gives the principal's ``subject``,
``tenant``, ``kinds``, ``names``, ``read_only`` or ``admin``; ``FIELD=`` turns one off) tune it. A JWT
grants only what its claims grant: one without a ``kinds`` claim is refused, unless
``--jwt-default-kind KIND`` (repeat; ``*``: every kind) names the kinds such a token may reach,
read-only unless ``--jwt-default-read-write``; ``--jwt-default-tenant`` puts JWTs without a tenant
claim into a tenant of their own. With ``$ROOST_SECRET`` set as well, both are accepted: ``roost1.``
tokens by the secret (``roost token``'s, an operator's admin token for instance), every other token as
a JWT.

Guarantee: incomplete or contradictory settings (a JWT option without ``--jwks``, ``--jwks`` without an
issuer and an audience, a JWKS file that does not exist, an ``http://`` JWKS URL to a host that is
not loopback, an unknown claim field, ``--jwt-claim kinds=`` without ``--jwt-default-kind``, a
symmetric or unknown algorithm, PyJWT not installed, an app with its own ``authenticate`` hook) are a
usage error before the server listens, never a server that refuses everyone.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost.cli.errors import UsageError
from roost.cli.options import non_negative_float

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

    from roost.actors import Principal
    from roost.transport.tokens import TokenSigner

__all__ = ["add_jwt_options", "jwt_hook"]

_TUNING = (
    "jwt_issuer",
    "jwt_audience",
    "jwt_algorithm",
    "jwt_leeway",
    "jwt_claim",
    "jwt_default_kind",
    "jwt_default_read_write",
    "jwt_default_tenant",
)


def add_jwt_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tokens from an identity provider (JWTs)")
    group.add_argument(
        "--jwks",
        help="the identity provider's keys: a JWKS file or an http(s):// URL (default: none, no JWTs)",
    )
    group.add_argument(
        "--jwt-issuer", help="the iss every JWT must carry (default: none; required with --jwks)"
    )
    group.add_argument(
        "--jwt-audience",
        action="append",
        help="an aud a JWT may carry (repeat; default: none; required with --jwks)",
    )
    group.add_argument(
        "--jwt-algorithm", action="append", help="an allowed algorithm (repeat; default: RS256, ES256, EdDSA)"
    )
    group.add_argument(
        "--jwt-leeway",
        type=non_negative_float,
        help="seconds of clock skew allowed on exp and nbf (0: none; default: 30)",
    )
    group.add_argument(
        "--jwt-claim",
        action="append",
        metavar="FIELD=CLAIM",
        help="the claim giving subject, tenant, kinds, names, read_only or admin (repeat; FIELD=: off; "
        "default: sub, tenant, kinds, names, ro, off)",
    )
    group.add_argument(
        "--jwt-default-kind",
        action="append",
        metavar="KIND",
        help="a kind a JWT without a kinds claim may reach (repeat; '*': every kind; default: none, "
        "such a JWT is refused)",
    )
    group.add_argument(
        "--jwt-default-read-write",
        action="store_true",
        default=None,
        help="JWTs given the default kinds may write too (default: read-only, unless their ro claim "
        "says otherwise)",
    )
    group.add_argument(
        "--jwt-default-tenant",
        metavar="TENANT",
        help="the tenant of a JWT without a tenant claim (default: none, the namespace of tokens "
        "without a tenant, roost token's included)",
    )


def jwt_hook(
    args: argparse.Namespace, signer: TokenSigner | None
) -> Callable[[HTTPConnection], Awaitable[Principal | None]] | None:
    """The ``authenticate`` hook the JWT options ask for (``None`` without ``--jwks``). Raises
    :class:`UsageError` for the settings of the module doc's guarantee."""
    from roost.transport.jwt_tokens import DEFAULT_ALGORITHMS, ClaimsMapping

    if args.jwks is None:
        given = [f"--{name.replace('_', '-')}" for name in _TUNING if getattr(args, name) is not None]
        if given:
            raise UsageError(
                f"{', '.join(given)}: --jwt-issuer, --jwt-audience, --jwt-algorithm, "
                "--jwt-leeway, --jwt-claim and --jwt-default-* need --jwks"
            )
        return None
    if not args.jwt_issuer or not args.jwt_audience:
        raise UsageError("--jwks needs --jwt-issuer and --jwt-audience")
    if not args.jwks.startswith(("http://", "https://")) and not Path(args.jwks).is_file():
        raise UsageError(f"--jwks {args.jwks}: no such file")
    mapping: dict[str, Any] = {}
    for item in args.jwt_claim or ():
        field, sep, claim = item.partition("=")
        if not sep or field not in ClaimsMapping.FIELDS or (field == "subject" and not claim):
            raise UsageError(
                f"--jwt-claim {item}: expected FIELD=CLAIM, FIELD one of {', '.join(ClaimsMapping.FIELDS)} "
                "(subject cannot be turned off)"
            )
        mapping[field] = claim or None
    from roost.transport.security import jwt_authenticate

    try:
        return jwt_authenticate(
            args.jwks,
            issuer=args.jwt_issuer,
            audience=args.jwt_audience,
            algorithms=args.jwt_algorithm or DEFAULT_ALGORITHMS,
            leeway=30.0 if args.jwt_leeway is None else args.jwt_leeway,
            claims=ClaimsMapping(**mapping),
            signer=signer,
            default_kinds=args.jwt_default_kind or (),
            default_read_only=not args.jwt_default_read_write,
            default_tenant=args.jwt_default_tenant,
        )
    except (ValueError, RuntimeError) as exc:
        raise UsageError(str(exc)) from None
