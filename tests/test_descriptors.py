"""Descriptors (``roost.actors.descriptors``): the limit is raised at start, ``max_active`` fits under
it beside a reserve for sockets, a limit too low is refused in one line, and running out is a capacity
error while other clients are still answered."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus

from roost.actors import FDS_PER_ACTOR, ActorUnavailable, Registry, RuntimeConfig, TooFewDescriptors
from roost.actors.descriptors import MIN_ACTORS, DescriptorBudget, budget, open_descriptors
from roost.examples.kinds import KINDS
from roost.testing import connect, open_files, until
from roost.transport.uvicorn_http import Refusals
from tests.support import ROOT, ServerProcess


async def test_an_active_actor_holds_FDS_PER_ACTOR_descriptors(tmp_path: Path) -> None:
    """Measured for every example kind (the agent included), and given back once it is dormant."""
    registry = Registry(KINDS, RuntimeConfig(data_dir=tmp_path, idle_timeout=0.0))
    await registry.start()
    try:
        for kind in registry.kinds:
            before = len(open_files())
            for i in range(20):
                registry.get(kind, f"{kind}{i}")
            assert len(open_files()) - before == 20 * FDS_PER_ACTOR, kind
            registry.sweep()  # all idle: deactivated, their files closed in release threads
            await registry.released()
            await until(lambda: len(open_files()) <= before)  # noqa: B023 (awaited here)
    finally:
        await registry.stop()


def test_max_active_is_sized_so_actors_and_their_releases_leave_the_reserve_free() -> None:
    for limit in (256, 1024, 4096, 65_536):
        found = budget(limit, in_use=20, max_active=1_000_000)
        pending = max(16, found.max_active // 10)
        held = 20 + (found.max_active + pending) * FDS_PER_ACTOR
        assert held <= limit - found.reserve, limit
        assert found.lowered_from == 1_000_000
        assert found.max_active >= MIN_ACTORS
    roomy = budget(1 << 20, in_use=20, max_active=2000)
    assert (roomy.max_active, roomy.lowered_from) == (2000, None)  # never raised past the setting


def test_a_limit_that_fits_too_few_actors_is_refused_with_the_numbers() -> None:
    with pytest.raises(TooFewDescriptors, match=r"a limit of 100 with 5 in use and 64 kept for sockets"):
        budget(100, in_use=5, max_active=2000)
    assert budget(200, in_use=5, max_active=2000).max_active >= MIN_ACTORS


def test_roost_serve_refuses_to_start_in_one_line_when_too_few_actors_fit(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "roost.cli", "serve", "--data", str(tmp_path / "d"), "--port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100)),
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("roost: too few file descriptors: a limit of 100"), lines[0]


@contextlib.contextmanager
def serving(data: Path, nofile: tuple[int, int], app: str | None = None) -> Iterator[ServerProcess]:
    """``roost serve`` (``app``, else the examples) under the descriptor limit ``nofile`` (soft,
    hard), with room for more new actors than it fits (the creation rate has its own tests)."""
    server = ServerProcess(data, "--anonymous-creation-burst", "1000", app=app, nofile=nofile).start()
    try:
        yield server
    finally:
        server.kill()


def test_a_soft_limit_below_the_hard_limit_is_raised_at_start(tmp_path: Path) -> None:
    with serving(tmp_path / "data", (256, 1024)) as server:
        health = httpx.get(f"{server.http}/healthz", timeout=10).json()
        assert health["descriptors"]["limit"] == 1024
        assert (
            health["max_active"]
            == health["descriptors"]["max_active"]
            == budget(1024, health["descriptors"]["in_use_at_start"], 2000).max_active
        )
        log = "".join(server.log)
        assert "descriptor limit raised from 256 to 1024 (the hard limit)" in log
        assert f"max_active lowered from 2000 to {health['max_active']} to fit" in log


async def test_past_the_actors_that_fit_a_new_actor_is_a_capacity_error_and_a_bystander_is_served(
    tmp_path: Path,
) -> None:
    """256 descriptors, soft and hard: ``max_active`` is lowered to fit; clients that each hold a
    connection to a new actor get a welcome until it is reached, then ``overloaded`` and 1013 (every
    handshake is answered); a bystander's handshake and call to a live actor, and ``/healthz``,
    still succeed. (The app keeps a reserve that holds more connections than actors fit: under the
    default reserve the connection cap comes first.)"""
    with serving(tmp_path / "data", (256, 256), app="tests.apps:roomy_sockets") as server:
        async with contextlib.AsyncExitStack() as held, httpx.AsyncClient(timeout=10) as http:
            descriptors = (await http.get(f"{server.http}/healthz")).json()["descriptors"]
            tries = descriptors["max_active"] + 10  # more actors than fit, fewer than one client's share
            assert tries < descriptors["connections"] // 2
            answers: list[str] = []
            for i in range(tries):
                ws = await held.enter_async_context(connect(f"{server.ws}/agents/counter/c{i}"))
                first = await ws.recv(timeout=10)  # a handshake without an answer fails here
                if first["type"] == "welcome":
                    answers.append("welcome")
                else:
                    answers.append(first["code"])
                    assert await ws.close_code() == 1013
            async with connect(f"{server.ws}/agents/counter/c0") as bystander:  # a live actor
                assert (await bystander.recv())["type"] == "welcome"
                assert await bystander.call("increment") == 1
            health = (await http.get(f"{server.http}/healthz")).json()
        fits = health["max_active"]
        assert answers == ["welcome"] * fits + ["overloaded"] * (tries - fits)
        assert health["active_actors"] == fits
        assert health["descriptors"]["limit"] == 256
        assert f"descriptor limit 256; max_active lowered from 2000 to {fits} to fit" in "".join(server.log)


async def test_actors_created_past_the_descriptors_leave_a_bystanders_handshake_and_call_answered(
    tmp_path: Path,
) -> None:
    """256 descriptors: one client creates 200 actors over one HTTP connection (each stays live
    until it is idle for ``idle_timeout``, three descriptors each). They are all created, the idle
    ones deactivated to make room, and a bystander's new connection is still accepted, welcomed and
    served. (Without the sizing the actors took every descriptor: new actors failed with "unable to
    open database file" and the bystander's handshake got no answer at all.)"""
    with serving(tmp_path / "data", (256, 256)) as server:
        async with httpx.AsyncClient(timeout=10) as http:
            codes = [
                (await http.post(f"{server.http}/agents/counter/h{i}/rpc/increment")).status_code
                for i in range(200)
            ]
            assert codes == [200] * 200
            async with connect(f"{server.ws}/agents/counter/bystander", open_timeout=10) as bystander:
                assert (await bystander.recv())["type"] == "welcome"
                assert await bystander.call("increment") == 1
            health = (await http.get(f"{server.http}/healthz")).json()
            assert health["active_actors"] <= health["max_active"] < 2000


async def test_an_actor_that_cannot_be_opened_for_want_of_descriptors_is_actor_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every descriptor of the process in use: the actor is ``actor_unavailable`` saying so (a warning,
    no traceback), nothing is left live, and it opens once descriptors are free again."""
    registry = Registry(KINDS, RuntimeConfig(data_dir=tmp_path))
    await registry.start()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fillers: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_descriptors() + 16, hard))
        with contextlib.suppress(OSError):
            while True:  # take every descriptor left
                fillers.append(os.open(os.devnull, os.O_RDONLY))
        with pytest.raises(ActorUnavailable, match="out of file descriptors"):
            registry.get("counter", "starved")
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert ("counter", "starved") not in registry.hosts
        assert not any(record.exc_info for record in caplog.records)
        assert "no file descriptor left" in caplog.text
        assert registry.get("counter", "starved").state == {"count": 0}
        await asyncio.sleep(0)
    finally:
        await registry.stop()


async def _health(server: ServerProcess) -> httpx.Response:
    """``GET /healthz`` on a connection of its own, closed after the answer."""
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(f"{server.http}/healthz")


async def _open_until_refused(
    held: contextlib.AsyncExitStack, url: str, headers: dict[str, str] | None = None, most: int = 1000
) -> tuple[int, str | int]:
    """Open connections to ``url`` and keep them until one is refused: how many were welcomed, and
    the refusal (an error frame's code, or the handshake's HTTP status)."""
    for n in range(most):
        try:
            ws = await held.enter_async_context(connect(url, additional_headers=headers, open_timeout=10))
        except InvalidStatus as exc:  # a handshake without any answer raises something else
            return n, exc.response.status_code
        first = await ws.recv(timeout=10)
        if first["type"] != "welcome":
            assert await ws.close_code() == 1013
            return n, str(first["code"])
    raise AssertionError(f"{most} connections and none refused")


async def test_one_client_cannot_take_every_socket_and_past_the_cap_every_handshake_is_answered_503(
    tmp_path: Path,
) -> None:
    """256 descriptors: the server holds at most ``connections`` sockets (the reserve less a headroom),
    one anonymous address at most half of them. One address opening WebSockets to one actor is
    refused at its share (1013 ``too_many_connections``) while a bystander (another address) is
    welcomed and served and ``/healthz`` answers; once other addresses fill the cap, every new
    handshake and request is answered HTTP 503 (never left without an answer by an ``EMFILE``),
    logged once per burst, and the server serves again when they close. (Without the cap one client
    took every descriptor: the 236th handshake, a bystander's and ``/healthz`` got no answer.)"""
    with serving(tmp_path / "data", (256, 256)) as server:
        descriptors = (await _health(server)).json()["descriptors"]
        cap = descriptors["connections"]
        assert cap == descriptors["reserve"] - max(16, descriptors["reserve"] // 8)
        share = cap // 2
        async with contextlib.AsyncExitStack() as held:
            url = f"{server.ws}/agents/counter/c0"
            assert await _open_until_refused(held, url) == (share, "too_many_connections")
            other = {"X-Forwarded-For": "198.51.100.7"}
            async with connect(f"{server.ws}/agents/counter/bystander", additional_headers=other) as ws:
                assert (await ws.recv(timeout=10))["type"] == "welcome"
                assert await ws.call("increment") == 1
            assert (await _health(server)).status_code == 200

            opened, refusal = 0, None
            for i in range(4):  # more addresses, each up to its share, until the cap refuses one
                headers = {"X-Forwarded-For": f"198.51.100.{10 + i}"}
                n, refusal = await _open_until_refused(held, url, headers, most=share + 1)
                opened += n
                if refusal == 503:
                    break
                assert (n, refusal) == (share, "too_many_connections")
            assert refusal == 503
            assert share + opened < cap  # uvicorn counts the refused one among the connections
            for _ in range(5):  # every new handshake and request: 503, to everyone
                with pytest.raises(InvalidStatus) as refused:
                    await held.enter_async_context(connect(url, additional_headers=other, open_timeout=10))
                assert refused.value.response.status_code == 503
                assert (await _health(server)).status_code == 503
        await until(lambda: "at the connection cap" in "".join(server.log))
        lines = [line for line in server.log if "at the connection cap" in line]
        assert 1 <= len(lines) <= 2, lines  # 11 refusals in a burst: one line (two across 10 s)

        async def served() -> bool:
            return (await _health(server)).status_code == 200

        await until(served)
        async with connect(url) as ws:
            assert (await ws.recv(timeout=10))["type"] == "welcome"


def test_roost_serve_gives_one_client_at_most_half_the_connection_cap_unless_told(tmp_path: Path) -> None:
    """Under a descriptor limit: an anonymous address and an authenticated principal hold at most
    half of the connections the reserve holds; ``--max-conns-per-address`` /
    ``--max-conns-per-principal`` / ``--max-connections`` (0: no cap) decide instead when given."""
    from roost.cli import _parser
    from roost.cli.serve import _secure, connection_cap
    from roost.transport import create_app

    found = budget(256, in_use=20, max_active=2000)
    cap = found.connections()
    assert cap == found.reserve - 16
    assert found.ceiling() == cap + 8 < found.reserve

    def limits(*argv: str, descriptors: DescriptorBudget | None = found) -> tuple[int | None, int | None]:
        app = create_app(KINDS, data_dir=tmp_path)
        _secure(app, _parser().parse_args(["serve", *argv]), descriptors)
        return app.access.limits.conns_per_address, app.access.limits.conns_per_principal

    assert limits() == (cap // 2, cap // 2)
    assert limits("--max-conns-per-address", "500", "--max-conns-per-principal", "7") == (500, 7)
    assert limits("--max-conns-per-address", "0") == (None, cap // 2)
    assert limits("--max-connections", "100") == (50, 50)
    assert limits("--max-connections", "0") == (None, 1000)
    assert limits(descriptors=budget(1 << 20, in_use=20, max_active=2000)) == (114_688, 1000)
    assert limits(descriptors=None) == (None, 1000)  # no descriptor limit: no cap, no share
    parse = _parser().parse_args
    assert connection_cap(parse(["serve"]), found) == (cap, cap + 8)
    assert connection_cap(parse(["serve", "--max-connections", "0"]), found) == (None, None)
    assert connection_cap(parse(["serve", "--max-connections", "90"]), found) == (90, None)


def test_connections_refused_at_the_cap_are_logged_once_per_burst(caplog: pytest.LogCaptureFixture) -> None:
    refusals = Refusals(every=10.0)
    with caplog.at_level(logging.WARNING, "roost.serve"):
        for i in range(1000):  # one burst
            refusals.note("requests and handshakes", 48, now=100.0 + i / 1000)
        refusals.note("requests and handshakes", 48, now=111.0)  # the next report: how many since
    lines = [r.getMessage() for r in caplog.records if r.name == "roost.serve"]
    said = "requests and handshakes refused (HTTP 503 or closed) since the last report"
    assert lines == [
        f"at the connection cap (48 open): 1 {said}",
        f"at the connection cap (48 open): 1000 {said}",
    ]


def _idle_socket(port: int, source: str) -> socket.socket:
    """A TCP connection to the server from the loopback address ``source`` that sends nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def _answered(sock: socket.socket) -> bytes:
    """What the server sent on ``sock`` before closing it (b"" if it closed without a word)."""
    sock.settimeout(10)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(4096):
            data += chunk
    return data


async def test_one_address_holding_idle_sockets_leaves_others_the_rest_of_the_cap(tmp_path: Path) -> None:
    """256 descriptors: sockets that never send a request count towards the cap, so one address could
    hold every one of them (reconnecting each the handshake timeout drops). A peer address holds at
    most half the cap: its next socket is answered HTTP 503 and closed, and a bystander from another
    address is served. (Before, 60 idle sockets from one address left a bystander's ``/healthz``
    reset or refused, 0 answers of 25.) The trusted proxy (127.0.0.1 by default) is not held to it."""
    with serving(tmp_path / "data", (256, 256)) as server:
        cap = (await _health(server)).json()["descriptors"]["connections"]
        share = cap // 2
        port = int(server.http.rsplit(":", 1)[1])
        held = [_idle_socket(port, "127.0.0.2") for _ in range(share)]
        try:
            past = [_idle_socket(port, "127.0.0.2") for _ in range(cap)]
            answers = await asyncio.gather(*(asyncio.to_thread(_answered, s) for s in past))
            assert all(a.startswith(b"HTTP/1.1 503") for a in answers), {a[:20] for a in answers}
            transport = httpx.AsyncHTTPTransport(local_address="127.0.0.3")
            async with httpx.AsyncClient(transport=transport, timeout=10) as bystander:
                health = await bystander.get(f"{server.http}/healthz")
                assert health.status_code == 200
                async with connect(f"{server.ws}/agents/counter/bystander") as ws:
                    assert (await ws.recv(timeout=10))["type"] == "welcome"
            for s in past:
                s.close()
        finally:
            for s in held:
                s.close()
        await until(lambda: "past its share" in "".join(server.log))
