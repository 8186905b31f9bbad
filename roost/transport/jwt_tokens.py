"""Tokens from an identity provider: JWTs verified against its JWKS, mapped to a Roost principal.

:class:`JwtVerifier` checks a JWT (RS256, ES256, EdDSA by default; PyJWT does the signature) against
the keys of a JWKS, a file or an ``http(s)://`` URL, and returns the same :class:`Principal` a
``roost1.`` token gives (:mod:`roost.transport.tokens`), so ``claims_authorize`` and the read-only,
tenant and expiry rules work unchanged. :func:`roost.transport.security.jwt_authenticate` makes it an
``authenticate`` hook.

Rules (``docs/security.md``, *Tokens from an identity provider*):

- **Algorithms**: an allow-list of asymmetric algorithms only (``none`` and ``HS*`` cannot be allowed:
  :class:`ValueError`); the token's ``alg`` must be on it *and* be the algorithm of the key its
  ``kid`` names (a JWK's ``alg``, else the one its type implies), so an ``HS256`` token "signed" with
  an RSA public key, or an ES256 token naming an RSA key, is refused. JWKS entries with another
  algorithm, a ``use`` other than ``sig`` or no ``kid`` are ignored. A token must name its ``kid``.
- **Claims**: ``iss`` must be ``issuer``; ``aud`` must hold one of ``audience``; ``exp`` is required,
  ``nbf`` honoured, both with ``leeway`` seconds of clock skew, on the injected ``clock``.
- **Keys**: fetched when first needed, kept ``cache_ttl`` seconds, fetched again at once when a token
  names a ``kid`` the cache lacks (rotation) — but at most once per ``refetch_interval`` seconds, so
  a flood of made-up ``kid`` values costs the identity provider one request per interval;
  concurrent needs share one fetch, which a caller that goes away does not cancel. A fetch never
  blocks the event loop: a URL is read with ``httpx``'s async client (``fetch_timeout`` seconds, at
  most :data:`MAX_JWKS_BYTES`, no redirects), a file in a thread. When a fetch fails, the keys last
  fetched are still used for ``max_stale`` seconds past their ``cache_ttl``; with none, every token
  is refused (``JWKS unavailable: …``).
- **Refusals** raise :class:`JwtError` (a :class:`~roost.transport.tokens.TokenError`) and nothing
  else, whatever the string holds; its message names the reason, never the token.

Claims → principal (:class:`ClaimsMapping` names the claims; ``None`` turns a field off):

================  ==============  ==================================================================
principal         default claim   rule
================  ==============  ==================================================================
``id``            ``sub``         a string of 1 to 256 characters (required)
``tenant``        ``tenant``      a string of 1 to 128 characters without NUL; absent: no tenant
``kinds``         ``kinds``       a list of strings: the kinds it may reach (absent: all)
``names``         ``names``       a list of glob patterns of names it may reach (absent: all)
``read_only``     ``ro``          ``true`` or ``false`` (absent: false)
``admin``         off             ``true`` or ``false``; only if named (an IdP's ``admin`` may mean
                                  something else)
``exp``           ``exp``         the expiry plus ``leeway``: an open connection closes then
================  ==============  ==================================================================

PyJWT is imported when a verifier is made, not with this module: ``pip install 'roost[jwt]'``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import httpx
import orjson

from roost.actors import Principal
from roost.transport.tokens import TokenError

if TYPE_CHECKING:
    from jwt import PyJWK

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "DEFAULT_ALGORITHMS",
    "MAX_JWKS_BYTES",
    "MAX_JWT_CHARS",
    "ClaimsMapping",
    "JwtError",
    "JwtVerifier",
]

#: What ``algorithms=`` may hold: public-key signatures only.
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
DEFAULT_ALGORITHMS = ("RS256", "ES256", "EdDSA")
MAX_JWT_CHARS = 16_384
MAX_JWKS_BYTES = 1 << 20
_SHOWN = 64  # at most this much of a kid or an alg reaches a log line

log = logging.getLogger("roost.security")


class JwtError(TokenError):
    """A JWT that cannot be accepted; the message says why, without the token."""


class JwksUnavailable(JwtError):
    """No keys to check a token with: the JWKS could not be fetched (the message says why)."""


@dataclass(frozen=True)
class ClaimsMapping:
    """Which JWT claim gives which part of the principal (the module doc's table); ``None``: never
    from the token (no tenant, every kind, every name, not read-only, not admin)."""

    subject: str = "sub"
    tenant: str | None = "tenant"
    kinds: str | None = "kinds"
    names: str | None = "names"
    read_only: str | None = "ro"
    admin: str | None = None

    FIELDS: ClassVar[tuple[str, ...]] = ("subject", "tenant", "kinds", "names", "read_only", "admin")


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:_SHOWN] + ("…" if len(text) > _SHOWN else ""))


def _import_jwt() -> Any:
    """PyJWT with its crypto support, or a clear error saying how to install it."""
    try:
        import jwt
        from jwt.algorithms import has_crypto
    except ImportError:
        has_crypto = False
    if not has_crypto:
        raise RuntimeError("JWT authentication needs PyJWT with cryptography: pip install 'roost[jwt]'")
    return jwt


class JwtVerifier:
    """Verifies JWTs against a JWKS (the module doc gives the rules); :meth:`verify` is async."""

    def __init__(
        self,
        jwks: str | Path,
        *,
        issuer: str,
        audience: str | Sequence[str],
        algorithms: Iterable[str] = DEFAULT_ALGORITHMS,
        leeway: float = 30.0,
        claims: ClaimsMapping | None = None,
        clock: Callable[[], float] | None = None,
        cache_ttl: float = 300.0,
        refetch_interval: float = 10.0,
        max_stale: float = 3600.0,
        fetch_timeout: float = 5.0,
    ) -> None:
        self._jwt = _import_jwt()
        allowed = tuple(algorithms)
        refused = [a for a in allowed if a not in ASYMMETRIC_ALGORITHMS]
        if not allowed or refused:
            raise ValueError(
                f"JWT algorithms must be some of {sorted(ASYMMETRIC_ALGORITHMS)}, got {list(allowed)}"
            )
        if not issuer:
            raise ValueError("a JWT issuer is required")
        audiences = [audience] if isinstance(audience, str) else list(audience)
        if not audiences or not all(audiences):
            raise ValueError("a JWT audience is required")
        if leeway < 0 or cache_ttl <= 0 or refetch_interval < 0 or max_stale < 0 or fetch_timeout <= 0:
            raise ValueError("leeway, cache_ttl, refetch_interval, max_stale and fetch_timeout must be ≥ 0")
        source = str(jwks)
        self.url = source if source.startswith(("http://", "https://")) else None
        self.path = None if self.url else Path(source)
        self.issuer, self.audiences, self.algorithms = issuer, audiences, allowed
        self.leeway, self.claims = leeway, claims or ClaimsMapping()
        self._clock = clock or time.time
        self.cache_ttl, self.refetch_interval = cache_ttl, refetch_interval
        self.max_stale, self.fetch_timeout = max_stale, fetch_timeout
        self._keys: dict[str, PyJWK] = {}
        self._fetched_at: float | None = None  # the last fetch that gave keys
        self._tried_at: float | None = None  # the last fetch, failed or not
        self._failure: str | None = None  # why the last fetch failed (None: it did not)
        self._fetch: asyncio.Future[None] | None = None  # the fetch under way, shared by all who need it

    async def verify(self, token: str) -> Principal:
        """The principal a JWT stands for. Raises :class:`JwtError` (the reason in its message) and
        nothing else, whatever the string holds."""
        if not isinstance(token, str) or not token.isascii() or len(token) > MAX_JWT_CHARS:
            raise JwtError("malformed token")
        try:
            header = self._jwt.get_unverified_header(token)
        except (self._jwt.PyJWTError, ValueError, TypeError):
            raise JwtError("malformed token") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise JwtError(f"algorithm {_shown(alg)} is not allowed")
        if not isinstance(kid, str) or not kid:
            raise JwtError("the token names no key (kid)")
        key = await self._key(kid)
        try:
            payload = self._jwt.decode(
                token,
                key=key,
                algorithms=list(self.algorithms),
                issuer=self.issuer,
                audience=self.audiences,
                options={
                    "verify_exp": False,  # checked below, on the injected clock
                    "verify_nbf": False,
                    "verify_iat": False,
                    "require": ["exp", "iss", "aud"],
                },
            )
        except self._jwt.InvalidSignatureError:
            raise JwtError("bad signature") from None
        except self._jwt.InvalidAlgorithmError:
            raise JwtError(f"algorithm {_shown(alg)} is not the algorithm of key {_shown(kid)}") from None
        except self._jwt.InvalidIssuerError:
            raise JwtError("wrong issuer") from None
        except self._jwt.InvalidAudienceError:
            raise JwtError("wrong audience") from None
        except self._jwt.MissingRequiredClaimError as exc:
            raise JwtError(f"claim {exc.claim} is missing") from None
        except (self._jwt.PyJWTError, ValueError, TypeError, OverflowError) as exc:
            raise JwtError(f"invalid token ({type(exc).__name__})") from None
        return self._principal(payload)

    def _principal(self, payload: dict[str, Any]) -> Principal:
        now = self._clock()
        exp = payload.get("exp")
        if isinstance(exp, bool) or not isinstance(exp, int | float) or not math.isfinite(exp):
            raise JwtError("claim exp must be a number")
        if now >= exp + self.leeway:
            raise JwtError("token expired")
        nbf = payload.get("nbf")
        if nbf is not None:
            if isinstance(nbf, bool) or not isinstance(nbf, int | float) or not math.isfinite(nbf):
                raise JwtError("claim nbf must be a number")
            if nbf > now + self.leeway:
                raise JwtError("token not yet valid")
        names = self.claims
        sub = payload.get(names.subject)
        if not isinstance(sub, str) or not 0 < len(sub) <= 256:
            raise JwtError(f"claim {names.subject} must be a string of 1 to 256 characters")
        if names.tenant and names.tenant in payload and payload[names.tenant] is None:
            raise JwtError(f"claim {names.tenant} must be a string of 1 to 128 characters without NUL")
        tenant = payload.get(names.tenant) if names.tenant else None
        if tenant is not None and (
            not isinstance(tenant, str) or not 0 < len(tenant) <= 128 or "\x00" in tenant
        ):
            raise JwtError(f"claim {names.tenant} must be a string of 1 to 128 characters without NUL")
        lists: dict[str, list[str] | None] = {}
        for field in ("kinds", "names"):
            claim = getattr(names, field)
            present = bool(claim) and claim in payload
            value = payload.get(claim) if claim else None
            if present and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise JwtError(f"claim {claim} must be a list of strings")  # null too: not "all"
            lists[field] = value
        flags: dict[str, bool] = {}
        for field in ("read_only", "admin"):
            claim = getattr(names, field)
            value = payload.get(claim, False) if claim else False
            if not isinstance(value, bool):
                raise JwtError(f"claim {claim} must be true or false")
            flags[field] = value
        return Principal(
            id=sub,
            tenant=tenant,
            claims={**lists, **flags, "exp": exp + self.leeway, "iss": payload["iss"]},
        )

    async def _key(self, kid: str) -> PyJWK:
        """The key ``kid`` names, fetching the JWKS if the cache is old or lacks it (rate-limited)."""
        if kid not in self._keys or not self._fresh():
            tried = self._tried_at
            if self._fetch is None and (tried is None or self._clock() - tried >= self.refetch_interval):
                self._fetch = asyncio.ensure_future(self._refresh())
                self._fetch.add_done_callback(self._fetched)
            if self._fetch is not None:  # this one's or one under way: its keys may hold this kid
                await asyncio.shield(self._fetch)  # a caller that goes away leaves it to the others
        key = self._keys.get(kid)
        failing = f" (the last fetch of the JWKS failed: {self._failure})" if self._failure else ""
        if self._fetched_at is None:
            raise JwksUnavailable(f"JWKS unavailable: {self._failure or 'not fetched yet'}")
        if key is None:
            raise JwtError(f"unknown key id {_shown(kid)}{failing}")
        if self._clock() - self._fetched_at >= self.cache_ttl + self.max_stale:
            raise JwksUnavailable(f"JWKS unavailable: keys too old{failing}")
        return key

    def _fresh(self) -> bool:
        return self._fetched_at is not None and self._clock() - self._fetched_at < self.cache_ttl

    def _fetched(self, fetch: asyncio.Future[None]) -> None:
        self._fetch = None

    async def _refresh(self) -> None:
        """Fetch the JWKS; a failure is kept in ``_failure`` (never raised: its waiters get a refusal)."""
        self._tried_at = self._clock()
        try:
            raw = await (self._download() if self.url else asyncio.to_thread(self._read_file))
            keys = self._parse(raw)
        except JwtError as exc:
            self._failure = str(exc)
            return
        except Exception as exc:  # a refusal, never a 500: logged with its traceback
            log.exception("fetching the JWKS failed")
            self._failure = f"unexpected error ({type(exc).__name__})"
            return
        self._keys, self._fetched_at, self._failure = keys, self._clock(), None

    async def _download(self) -> bytes:
        assert self.url is not None
        try:
            async with (
                httpx.AsyncClient(timeout=self.fetch_timeout, follow_redirects=False) as http,
                http.stream("GET", self.url, headers={"Accept": "application/json"}) as response,
            ):
                if response.status_code != 200:
                    raise JwtError(f"HTTP {response.status_code} from the JWKS URL")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_JWKS_BYTES:
                        raise JwtError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
                return bytes(body)
        except httpx.TimeoutException:
            raise JwtError(f"no answer from the JWKS URL within {self.fetch_timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise JwtError(f"cannot fetch the JWKS URL ({type(exc).__name__})") from None

    def _read_file(self) -> bytes:
        assert self.path is not None
        try:
            with self.path.open("rb") as file:
                raw = file.read(MAX_JWKS_BYTES + 1)
        except OSError as exc:
            raise JwtError(f"cannot read the JWKS file ({exc.strerror or type(exc).__name__})") from None
        if len(raw) > MAX_JWKS_BYTES:
            raise JwtError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
        return raw

    def _parse(self, raw: bytes) -> dict[str, PyJWK]:
        """The usable keys of a JWKS document, by ``kid`` (the first of a repeated ``kid``)."""
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise JwtError("the JWKS is not JSON") from None
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise JwtError("the JWKS has no list of keys")
        keys: dict[str, PyJWK] = {}
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            kid = entry.get("kid")
            if not isinstance(kid, str) or not kid or kid in keys:
                continue
            try:
                key = self._jwt.PyJWK(entry)
            except (self._jwt.PyJWTError, ValueError, TypeError, KeyError):
                continue  # a key this verifier cannot use (another type, a broken one)
            if key.algorithm_name in self.algorithms:
                keys[kid] = key
        if not keys:
            raise JwtError("the JWKS holds no usable key")
        return keys
