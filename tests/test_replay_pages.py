"""A resume replay is read from the log in pages, as fast as the client drains them (issue 13, point 4).

Real server in this process, real sockets on 127.0.0.1. The log is many times ``send_queue_bytes``:

- A connection that never reads holds at most the configured byte bound (a page and a frame over at
  most) whatever the log holds; its replay is paused, a bystander's call still answers, and when the
  client reads again it gets every frame, once and in order.
- A client that resumes from ``cursor=0`` while the actor logs and broadcasts meanwhile gets every
  logged frame exactly once in ``seq`` order (gap-free), every broadcast made after its welcome, and
  never has more than the bound waiting for it.
- What ``on_connect`` sent, a pong and a call's reply come after the replay, in their order.
- Frames other than the replay's, held behind a paused replay, share one budget with its queue: what
  the server holds for the connection (queue, held frames, page read) stays within the bound (plus a
  frame), and past it the connection is closed with 1013.
- A page is never larger than what that budget has left, and the next is asked for once the queue
  has drained to half the bound less what is held (the rule itself, on a real sink without a loop).
- A paused replay that retention overtakes is closed with 1013, and the client resumes by cursor
  (``snapshot``, ``cursor_expired``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from roost.actors import Actor, Connection, callable
from roost.testing import connect, until
from roost.transport import RoostApp, create_app
from roost.transport.sink import SocketSink
from tests.support import serve_in_process, small_window_socket

Frame = dict[str, Any]

BOUND = 256 << 10  # send_queue_bytes of these tests
SIZE = 40_000  # one logged frame: the log below is ~4.8 MB, nineteen times the bound
FRAMES = 120


class Archive(Actor):
    """A room whose log holds big events; it also counts and broadcasts (not logged)."""

    kind = "archive"
    initial_state = {"count": 0}
    log_retention = 10_000

    @callable
    def fill(self, n: int, size: int) -> int:
        seq = 0
        for i in range(n):
            seq = self.emit({"i": i, "blob": "x" * size})
        return seq

    @callable
    def increment(self) -> int:
        n: int = self.state["count"] + 1
        self.set_state({"count": n, "pad": "p" * 8000})
        return n

    @callable
    def shout(self, i: int, size: int = 10) -> int:
        return self.broadcast({"i": i, "blob": "y" * size})


class ShortArchive(Archive):
    """The same with a short log: a paused replay is soon overtaken by pruning."""

    kind = "short-archive"
    log_retention = 20


class Greeter(Archive):
    """The same, greeting every connection from ``on_connect``."""

    kind = "greeter"

    def on_connect(self, conn: Connection) -> None:
        conn.send({"hello": conn.id})


@contextlib.asynccontextmanager
async def peak_held(app: RoostApp) -> AsyncIterator[list[int]]:
    """The most bytes the server held for any one connection (its send queue, the frames held behind
    its replay and the page read for it: ``Connection.holding``), sampled at every turn of the loop."""
    peak = [0]

    async def sample() -> None:
        while True:
            held = (c.holding()[1] for h in app.registry.hosts.values() for c in h.connections.values())
            peak[0] = max([peak[0], *held])
            await asyncio.sleep(0)

    task = asyncio.create_task(sample())
    try:
        yield peak
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_connection_that_never_reads_holds_at_most_the_byte_bound_whatever_the_log_holds(
    data_dir: Path,
) -> None:
    """Four ``cursor=0`` connections that never read: each waits with at most the bound queued (the
    log is nineteen times it), a bystander's call answers, and a reader that starts late gets it all."""
    app = create_app([Archive], data_dir=data_dir, send_queue_bytes=BOUND)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/archive/room"
        async with connect(f"{url}?subscribe=none", compression=None) as bystander:
            await bystander.recv()
            assert (await bystander.rpc("fill", FRAMES, SIZE))["result"] == FRAMES
            async with contextlib.AsyncExitStack() as stack, peak_held(app) as peak:
                socks = [small_window_socket(addr) for _ in range(4)]
                slow = [
                    await stack.enter_async_context(
                        connect(f"{url}?cursor=0", sock=sock, max_queue=1, max_size=None, compression=None)
                    )
                    for sock in socks
                ]
                # every slow connection's replay is paused on its client (or one has passed the bound)
                await until(
                    lambda: (
                        sum(s.awaiting_drain for s in app.sinks) == 4
                        or any(s.queued_bytes > BOUND for s in app.sinks)
                    ),
                    message="the replays never paused",
                )
                held = sorted(s.queued_bytes for s in app.sinks)
                assert held[-1] <= BOUND, f"a slow connection holds {held[-1]} bytes, bound {BOUND}"
                answer = await bystander.rpc("increment", timeout=10)
                assert answer["ok"], answer
                assert peak[0] <= BOUND + SIZE + 1000, peak[0]
                # one of them reads at last: the welcome, every frame once and in order, then live
                frames: list[Frame] = []
                reader = slow[0]
                welcome = await reader.recv()
                assert welcome["resume"] == "replay"
                head = welcome["cursor"]
                while not frames or frames[-1]["seq"] < head + 1:
                    frames.append(await reader.recv())
                assert [f["seq"] for f in frames] == list(range(1, head + 2))
                assert [f["event"]["i"] for f in frames[:FRAMES]] == list(range(FRAMES))
                assert frames[-1]["type"] == "state"
                for other in slow[1:]:  # they never read: no close handshake to wait for
                    other.ws.transport.abort()


async def test_a_resume_from_cursor_0_during_broadcasts_is_gap_free_and_bounded(data_dir: Path) -> None:
    """A reader resumes from 0 over a log a hundred times the bound while the actor logs 150 more frames and
    broadcasts 150 messages: it gets seq 1, 2, 3, … each once, every message sent after its welcome
    in order, and its queue never holds more than the bound (plus a frame)."""
    bound = 32 << 10
    app = create_app([Archive], data_dir=data_dir, send_queue_bytes=bound)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/archive/busy"
        async with connect(f"{url}?subscribe=none", compression=None) as driver:
            await driver.recv()
            filled = (await driver.rpc("fill", 400, 8000))["result"]
            async with peak_held(app) as peak, connect(f"{url}?cursor=0", compression=None) as reader:
                welcome = await reader.recv()
                assert welcome["resume"] == "replay"
                assert welcome["cursor"] == filled

                conn = app.registry.hosts[("archive", "busy")].connections[welcome["connection_id"]]
                during: list[bool] = []  # whether its replay was still being read after each frame

                async def drive() -> None:
                    for i in range(150):
                        assert (await driver.rpc("increment", id=f"i{i}"))["ok"]
                        assert (await driver.rpc("shout", i, id=f"s{i}"))["ok"]
                        during.append(conn.replay is not None)

                async def read() -> list[Frame]:
                    got: list[Frame] = []
                    messages = 0
                    while messages < 150:
                        frame = await reader.recv()
                        got.append(frame)
                        messages += frame["type"] == "message"
                    return got

                _, got = await asyncio.gather(drive(), read())
            assert any(during), "the replay was over before the actor logged anything: nothing concurrent"
            assert not during[-1]
            seqs = [f["seq"] for f in got if "seq" in f]
            assert seqs == list(range(1, filled + 151)), "a gap or a duplicate in the replay"
            assert [f["data"]["i"] for f in got if f["type"] == "message"] == list(range(150))
            assert peak[0] <= bound + 9000, peak[0]


async def test_what_on_connect_sends_a_pong_and_a_reply_follow_the_replay_in_their_order(
    data_dir: Path,
) -> None:
    """A ping and a call sent at once, over a replay of many pages: the welcome, the replay, then what
    ``on_connect`` sent, the pong, the call's reply; every ``seq`` once and in order."""
    app = create_app([Greeter], data_dir=data_dir, send_queue_bytes=32 << 10)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/greeter/order"
        async with connect(f"{url}?subscribe=none", compression=None) as driver:
            await driver.recv()
            filled = (await driver.rpc("fill", 200, 8000))["result"]
        async with connect(f"{url}?cursor=0", compression=None) as client:
            await client.send('{"type":"ping","id":"p"}')
            await client.send_rpc("increment", id="call")
            got = [await client.recv()]
            while got[-1]["type"] != "rpc_result":
                got.append(await client.recv())
            while len([f for f in got if "seq" in f]) < filled + 1:  # its state frame, if live
                got.append(await client.recv())
        assert got[0]["type"] == "welcome"
        assert [f["seq"] for f in got if "seq" in f] == list(range(1, filled + 2))
        kinds = [f["type"] if f["type"] != "event" else f["seq"] for f in got]
        hello, pong, reply = kinds.index("message"), kinds.index("pong"), kinds.index("rpc_result")
        assert kinds.index(filled) < hello < pong < reply, kinds[-6:]
        assert got[hello]["data"] == {"hello": got[0]["connection_id"]}


async def test_frames_held_behind_a_paused_replay_share_the_bound_with_its_queue_and_past_it_close_1013(
    data_dir: Path,
) -> None:
    """Broadcasts to a connection whose replay waits on it are held behind the replay; what the server
    holds for it (its queue, the held frames, the page read) never passes the byte bound by more than
    a frame: past it the connection is closed with 1013 (slow consumer), and everyone else goes on."""
    app = create_app([Archive], data_dir=data_dir, send_queue_bytes=BOUND)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/archive/loud"
        async with connect(f"{url}?subscribe=none", compression=None) as driver:
            await driver.recv()
            await driver.rpc("fill", FRAMES, SIZE)
            sock = small_window_socket(addr)
            async with (
                peak_held(app) as peak,
                connect(f"{url}?cursor=0", sock=sock, max_queue=1, max_size=None) as slow,
            ):
                await until(lambda: any(s.awaiting_drain for s in app.sinks), message="never paused")
                for i in range(40):  # 40 × 20 KB held: past the 256 KiB bound
                    assert (await driver.rpc("shout", i, 20_000, id=str(i)))["ok"]
                    if len(app.sinks) < 2 or any(s.closing for s in app.sinks):  # closed, or gone
                        break
                else:
                    raise AssertionError("the paused connection was never closed")
                # the queue, the held frames and the page read share the bound (plus one frame)
                assert peak[0] <= BOUND + SIZE + 1000, f"held {peak[0]} bytes for it, bound {BOUND}"
                _, code = await slow.read_until_closed(timeout=30)
                assert code == 1013
            assert (await driver.rpc("increment", id="after"))["ok"]


async def _never_sent(message: Any) -> None:
    raise AssertionError("no writer runs in this test")


def test_a_page_is_never_larger_than_what_the_budget_has_left() -> None:
    """The queue, the held frames and the page read share the bound: each frame held shrinks the next
    page and its low-water mark, a page is at least one row, and a held frame past the bound is
    refused (the connection then closes 1013)."""
    sink = SocketSink(_never_sent, max_queue=100, max_bytes=100_000)  # no writer: what is sent waits
    conn = Connection("c", sink)
    sink.send_text("q" * 40_000)
    replay = conn.start_replay(0)
    assert replay.page == (25, 25_000)
    assert replay.low_water == (50, 50_000)
    assert replay.hold("h" * 30_000)
    queued, held = sink.queued[1], replay.held_bytes
    assert conn.holding() == (2, queued + held)
    assert replay.page == (25, 25_000)  # 100 000 - 70 000 left: a quarter still fits
    assert replay.low_water == (49, 50_000 - held)
    assert replay.hold("h" * 20_000)
    assert replay.page[1] == 100_000 - conn.holding()[1] < 10_000  # only what is left
    replay.read(["p" * 9_900])  # a page read, not yet written, counts too: the bound is reached
    assert replay.page[1] == 1  # at least one row
    assert replay.low_water[1] == 0  # the next page waits for an empty queue
    replay.written()
    assert not replay.hold("h" * 15_000)  # 40 + 30 + 20 + 15 KB: past the bound


async def test_a_paused_replay_overtaken_by_retention_is_closed_1013_and_resumes_by_snapshot(
    data_dir: Path,
) -> None:
    """Pruning removes rows a paused reader still needs: it is closed with 1013, and its cursor is
    then expired (``snapshot``), never a replay with a gap."""
    app = create_app([ShortArchive], data_dir=data_dir, send_queue_bytes=BOUND)
    async with serve_in_process(app) as addr:
        url = f"ws://{addr}/agents/short-archive/pruned"
        async with connect(f"{url}?subscribe=none", compression=None) as driver:
            await driver.recv()
            await driver.rpc("fill", 20, 250_000)  # 5 MB: more than the kernel buffers a socket
            sock = small_window_socket(addr)
            async with connect(f"{url}?cursor=0", sock=sock, max_queue=1, max_size=None) as slow:
                await until(lambda: any(s.awaiting_drain for s in app.sinks), message="never paused")
                await driver.rpc("fill", 30, 10)  # prunes the rows after the reader's position
                seqs: list[int] = []
                frames, code = await slow.read_until_closed(timeout=30)
                seqs = [f["seq"] for f in frames if "seq" in f]
                assert code == 1013
                assert seqs == list(range(1, len(seqs) + 1)), "a gap before the close"
            async with connect(f"{url}?cursor={seqs[-1]}", compression=None) as again:
                welcome = await again.recv()
                assert (welcome["resume"], welcome.get("reason")) == ("snapshot", "cursor_expired")
