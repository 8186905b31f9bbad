"""Who may reach which actor, from where: token authentication, authorization, origins, tenants.

- :func:`token_authenticate` is an ``authenticate`` hook for :mod:`roost.transport.tokens`: the token comes
  from ``Authorization: Bearer <token>``, from the ``Sec-WebSocket-Protocol`` header (a browser offers
  ``["roost", "roost.token.<token>"]``; the server answers ``roost``), or from ``?token=<token>``.
  Expired, forged or malformed tokens are refused; the log names the reason, never the token. A token
  sent on an open connection (an ``auth`` frame) reaches the hook as ``scope["roost.token"]``, alone
  (:meth:`roost.transport.access.Access.renew`); the log says it came from the ``auth frame``.
- :func:`jwt_authenticate` is an async ``authenticate`` hook for an identity provider's JWTs
  (:mod:`roost.transport.jwt_tokens`), taken from the same places and refused and logged the same way;
  with ``signer=`` it also accepts ``roost1.`` tokens. A JWT grants only what its claims (or the
  server's ``default_kinds``) grant: one that grants no kind is refused.
- ``authorize(principal, kind, name, action) -> bool`` is checked on connect (``"connect"``), on every
  call (``"call:<method>"``), every message (``"message"``) and every HTTP request (``"read"`` for GET,
  ``"call:<method>"`` for POST). :func:`claims_authorize`, the default with tokens, allows the kinds
  and name patterns of the token's claims.
- Read-only principals (``claims["read_only"]``) may connect and read, and call only methods marked
  ``@callable(readonly=True)``; anything else is ``forbidden``.
- :func:`origin_allowed`: with an allow-list, a browser connection (one that sends ``Origin``) from
  any other origin is refused.
- :func:`scoped_name`: a principal with a tenant reaches ``tenant NUL name``, so the same name in two
  tenants is two actors; a client can never write a NUL itself (:func:`check_client_name`).
"""

from __future__ import annotations

import fnmatch
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from starlette.requests import HTTPConnection

from roost.actors import Principal
from roost.protocol.redaction import TokenFilter, redact_tokens
from roost.transport.jwt_tokens import DEFAULT_ALGORITHMS, MAX_WAITING, ClaimsMapping, JwtVerifier
from roost.transport.tokens import PREFIX, TokenError, TokenSigner

__all__ = [
    "SUBPROTOCOL",
    "Authorize",
    "RedactTokens",
    "check_client_name",
    "claims_authorize",
    "hide_token",
    "jwt_authenticate",
    "offered_subprotocols",
    "origin_allowed",
    "redact_logs",
    "run_authorize",
    "scoped_name",
    "token_authenticate",
]

log = logging.getLogger("roost.security")

#: The subprotocol a browser offers with its token, and that the server selects.
SUBPROTOCOL = "roost"
_TOKEN_PROTOCOL = "roost.token."

Authorize = Callable[[Principal, str, str, str], Awaitable[bool] | bool]


def offered_subprotocols(conn: HTTPConnection) -> list[str]:
    header = conn.headers.get("sec-websocket-protocol", "")
    return [p.strip() for p in header.split(",") if p.strip()]


def hide_token(scope: MutableMapping[str, Any]) -> None:
    """Move a ``token`` query parameter out of the URL (into ``scope["roost.token"]``), so that no
    log line that prints the URL — uvicorn's included — can carry it.

    The parameter is found by its percent-decoded name (``tok%65n`` is ``token``), exactly as the
    query parser that reads it decodes it, so a token the server accepts is always one it removed."""
    raw: bytes = scope.get("query_string", b"")
    if b"token" not in raw and b"%" not in raw:
        return
    kept, token = [], None
    for part in raw.split(b"&"):
        key, _, value = part.partition(b"=")
        if unquote(key.decode("latin-1")) == "token":
            token = token or unquote(value.decode("latin-1"))
        else:
            kept.append(part)
    scope["query_string"] = b"&".join(kept)
    if token is not None:
        scope["roost.token"] = token


class RedactTokens(TokenFilter):
    """A handler filter that blanks tokens (``roost1.…`` and ``token=…``) in every record the
    handler writes, tracebacks included. Install it on handlers (:func:`redact_logs`): a filter on a
    logger does not see what its children log."""

    @classmethod
    def redact(cls, text: str) -> str:
        """``text`` with every token blanked (:func:`roost.protocol.redaction.redact_tokens`), the same
        object if it holds none."""
        return redact_tokens(text)


def redact_logs(*loggers: str) -> None:
    """Put :class:`RedactTokens` on every handler of the root logger and of ``loggers``."""
    redact = RedactTokens()
    for name in ("", *loggers):
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RedactTokens) for f in handler.filters):
                handler.addFilter(redact)


def _token_of(conn: HTTPConnection) -> tuple[str | None, str]:
    hidden = conn.scope.get("roost.token")
    if isinstance(hidden, str):
        return hidden, str(conn.scope.get("roost.token_from", "query"))
    auth = conn.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip(), "authorization header"
    for proto in offered_subprotocols(conn):
        if proto.startswith(_TOKEN_PROTOCOL):
            return proto[len(_TOKEN_PROTOCOL) :], "subprotocol"
    query = parse_qs(conn.scope.get("query_string", b"").decode("latin-1"))
    if query.get("token"):
        return query["token"][0], "query"
    return None, "none"


def token_authenticate(
    signer: TokenSigner, *, clock: Callable[[], float] | None = None
) -> Callable[[HTTPConnection], Principal | None]:
    """An ``authenticate`` hook accepting the tokens of ``signer`` (see the module doc)."""

    def authenticate(conn: HTTPConnection) -> Principal | None:
        token, source = _token_of(conn)
        client = conn.client.host if conn.client else "?"
        if token is None:
            log.warning("refused %s from %s: no token", conn.url.path, client)
            return None
        try:
            return signer.verify(token, now=clock() if clock else None)
        except TokenError as exc:  # the token itself is never logged
            log.warning("refused %s from %s: %s (token from %s)", conn.url.path, client, exc, source)
            return None

    return authenticate


def jwt_authenticate(
    jwks: str | Path,
    *,
    issuer: str,
    audience: str | Sequence[str],
    algorithms: Iterable[str] = DEFAULT_ALGORITHMS,
    leeway: float = 30.0,
    claims: ClaimsMapping | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
    signer: TokenSigner | None = None,
    cache_ttl: float = 300.0,
    refetch_interval: float = 10.0,
    max_stale: float = 3600.0,
    fetch_timeout: float = 5.0,
    max_waiting: int = MAX_WAITING,
    default_kinds: Iterable[str] = (),
    default_read_only: bool = True,
    default_tenant: str | None = None,
) -> Callable[[HTTPConnection], Awaitable[Principal | None]]:
    """An async ``authenticate`` hook accepting the JWTs of an identity provider: signed by a key of
    ``jwks`` (a file or an ``http(s)://`` URL), from ``issuer``, for ``audience``, on ``algorithms``
    (asymmetric only), ``exp`` and ``nbf`` checked on ``clock`` with ``leeway`` seconds of skew; the
    principal as ``claims`` maps it (:class:`~roost.transport.jwt_tokens.ClaimsMapping`), granting only
    what its claims grant: a token without a ``kinds`` claim gets ``default_kinds`` (``"*"``: every
    kind; read-only unless ``default_read_only=False``), and with none of those is refused; one
    without a tenant claim gets ``default_tenant``. The JWKS (``https://``, ``http://`` only to a
    loopback address) is kept ``cache_ttl`` seconds, then refreshed in the background while its keys
    serve on for ``max_stale`` seconds more; a token with an unknown ``kid`` waits for the next fetch,
    fetches starting at most once per ``refetch_interval`` (on ``sleep``; at most ``max_waiting``
    tokens wait), each given ``fetch_timeout`` seconds (:class:`~roost.transport.jwt_tokens.JwtVerifier`).
    With ``signer``, a ``roost1.`` token is verified by it instead (``roost token``'s, e.g. an
    operator's admin token). A refusal (a bad token, or a JWKS that cannot be fetched) is ``None`` with
    its reason logged, never the token, never an exception. Raises :class:`RuntimeError` at once if
    PyJWT is not installed, :class:`ValueError` for a symmetric algorithm or a missing issuer or
    audience."""
    verifier = JwtVerifier(
        jwks,
        issuer=issuer,
        audience=audience,
        algorithms=algorithms,
        leeway=leeway,
        claims=claims,
        clock=clock,
        sleep=sleep,
        cache_ttl=cache_ttl,
        refetch_interval=refetch_interval,
        max_stale=max_stale,
        fetch_timeout=fetch_timeout,
        max_waiting=max_waiting,
        default_kinds=default_kinds,
        default_read_only=default_read_only,
        default_tenant=default_tenant,
    )

    async def authenticate(conn: HTTPConnection) -> Principal | None:
        token, source = _token_of(conn)
        client = conn.client.host if conn.client else "?"
        if token is None:
            log.warning("refused %s from %s: no token", conn.url.path, client)
            return None
        try:
            if signer is not None and token.startswith(f"{PREFIX}."):
                return signer.verify(token, now=clock() if clock else None)
            return await verifier.verify(token)
        except TokenError as exc:  # JwtError included; the token itself is never logged
            log.warning("refused %s from %s: %s (token from %s)", conn.url.path, client, exc, source)
            return None

    return authenticate


def claims_authorize(principal: Principal, kind: str, name: str, action: str) -> bool:
    """Allow what the principal's claims allow: its ``kinds`` and its ``names`` patterns (absent: all)."""
    kinds = principal.claims.get("kinds")
    if kinds is not None and kind not in kinds:
        return False
    names = principal.claims.get("names")
    return names is None or any(fnmatch.fnmatchcase(name, pattern) for pattern in names)


async def run_authorize(
    hook: Authorize | None, principal: Principal, kind: str, name: str, action: str
) -> bool:
    if hook is None:
        return True
    result = hook(principal, kind, name, action)
    if inspect.isawaitable(result):
        result = await result
    return bool(result)


def origin_allowed(conn: HTTPConnection, origins: Iterable[str] | None) -> bool:
    """True without an allow-list, for clients that send no ``Origin`` (not browsers), and for the
    listed origins (``scheme://host[:port]``, compared exactly, or ``"*"``)."""
    if origins is None:
        return True
    origin = conn.headers.get("origin")
    if origin is None:
        return True
    allowed = set(origins)
    return "*" in allowed or origin in allowed


def check_client_name(name: str) -> None:
    """Names from clients may not hold NUL: it separates a tenant from a name."""
    if "\x00" in name:
        raise ValueError("actor names may not contain NUL")


def scoped_name(principal: Principal | None, name: str) -> str:
    """The actor a principal reaches by ``name``: inside its tenant, if it has one."""
    if principal is None or principal.tenant is None:
        return name
    return f"{principal.tenant}\x00{name}"
