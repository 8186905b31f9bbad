"""The creation of actors is rate-limited per principal, and per address for anonymous clients
(``docs/security.md``, *many actors*): a connection or an HTTP call that would create an actor takes a
token; one to an actor that exists takes none. Time is the app's :class:`FakeClock`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.actors import ANONYMOUS, Principal, Registry, RuntimeConfig
from roost.examples.kinds import KINDS
from roost.protocol.codes import CloseCode
from roost.scheduler import FakeClock
from roost.testing import connect
from roost.transport import create_app
from roost.transport.access import Access
from roost.transport.auth import allow_all
from roost.transport.limits import BucketTable, Limits
from roost.transport.security import token_authenticate
from roost.transport.tokens import TokenSigner
from tests.support import ServerProcess, serve_in_process

signer = TokenSigner("c" * 40)


def created(data_dir: Path) -> int:
    """Actor files in the data directory (each actor has one: ``<kind>/<digest>.sqlite``)."""
    return sum(1 for _ in data_dir.glob("*/**/*.sqlite")) if data_dir.exists() else 0


async def welcomed_or_refused(url: str, **kwargs: Any) -> tuple[str, int | None]:
    """``("welcome", None)``, or the refusal's error code and close code."""
    async with connect(url, **kwargs) as ws:
        first = await ws.recv()
        if first["type"] == "welcome":
            return "welcome", None
        return first["code"], await ws.close_code()


async def test_anonymous_creation_past_the_burst_is_refused_and_existing_actors_and_others_keep_working(
    data_dir: Path,
) -> None:
    clock = FakeClock()
    limits = Limits(conn_rate=None, anonymous_creation_rate=0.5, anonymous_creation_burst=3)
    app = create_app(KINDS, data_dir=data_dir, clock=clock, limits=limits)
    async with serve_in_process(app) as addr, httpx.AsyncClient() as http:
        base = f"ws://{addr}/agents/counter"
        for i in range(3):  # the burst
            assert await welcomed_or_refused(f"{base}/n{i}") == ("welcome", None)
        code, close = await welcomed_or_refused(f"{base}/n3")
        assert (code, close) == ("creation_limited", CloseCode.TRY_AGAIN_LATER)
        answer = await http.post(f"http://{addr}/agents/counter/h0/rpc/increment")
        assert answer.status_code == 429
        assert answer.json()["error"]["code"] == "creation_limited"
        assert answer.headers["retry-after"] == "2"  # one token at 0.5/s
        assert not app.registry.exists("counter", "n3")
        assert not app.registry.exists("counter", "h0")  # refused before anything was created

        # the actors that exist are never limited: connections, calls over both
        for _ in range(5):
            async with connect(f"{base}/n0") as ws:
                await ws.recv()
                assert await ws.call("increment") >= 1
            assert (await http.post(f"http://{addr}/agents/counter/n1/rpc/increment")).status_code == 200
        # another address (a proxy's X-Forwarded-For, trusted from 127.0.0.1) has its own bucket
        other = {"X-Forwarded-For": "198.51.100.7"}
        assert await welcomed_or_refused(f"{base}/o0", additional_headers=other) == ("welcome", None)
        answer = await http.post(f"http://{addr}/agents/counter/o1/rpc/increment", headers=other)
        assert answer.status_code == 200


async def test_the_creation_bucket_refills_on_the_apps_clock(data_dir: Path) -> None:
    clock = FakeClock()
    limits = Limits(conn_rate=None, anonymous_creation_rate=1, anonymous_creation_burst=2)
    app = create_app(KINDS, data_dir=data_dir, clock=clock, limits=limits)
    async with serve_in_process(app) as addr, httpx.AsyncClient() as http:
        rpc = f"http://{addr}/agents/counter/{{}}/rpc/increment"
        codes = [(await http.post(rpc.format(f"a{i}"))).status_code for i in range(3)]
        assert codes == [200, 200, 429]
        clock.advance(0.5)  # half a token: still refused, and told the second left
        answer = await http.post(rpc.format("a2"))
        assert (answer.status_code, answer.headers["retry-after"]) == (429, "1")
        clock.advance(0.5)
        assert (await http.post(rpc.format("a2"))).status_code == 200
        clock.advance(10)  # refills up to the burst, no further
        codes = [(await http.post(rpc.format(f"b{i}"))).status_code for i in range(3)]
        assert codes == [200, 200, 429]


async def test_an_authenticated_principal_has_its_own_creation_bucket(data_dir: Path) -> None:
    """Alice's and Bob's tokens (their subjects) each have a bucket, apart from the anonymous
    address they connect from."""
    clock = FakeClock()
    limits = Limits(
        conn_rate=None,
        principal_rate=None,
        creation_rate=0.01,
        creation_burst=2,
        anonymous_creation_rate=0.01,
        anonymous_creation_burst=1,
    )
    app = create_app(
        KINDS,
        data_dir=data_dir,
        clock=clock,
        limits=limits,
        authenticate=lambda conn: tokens(conn) if "authorization" in conn.headers else ANONYMOUS,
    )
    tokens = token_authenticate(signer, clock=clock.now)

    def bearer(sub: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {signer.issue(sub, ttl=600, now=clock.now())}"}

    async with serve_in_process(app) as addr:
        base = f"ws://{addr}/agents/counter"
        assert await welcomed_or_refused(f"{base}/anon0") == ("welcome", None)
        assert (await welcomed_or_refused(f"{base}/anon1"))[0] == "creation_limited"
        # the anonymous address's bucket is empty; alice and bob have buckets of their own
        for who in ("alice", "bob"):
            for i in range(2):
                got = await welcomed_or_refused(f"{base}/{who}{i}", additional_headers=bearer(who))
                assert got == ("welcome", None), who
            got = await welcomed_or_refused(f"{base}/{who}2", additional_headers=bearer(who))
            assert got == ("creation_limited", CloseCode.TRY_AGAIN_LATER)


async def test_without_a_creation_rate_for_principals_they_create_freely(data_dir: Path) -> None:
    """Authenticated principals are not limited by default (``Limits.creation_rate`` is None)."""
    assert Limits().creation_rate is None
    app = create_app(
        KINDS,
        data_dir=data_dir,
        clock=FakeClock(),
        limits=Limits(conn_rate=None, principal_rate=None),
        authenticate=token_authenticate(signer),
    )
    token = {"Authorization": f"Bearer {signer.issue('carol', ttl=600)}"}
    async with serve_in_process(app) as addr, httpx.AsyncClient(headers=token) as http:
        n = int(Limits().anonymous_creation_burst) + 20  # more than an anonymous address may
        for i in range(n):
            answer = await http.post(f"http://{addr}/agents/counter/m{i}/rpc/increment")
            assert answer.status_code == 200, answer.text
    assert created(data_dir) == n


def test_the_creation_bucket_table_stays_bounded(tmp_path: Path) -> None:
    """However many addresses come, at most ``creation_buckets`` buckets are kept; the least recently
    used goes first."""
    clock = FakeClock()
    registry = Registry(KINDS, RuntimeConfig(data_dir=tmp_path))
    limits = Limits(anonymous_creation_rate=0.001, anonymous_creation_burst=1, creation_buckets=50)
    access = Access(registry, allow_all, None, None, limits, clock.monotonic)
    table = access.anonymous_creations
    assert table is not None
    for i in range(1000):
        assert access.creation(ANONYMOUS, "counter", f"x{i}", f"10.0.{i // 250}.{i % 250}") is None
        assert len(table) <= 50
    assert len(table) == 50
    # the most recent address is remembered (refused), the first one long forgotten (full again)
    assert access.creation(ANONYMOUS, "counter", "again", "10.0.3.249") is not None
    assert access.creation(ANONYMOUS, "counter", "again", "10.0.0.0") is None


def test_a_used_bucket_is_kept_over_newer_ones() -> None:
    table = BucketTable(1.0, 1.0, 2, FakeClock().monotonic)
    first = table.get("a")
    table.get("b")
    assert table.get("a") is first  # used again: now the most recent
    table.get("c")  # forgets "b", the least recently used
    assert list(table.buckets) == ["a", "c"]
    with pytest.raises(ValueError, match="at least one"):
        BucketTable(1.0, 1.0, 0, FakeClock().monotonic)


def test_a_principal_is_keyed_by_tenant_and_subject(tmp_path: Path) -> None:
    clock = FakeClock()
    registry = Registry(KINDS, RuntimeConfig(data_dir=tmp_path))
    limits = Limits(creation_rate=0.001, creation_burst=1)
    access = Access(registry, allow_all, None, None, limits, clock.monotonic)
    assert access.creation(Principal("dan", tenant="t1"), "counter", "a") is None
    assert access.creation(Principal("dan", tenant="t1"), "counter", "b") is not None
    assert access.creation(Principal("dan", tenant="t2"), "counter", "b") is None


def test_roost_serve_refuses_anonymous_creation_past_its_default_burst(tmp_path: Path) -> None:
    """A real server with its defaults, but a small burst: past it new actors are refused with 429 and
    1013, while calls to existing actors and a bystander's handshake still succeed."""
    server = ServerProcess(
        tmp_path / "data", "--anonymous-creation-rate", "0.001", "--anonymous-creation-burst", "5"
    ).start()
    try:
        with httpx.Client(base_url=server.http, timeout=10) as http:
            codes = [http.post(f"/agents/counter/k{i}/rpc/increment").status_code for i in range(8)]
            assert codes == [200] * 5 + [429] * 3
            assert http.post("/agents/counter/k0/rpc/increment").json() == {"ok": True, "result": 2}
        from websockets.sync.client import connect as sync_connect

        with sync_connect(f"{server.ws}/agents/counter/k9") as ws:
            frame = ws.recv(timeout=10)
            assert '"creation_limited"' in str(frame)
        with sync_connect(f"{server.ws}/agents/counter/k1") as ws:  # exists: welcomed
            assert '"welcome"' in str(ws.recv(timeout=10))
    finally:
        server.kill()
    assert created(tmp_path / "data") == 5


def test_roost_serve_creation_defaults_are_the_limits_defaults() -> None:
    """``roost serve`` without creation options limits as ``Limits()`` does: anonymous clients on,
    authenticated principals off."""
    from roost.cli import _parser

    args = _parser().parse_args(["serve"])
    defaults = Limits()
    assert args.anonymous_creation_rate == defaults.anonymous_creation_rate
    assert args.anonymous_creation_burst == defaults.anonymous_creation_burst
    assert args.anonymous_network_creation_rate == defaults.anonymous_network_creation_rate
    assert args.anonymous_network_creation_burst == defaults.anonymous_network_creation_burst
    assert args.anonymous_total_creation_rate == defaults.anonymous_total_creation_rate
    assert args.anonymous_total_creation_burst == defaults.anonymous_total_creation_burst
    assert (args.creation_rate or None) is defaults.creation_rate is None
    assert args.creation_burst == defaults.creation_burst


def anonymous_access(tmp_path: Path, clock: FakeClock, **limits: Any) -> Access:
    registry = Registry(KINDS, RuntimeConfig(data_dir=tmp_path))
    return Access(registry, allow_all, None, None, Limits(**limits), clock.monotonic)


async def test_ipv4_clients_carried_in_ipv6_each_have_their_own_creation_bucket(data_dir: Path) -> None:
    """A dual-stack proxy forwards IPv4 clients as ``::ffff:a.b.c.d``: each is keyed as its IPv4
    address (the same bucket as ``a.b.c.d`` itself), not all together as ``::/64``."""
    limits = Limits(conn_rate=None, anonymous_creation_rate=0.001, anonymous_creation_burst=2)
    app = create_app(KINDS, data_dir=data_dir, clock=FakeClock(), limits=limits)
    async with serve_in_process(app) as addr, httpx.AsyncClient() as http:

        async def create(name: str, client: str) -> int:
            url = f"http://{addr}/agents/counter/{name}/rpc/increment"
            return (await http.post(url, headers={"X-Forwarded-For": client})).status_code

        assert [await create(f"a{i}", "::ffff:198.51.100.7") for i in range(3)] == [200, 200, 429]
        assert await create("b0", "::ffff:203.0.113.5") == 200  # another client: its own bucket
        assert await create("b1", "203.0.113.5") == 200  # the same client over IPv4: the same one
        assert await create("b2", "::ffff:203.0.113.5") == 429


def test_ipv4_compatible_and_6to4_addresses_are_keyed_as_their_ipv4_address(tmp_path: Path) -> None:
    access = anonymous_access(
        tmp_path, FakeClock(), anonymous_creation_rate=0.001, anonymous_creation_burst=1
    )
    assert access.creation(ANONYMOUS, "counter", "a", "198.51.100.7") is None
    for same in ("::ffff:198.51.100.7", "::198.51.100.7", "2002:c633:6407:1::5"):  # 6to4 of it
        assert access.creation(ANONYMOUS, "counter", "a", same) is not None, same
    assert access.creation(ANONYMOUS, "counter", "a", "2002:cb00:7105::1") is None  # 203.0.113.5
    assert access.creation(ANONYMOUS, "counter", "a", "::1") is None  # loopback: not an IPv4 one
    assert access.creation(ANONYMOUS, "counter", "a", "::") is not None  # ::/64 as ::1, still IPv6


def test_the_many_64s_of_one_ipv6_network_share_its_48s_creation_bucket(tmp_path: Path) -> None:
    """With the defaults, 256 /64s of one /56 create at most the /48's burst (1000), not 256 bursts
    of 200; another /48 still creates, and a refusal takes no token from the address's bucket."""
    clock = FakeClock()
    access = anonymous_access(tmp_path, clock)
    made = 0
    for net in range(256):
        client = f"2001:db8:0:ab{net:02x}::1"
        while access.creation(ANONYMOUS, "counter", f"n{made}", client) is None:
            made += 1
    assert made == Limits().anonymous_network_creation_burst == 1000
    refused = access.creation(ANONYMOUS, "counter", "x", "2001:db8:0:1::1")  # a /64 not used yet
    assert refused is not None
    assert refused.code == "creation_limited"
    assert refused.retry_after == 1  # 5 per second
    assert access.creation(ANONYMOUS, "counter", "x", "2001:db8:1::1") is None  # another /48
    clock.advance(0.2)  # one token back in the /48's bucket; the unused /64's is still full
    assert access.creation(ANONYMOUS, "counter", "y", "2001:db8:0:1::1") is None
    assert access.creation(ANONYMOUS, "counter", "z", "2001:db8:0:1::1") is not None


def test_all_anonymous_creations_together_stay_within_the_total_bucket(tmp_path: Path) -> None:
    """However many addresses and networks: at most the total burst at once, then its rate; an
    authenticated principal is not counted in it."""
    clock = FakeClock()
    access = anonymous_access(
        tmp_path,
        clock,
        anonymous_creation_burst=10,
        anonymous_total_creation_rate=2.0,
        anonymous_total_creation_burst=50,
        creation_rate=1.0,
        creation_burst=5,
    )
    made = 0
    for i in range(20):  # 20 IPv4 addresses and 20 IPv6 /48s, 10 each: 400 asked for
        for client in (f"192.0.2.{i}", f"2001:db8:{i:x}::1"):
            made += sum(access.creation(ANONYMOUS, "counter", f"t{i}", client) is None for _ in range(10))
    assert made == 50
    refused = access.creation(ANONYMOUS, "counter", "late", "198.51.100.99")
    assert refused is not None
    assert refused.retry_after == 1
    assert access.creation(Principal("erin"), "counter", "e", "198.51.100.99") is None
    clock.advance(1.0)  # two tokens
    fresh = [access.creation(ANONYMOUS, "counter", "f", f"198.51.100.{i}") for i in range(3)]
    assert [r is None for r in fresh] == [True, True, False]
