"""Every class of hostile input gets its documented answer, and a bystander on the same actor is served
throughout (docs/security.md, docs/protocol.md *Errors* and *Close codes*)."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roost.actors import Actor, callable
from roost.examples.kinds import KINDS
from roost.testing import WsClient, connect, ping_frame
from roost.transport import create_app
from roost.transport.limits import Limits
from tests.conftest import NO_RATE_LIMITS
from tests.support import serve_in_process


class Bystander:
    """A well-behaved client on the same actor: every call it makes must succeed, in order."""

    def __init__(self, ws: WsClient) -> None:
        self.ws = ws
        self.n = 0

    async def check(self) -> None:
        self.n += 1
        frame = await self.ws.rpc("get", id=f"b{self.n}", timeout=5)
        assert frame["ok"] is True


@pytest.fixture
async def served(data_dir: Path) -> AsyncIterator[tuple[str, Bystander]]:
    app = create_app(
        KINDS, data_dir=data_dir, limits=Limits(conn_rate=50, conn_burst=50), max_frame_bytes=4096
    )
    async with serve_in_process(app) as addr, connect(f"ws://{addr}/agents/counter/h") as by:
        await by.recv()
        yield addr, Bystander(by)


def raw_ws(addr: str, path: str) -> socket.socket:
    """A WebSocket opened by hand, to send what a well-behaved library would not."""
    host, port = addr.split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert b" 101 " in head
    return sock


def ws_frame(opcode: int, payload: bytes) -> bytes:
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    n = len(payload)
    length = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
    return bytes([0x80 | opcode]) + length + mask + masked


def close_code(sock: socket.socket) -> int | None:
    """The code of the server's close frame (frames before it are skipped)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    i = 0
    while i + 2 <= len(data):
        opcode, n = data[i] & 0x0F, data[i + 1] & 0x7F
        i += 2
        if n == 126:
            n = struct.unpack(">H", data[i : i + 2])[0]
            i += 2
        elif n == 127:
            n = struct.unpack(">Q", data[i : i + 8])[0]
            i += 8
        if opcode == 8:
            return int(struct.unpack(">H", data[i : i + 2])[0]) if n >= 2 else None
        i += n
    return None


async def test_invalid_utf8_in_a_text_frame_closes_1007(served: tuple[str, Bystander]) -> None:
    addr, bystander = served
    sock = await asyncio.to_thread(raw_ws, addr, "/agents/counter/h")
    sock.sendall(ws_frame(0x1, b'{"type":"ping","id":"\xff\xfe"}'))
    assert await asyncio.to_thread(close_code, sock) == 1007
    sock.close()
    await bystander.check()


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"\x00\x01binary", "bad_frame"),
        ("{not json", "bad_frame"),
        ("[1,2,3]", "bad_frame"),
        ('{"type":"launch_missiles"}', "unknown_type"),
        ('{"type":"rpc","id":7,"method":"get"}', "bad_frame"),
    ],
)
async def test_malformed_frames_get_an_error_frame_and_the_connection_goes_on(
    served: tuple[str, Bystander], payload: Any, code: str
) -> None:
    addr, bystander = served
    async with connect(f"ws://{addr}/agents/counter/h") as ws:
        await ws.recv()
        await ws.send(payload)
        frame = await ws.recv()
        assert frame["type"] == "error"
        assert frame["code"] == code
        await ws.send({"type": "rpc", "id": "1", "method": "get"})
        assert (await ws.recv())["ok"] is True  # still served
    await bystander.check()


@pytest.mark.parametrize(
    ("method", "args", "code"),
    [
        ("launch", [], "method_not_found"),
        ("_schedule", [], "method_not_found"),
        ("__init__", [], "method_not_found"),
        ("__class__", [], "method_not_found"),
        ("increment", [1, 2, 3], "invalid_arguments"),
        ("increment", ["three"], "invalid_arguments"),
    ],
)
async def test_bad_calls_get_their_error_codes(
    served: tuple[str, Bystander], method: str, args: list[Any], code: str
) -> None:
    addr, bystander = served
    async with connect(f"ws://{addr}/agents/counter/h") as ws:
        await ws.recv()
        frame = await ws.rpc(method, *args, id="x")
        assert frame["ok"] is False
        assert frame["error"]["code"] == code
    await bystander.check()


#: Decodes (orjson takes 1,024 levels of nesting) but could not be encoded again (about 255 levels).
NESTED = "[" * 1000 + "]" * 1000


@pytest.mark.parametrize(
    "frame",
    [
        '{"type":"ping","id":' + NESTED + "}",
        '{"type":"rpc","id":' + NESTED + ',"method":"get"}',
    ],
    ids=["ping", "rpc"],
)
async def test_an_id_nested_too_deeply_to_echo_gets_an_error_frame_and_the_connection_goes_on(
    served: tuple[str, Bystander], frame: str
) -> None:
    """The id rule (docs/protocol.md, *Client frames*): an id the server would echo back must be a short
    scalar; a nested one is ``bad_frame``, not a reply that fails to encode and drops the connection."""
    addr, bystander = served
    async with connect(f"ws://{addr}/agents/counter/h") as ws:
        await ws.recv()
        await ws.send(frame)
        error = await ws.recv()
        assert (error["type"], error["code"]) == ("error", "bad_frame")
        assert "id" in error["message"]
        assert (await ws.rpc("get"))["ok"] is True  # the same connection still answers a call
    await bystander.check()


async def test_message_data_too_deep_to_send_back_fails_the_turn_and_the_connection_goes_on(
    served: tuple[str, Bystander],
) -> None:
    """A message's data goes to the actor as it is; a room broadcasting it back cannot encode it, so
    the turn fails (``handler_error``) and the sender's connection goes on."""
    addr, bystander = served
    async with connect(f"ws://{addr}/agents/room/deep") as ws:
        await ws.recv()
        await ws.send('{"type":"message","data":' + NESTED + "}")
        error = await ws.wait_for(lambda f: f["type"] == "error")
        assert error["code"] == "handler_error"
        assert (await ws.rpc("history"))["ok"] is True
    await bystander.check()


def deepest_encodable() -> int:
    """The deepest nesting of lists orjson encodes (it decodes deeper)."""
    depth = 0
    value: Any = None
    while True:
        try:
            orjson.dumps([value])
        except TypeError:
            return depth
        depth, value = depth + 1, [value]


class Echo(Actor):
    kind = "echo"
    initial_state = {"echoed": 0}

    @callable
    def echo(self, value: Any) -> Any:
        self.set_state({"echoed": self.state["echoed"] + 1})
        return value


async def test_an_http_result_too_deep_for_its_response_fails_its_turn_with_handler_error(
    data_dir: Path,
) -> None:
    """A result the HTTP answer could not carry (the answer nests it one level deeper) fails the turn
    (``handler_error``, rolled back), as an ``rpc_result`` too deep to encode does over WebSocket."""
    depth = deepest_encodable()
    value: Any = None
    for _ in range(depth):
        value = [value]
    orjson.dumps(value)  # encodes on its own ...
    with pytest.raises(TypeError):
        orjson.dumps({"ok": True, "result": value})  # ... but not inside the answer
    app = create_app([Echo], data_dir=data_dir)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        args = "[" * (depth + 1) + "null" + "]" * (depth + 1)  # [value], written out: too deep to encode
        r = await http.post("/agents/echo/e/rpc/echo", content=args)
        assert r.status_code == 500
        assert r.json()["error"]["code"] == "handler_error"
        r = await http.get("/agents/echo/e")
        assert r.json()["state"] == {"echoed": 0}, "the turn was rolled back"
        r = await http.post("/agents/echo/e/rpc/echo", json=["fine"])
        assert r.json() == {"ok": True, "result": "fine"}


async def test_a_huge_frame_closes_1009(served: tuple[str, Bystander]) -> None:
    addr, bystander = served
    async with connect(f"ws://{addr}/agents/counter/h", max_size=None) as ws:
        await ws.recv()
        await ws.send("x" * 10_000)
        assert await ws.close_code() == 1009
    await bystander.check()


async def test_a_flood_is_refused_frame_by_frame_and_the_bystander_is_served(
    served: tuple[str, Bystander],
) -> None:
    addr, bystander = served
    async with connect(f"ws://{addr}/agents/counter/h") as ws:
        await ws.recv()
        for i in range(500):
            await ws.send({"type": "rpc", "id": str(i), "method": "increment"})
        seen: dict[str, int] = {}
        for frame in await ws.results(str(i) for i in range(500)):
            key = "ok" if frame["ok"] else frame["error"]["code"]
            seen[key] = seen.get(key, 0) + 1
        assert seen.get("ok", 0) <= 50 + 5  # the burst, and what refilled meanwhile
        assert seen["rate_limited"] >= 440
        await bystander.check()


INTS = st.integers(-(2**63), 2**63 - 1)
FRAMES = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200),
    st.dictionaries(
        st.sampled_from(["type", "id", "method", "args", "kwargs", "data", "state", "events"]),
        st.one_of(
            st.sampled_from(["rpc", "message", "ping", "subscribe", "get", "increment", "_x", "nope"]),
            INTS,
            st.none(),
            st.lists(INTS, max_size=3),
            st.dictionaries(st.text(max_size=3), INTS, max_size=2),
        ),
        max_size=5,
    ).map(lambda d: orjson.dumps(d).decode()),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(FRAMES, min_size=1, max_size=8))
def test_random_frames_never_hurt_the_server_or_a_bystander(data_dir: Path, frames: list[Any]) -> None:
    """Property: whatever a client sends, each of its frames is answered or ignored as documented,
    the server never fails, and a bystander on the same actor gets correct answers."""

    async def scenario() -> None:
        app = create_app(KINDS, data_dir=data_dir, limits=NO_RATE_LIMITS)
        async with serve_in_process(app) as addr:
            async with (
                connect(f"ws://{addr}/agents/counter/fz") as by,
                connect(f"ws://{addr}/agents/counter/fz") as ws,
            ):
                await by.recv()
                await ws.recv()
                for frame in frames:
                    await ws.send(frame)
                await ws.send(ping_frame("end"))
                while True:  # everything before the ping was answered or ignored; nothing unexpected
                    got = await ws.recv(timeout=5)
                    assert got["type"] in ("error", "rpc_result", "pong", "state", "message", "rpc_chunk")
                    if got["type"] == "error":
                        assert got["code"] in ("bad_frame", "unknown_type")
                    if got["type"] == "pong" and got["id"] == "end":
                        break
                await Bystander(by).check()

    asyncio.run(scenario())


async def test_a_flood_of_bad_frames_is_rate_limited_too(served: tuple[str, Bystander]) -> None:
    addr, bystander = served
    async with connect(f"ws://{addr}/agents/counter/h") as ws:
        await ws.recv()
        for _ in range(300):
            await ws.send(b"\x00binary")
        codes: dict[str, int] = {}
        for _ in range(300):
            frame = await ws.recv()
            codes[frame["code"]] = codes.get(frame["code"], 0) + 1
        assert codes.get("bad_frame", 0) <= 55  # the burst, and what refilled meanwhile
        assert codes["rate_limited"] >= 245
    await bystander.check()
