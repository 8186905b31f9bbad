"""What a JWT grants (``roost.transport.jwt_tokens``; ``docs/security.md``, *Tokens from an identity
provider*): only what its claims, or the server's default scope, grant; time claims checked as
numbers of seconds; a JWKS URL over plain ``http://`` only to a loopback address.

Real parts only: keys made with ``cryptography``, the identity provider's JWKS served over HTTP on
127.0.0.1 (``tests/jwt_support.py``), a Roost app on 127.0.0.1 on a
:class:`~roost.scheduler.FakeClock`, reached over HTTP and WebSockets.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.examples.kinds import Counter, Room
from roost.scheduler import FakeClock
from roost.testing import connect
from roost.transport import RoostApp, create_app
from roost.transport.jwt_tokens import ClaimsMapping, JwtError, JwtVerifier
from roost.transport.security import claims_authorize, jwt_authenticate
from roost.transport.tokens import TokenSigner
from tests.conftest import NO_RATE_LIMITS
from tests.jwt_support import AUDIENCE, ISSUER, RSA_1, IdentityProvider, bearer, claims
from tests.support import serve_in_process

signer = TokenSigner("s" * 40)


@pytest.fixture
async def idp() -> AsyncIterator[IdentityProvider]:
    async with IdentityProvider(RSA_1).running() as provider:
        yield provider


def app_for(data_dir: Path, clock: FakeClock, idp: IdentityProvider, **kw: Any) -> RoostApp:
    return create_app(
        [Counter, Room],
        data_dir=data_dir,
        clock=clock,
        limits=NO_RATE_LIMITS,
        authenticate=jwt_authenticate(
            idp.url, issuer=ISSUER, audience=AUDIENCE, clock=clock.now, sleep=clock.sleep, **kw
        ),
        authorize=claims_authorize,
    )


def bare(now: float, **extra: Any) -> dict[str, Any]:
    """Claims with nothing of Roost's: a subject, an issuer, an audience, an expiry."""
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": int(now) + 600, **extra}


async def call(addr: str, token: str, path: str, **args: Any) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(f"http://{addr}/agents/{path}", headers=bearer(token), json=args)


async def test_a_jwt_that_grants_no_kinds_is_refused_with_401_and_4401_and_a_logged_reason(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    token = RSA_1.sign(bare(clock.now()))
    async with serve_in_process(app_for(data_dir, clock, idp)) as addr:
        got = await call(addr, token, "counter/someone-elses-actor/rpc/increment")
        assert got.status_code == 401
        assert got.json()["error"]["code"] == "unauthenticated"
        async with connect(f"ws://{addr}/agents/counter/c1", additional_headers=bearer(token)) as ws:
            assert await ws.close_code() == 4401
        assert "the token grants no kinds (no claim kinds, and no default kinds)" in caplog.text
        granted = RSA_1.sign(claims(clock.now(), kinds=["counter"]))  # its own kinds: read-write
        assert (await call(addr, granted, "counter/c1/rpc/increment")).json()["result"] == 1
        assert (await call(addr, granted, "room/r1/rpc/history")).status_code == 403


async def test_default_kinds_grant_a_jwt_without_a_kinds_claim_read_only_access_to_those_kinds(
    data_dir: Path, idp: IdentityProvider
) -> None:
    clock = FakeClock()
    token = RSA_1.sign(bare(clock.now()))
    own = RSA_1.sign(claims(clock.now(), kinds=["counter"]))  # names its kinds itself: read-write
    async with serve_in_process(app_for(data_dir, clock, idp, default_kinds=["counter"])) as addr:
        assert (await call(addr, own, "counter/c1/rpc/increment")).json()["result"] == 1
        assert (await call(addr, token, "counter/c1/rpc/get")).json()["result"] == 1
        refused = await call(addr, token, "counter/c1/rpc/increment")
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "forbidden"
        assert (await call(addr, token, "room/r1/rpc/history")).status_code == 403  # not a default kind
        # the token's own ro claim still decides
        writer = RSA_1.sign(bare(clock.now(), ro=False))
        assert (await call(addr, writer, "counter/c1/rpc/increment")).json()["result"] == 2


async def test_default_kinds_may_be_read_write_or_every_kind_when_the_server_says_so(
    data_dir: Path, idp: IdentityProvider
) -> None:
    clock = FakeClock()
    token = RSA_1.sign(bare(clock.now()))
    app = app_for(data_dir, clock, idp, default_kinds=["*"], default_read_only=False)
    async with serve_in_process(app) as addr:
        assert (await call(addr, token, "counter/c1/rpc/increment")).json()["result"] == 1
        assert (await call(addr, token, "room/r1/rpc/say", text="hi")).status_code == 200
        assert (await call(addr, token, "room/r1/rpc/history")).json()["result"][0]["text"] == "hi"


async def test_a_default_tenant_keeps_jwts_without_a_tenant_claim_apart_from_roost_tokens(
    data_dir: Path, idp: IdentityProvider
) -> None:
    clock = FakeClock()
    app = app_for(data_dir, clock, idp, signer=signer, default_tenant="idp-users")
    operator = signer.issue("op", ttl=600, now=clock.now())  # roost token's, no tenant
    plain = RSA_1.sign(claims(clock.now(), kinds=["counter"]))
    acme = RSA_1.sign(claims(clock.now(), kinds=["counter"], tenant="acme"))
    async with serve_in_process(app) as addr:
        path = "counter/c1/rpc/increment"
        assert (await call(addr, operator, path)).json()["result"] == 1
        assert (await call(addr, plain, path)).json()["result"] == 1  # another counter than the operator's
        assert (await call(addr, plain, path)).json()["result"] == 2
        assert (await call(addr, acme, path)).json()["result"] == 1  # its own claim wins
        assert (await call(addr, operator, path)).json()["result"] == 2


async def test_without_a_default_tenant_a_jwt_without_a_tenant_claim_shares_the_tenantless_namespace(
    data_dir: Path, idp: IdentityProvider
) -> None:
    clock = FakeClock()
    operator = signer.issue("op", ttl=600, now=clock.now())
    plain = RSA_1.sign(claims(clock.now(), kinds=["counter"]))
    async with serve_in_process(app_for(data_dir, clock, idp, signer=signer)) as addr:
        path = "counter/c1/rpc/increment"
        assert (await call(addr, operator, path)).json()["result"] == 1
        assert (await call(addr, plain, path)).json()["result"] == 2  # documented: the same actor


def test_settings_that_would_refuse_every_token_or_an_impossible_default_tenant_are_refused(
    idp: IdentityProvider,
) -> None:
    with pytest.raises(ValueError, match="with no kinds claim mapped, default kinds are needed"):
        JwtVerifier(idp.url, issuer=ISSUER, audience=AUDIENCE, claims=ClaimsMapping(kinds=None))
    for tenant in ("", "a\x00b", "t" * 129):
        with pytest.raises(ValueError, match="the default tenant must be"):
            JwtVerifier(idp.url, issuer=ISSUER, audience=AUDIENCE, default_tenant=tenant)
    with pytest.raises(ValueError, match="default kinds must be non-empty strings"):
        JwtVerifier(idp.url, issuer=ISSUER, audience=AUDIENCE, default_kinds=[""])


def test_a_jwks_url_over_plain_http_is_refused_unless_it_is_a_loopback_address(tmp_path: Path) -> None:
    for url in ("http://idp.example/jwks.json", "http://10.0.0.1/jwks", "http://[2001:db8::1]/jwks"):
        with pytest.raises(ValueError, match=r"must be https:// \(http:// only to a loopback address"):
            JwtVerifier(url, issuer=ISSUER, audience=AUDIENCE)
    for url in (
        "https://idp.example/jwks.json",
        "http://127.0.0.1:8080/jwks",
        "http://127.9.9.9/jwks",
        "http://localhost:9999/jwks",
        "http://[::1]:9999/jwks",
    ):
        assert JwtVerifier(url, issuer=ISSUER, audience=AUDIENCE).url == url


# a time claim that is not a number of seconds a clock can reach
NOT_SECONDS: list[tuple[str, Any]] = [
    ("huge int", 10**400),
    ("huge negative int", -(10**400)),
    ("huge float", 1e300),
    ("infinity", math.inf),
    ("NaN", math.nan),
    ("true", True),
    ("false", False),
    ("string", "1700000600"),
    ("list", [1700000600]),
]


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
@pytest.mark.parametrize(("label", "value"), NOT_SECONDS, ids=[label for label, _ in NOT_SECONDS])
async def test_every_time_claim_that_is_not_a_number_of_seconds_is_a_refusal_never_an_exception(
    idp: IdentityProvider, claim: str, label: str, value: Any
) -> None:
    clock = FakeClock()
    verifier = JwtVerifier(idp.url, issuer=ISSUER, audience=AUDIENCE, clock=clock.now)
    with pytest.raises(JwtError, match=f"claim {claim} must be a number of seconds"):
        await verifier.verify(RSA_1.sign(claims(clock.now(), **{claim: value})))


async def test_time_claims_may_be_floats_and_an_iat_in_the_future_is_refused(idp: IdentityProvider) -> None:
    clock = FakeClock()
    verifier = JwtVerifier(idp.url, issuer=ISSUER, audience=AUDIENCE, clock=clock.now, leeway=30)
    now = clock.now()
    floats = claims(now, exp=now + 600.5, nbf=now - 0.5, iat=now - 0.25)
    assert (await verifier.verify(RSA_1.sign(floats))).claims["exp"] == now + 630.5
    assert (await verifier.verify(RSA_1.sign(claims(now, iat=now + 29)))).id == "alice"  # within leeway
    with pytest.raises(JwtError, match=r"token issued in the future \(iat\)"):
        await verifier.verify(RSA_1.sign(claims(now, iat=now + 86_400)))


async def test_a_huge_exp_is_a_401_over_http_and_a_4401_over_websockets_not_a_500(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    async with serve_in_process(app_for(data_dir, clock, idp)) as addr:
        for exp in (10**400, math.inf):  # signed by the provider: only the claim is wrong
            token = RSA_1.sign(claims(clock.now(), exp=exp))
            got = await call(addr, token, "counter/c1/rpc/increment")
            assert got.status_code == 401, got.text
            async with connect(f"ws://{addr}/agents/counter/c1", additional_headers=bearer(token)) as ws:
                assert await ws.close_code() == 4401
        assert "claim exp must be a number of seconds, at most 10**12 in size" in caplog.text
        good = RSA_1.sign(claims(clock.now()))
        assert (await call(addr, good, "counter/c1/rpc/increment")).status_code == 200
