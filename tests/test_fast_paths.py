"""The two fast paths on other libraries' private internals: a measured, detected, switchable exception.

The suite runs on both sides: ``make test`` with the paths as detected (on, here), and
``make test-public`` with ``ROOST_FAST_PATHS=0`` (every turn in its mailbox task, every frame through
ASGI ``receive``/``send``). The tests below say what they expect on the side they run on.

- **Private names stay in two modules**: only ``roost.actors.inline`` names asyncio's
  ``_enter_task``/``_leave_task``, only ``roost.transport.uvicorn_ws`` overrides uvicorn's
  ``handle_connect``/``send_receive_event_to_app``.
- **Inline turns are detected**: on only on a tested Python with both names there and without
  ``ROOST_FAST_PATHS=0``; off, the reason is reported.
- **An inline turn runs as the actor's own task**: a call to an idle actor runs at once in the
  caller's stack with ``asyncio.current_task()`` the actor's mailbox task, in its context; a turn that
  suspends is continued by that task; off, the mailbox task runs it from the start.
- **The direct frame path is offered only where it can run**: a connection to Roost's protocol class
  takes it (the sink writes through it), not with the switch, not under uvicorn's own class, and not
  when uvicorn's protocol object lacks an attribute it reads.
- **Hand-built frame headers are RFC 6455's**: replies of 125, 126, 65,535 and 65,536 bytes (the
  header's three length forms and their edges) reach a real client whole.
- **What is on is reported**: ``roost serve`` says so in one line at start-up, ``GET /healthz`` in
  ``fast_paths``.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
import pytest
import websockets

from roost.actors import INLINE_TURNS, Actor, callable, fast_paths_off, inline
from roost.actors.host import turn_runner
from roost.examples.kinds import KINDS
from roost.testing import rpc_frame, serve
from roost.transport import RoostApp, create_app, uvicorn_protocols
from roost.transport.uvicorn_ws import missing_attributes
from tests.conftest import NO_RATE_LIMITS
from tests.support import ServerProcess
from tests.support import call as support_call

ROOT = Path(__file__).resolve().parent.parent
SWITCHED_OFF = fast_paths_off() is not None
#: Each private name, and the modules that may name it: the fast path's own, and the start-up check
#: that looks for it (``uvicorn_protocols.choose``).
PRIVATE = {
    "_enter_task": ["roost/actors/inline.py"],
    "_leave_task": ["roost/actors/inline.py"],
    "send_receive_event_to_app": ["roost/transport/uvicorn_protocols.py", "roost/transport/uvicorn_ws.py"],
    "handle_connect": ["roost/transport/uvicorn_protocols.py", "roost/transport/uvicorn_ws.py"],
}


def names_used(path: Path) -> set[str]:
    """The private names of :data:`PRIVATE` a module names: as an attribute, a name, a function it
    defines or a string (what ``getattr`` would look up)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        match node:
            case ast.Attribute(attr=name) | ast.Name(id=name) | ast.FunctionDef(name=name):
                pass
            case ast.Constant(value=str() as name):
                pass
            case _:
                continue
        if name in PRIVATE:
            found.add(name)
    return found


def test_private_names_stay_in_the_two_fast_path_modules() -> None:
    where = {
        name: sorted(
            str(p.relative_to(ROOT)) for p in (ROOT / "roost").rglob("*.py") if name in names_used(p)
        )
        for name in PRIVATE
    }
    assert where == PRIVATE


@pytest.mark.parametrize(
    ("version", "environ", "has_names", "why_not"),
    [
        ((3, 11), {}, True, ""),
        ((3, 13), {}, True, ""),
        ((3, 14), {}, True, "Python 3.14 is not a tested version"),
        ((3, 12), {"ROOST_FAST_PATHS": "0"}, True, "ROOST_FAST_PATHS=0"),
        ((3, 12), {}, False, "asyncio.tasks has no _enter_task/_leave_task"),
    ],
)
def test_inline_turns_are_on_only_on_a_tested_python_with_the_names_and_without_the_switch(
    version: tuple[int, int], environ: dict[str, str], has_names: bool, why_not: str
) -> None:
    tasks: Any = asyncio.tasks if has_names else object()
    enter, leave, why = inline.detect(version, environ, tasks)
    assert why == why_not
    assert (enter is not None and leave is not None) is (why_not == "")


@pytest.mark.parametrize(
    ("value", "off"),
    [("0", True), ("false", True), ("OFF", True), ("no", True), ("", False), ("1", False), ("yes", False)],
)
def test_the_switch_reads_the_usual_spellings_of_off(value: str, off: bool) -> None:
    assert (fast_paths_off({"ROOST_FAST_PATHS": value}) is not None) is off


def test_an_unknown_switch_value_leaves_the_paths_on_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    assert fast_paths_off({"ROOST_FAST_PATHS": "maybe"}) is None
    assert any("ROOST_FAST_PATHS='maybe'" in r.getMessage() for r in caplog.records)


def test_this_process_reports_the_side_it_runs_on() -> None:
    assert INLINE_TURNS.on is (not SWITCHED_OFF)
    assert INLINE_TURNS.why_not == (fast_paths_off() or "")


class Runner(Actor):
    """Records, in each turn, who runs it and as which task."""

    kind = "runner"
    initial_state: ClassVar[dict[str, Any]] = {"n": 0}
    seen: ClassVar[list[tuple[str, str, str]]] = []

    @callable
    def quick(self) -> int:
        task = asyncio.current_task()
        type(self).seen.append(("quick", turn_runner(), task.get_name() if task else ""))
        n: int = self.state["n"] + 1
        self.set_state({"n": n})
        return n

    @callable
    async def slow(self) -> int:
        before = asyncio.current_task()
        runner = turn_runner()
        await asyncio.sleep(0.001)  # a real suspension
        after = asyncio.current_task()
        seen = type(self).seen
        seen.append(("slow-before", runner, before.get_name() if before else ""))
        seen.append(("slow-after", turn_runner(), after.get_name() if after else ""))
        assert before is after, "the turn changed tasks across its await"
        n: int = self.state["n"] + 1
        self.set_state({"n": n})
        return n


async def call(ws: Any, call_id: str, method: str) -> Any:
    return (await support_call(ws, call_id, method))["result"]


@pytest.mark.parametrize("ws", ["roost", "websockets-sansio"])
async def test_a_turn_runs_inline_as_the_actors_own_task_and_one_that_suspends_is_continued_by_it(
    data_dir: Path, ws: str
) -> None:
    """Inline (on either server protocol: the reader's ASGI path and the direct path both call
    ``run_now``) or, switched off, in the mailbox task from the start; always as the actor's task."""
    Runner.seen = []
    app = create_app([Runner], data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve(app, ws=None if ws == "roost" else ws) as addr:
        async with websockets.connect(f"ws://{addr}/agents/runner/r?subscribe=none") as conn:
            assert orjson.loads(await conn.recv())["type"] == "welcome"
            assert await call(conn, "1", "quick") == 1
            assert await call(conn, "2", "slow") == 2
            assert await call(conn, "3", "quick") == 3
    task = "actor:runner/r"
    if INLINE_TURNS.on:
        expected = [
            ("quick", "inline", task),
            ("slow-before", "inline", task),
            ("slow-after", "resumed", task),
            ("quick", "inline", task),
        ]
    else:
        expected = [
            ("quick", "mailbox", task),
            ("slow-before", "mailbox", task),
            ("slow-after", "mailbox", task),
            ("quick", "mailbox", task),
        ]
    assert Runner.seen == expected


def direct_connections(app: RoostApp) -> int:
    return sum(sink.direct is not None for sink in app.sinks)


@pytest.mark.parametrize("ws", ["roost", "websockets-sansio"])
async def test_a_connection_takes_the_direct_path_only_under_roosts_protocol_and_not_switched_off(
    data_dir: Path, ws: str
) -> None:
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve(app, ws=None if ws == "roost" else ws) as addr:
        async with websockets.connect(f"ws://{addr}/agents/counter/d?subscribe=none") as conn:
            assert orjson.loads(await conn.recv())["type"] == "welcome"
            await conn.send(rpc_frame("1", "get"))
            assert orjson.loads(await conn.recv())["id"] == "1"
            offered = ws == "roost" and not SWITCHED_OFF
            assert direct_connections(app) == (1 if offered else 0)
            async with httpx.AsyncClient() as http:
                health = (await http.get(f"http://{addr}/healthz")).json()
            assert health["fast_paths"] == {
                "switched_off": SWITCHED_OFF,
                "inline_turns": INLINE_TURNS.on,
                "direct_connections": 1 if offered else 0,
            }


def test_the_direct_path_names_what_uvicorns_protocol_object_lacks() -> None:
    class Partial:
        frames: list[bytes] = []
        queue = None

    missing = missing_attributes(Partial())
    assert "frames" not in missing
    assert "queue" not in missing
    assert {"writable", "close_sent", "conn", "curr_msg_data_type"} <= set(missing)


class Blob(Actor):
    kind = "blob"

    @callable
    def make(self, size: int) -> str:
        return "x" * size


@pytest.mark.parametrize("frame_size", [125, 126, 65_535, 65_536, 70_000])
async def test_replies_of_every_header_length_form_reach_a_real_client_whole(
    data_dir: Path, frame_size: int
) -> None:
    """The server's frame header has three length forms (7-bit up to 125, 16-bit up to 65,535,
    64-bit beyond); a reply of each edge size arrives whole and parses."""
    app = create_app([Blob], data_dir=data_dir, limits=NO_RATE_LIMITS)
    empty = len(orjson.dumps({"type": "rpc_result", "id": "1", "ok": True, "result": ""}))
    async with serve(app) as addr:
        async with websockets.connect(f"ws://{addr}/agents/blob/b?subscribe=none", max_size=None) as conn:
            assert orjson.loads(await conn.recv())["type"] == "welcome"
            size = frame_size - empty
            await conn.send(
                orjson.dumps({"type": "rpc", "id": "1", "method": "make", "args": [size]}).decode()
            )
            text = await conn.recv()
    assert isinstance(text, str)
    assert len(text.encode()) == frame_size
    assert orjson.loads(text)["result"] == "x" * size


def test_roost_serve_says_which_fast_paths_it_takes(data_dir: Path) -> None:
    server = ServerProcess(data_dir).start()
    try:
        health = httpx.get(f"{server.http}/healthz").json()
    finally:
        server.terminate()
    said = [line for line in server.log if "fast paths:" in line]
    assert said == ["INFO roost.serve: " + uvicorn_protocols.fast_paths(uvicorn_protocols.choose()) + "\n"]
    if SWITCHED_OFF:
        why = fast_paths_off()
        assert f"inline turns off ({why}), direct frames off ({why})" in said[0]
    else:
        assert "inline turns on, direct frames on" in said[0]
    assert health["fast_paths"]["inline_turns"] is INLINE_TURNS.on


@pytest.mark.parametrize("ws", ["roost", "websockets-sansio"])
@pytest.mark.parametrize("hook", ["sync", "async"])
async def test_an_authorize_hook_that_raises_closes_only_its_connection_with_1011_on_either_path(
    data_dir: Path, ws: str, hook: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the application's ``authorize`` hook is logged and ends the one connection with 1011
    (on the direct path it runs inside uvicorn's ``data_received``, where an exception would otherwise
    kill the transport with 1006); other connections go on."""

    def authorize(principal: Any, kind: str, name: str, action: str) -> Any:
        if name != "bad" or action != "call:get":
            return True
        if hook == "sync":
            raise RuntimeError("hook bug")

        async def later() -> bool:
            raise RuntimeError("hook bug")

        return later()

    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATE_LIMITS, authorize=authorize)
    async with serve(app, ws=None if ws == "roost" else ws) as addr:
        async with (
            websockets.connect(f"ws://{addr}/agents/counter/bad?subscribe=none") as bad,
            websockets.connect(f"ws://{addr}/agents/counter/good?subscribe=none") as good,
        ):
            assert orjson.loads(await bad.recv())["type"] == "welcome"
            assert orjson.loads(await good.recv())["type"] == "welcome"
            await bad.send(rpc_frame("1", "get"))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(bad.recv(), 10)
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 1011
            assert await call(good, "2", "get") == 0
    assert any("authorize hook raised" in r.getMessage() and r.exc_info for r in caplog.records)
