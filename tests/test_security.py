"""Authentication, authorization, tenants, origins and read-only access (docs/security.md)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import websockets

from roost.actors import Actor, callable
from roost.examples.kinds import Counter
from roost.testing import connect, until
from roost.transport import create_app
from roost.transport.limits import Limits
from roost.transport.security import claims_authorize, token_authenticate
from roost.transport.tokens import TokenError, TokenSigner
from tests.support import serve_in_process

SECRET = "s" * 40
signer = TokenSigner(SECRET)


class Whoami(Actor):
    kind = "whoami"

    @callable(readonly=True)
    async def who(self) -> dict[str, Any]:
        return {
            "principal": self.principal.id if self.principal else None,
            "tenant": self.tenant,
            "name": self.local_name,
        }

    @callable
    async def touch(self) -> int:
        self.set_state({"n": (self.state or {}).get("n", 0) + 1})
        return int(self.state["n"])


def app_for(data_dir: Path, **kw: Any) -> Any:
    return create_app(
        [Whoami, Counter],
        data_dir=data_dir,
        authenticate=token_authenticate(signer),
        authorize=claims_authorize,
        limits=Limits(conn_rate=None, principal_rate=None),
        **kw,
    )


async def closed_with(url: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    async with connect(url, **kw) as ws:
        frame = await ws.recv()
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, frame


def test_tokens_round_trip_expire_and_refuse_forgeries() -> None:
    token = signer.issue(
        "alice", ttl=60, tenant="acme", kinds=["whoami"], names=["a*"], read_only=True, now=1000
    )
    p = signer.verify(token, now=1059)
    assert (p.id, p.tenant) == ("alice", "acme")
    assert p.claims["kinds"] == ["whoami"]
    assert p.claims["read_only"] is True
    with pytest.raises(TokenError, match="expired"):
        signer.verify(token, now=1060)
    head, claims, sig = token.split(".")
    forged = orjson.loads(__import__("base64").urlsafe_b64decode(claims + "=="))
    forged["tenant"] = "other"
    import base64

    forged_claims = base64.urlsafe_b64encode(orjson.dumps(forged)).rstrip(b"=").decode()
    with pytest.raises(TokenError, match="bad signature"):
        signer.verify(f"{head}.{forged_claims}.{sig}", now=1000)
    with pytest.raises(TokenError, match="bad signature"):
        TokenSigner("t" * 40).verify(token, now=1000)
    for junk in ("", "roost1", "roost1.a.b.c", "x" * 5000, "roost2.a.b"):
        with pytest.raises(TokenError):
            signer.verify(junk, now=1000)
    rotated = TokenSigner(["n" * 40, SECRET])  # a new secret signs, the old one still verifies
    assert rotated.verify(token, now=1000).id == "alice"
    with pytest.raises(ValueError, match="32 bytes"):
        TokenSigner("short")


async def test_expired_forged_and_missing_tokens_are_refused_and_logged_without_the_token(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expired = signer.issue("alice", ttl=-1)
    forged = signer.issue("alice", ttl=60)[:-4] + "AAAA"
    async with serve_in_process(app_for(data_dir)) as addr:
        url = f"ws://{addr}/agents/counter/c1"
        with caplog.at_level(logging.WARNING, logger="roost.security"):
            for headers in (
                {},
                {"Authorization": f"Bearer {expired}"},
                {"Authorization": f"Bearer {forged}"},
            ):
                code, frame = await closed_with(url, additional_headers=headers)
                assert code == 4401
                assert frame["code"] == "unauthenticated"
            async with httpx.AsyncClient() as http:
                r = await http.post(
                    f"http://{addr}/agents/counter/c1/rpc/increment",
                    headers={"Authorization": f"Bearer {forged}"},
                )
            assert r.status_code == 401
        logged = caplog.text
        assert "token expired" in logged
        assert "bad signature" in logged
        assert expired not in logged
        assert forged not in logged
        assert forged.split(".")[1] not in logged
        # the server goes on serving good tokens
        good = signer.issue("alice", ttl=60)
        async with connect(url, additional_headers={"Authorization": f"Bearer {good}"}) as ws:
            assert (await ws.recv())["type"] == "welcome"


async def test_tokens_from_the_header_the_subprotocol_and_the_query(data_dir: Path) -> None:
    token = signer.issue("bob", ttl=60)
    async with serve_in_process(app_for(data_dir)) as addr:
        url = f"ws://{addr}/agents/whoami/w"
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.recv()
            assert (await ws.rpc("who"))["result"]["principal"] == "bob"
        async with connect(url, subprotocols=["roost", f"roost.token.{token}"]) as ws:
            assert ws.ws.subprotocol == "roost"  # the token is never echoed back
            await ws.recv()
            assert (await ws.rpc("who"))["result"]["principal"] == "bob"
        async with connect(f"{url}?token={token}") as ws:
            await ws.recv()
            assert (await ws.rpc("who"))["result"]["principal"] == "bob"


async def test_tenants_isolate_names_and_cross_tenant_access_is_impossible(data_dir: Path) -> None:
    """The same name in two tenants is two actors; no name a client can send reaches another tenant."""
    t1 = signer.issue("sam", ttl=60, tenant="t1")
    t2 = signer.issue("sam", ttl=60, tenant="t2")
    async with serve_in_process(app_for(data_dir)) as addr:
        url = f"ws://{addr}/agents/whoami/shared"
        async with connect(url, additional_headers={"Authorization": f"Bearer {t1}"}) as ws:
            welcome = await ws.recv()
            assert welcome["actor"]["name"] == "shared"
            assert (await ws.rpc("touch"))["result"] == 1
            assert (await ws.rpc("touch"))["result"] == 2
            who = (await ws.rpc("who"))["result"]
            assert who == {"principal": "sam", "tenant": "t1", "name": "shared"}
        async with connect(url, additional_headers={"Authorization": f"Bearer {t2}"}) as ws:
            await ws.recv()
            assert (await ws.rpc("touch"))["result"] == 1  # another actor
        # addressing the other tenant's key directly is refused (NUL is never accepted from a client)
        code, _frame = await closed_with(
            f"ws://{addr}/agents/whoami/t1%00shared", additional_headers={"Authorization": f"Bearer {t2}"}
        )
        assert code == 4400
        async with httpx.AsyncClient() as http:
            r = await http.get(
                f"http://{addr}/agents/whoami/shared", headers={"Authorization": f"Bearer {t2}"}
            )
            assert r.json()["state"] == {"n": 1}
            r = await http.get(
                f"http://{addr}/agents/whoami/t1%00shared", headers={"Authorization": f"Bearer {t2}"}
            )
            assert r.status_code == 400


async def test_authorize_is_checked_on_connect_every_call_and_every_http_request(data_dir: Path) -> None:
    seen: list[tuple[str, str, str, str]] = []

    def authorize(principal: Any, kind: str, name: str, action: str) -> bool:
        seen.append((principal.id, kind, name, action))
        return action != "call:touch" and name != "secret"

    token = signer.issue("ann", ttl=60)
    auth = {"Authorization": f"Bearer {token}"}
    app = create_app(
        [Whoami], data_dir=data_dir, authenticate=token_authenticate(signer), authorize=authorize
    )
    async with serve_in_process(app) as addr:
        code, frame = await closed_with(f"ws://{addr}/agents/whoami/secret", additional_headers=auth)
        assert (code, frame["code"]) == (4403, "forbidden")
        async with connect(f"ws://{addr}/agents/whoami/open", additional_headers=auth) as ws:
            await ws.recv()
            assert (await ws.rpc("who"))["ok"] is True
            refused = await ws.rpc("touch")
            assert refused["error"]["code"] == "forbidden"
            assert (await ws.rpc("who"))["ok"] is True  # the connection goes on
        async with httpx.AsyncClient() as http:
            assert (
                await http.post(f"http://{addr}/agents/whoami/open/rpc/touch", headers=auth)
            ).status_code == 403
            assert (await http.get(f"http://{addr}/agents/whoami/secret", headers=auth)).status_code == 403
            assert (
                await http.post(f"http://{addr}/agents/whoami/open/rpc/who", headers=auth)
            ).status_code == 200
    actions = [a for *_, a in seen]
    assert actions.count("connect") == 2
    assert {"call:who", "call:touch", "read"} <= set(actions)


async def test_token_claims_limit_kinds_and_names_and_read_only_connections(data_dir: Path) -> None:
    narrow = signer.issue("nina", ttl=60, kinds=["whoami"], names=["team-*"])
    viewer = signer.issue("vic", ttl=60, read_only=True)
    async with serve_in_process(app_for(data_dir)) as addr:
        for path in ("/agents/counter/team-1", "/agents/whoami/other"):
            code, _ = await closed_with(
                f"ws://{addr}{path}", additional_headers={"Authorization": f"Bearer {narrow}"}
            )
            assert code == 4403
        async with connect(
            f"ws://{addr}/agents/whoami/team-1", additional_headers={"Authorization": f"Bearer {narrow}"}
        ) as ws:
            await ws.recv()
            assert (await ws.rpc("touch"))["result"] == 1
        async with connect(
            f"ws://{addr}/agents/whoami/team-1", additional_headers={"Authorization": f"Bearer {viewer}"}
        ) as ws:
            welcome = await ws.recv()
            assert welcome["state"] == {"n": 1}  # a read-only connection reads
            assert (await ws.rpc("who"))["ok"] is True
            refused = await ws.rpc("touch")
            assert refused["error"]["code"] == "forbidden"
            await ws.send({"type": "message", "data": "hi"})
            assert (await ws.recv())["code"] == "forbidden"
        async with httpx.AsyncClient() as http:
            r = await http.post(
                f"http://{addr}/agents/whoami/team-1/rpc/touch", headers={"Authorization": f"Bearer {viewer}"}
            )
            assert r.status_code == 403


async def test_a_wrong_origin_is_refused_and_logged(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    token = signer.issue("alice", ttl=60)
    auth = {"Authorization": f"Bearer {token}"}
    async with serve_in_process(app_for(data_dir, origins=["https://app.example"])) as addr:
        url = f"ws://{addr}/agents/counter/c"
        with caplog.at_level(logging.WARNING, logger="roost.access"):
            code, frame = await closed_with(url, additional_headers=auth, origin="https://evil.example")
        assert (code, frame["code"]) == (4403, "origin_refused")
        assert "evil.example" in caplog.text
        assert token not in caplog.text
        async with connect(url, additional_headers=auth, origin="https://app.example") as ws:
            assert (await ws.recv())["type"] == "welcome"
        async with connect(url, additional_headers=auth) as ws:  # not a browser: no Origin
            assert (await ws.recv())["type"] == "welcome"


@pytest.mark.slow
async def test_roost_serve_never_logs_a_token_even_from_the_url(data_dir: Path) -> None:
    """At the default log level uvicorn prints every WebSocket request line; a ``?token=`` is taken
    out of the URL before anything can print it, accepted or refused."""

    from tests.support import ServerProcess

    secret = "z" * 40
    issuer = TokenSigner(secret)
    good = issuer.issue("alice", ttl=600)
    forged = good[:-6] + "AAAAAA"
    server = ServerProcess(data_dir, env={"ROOST_SECRET": secret}).start()
    try:
        async with connect(f"{server.ws}/agents/counter/c?token={good}") as ws:
            assert (await ws.recv())["type"] == "welcome"
        code, _ = await closed_with(f"{server.ws}/agents/counter/c?token={forged}")
        assert code == 4401
        async with httpx.AsyncClient() as http:
            r = await http.get(f"{server.http}/agents/counter/c?token={forged}")
            assert r.status_code == 401
        # bounded: the log line is written by the server process
        await until(lambda: any("bad signature" in line for line in server.log), timeout=5, interval=0.05)
    finally:
        server.kill()
    text = "".join(server.log)
    assert "bad signature" in text  # the refusal is logged ...
    assert "[accepted]" in text  # ... uvicorn's request lines too ...
    for token in (good, forged):
        assert token not in text  # ... and no token anywhere
        assert token.split(".")[1] not in text


class Ledger(Actor):
    kind = "ledger"
    migrations = ("CREATE TABLE entries (id INTEGER PRIMARY KEY, text TEXT)",)

    @callable(readonly=True)
    async def sneaky(self) -> None:
        """Claims to read, but writes."""
        self.set_state({"hacked": True})

    @callable(readonly=True)
    async def sneaky_sql(self) -> None:
        self.sql.execute("INSERT INTO entries (text) VALUES ('x')")

    @callable(readonly=True)
    async def count(self) -> int:
        n: int = self.sql.scalar("SELECT count(*) FROM entries")
        return n

    @callable
    async def add(self) -> int:
        self.sql.execute("INSERT INTO entries (text) VALUES ('ok')")
        n: int = self.sql.scalar("SELECT count(*) FROM entries")
        return n


async def test_read_only_principals_change_nothing_and_create_nothing(data_dir: Path) -> None:
    writer = signer.issue("w", ttl=60)
    viewer = signer.issue("v", ttl=60, read_only=True)
    app = create_app(
        [Ledger], data_dir=data_dir, authenticate=token_authenticate(signer), authorize=claims_authorize
    )
    async with serve_in_process(app) as addr:
        code, frame = await closed_with(
            f"ws://{addr}/agents/ledger/new", additional_headers={"Authorization": f"Bearer {viewer}"}
        )
        assert (code, frame["code"]) == (4403, "forbidden")  # no actor created by looking
        assert not app.registry.exists("ledger", "new")
        assert app.registry.directory is not None
        assert app.registry.directory.get("ledger", "new") is None  # not even a directory row
        async with connect(
            f"ws://{addr}/agents/ledger/l", additional_headers={"Authorization": f"Bearer {writer}"}
        ) as ws:
            await ws.recv()
            assert (await ws.rpc("add"))["result"] == 1  # a normal write, prepared by a writer
        async with connect(
            f"ws://{addr}/agents/ledger/l", additional_headers={"Authorization": f"Bearer {viewer}"}
        ) as ws:
            await ws.recv()
            for method in ("sneaky", "sneaky_sql"):
                refused = await ws.rpc(method)
                assert refused["ok"] is False, method
            assert (await ws.rpc("count"))["result"] == 1
        async with connect(
            f"ws://{addr}/agents/ledger/l", additional_headers={"Authorization": f"Bearer {writer}"}
        ) as ws:
            welcome = await ws.recv()
            assert "hacked" not in (welcome["state"] or {})
            assert (await ws.rpc("count"))["result"] == 1


class Relay(Actor):
    kind = "relay"

    @callable
    async def poke(self, name: str) -> int:
        count: int = await self.actor("counter", name).call("increment")
        return count

    @callable(readonly=True)
    async def peek_and_poke(self, name: str) -> int:
        """Claims to read; asks another actor to write."""
        count: int = await self.actor("counter", name).call("increment")
        return count


async def test_actor_to_actor_calls_stay_in_the_tenant_and_read_only(data_dir: Path) -> None:
    t1 = {"Authorization": f"Bearer {signer.issue('a', ttl=60, tenant='t1')}"}
    t1_viewer = {"Authorization": f"Bearer {signer.issue('v', ttl=60, tenant='t1', read_only=True)}"}
    app = create_app([Relay, Counter], data_dir=data_dir, authenticate=token_authenticate(signer))
    async with serve_in_process(app) as addr:
        async with connect(f"ws://{addr}/agents/relay/r", additional_headers=t1) as ws:
            await ws.recv()
            assert (await ws.rpc("poke", "bank"))["result"] == 1  # t1's own counter
            escape = await ws.rpc("poke", "t2\x00bank")
            assert escape["ok"] is False  # never another tenant's actor
        async with connect(f"ws://{addr}/agents/relay/r", additional_headers=t1_viewer) as ws:
            await ws.recv()
            refused = await ws.rpc("peek_and_poke", "bank")
            assert refused["ok"] is False  # the nested write runs as the read-only caller
        async with httpx.AsyncClient() as http:
            r = await http.post(f"http://{addr}/agents/counter/new-one/rpc/get", headers=t1_viewer)
            assert r.status_code == 403  # read-only over HTTP creates nothing either
            r = await http.get(f"http://{addr}/agents/counter/bank", headers=t1)
            assert r.json()["state"] == {"count": 1}
