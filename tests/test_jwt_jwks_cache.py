"""The JWKS cache of ``JwtVerifier`` (``docs/design.md``, *The JWKS cache of JwtVerifier*): stale keys
serve while a refresh runs in the background, so a hanging identity provider delays no token whose
key is cached; a token with an unknown ``kid`` waits for the next fetch the rate limit allows, so a
made-up ``kid`` does not lock a rotated-in key out; the waiters are bounded.

Real parts only: the identity provider's JWKS served over HTTP on 127.0.0.1 (``tests/jwt_support.py``;
its ``gate`` holds every answer, as a provider that hangs), keys made with ``cryptography``. Time is a
:class:`~roost.scheduler.FakeClock` (the verifier's clock and its sleep): the cache's lifetime and the
refetch interval are passed by advancing it, never by sleeping; "no verify waits for the provider" is
shown by verifications that complete while the provider's answer is held.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from roost.scheduler import FakeClock
from roost.testing import until
from roost.transport.jwt_tokens import JwtError, JwtVerifier
from tests.jwt_support import AUDIENCE, GHOST, ISSUER, RSA_1, RSA_2, IdentityProvider, claims

# long enough that a verification which waited for a held fetch could not finish before the test does
NEVER = 3600.0


@pytest.fixture
async def idp() -> AsyncIterator[IdentityProvider]:
    async with IdentityProvider(RSA_1).running() as provider:
        yield provider


def verifier_for(idp: IdentityProvider, clock: FakeClock, **kw: Any) -> JwtVerifier:
    return JwtVerifier(idp.url, issuer=ISSUER, audience=AUDIENCE, clock=clock.now, sleep=clock.sleep, **kw)


async def test_stale_keys_serve_at_once_while_a_hanging_jwks_is_refreshed_in_the_background(
    idp: IdentityProvider,
) -> None:
    clock = FakeClock()
    verifier = verifier_for(idp, clock, cache_ttl=300, max_stale=3600, fetch_timeout=NEVER)
    assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"
    assert idp.hits == 1
    idp.gate = asyncio.Event()  # from now on the provider accepts the request and never answers
    clock.advance(301)  # the keys are stale
    try:
        # each of these completes while the provider holds its answer: none waits for it
        for i in range(5):
            got = await verifier.verify(RSA_1.sign(claims(clock.now(), sub=f"user-{i}")))
            assert got.id == f"user-{i}"
        await until(lambda: idp.hits == 2)  # the one background refresh reached the provider
        clock.advance(10)  # past the refetch interval, the refresh still held: no second one
        assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"
        clock.advance(3588)  # the last second of max_stale (fetched 3899 s ago)
        assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"
        assert idp.hits == 2  # one refresh in flight at a time
    finally:
        idp.gate.set()
        await verifier.aclose()


async def test_keys_older_than_max_stale_wait_for_a_fetch_and_a_finished_refresh_replaces_them(
    idp: IdentityProvider,
) -> None:
    clock = FakeClock()
    verifier = verifier_for(idp, clock, cache_ttl=300, max_stale=600)
    assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"
    idp.keys = [RSA_2]  # the provider rotated while the cache was fresh
    clock.advance(300)
    assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"  # stale, served

    async def refreshed() -> bool:
        try:
            await verifier.verify(RSA_2.sign(claims(clock.now())))
        except JwtError:
            return False
        return True

    await until(refreshed)  # the new key, once the background refresh is in
    assert idp.hits == 2
    with pytest.raises(JwtError, match=r"unknown key id 'rsa-1' \(withdrawn from the JWKS\)"):
        await verifier.verify(RSA_1.sign(claims(clock.now())))  # at once: no wait for a dropped key
    idp.gate = asyncio.Event()
    clock.advance(900)  # too old: a token waits for the fetch (and for nothing else)
    pending = asyncio.create_task(verifier.verify(RSA_2.sign(claims(clock.now()))))
    await until(lambda: idp.hits == 3)
    assert not pending.done()
    idp.gate.set()
    assert (await pending).id == "alice"


async def test_a_rotated_in_key_is_accepted_after_a_made_up_kid_used_up_the_refetch_interval(
    idp: IdentityProvider,
) -> None:
    clock = FakeClock()
    verifier = verifier_for(idp, clock, refetch_interval=10)
    assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"
    clock.advance(10)
    with pytest.raises(JwtError, match="unknown key id 'made-up'"):
        await verifier.verify(GHOST.sign(claims(clock.now()), kid="made-up"))  # the fetch it may have
    assert idp.hits == 2
    idp.keys = [RSA_1, RSA_2]  # the provider rotates a key in, a second later
    clock.advance(1)
    pending = asyncio.create_task(verifier.verify(RSA_2.sign(claims(clock.now(), sub="new"))))
    await until(lambda: verifier.waiting == 1)  # waiting for the next fetch, not refused
    assert idp.hits == 2
    clock.advance(9)  # the moment the rate limit allows
    assert (await pending).id == "new"
    assert idp.hits == 3


async def test_a_flood_of_made_up_kids_costs_one_fetch_per_interval_and_at_most_max_waiting_waiters(
    idp: IdentityProvider,
) -> None:
    clock = FakeClock()
    verifier = verifier_for(idp, clock, refetch_interval=10, max_waiting=10)
    assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"
    tasks = [
        asyncio.create_task(verifier.verify(GHOST.sign(claims(clock.now()), kid=f"made-up-{i}")))
        for i in range(50)
    ]
    await until(lambda: sum(task.done() for task in tasks) == 40)  # refused at once: too many wait
    assert verifier.waiting == 10
    for task in (t for t in tasks if t.done()):
        with pytest.raises(JwtError, match=r"\(10 tokens already wait for the next fetch of the JWKS\)"):
            task.result()
    assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"  # known kids: at once
    assert idp.hits == 1
    clock.advance(10)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    waited = [r for r in results if isinstance(r, JwtError) and "already wait" not in str(r)]
    assert len(waited) == 10
    assert all("unknown key id 'made-up-" in str(r) for r in waited)
    assert idp.hits == 2  # ten waiters, one fetch
    assert verifier.waiting == 0


async def test_a_waiter_that_goes_away_leaves_the_scheduled_fetch_to_the_others(
    idp: IdentityProvider,
) -> None:
    clock = FakeClock()
    verifier = verifier_for(idp, clock, refetch_interval=10)
    assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"
    idp.keys = [RSA_1, RSA_2]
    gone = asyncio.create_task(verifier.verify(RSA_2.sign(claims(clock.now(), sub="gone"))))
    stays = asyncio.create_task(verifier.verify(RSA_2.sign(claims(clock.now(), sub="stays"))))
    await until(lambda: verifier.waiting == 2)
    gone.cancel()  # its client hung up
    await until(lambda: verifier.waiting == 1)
    clock.advance(10)
    assert (await stays).id == "stays"
    assert gone.cancelled()
    assert idp.hits == 2


async def test_closing_the_verifier_ends_the_waits_for_its_fetches_with_a_refusal(
    idp: IdentityProvider,
) -> None:
    clock = FakeClock()
    verifier = verifier_for(idp, clock, fetch_timeout=NEVER)
    idp.gate = asyncio.Event()  # the first fetch is held
    first = asyncio.create_task(verifier.verify(RSA_1.sign(claims(clock.now()))))
    await until(lambda: idp.hits == 1)
    await verifier.aclose()
    with pytest.raises(JwtError, match="JWKS unavailable: not fetched yet"):
        await first
    idp.gate.set()
    clock.advance(10)  # a closed verifier still answers: a fresh fetch
    assert (await verifier.verify(RSA_1.sign(claims(clock.now())))).id == "alice"
    idp.keys = [RSA_1, RSA_2]
    waiting = asyncio.create_task(verifier.verify(RSA_2.sign(claims(clock.now()))))
    await until(lambda: verifier.waiting == 1)  # for the scheduled fetch
    await verifier.aclose()
    with pytest.raises(JwtError, match="unknown key id 'rsa-2'"):
        await waiting


async def test_a_sleep_that_does_not_move_the_clock_cannot_hold_a_waiting_token_for_ever(
    idp: IdentityProvider,
) -> None:
    frozen = FakeClock()  # never advanced: its time stands still while the verifier sleeps on another
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    verifier = JwtVerifier(idp.url, issuer=ISSUER, audience=AUDIENCE, clock=frozen.now, sleep=sleep)
    assert (await verifier.verify(RSA_1.sign(claims(frozen.now())))).id == "alice"
    idp.keys = [RSA_1, RSA_2]
    assert (await verifier.verify(RSA_2.sign(claims(frozen.now())))).id == "alice"
    assert slept == [10.0]  # one wait of the refetch interval, then the fetch
    assert idp.hits == 2
