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
  ``nbf`` honoured, an ``iat`` in the future refused, each with ``leeway`` seconds of clock skew, on
  the injected ``clock``; each is a number of seconds (not a bool, finite, at most
  :data:`MAX_TIME` in size), else the token is refused.
- **Least privilege**: a token reaches only what it is granted. Its kinds come from its ``kinds``
  claim, else from the server's ``default_kinds`` (``"*"``: every kind); with neither it is refused
  ("the token grants no kinds"). Its names come from its ``names`` claim (absent: every name of those
  kinds); it is read-only as its ``ro`` claim says, else read-write for kinds it names itself and
  ``default_read_only`` (true by default) for the default kinds; its tenant is its ``tenant`` claim,
  else ``default_tenant`` (``None`` by default: the namespace of tokens without a tenant).
- **Keys**: fetched when first needed and kept ``cache_ttl`` seconds; past that, while they are less
  than ``max_stale`` seconds older, a token whose ``kid`` they hold is checked with them at once and a
  refresh runs in the background, so an identity provider that hangs delays no token whose key is
  cached. A token naming a ``kid`` the keys lack (rotation) waits for the next fetch: the one under
  way, one started at once, or — when one ran less than ``refetch_interval`` seconds before — the one
  scheduled for the moment the interval allows, which at most ``max_waiting`` tokens wait for (more are
  refused at once); a ``kid`` the last fetch dropped is refused at once. So a flood of made-up ``kid``
  values costs the identity provider one request per interval and holds a bounded number of
  connections, and a key rotated in is picked up by its first token. Fetches start at most once per
  ``refetch_interval``, one at a time, shared by all who wait for them; a caller that goes away does not
  cancel one. A fetch never blocks the event loop: a URL (``https://``; ``http://`` only to a loopback
  address, else :class:`ValueError`) is read with ``httpx``'s async client (``fetch_timeout``
  seconds, at most :data:`MAX_JWKS_BYTES`, no redirects), a file in a thread. When fetches fail, the
  keys last fetched are still used for ``max_stale`` seconds past their ``cache_ttl``; with none,
  every token is refused (``JWKS unavailable: …``). Waits are on the injected ``sleep`` (with
  ``clock``: a fake clock's).
- **Refusals** raise :class:`JwtError` (a :class:`~roost.transport.tokens.TokenError`) and nothing
  else, whatever the string holds; its message names the reason, never the token.

Claims → principal (:class:`ClaimsMapping` names the claims; ``None`` turns a field off):

================  ==============  ==================================================================
principal         default claim   rule
================  ==============  ==================================================================
``id``            ``sub``         a string of 1 to 256 characters, no control character (required)
``tenant``        ``tenant``      a string of 1 to 128 characters without NUL (absent: ``default_tenant``)
``kinds``         ``kinds``       a list of strings: the kinds it may reach (absent: ``default_kinds``;
                                  neither: refused)
``names``         ``names``       a list of glob patterns of names it may reach (absent: all)
``read_only``     ``ro``          ``true`` or ``false`` (absent: false for its own ``kinds``,
                                  ``default_read_only`` for the default kinds)
``admin``         off             ``true`` or ``false``; only if named (an IdP's ``admin`` may mean
                                  something else)
``exp``           ``exp``         the expiry plus ``leeway``: an open connection closes then
================  ==============  ==================================================================

PyJWT is imported when a verifier is made, not with this module: ``pip install 'roost[jwt]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
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
    "MAX_TIME",
    "MAX_WAITING",
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
#: The largest ``exp``, ``nbf`` or ``iat`` (in size, seconds; the year 33658): a larger one is refused.
MAX_TIME = 10**12
#: How many tokens with an unknown ``kid`` may wait for the next fetch of the JWKS at once.
MAX_WAITING = 1000
_MAX_WITHDRAWN = 1024  # kids remembered as withdrawn (then only the last fetch's)

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


def _seconds(payload: dict[str, Any], claim: str) -> int | float | None:
    """A time claim (``None``: absent): a number of seconds, not a bool, finite, at most
    :data:`MAX_TIME` in size, else a refusal (never an ``OverflowError``: an int is compared, not
    converted)."""
    if claim not in payload:
        return None
    value = payload[claim]
    if isinstance(value, bool) or not isinstance(value, int | float) or not -MAX_TIME <= value <= MAX_TIME:
        raise JwtError(f"claim {claim} must be a number of seconds, at most 10**12 in size")
    return value


async def _join(shared: asyncio.Future[None]) -> None:
    """Wait for a fetch others may wait for too: a caller that goes away leaves it to them, and a
    fetch cancelled under its waiters (:meth:`JwtVerifier.aclose`) ends their wait, not their task."""
    try:
        await asyncio.shield(shared)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not shared.cancelled() or (task is not None and task.cancelling()):
            raise


def _loopback(url: str) -> bool:
    """Whether ``url`` names a loopback host (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
        sleep: Callable[[float], Awaitable[None]] | None = None,
        cache_ttl: float = 300.0,
        refetch_interval: float = 10.0,
        max_stale: float = 3600.0,
        fetch_timeout: float = 5.0,
        max_waiting: int = MAX_WAITING,
        default_kinds: Iterable[str] = (),
        default_read_only: bool = True,
        default_tenant: str | None = None,
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
        if max_waiting < 0:
            raise ValueError("max_waiting must be ≥ 0")
        source = str(jwks)
        self.url = source if source.startswith(("http://", "https://")) else None
        if self.url is not None and self.url.startswith("http://") and not _loopback(self.url):
            raise ValueError(
                f"the JWKS URL {self.url} must be https:// "
                "(http:// only to a loopback address: localhost, 127.0.0.0/8, ::1)"
            )
        self.path = None if self.url else Path(source)
        self.issuer, self.audiences, self.algorithms = issuer, audiences, allowed
        self.leeway, self.claims = leeway, claims or ClaimsMapping()
        kinds = [default_kinds] if isinstance(default_kinds, str) else list(default_kinds)
        if not all(isinstance(kind, str) and kind for kind in kinds):
            raise ValueError("default kinds must be non-empty strings")
        if not self.claims.kinds and not kinds:
            raise ValueError(
                "with no kinds claim mapped, default kinds are needed: every token would be refused"
            )
        if default_tenant is not None and (not 0 < len(default_tenant) <= 128 or "\x00" in default_tenant):
            raise ValueError("the default tenant must be a string of 1 to 128 characters without NUL")
        self._has_default_kinds = bool(kinds)
        self.default_kinds = None if "*" in kinds else kinds  # None: every kind
        self.default_read_only, self.default_tenant = default_read_only, default_tenant
        self._clock = clock or time.time
        self._sleep = sleep or asyncio.sleep
        self.cache_ttl, self.refetch_interval = cache_ttl, refetch_interval
        self.max_stale, self.fetch_timeout, self.max_waiting = max_stale, fetch_timeout, max_waiting
        self._keys: dict[str, PyJWK] = {}
        self._withdrawn: frozenset[str] = frozenset()  # kids fetches dropped (refused without a wait)
        self._fetched_at: float | None = None  # the last fetch that gave keys
        self._tried_at: float | None = None  # the last fetch, failed or not
        self._fetches = 0  # how many fetches started
        self._failure: str | None = None  # why the last fetch failed (None: it did not)
        self._fetch: asyncio.Future[None] | None = None  # the fetch under way, shared by all who need it
        self._later: asyncio.Future[None] | None = None  # the fetch scheduled for when the limit allows
        self._later_mark = 0  # how many fetches had started when ``_later`` was scheduled
        self._waiting = 0  # the tokens waiting for ``_later``

    @property
    def waiting(self) -> int:
        """How many tokens with an unknown ``kid`` wait for the next fetch (at most ``max_waiting``)."""
        return self._waiting

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
        exp = _seconds(payload, "exp")
        if exp is None:
            raise JwtError("claim exp is missing")
        if now >= exp + self.leeway:
            raise JwtError("token expired")
        nbf = _seconds(payload, "nbf")
        if nbf is not None and nbf > now + self.leeway:
            raise JwtError("token not yet valid")
        iat = _seconds(payload, "iat")
        if iat is not None and iat > now + self.leeway:
            raise JwtError("token issued in the future (iat)")
        names = self.claims
        sub = payload.get(names.subject)
        if not isinstance(sub, str) or not 0 < len(sub) <= 256:
            raise JwtError(f"claim {names.subject} must be a string of 1 to 256 characters")
        if any(ord(c) < 32 or ord(c) == 127 for c in sub):  # a NUL, or a newline forging a log line
            raise JwtError(f"claim {names.subject} must hold no control character")
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
        own_kinds = lists["kinds"] is not None
        if not own_kinds:  # least privilege: only the server's default kinds, if it names any
            if not self._has_default_kinds:
                raise JwtError(f"the token grants no kinds (no claim {names.kinds}, and no default kinds)")
            lists["kinds"] = self.default_kinds
        flags: dict[str, bool] = {}
        for field in ("read_only", "admin"):
            claim = getattr(names, field)
            implied = field == "read_only" and not own_kinds and self.default_read_only
            value = payload.get(claim, implied) if claim else implied
            if not isinstance(value, bool):
                raise JwtError(f"claim {claim} must be true or false")
            flags[field] = value
        return Principal(
            id=sub,
            tenant=self.default_tenant if tenant is None else tenant,
            claims={**lists, **flags, "exp": exp + self.leeway, "iss": payload["iss"]},
        )

    async def _key(self, kid: str) -> PyJWK:
        """The key ``kid`` names: at once from keys not too old (refreshing stale ones in the
        background), else after the next fetch (``docs/design.md``, *The JWKS cache*)."""
        now = self._clock()
        if kid in self._keys and self._usable(now):
            if not self._fresh(now):
                self._start_fetch(now)  # in the background, if the limit allows: stale keys serve
            return self._keys[kid]
        if self._fetch is None:
            self._start_fetch(now)
        if self._fetch is not None:  # this one's or one under way: its keys may hold this kid
            await _join(self._fetch)
        elif self._rotating(kid, now):
            await self._next_fetch(kid)
        return self._known(kid)

    def _known(self, kid: str) -> PyJWK:
        """``kid``'s key in the keys as they are, or the refusal that says why there is none."""
        failing = f" (the last fetch of the JWKS failed: {self._failure})" if self._failure else ""
        if self._fetched_at is None:
            raise JwksUnavailable(f"JWKS unavailable: {self._failure or 'not fetched yet'}")
        if not self._usable(self._clock()):
            raise JwksUnavailable(f"JWKS unavailable: keys too old{failing}")
        key = self._keys.get(kid)
        if key is None:
            withdrawn = " (withdrawn from the JWKS)" if kid in self._withdrawn else ""
            raise JwtError(f"unknown key id {_shown(kid)}{withdrawn}{failing}")
        return key

    def _fresh(self, now: float) -> bool:
        return self._fetched_at is not None and now - self._fetched_at < self.cache_ttl

    def _usable(self, now: float) -> bool:
        return self._fetched_at is not None and now - self._fetched_at < self.cache_ttl + self.max_stale

    def _rotating(self, kid: str, now: float) -> bool:
        """A kid the keys lack though they are good and the provider answered: perhaps a new key."""
        return self._usable(now) and self._failure is None and kid not in self._withdrawn

    def _start_fetch(self, now: float, *, force: bool = False) -> bool:
        """Start a fetch unless one is under way or one started less than ``refetch_interval`` ago
        (``force``: the caller waited that long on ``sleep``)."""
        tried = self._tried_at
        if self._fetch is not None:
            return False
        if not force and tried is not None and now < tried + self.refetch_interval:
            return False
        self._tried_at, self._fetches = self._clock(), self._fetches + 1
        self._fetch = asyncio.ensure_future(self._refresh())
        self._fetch.add_done_callback(self._fetched)
        return True

    def _fetched(self, fetch: asyncio.Future[None]) -> None:
        self._fetch = None

    async def _next_fetch(self, kid: str) -> None:
        """Wait for the fetch scheduled for when the rate limit allows (scheduling it if need be);
        refused at once if ``max_waiting`` tokens wait for it already."""
        if self._waiting >= self.max_waiting:
            raise JwtError(
                f"unknown key id {_shown(kid)} ({self._waiting} tokens already wait for the next fetch "
                "of the JWKS)"
            )
        if self._later is None or self._later_mark != self._fetches:  # none, or one already served
            self._later_mark = self._fetches
            self._later = asyncio.ensure_future(self._fetch_later(self._fetches))
            self._later.add_done_callback(self._scheduled_done)
        self._waiting += 1
        try:
            await _join(self._later)
        finally:
            self._waiting -= 1

    def _scheduled_done(self, later: asyncio.Future[None]) -> None:
        if self._later is later:
            self._later = None

    async def _fetch_later(self, mark: int) -> None:
        """At the first moment the rate limit allows, a fetch (or the one under way then), awaited;
        done at once if one started after the ``mark``-th. One sleep, then the fetch: a ``sleep``
        that does not move ``clock`` along (a frozen clock) cannot hold the waiters for ever."""
        now = self._clock()
        if self._fetch is None and self._fetches == mark and not self._start_fetch(now):
            assert self._tried_at is not None
            await self._sleep(self._tried_at + self.refetch_interval - now)  # > 0: see _start_fetch
            if self._fetch is None and self._fetches == mark:  # none started meanwhile
                self._start_fetch(now, force=True)
        if self._fetch is not None:
            await asyncio.shield(self._fetch)

    async def aclose(self) -> None:
        """Cancel the fetches under way or scheduled, for a verifier no longer used (the tokens waiting
        for them get the refusal the keys as they are give)."""
        for task in (self._later, self._fetch):
            if task is not None:
                task.cancel()
        for task in (self._later, self._fetch):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _refresh(self) -> None:
        """Fetch the JWKS; a failure is kept in ``_failure`` (never raised: its waiters get a refusal)."""
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
        dropped = self._keys.keys() - keys.keys()
        withdrawn = self._withdrawn | dropped if len(self._withdrawn) < _MAX_WITHDRAWN else dropped
        self._withdrawn = frozenset(withdrawn - keys.keys())
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
