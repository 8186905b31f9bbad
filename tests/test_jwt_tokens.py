"""Tokens from an identity provider: JWTs checked against a JWKS (``roost.transport.jwt_tokens``,
``jwt_authenticate``; ``docs/security.md``, *Tokens from an identity provider*).

Real parts only (``tests/jwt_support.py``): RSA, EC and Ed25519 keys made with ``cryptography``, an
identity provider's JWKS served over HTTP on 127.0.0.1, a Roost app
served on 127.0.0.1 and reached over HTTP and WebSockets. The Roost app runs on a
:class:`~roost.scheduler.FakeClock`: expiry, ``nbf``, the JWKS cache and its refetch interval are
moved past by advancing it, never by sleeping.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from roost.actors import Actor, Principal, callable
from roost.examples.kinds import Counter
from roost.scheduler import FakeClock
from roost.testing import connect, until
from roost.transport import RoostApp, create_app
from roost.transport.jwt_tokens import ClaimsMapping, JwtError, JwtVerifier
from roost.transport.security import claims_authorize, jwt_authenticate
from roost.transport.tokens import TokenSigner
from tests.conftest import NO_RATE_LIMITS
from tests.jwt_support import (
    AUDIENCE,
    EC_1,
    ED_1,
    GHOST,
    ISSUER,
    RSA_1,
    RSA_2,
    IdentityProvider,
    b64,
    bearer,
    claims,
    handmade,
)
from tests.support import serve_in_process

SECRET = "j" * 40
signer = TokenSigner(SECRET)


class Whoami(Actor):
    kind = "whoami"

    @callable  # not read-only: its call may create the actor
    async def who(self) -> dict[str, Any]:
        return await self.peek()

    @callable(readonly=True)
    async def peek(self) -> dict[str, Any]:
        assert self.principal is not None
        given = self.principal.claims
        return {
            "id": self.principal.id,
            "tenant": self.tenant,
            **{k: given.get(k) for k in ("kinds", "names", "read_only", "admin", "exp")},
        }

    @callable
    async def touch(self) -> int:
        self.set_state({"n": (self.state or {}).get("n", 0) + 1})
        return int(self.state["n"])


@pytest.fixture
async def idp() -> AsyncIterator[IdentityProvider]:
    async with IdentityProvider(RSA_1, EC_1, ED_1).running() as provider:
        yield provider


def app_for(data_dir: Path, clock: FakeClock, jwks: str | Path, **kw: Any) -> RoostApp:
    return create_app(
        [Whoami, Counter],
        data_dir=data_dir,
        clock=clock,
        limits=NO_RATE_LIMITS,
        authenticate=jwt_authenticate(
            jwks, issuer=ISSUER, audience=AUDIENCE, clock=clock.now, sleep=clock.sleep, **kw
        ),
        authorize=claims_authorize,
    )


async def who(addr: str, token: str, name: str = "w1") -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(f"http://{addr}/agents/whoami/{name}/rpc/who", headers=bearer(token))


async def ws_close_code(url: str, token: str) -> int:
    """The close code of a WebSocket connect with ``token``; a refusal sends its error frame first."""
    async with connect(url, additional_headers=bearer(token)) as ws:
        frame = await ws.recv()
        assert frame["type"] == "error", frame
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "roost.security"]


async def test_rs256_es256_and_eddsa_tokens_from_a_jwks_url_are_accepted_over_http_and_websockets(
    data_dir: Path, idp: IdentityProvider
) -> None:
    clock = FakeClock()
    async with serve_in_process(app_for(data_dir, clock, idp.url)) as addr:
        for key in (RSA_1, EC_1, ED_1):
            token = key.sign(claims(clock.now(), sub=f"user-{key.kid}"))
            got = await who(addr, token)
            assert got.status_code == 200, got.text
            assert got.json()["result"]["id"] == f"user-{key.kid}"
            async with connect(f"ws://{addr}/agents/whoami/w1", additional_headers=bearer(token)) as ws:
                assert (await ws.recv())["type"] == "welcome"
                assert (await ws.call("who"))["id"] == f"user-{key.kid}"
    assert idp.hits == 1  # one fetch, then the cache


def test_only_asymmetric_algorithms_can_be_allowed(idp: IdentityProvider) -> None:
    for algorithms in (["none"], ["HS256"], ["RS256", "HS256"], []):
        with pytest.raises(ValueError, match="JWT algorithms must be some of"):
            jwt_authenticate(idp.url, issuer=ISSUER, audience=AUDIENCE, algorithms=algorithms)


async def test_the_none_algorithm_hs_rs_confusion_and_a_key_of_another_algorithm_are_refused_with_4401(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    body = claims(clock.now())
    pem = RSA_1.public_pem()
    cases = {
        "algorithm 'none' is not allowed": handmade({"alg": "none", "kid": "rsa-1"}, body),
        # the RSA public key (public: anyone has it) used as an HMAC secret
        "algorithm 'HS256' is not allowed": handmade(
            {"alg": "HS256", "kid": "rsa-1"}, body, lambda m: hmac.new(pem, m, hashlib.sha256).digest()
        ),
        # signed by an EC key but naming the RSA key: the token's alg is allowed, not for this key
        "algorithm 'ES256' is not the algorithm of key 'rsa-1'": EC_1.sign(body, kid="rsa-1"),
        "algorithm 'RS384' is not allowed": RSA_1.sign(body, alg="RS384"),
    }
    async with serve_in_process(app_for(data_dir, clock, idp.url)) as addr:
        for reason, token in cases.items():
            assert (await who(addr, token)).status_code == 401, reason
            assert await ws_close_code(f"ws://{addr}/agents/whoami/w1", token) == 4401
            assert any(
                reason in line and "token from authorization header" in line for line in refusals(caplog)
            )
        assert (await who(addr, RSA_1.sign(body))).status_code == 200  # the same server serves on
    assert not any(token in caplog.text for token in cases.values())


async def test_an_unknown_kid_is_refused_and_a_flood_of_them_fetches_the_jwks_once_per_interval(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    async with serve_in_process(app_for(data_dir, clock, idp.url, refetch_interval=10)) as addr:
        assert (await who(addr, RSA_1.sign(claims(clock.now())))).status_code == 200
        assert idp.hits == 1
        clock.advance(10)
        bogus = [GHOST.sign(claims(clock.now()), kid=f"made-up-{i}") for i in range(40)]
        answers = await asyncio.gather(*(who(addr, token) for token in bogus))
        assert {a.status_code for a in answers} == {401}
        assert idp.hits == 2  # forty unknown kids, one refetch
        assert "unknown key id 'made-up-0'" in caplog.text
        # within the interval an unknown kid waits for the next fetch the limit allows, then is refused
        url = f"ws://{addr}/agents/whoami/w1"
        pending = asyncio.create_task(ws_close_code(url, GHOST.sign(claims(clock.now()))))

        def tick() -> bool:  # fake time moves on until the waiting token has its answer
            if not pending.done():
                clock.advance(1)
            return pending.done()

        await until(tick, interval=0.05)
        assert pending.result() == 4401
        assert idp.hits == 3  # one more per interval


async def test_concurrent_tokens_that_need_the_jwks_share_one_fetch(idp: IdentityProvider) -> None:
    clock = FakeClock()
    verifier = JwtVerifier(idp.url, issuer=ISSUER, audience=AUDIENCE, clock=clock.now)
    idp.gate = asyncio.Event()  # the provider holds its answer: every verification needs it meanwhile
    tokens = [GHOST.sign(claims(clock.now()), kid=f"made-up-{i}") for i in range(20)]
    tokens += [RSA_1.sign(claims(clock.now(), sub=f"user-{i}")) for i in range(20)]
    tasks = [asyncio.create_task(verifier.verify(token)) for token in tokens]
    await until(lambda: idp.hits == 1)  # every task started before the first one's fetch got here
    clock.advance(10)  # a fetch slower than the refetch interval: those waiting for it still share it
    idp.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, JwtError) and "unknown key id" in str(r) for r in results[:20])
    assert [r.id for r in results[20:] if isinstance(r, Principal)] == [f"user-{i}" for i in range(20)]
    assert idp.hits == 1


async def test_a_caller_that_goes_away_during_the_fetch_leaves_it_to_the_others(
    idp: IdentityProvider,
) -> None:
    clock = FakeClock()
    verifier = JwtVerifier(idp.url, issuer=ISSUER, audience=AUDIENCE, clock=clock.now)
    idp.gate = asyncio.Event()
    first = asyncio.create_task(verifier.verify(RSA_1.sign(claims(clock.now(), sub="gone"))))
    await until(lambda: idp.hits == 1)
    first.cancel()  # its client hung up while the JWKS was on its way
    idp.gate.set()
    assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"
    assert idp.hits == 1
    assert first.cancelled()


async def test_a_new_key_is_picked_up_by_its_kid_and_a_removed_keys_tokens_are_refused(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    async with (
        IdentityProvider(RSA_1).running() as idp,
        serve_in_process(app_for(data_dir, clock, idp.url, cache_ttl=300, refetch_interval=10)) as addr,
    ):
        old = RSA_1.sign(claims(clock.now(), ttl=3600))
        assert (await who(addr, old)).status_code == 200
        idp.keys = [RSA_1, RSA_2]  # the provider publishes its next key, then signs with it
        clock.advance(10)
        new = RSA_2.sign(claims(clock.now(), ttl=3600))
        assert (await who(addr, new)).status_code == 200
        assert idp.hits == 2
        idp.keys = [RSA_2]  # and retires the old one
        assert (await who(addr, old)).status_code == 200  # still cached
        clock.advance(300)  # the cache's lifetime: its keys serve on while it is refreshed
        assert (await who(addr, old)).status_code == 200

        async def refused() -> bool:
            return (await who(addr, old)).status_code == 401

        await until(refused)  # once the refresh is in, at once: no wait for a withdrawn key
        assert idp.hits == 3
        assert "unknown key id 'rsa-1' (withdrawn from the JWKS)" in caplog.text
        assert await ws_close_code(f"ws://{addr}/agents/whoami/w1", old) == 4401
        assert (await who(addr, new)).status_code == 200


async def test_a_jwks_that_cannot_be_fetched_is_a_401_with_a_logged_reason_and_the_server_keeps_serving(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    idp.status = 503
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    down = create_app(
        [Whoami],
        data_dir=data_dir / "other",
        clock=clock,
        authenticate=jwt_authenticate(
            f"http://127.0.0.1:{closed_port}/jwks.json", issuer=ISSUER, audience=AUDIENCE, clock=clock.now
        ),
    )
    token = RSA_1.sign(claims(clock.now(), ttl=3600))
    async with (
        serve_in_process(app_for(data_dir, clock, idp.url, signer=signer)) as addr,
        serve_in_process(down) as down_addr,
    ):
        assert (await who(addr, token)).status_code == 401
        assert await ws_close_code(f"ws://{addr}/agents/whoami/w1", token) == 4401
        assert "JWKS unavailable: HTTP 503 from the JWKS URL" in caplog.text
        assert (await who(down_addr, token)).status_code == 401
        assert "JWKS unavailable: cannot fetch the JWKS URL (ConnectError)" in caplog.text
        # everyone else is served: roost1 tokens, health checks
        assert (await who(addr, signer.issue("op", ttl=60, now=clock.now()))).status_code == 200
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://{addr}/healthz")).status_code == 200
        idp.status = 200  # the provider is back: within one refetch interval, tokens pass again
        clock.advance(10)
        assert (await who(addr, token)).status_code == 200


async def test_keys_last_fetched_serve_while_the_jwks_is_down_until_max_stale(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    app = app_for(data_dir, clock, idp.url, cache_ttl=300, max_stale=600)
    async with serve_in_process(app) as addr:
        assert (await who(addr, RSA_1.sign(claims(clock.now())))).status_code == 200
        idp.status = 503
        clock.advance(300)
        assert (await who(addr, RSA_1.sign(claims(clock.now())))).status_code == 200  # stale, still trusted
        await until(lambda: idp.hits == 2)  # the refresh it started in the background
        clock.advance(600)
        assert (await who(addr, RSA_1.sign(claims(clock.now())))).status_code == 401
        assert "JWKS unavailable: keys too old (the last fetch of the JWKS failed: HTTP 503" in caplog.text


async def test_fetching_the_jwks_does_not_block_the_event_loop_and_a_silent_jwks_times_out_as_a_401(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    idp.gate = asyncio.Event()
    token = RSA_1.sign(claims(clock.now()))
    async with serve_in_process(app_for(data_dir, clock, idp.url, signer=signer, fetch_timeout=60)) as addr:
        pending = asyncio.create_task(who(addr, token))
        await until(lambda: idp.hits == 1)  # the fetch is waiting for the provider
        assert (await who(addr, signer.issue("op", ttl=60, now=clock.now()))).status_code == 200
        assert not pending.done()
        idp.gate.set()
        assert (await pending).status_code == 200
    idp.gate = asyncio.Event()  # never answers
    slow = app_for(data_dir / "slow", clock, idp.url, fetch_timeout=0.2)
    async with serve_in_process(slow) as addr:
        assert (await who(addr, token)).status_code == 401
        assert "JWKS unavailable: no answer from the JWKS URL within 0.2 s" in caplog.text


async def test_expired_and_not_yet_valid_tokens_are_refused_on_the_injected_clock_within_the_leeway(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    async with serve_in_process(app_for(data_dir, clock, idp.url, leeway=30)) as addr:
        short = RSA_1.sign(claims(clock.now(), ttl=10))
        early = RSA_1.sign(claims(clock.now(), nbf=int(clock.now()) + 60))
        assert (await who(addr, short)).status_code == 200
        assert (await who(addr, early)).status_code == 401
        assert "token not yet valid" in caplog.text
        async with connect(f"ws://{addr}/agents/whoami/w1", additional_headers=bearer(short)) as ws:
            assert (await ws.recv())["type"] == "welcome"
            clock.advance(39)  # past exp, within the leeway
            assert (await who(addr, short)).status_code == 200
            assert (await who(addr, early)).status_code == 200  # nbf is 21 s ahead: within the leeway
            clock.advance(1)  # exp + leeway: the token is refused and its open connection closed
            assert await ws.close_code(timeout=5) == 4401
        assert (await who(addr, short)).status_code == 401
        assert await ws_close_code(f"ws://{addr}/agents/whoami/w1", short) == 4401
        assert "token expired" in caplog.text


async def test_an_open_connection_renews_with_a_new_jwt_in_an_auth_frame(
    data_dir: Path, idp: IdentityProvider
) -> None:
    clock = FakeClock()
    first = RSA_1.sign(claims(clock.now(), ttl=10))
    async with (
        serve_in_process(app_for(data_dir, clock, idp.url, leeway=0)) as addr,
        connect(f"ws://{addr}/agents/whoami/w1", additional_headers=bearer(first)) as ws,
    ):
        assert (await ws.recv())["type"] == "welcome"
        clock.advance(5)
        second = EC_1.sign(claims(clock.now(), ttl=60))  # another key of the same provider
        exp = int(clock.now()) + 60
        await ws.send({"type": "auth", "token": second, "id": "r1"})
        ack = await ws.wait_for(lambda f: f.get("type") == "auth_result")
        assert ack == {"type": "auth_result", "id": "r1", "ok": True, "exp": exp}
        clock.advance(10)  # past the first token's exp
        assert (await ws.call("who"))["id"] == "alice"
        await ws.send({"type": "auth", "token": GHOST.sign(claims(clock.now())), "id": "r2"})
        refused = await ws.wait_for(lambda f: f.get("type") == "auth_result" and f.get("id") == "r2")
        assert refused["ok"] is False
        assert (await ws.call("who"))["exp"] == exp  # the second token's principal goes on


async def test_the_issuer_the_audience_and_the_required_claims_are_checked(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    good = claims(clock.now())
    without = {name: {k: v for k, v in good.items() if k != name} for name in ("exp", "aud", "iss", "sub")}
    cases = {
        "wrong issuer": {**good, "iss": "https://evil.example"},
        "wrong audience": {**good, "aud": "another-api"},
        "claim exp is missing": without["exp"],
        "claim aud is missing": without["aud"],
        "claim iss is missing": without["iss"],
        "claim sub must be a string of 1 to 256 characters": without["sub"],
        "claim sub must hold no control character": {**good, "sub": "al\x00ice"},
    }
    forged = RSA_1.sign({**good, "sub": "alice\nroost.security WARNING refused admin"})
    async with serve_in_process(app_for(data_dir, clock, idp.url)) as addr:
        for reason, body in cases.items():
            assert (await who(addr, RSA_1.sign(body))).status_code == 401, reason
            assert reason in caplog.text
        assert (await who(addr, forged)).status_code == 401  # a newline in a principal's id
        several = RSA_1.sign({**good, "aud": ["another-api", AUDIENCE]})
        assert (await who(addr, several)).status_code == 200


async def test_claims_map_to_the_principal_and_claims_authorize_honours_them(
    data_dir: Path, idp: IdentityProvider
) -> None:
    clock = FakeClock()
    body = claims(clock.now(), tenant="acme", kinds=["whoami"], names=["room-*"], ro=True, admin=True)
    reader = RSA_1.sign(body)
    writer = RSA_1.sign(claims(clock.now(), tenant="acme"))
    async with (
        serve_in_process(app_for(data_dir, clock, idp.url, leeway=5)) as addr,
        httpx.AsyncClient() as http,
    ):
        rpc = f"http://{addr}/agents/whoami/room-1/rpc"
        assert (await http.post(f"{rpc}/touch", headers=bearer(writer))).json()["result"] == 1
        got = await http.post(f"{rpc}/peek", headers=bearer(reader))
        assert got.json()["result"] == {
            "id": "alice",
            "tenant": "acme",
            "kinds": ["whoami"],
            "names": ["room-*"],
            "read_only": True,
            "admin": False,  # not mapped unless asked for
            "exp": body["exp"] + 5,
        }
        touch = await http.post(f"{rpc}/touch", headers=bearer(reader))
        assert touch.status_code == 403
        assert touch.json()["error"]["code"] == "forbidden"
        async with connect(f"ws://{addr}/agents/whoami/room-1", additional_headers=bearer(reader)) as ws:
            assert (await ws.recv())["type"] == "welcome"
            assert (await ws.rpc("touch"))["error"]["code"] == "forbidden"
            assert (await ws.call("peek"))["tenant"] == "acme"
        assert await ws_close_code(f"ws://{addr}/agents/counter/room-1", reader) == 4403  # kinds
        assert await ws_close_code(f"ws://{addr}/agents/whoami/lobby", reader) == 4403  # names
        assert (await http.post(f"{rpc}/touch", headers=bearer(writer))).json()["result"] == 2
        other = RSA_1.sign(claims(clock.now(), tenant="globex"))  # another tenant: another actor
        assert (await http.post(f"{rpc}/touch", headers=bearer(other))).json()["result"] == 1


async def test_a_claims_mapping_names_the_claims_of_another_identity_provider(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    mapping = ClaimsMapping(
        subject="email", tenant="org_id", kinds=None, names=None, read_only=None, admin="op"
    )
    body = claims(clock.now(), email="ann@acme.example", org_id="acme", ro=True, op=True, kinds=["counter"])
    every = {"default_kinds": ["*"], "default_read_only": False}  # what no claim grants, the server does
    async with serve_in_process(app_for(data_dir, clock, idp.url, claims=mapping, **every)) as addr:
        got = (await who(addr, RSA_1.sign(body))).json()["result"]
        assert got["id"] == "ann@acme.example"
        assert got["tenant"] == "acme"
        assert (got["read_only"], got["admin"], got["kinds"]) == (False, True, None)
        bad = {
            "claim org_id must be a string of 1 to 128 characters without NUL": {**body, "org_id": "a\x00b"},
            "claim op must be true or false": {**body, "op": "yes"},
            "claim email must be a string of 1 to 256 characters": {**body, "email": 7},
        }
        for reason, payload in bad.items():
            assert (await who(addr, RSA_1.sign(payload))).status_code == 401
            assert reason in caplog.text


async def test_claims_of_the_wrong_type_are_refused(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    bad: list[tuple[str, dict[str, Any]]] = [
        ("claim ro must be true or false", {"ro": "true"}),
        ("claim kinds must be a list of strings", {"kinds": "whoami"}),
        ("claim kinds must be a list of strings", {"kinds": None}),  # null is not "every kind"
        ("claim names must be a list of strings", {"names": [1]}),
        ("claim tenant must be a string of 1 to 128 characters without NUL", {"tenant": ""}),
        ("claim tenant must be a string of 1 to 128 characters without NUL", {"tenant": None}),
        ("claim exp must be a number", {"exp": float("nan")}),  # would never expire
    ]
    async with serve_in_process(app_for(data_dir, clock, idp.url)) as addr:
        for reason, extra in bad:
            caplog.clear()
            assert (await who(addr, RSA_1.sign(claims(clock.now(), **extra)))).status_code == 401, extra
            assert reason in caplog.text, extra


async def test_malformed_tokens_are_a_401_or_4401_never_a_500_from_every_place_a_token_comes_from(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    good = RSA_1.sign(claims(clock.now()))
    head, payload, signature = good.split(".")
    tampered_body = b64(json.dumps(claims(clock.now(), sub="mallory")).encode())
    garbage = [
        "abc",
        "a.b.c",
        "é.x.y",
        "x" * 20_000,
        f"{head}.{tampered_body}.{signature}",
        f"{b64(b'not json')}.{payload}.{signature}",
        handmade({"alg": "RS256", "kid": 7}, claims(clock.now())),
        handmade({"alg": ["RS256"], "kid": "rsa-1"}, claims(clock.now())),
        f"{head}.{payload}.{signature[:-4]}",
    ]
    async with serve_in_process(app_for(data_dir, clock, idp.url)) as addr:
        async with httpx.AsyncClient() as http:
            for token in garbage:
                # as UTF-8 bytes: é as a client may send it
                header = {b"Authorization": f"Bearer {token}".encode()}
                got = await http.post(f"http://{addr}/agents/whoami/w1/rpc/who", headers=header)
                assert got.status_code == 401, token[:40]
        for token in garbage[:2] + garbage[4:]:
            async with connect(
                f"ws://{addr}/agents/whoami/w1", subprotocols=["roost", f"roost.token.{token}"]
            ) as ws:
                assert (await ws.recv())["code"] == "unauthenticated"
                assert await ws.close_code() == 4401
        async with connect(f"ws://{addr}/agents/whoami/w1?token={garbage[4]}") as ws:
            assert await ws.close_code() == 4401
        assert "bad signature (token from subprotocol)" in caplog.text
        assert "bad signature (token from query)" in caplog.text
        assert "malformed token" in caplog.text
        assert (await who(addr, good)).status_code == 200


async def test_a_jwks_file_is_read_and_its_keys_rotate_by_kid(data_dir: Path, tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [RSA_1.jwk()]}))
    async with serve_in_process(app_for(data_dir, clock, path)) as addr:
        assert (await who(addr, RSA_1.sign(claims(clock.now())))).status_code == 200
        path.write_text(json.dumps({"keys": [RSA_1.jwk(), ED_1.jwk()]}))
        clock.advance(10)
        assert (await who(addr, ED_1.sign(claims(clock.now())))).status_code == 200


async def test_a_missing_or_broken_jwks_file_is_a_401_with_a_logged_reason(
    data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    path = tmp_path / "jwks.json"
    token = RSA_1.sign(claims(clock.now()))
    async with serve_in_process(app_for(data_dir, clock, path)) as addr:
        assert (await who(addr, token)).status_code == 401
        assert "JWKS unavailable: cannot read the JWKS file (No such file or directory)" in caplog.text
        for text, reason in (
            ("{", "the JWKS is not JSON"),
            ('{"keys": {}}', "the JWKS has no list of keys"),
            (json.dumps({"keys": [{"kty": "oct", "k": b64(b"s" * 32), "kid": "rsa-1"}]}), "no usable key"),
        ):
            path.write_text(text)
            clock.advance(10)
            assert (await who(addr, token)).status_code == 401
            assert reason in caplog.text


async def test_hmac_tokens_and_jwts_are_accepted_side_by_side_with_a_signer(
    data_dir: Path, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, "roost.security")
    async with serve_in_process(app_for(data_dir, clock, idp.url, signer=signer)) as addr:
        assert (await who(addr, RSA_1.sign(claims(clock.now())))).json()["result"]["id"] == "alice"
        operator = signer.issue("op", ttl=60, admin=True, now=clock.now())
        assert (await who(addr, operator)).json()["result"]["admin"] is True
        forged = TokenSigner("z" * 40).issue("op", ttl=60, admin=True, now=clock.now())
        assert (await who(addr, forged)).status_code == 401
        assert "bad signature" in caplog.text
        assert idp.hits == 1  # roost1 tokens never reach the JWKS
