"""Signed access tokens: who, which tenant, which actors, read-only or not, until when.

A token is ``roost1.<claims>.<signature>``: the claims are base64url JSON, the signature is
HMAC-SHA256 over ``roost1.<claims>`` with a server secret (stdlib :mod:`hmac`, compared in constant
time). Claims:

==========  ==================================================================================
``sub``     the principal's id (required)
``tenant``  the tenant: actors are isolated per tenant (the same name in two tenants is two actors)
``kinds``   the actor kinds it may reach (absent: all)
``names``   glob patterns of the actor names it may reach (absent: all)
``ro``      read-only: it may connect and read, and call only ``@callable(readonly=True)`` methods
``admin``   may use the server's ``/admin`` routes (backup)
``exp``     expiry, seconds since the epoch (required)
``iat``     issued at
==========  ==================================================================================

Several secrets may be given: the first signs, all verify (key rotation). A token is never logged;
refusals name the reason only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from roost.actors import Principal

__all__ = ["PREFIX", "TokenError", "TokenSigner"]

PREFIX = "roost1"
MAX_TOKEN_CHARS = 4096


class TokenError(ValueError):
    """A token that cannot be accepted; the message says why, without the token."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    def __init__(self, secrets: str | bytes | Sequence[str | bytes]) -> None:
        items = [secrets] if isinstance(secrets, str | bytes) else list(secrets)
        keys = [s.encode() if isinstance(s, str) else bytes(s) for s in items]
        if not keys or any(len(k) < 32 for k in keys):
            raise ValueError("token secrets must be at least 32 bytes")
        self._keys = keys

    def _sign(self, key: bytes, body: str) -> str:
        return _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())

    def issue(
        self,
        sub: str,
        *,
        ttl: float,
        tenant: str | None = None,
        kinds: Iterable[str] | None = None,
        names: Iterable[str] | None = None,
        read_only: bool = False,
        admin: bool = False,
        now: float | None = None,
    ) -> str:
        """A token for ``sub``, valid ``ttl`` seconds from ``now``."""
        issued = time.time() if now is None else now
        claims: dict[str, Any] = {"sub": sub, "iat": int(issued), "exp": issued + ttl}
        if tenant is not None:
            claims["tenant"] = tenant
        if kinds is not None:
            claims["kinds"] = list(kinds)
        if names is not None:
            claims["names"] = list(names)
        if read_only:
            claims["ro"] = True
        if admin:
            claims["admin"] = True
        _check_claims(claims)
        body = f"{PREFIX}.{_b64(orjson.dumps(claims))}"
        return f"{body}.{self._sign(self._keys[0], body)}"

    def verify(self, token: str, *, now: float | None = None) -> Principal:
        """The principal a token stands for. Raises :class:`TokenError` (expired, forged, malformed) and
        nothing else, whatever the string holds (a non-ASCII signature included)."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
            raise TokenError("malformed token")
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != PREFIX:
            raise TokenError("malformed token")
        body = f"{parts[0]}.{parts[1]}"
        if not (body.isascii() and parts[2].isascii()):  # compare_digest refuses non-ASCII str
            raise TokenError("malformed token")
        if not any(hmac.compare_digest(self._sign(k, body), parts[2]) for k in self._keys):
            raise TokenError("bad signature")
        try:
            claims = orjson.loads(_unb64(parts[1]))
        except (ValueError, orjson.JSONDecodeError):
            raise TokenError("malformed claims") from None
        _check_claims(claims)
        if (time.time() if now is None else now) >= claims["exp"]:
            raise TokenError("token expired")
        return Principal(
            id=claims["sub"],
            tenant=claims.get("tenant"),
            claims={
                "kinds": claims.get("kinds"),
                "names": claims.get("names"),
                "read_only": bool(claims.get("ro", False)),
                "admin": bool(claims.get("admin", False)),
                "exp": claims["exp"],
            },
        )


def _check_claims(claims: Any) -> None:
    if not isinstance(claims, dict):
        raise TokenError("malformed claims")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not 0 < len(sub) <= 256:
        raise TokenError("claim sub must be a string of 1 to 256 characters")
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        raise TokenError("claim exp must be a number")
    tenant = claims.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or not 0 < len(tenant) <= 128 or "\x00" in tenant):
        raise TokenError("claim tenant must be a string of 1 to 128 characters without NUL")
    for key in ("kinds", "names"):
        value = claims.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise TokenError(f"claim {key} must be a list of strings")
    for flag in ("ro", "admin"):
        if not isinstance(claims.get(flag, False), bool):
            raise TokenError(f"claim {flag} must be true or false")
