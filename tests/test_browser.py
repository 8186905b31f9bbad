"""The demo page in a real browser: headless Chromium (Debian's package) driven by Playwright.

The page runs the docs flow, approves, sees completion; then the server is SIGKILLed, events happen
while the page is away, the server comes back on the same address, and the page reconnects and
resumes from its cursor with no duplicate and no gap.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from roost.agent import AgentConfig
from roost.examples.demo import free_port
from roost.examples.docs_agent import DocsAgent
from roost.testing import ActorKit, connect
from tests.support import ServerProcess

pytestmark = pytest.mark.slow

CONFIG = """
[agent]
heartbeat_interval = 0.25
lease_ttl = 1.0
[agent.tools.analyze_documents]
delay_s = 0.3
"""
#: Where the finished flow's screenshot goes; `make screenshot` refreshes the one in docs/.
SCREENSHOT_ENV = "ROOST_SCREENSHOT"


async def counter(page: Page, name: str) -> int:
    return int(await page.locator(f"#n-{name}").inner_text())


async def test_demo_page_flow_then_server_drop_resumes_without_gap_or_duplicate(
    browser: Browser, data_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text(CONFIG)
    port = free_port()
    server = ServerProcess(data_dir, "--config", str(cfg), "--port", str(port)).start()
    try:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(f"http://{server.addr}/?agent=acme")
        await expect(page.locator("#status")).to_have_text("connected")
        await page.get_by_role("button", name="Send", exact=True).click()
        await expect(page.locator("#timeline li[data-type=plan_ready]")).to_have_count(1)
        approve = page.get_by_role("button", name="Approve generate_report")
        await expect(approve).to_be_visible(timeout=15_000)
        bar = page.locator("progress[data-tool=analyze_documents]")
        assert await bar.get_attribute("value") == "6"
        await approve.click()
        await expect(page.locator("#timeline li[data-type=turn_completed]")).to_have_count(1)
        await expect(page.locator("#run-verification")).to_contain_text("pass")
        await expect(page.locator("#run-evidence")).to_contain_text("file:reports/")
        before = await counter(page, "events")
        cursor = await counter(page, "cursor")

        # the server drops the socket: SIGKILL
        server.kill()
        await expect(page.locator("#reconnecting")).to_be_visible()

        # while the page is away, the agent works on: another turn, in a process of our own
        class Docs(DocsAgent):
            config = AgentConfig()

        async with ActorKit([Docs], data_dir) as kit:
            reply = await kit.call("docs", "acme", "turn", "collect the documents")
            assert reply["status"] == "completed"
        # the server comes back on the same address; the page reconnects by itself
        server = ServerProcess(data_dir, "--config", str(cfg), "--port", str(port)).start()
        await expect(page.locator("#timeline li[data-type=turn_completed]")).to_have_count(2, timeout=20_000)
        await expect(page.locator("#status")).to_have_text("connected")
        assert await counter(page, "reconnects") >= 1
        assert await counter(page, "duplicates") == 0
        assert await counter(page, "gaps") == 0
        replayed = page.locator("#timeline li.replayed")
        assert await replayed.count() >= 1
        seqs = [
            int(s)
            for s in await page.locator("#timeline li").evaluate_all("els => els.map(e => e.dataset.seq)")
        ]
        assert seqs == list(range(1, len(seqs) + 1))  # every event once, in order
        assert len(seqs) > before
        assert await counter(page, "cursor") == seqs[-1] > cursor
        assert errors == []
        shot = os.environ.get(SCREENSHOT_ENV) or str(tmp_path / "demo-page.png")
        await page.screenshot(path=shot, full_page=True)
    finally:
        server.kill()


async def test_the_page_is_served_with_a_strict_policy_and_no_external_resource(
    browser: Browser, data_dir: Path
) -> None:
    server = ServerProcess(data_dir).start()
    try:
        page = await browser.new_page()
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        response = await page.goto(f"http://{server.addr}/")
        assert response is not None
        assert "default-src 'none'" in (await response.all_headers())["content-security-policy"]
        await expect(page.locator("#status")).to_have_text("connected")
        assert all(
            u.startswith(f"http://{server.addr}/") or u.startswith(f"ws://{server.addr}/") for u in requests
        )
        missing = await page.goto(f"http://{server.addr}/web/../../etc/passwd")
        assert missing is not None
        assert missing.status == 404
    finally:
        server.kill()


FAKE_SOCKET_CHECKS = """
async () => {
  const roost = await import("/web/roost.js");
  const { RoostClient, backoffDelay, isTerminalClose, ConnectionLost, CallNotSent, actorUrl } = roost;
  const sockets = [];
  class FakeSocket {
    constructor(url) { this.url = url; this.sent = []; sockets.push(this); }
    send(text) { this.sent.push(JSON.parse(text)); }
    close(code, reason) { this.onclose({ code, reason }); }
    frame(obj) { this.onmessage({ data: JSON.stringify(obj) }); }
  }
  const welcome = (cursor, resume, state) => ({
    type: "welcome", protocol: 1, connection_id: "c", actor: { kind: "k", name: "n" },
    state, cursor, resume, oldest: 1,
  });
  const out = {};
  const client = new RoostClient("ws://example.invalid/agents/k/n", {
    cursor: 1, WebSocketImpl: FakeSocket, random: () => 0, backoff: { base: 0.001, cap: 0.001 },
  });
  const seen = [];
  client.addEventListener("event", (e) => seen.push(e.detail.seq));
  client.start();
  out.firstUrl = sockets[0].url;
  sockets[0].frame(welcome(3, "replay", { count: 3 }));
  sockets[0].frame({ type: "state", seq: 2, state: { count: 2 } });   // replayed, older than the welcome
  sockets[0].frame({ type: "event", seq: 3, event: { x: 1 } });
  sockets[0].frame({ type: "event", seq: 3, event: { x: 1 } });       // a duplicate
  sockets[0].frame({ type: "event", seq: 4, event: { x: 2 } });
  out.state = client.state;
  out.seen = seen;
  out.duplicates = client.duplicates;
  const pending = client.call("slow", [], {}, { idempotencyKey: false }).then(
    () => "resolved",
    (err) => (err instanceof ConnectionLost ? "lost" : String(err)),
  );
  const keyed = client.call("inc", [1]);                               // a fresh key by default
  const key = sockets[0].sent.at(-1).idempotency_key;
  sockets[0].close(1006, "network");                                   // transient: reconnect
  out.pending = await pending;
  const queued = client.call("queued");                                // not connected: it waits
  await new Promise((r) => setTimeout(r, 20));
  out.sockets = sockets.length;
  out.secondUrl = sockets[1] && sockets[1].url;
  out.sentBeforeWelcome = sockets[1].sent.length;
  sockets[1].frame(welcome(4, "replay", { count: 3 }));
  out.keyLength = key.length;
  out.resent = sockets[1].sent.map((f) => [f.method, f.idempotency_key === key]);
  const answer = (f) => ({ type: "rpc_result", id: f.id, ok: true, result: f.method });
  for (const f of sockets[1].sent) sockets[1].frame(answer(f));
  out.answers = [await keyed, await queued];
  sockets[1].close(4401, "unauthenticated");                           // terminal: stop
  await new Promise((r) => setTimeout(r, 20));
  out.afterTerminal = sockets.length;
  out.callAfterTerminal = await client.call("late").catch((err) => err instanceof CallNotSent);
  out.status = client.status;
  out.reconnects = client.reconnects;
  const transient = [1001, 1006, 1011, 1012, 1013, 4000, 4500];
  out.terminal = [1000, 1009, 4400, 4499].concat(transient).map(isTerminalClose);
  out.backoff = [0, 1, 2, 5, 10, 100].map((a) => backoffDelay(a, { base: 0.25, cap: 5 }, () => 0.999999));
  const at = (protocol, pathname) => ({ protocol, host: "h:1", pathname });
  out.urls = [
    actorUrl(at("http:", "/"), "counter", "a b"),
    actorUrl(at("https:", "/roost/"), "counter", "c1"),
    actorUrl(at("http:", "/roost/web/index.html"), "counter", "c1"),
    actorUrl(at("http:", "/anything/page.html"), "counter", "c1", "/roost/"),
    actorUrl(at("http:", "/anything/page.html"), "counter", "c1", ""),
  ];
  return out;
}
"""


async def test_the_browser_client_dedups_resumes_and_tells_terminal_from_transient_closes(
    browser: Browser, data_dir: Path
) -> None:
    """roost.js on its own, against a fake socket: dedup by seq, state never goes back during a replay,
    the cursor on every reconnect, a call without a key fails with ConnectionLost while a keyed one is
    sent again with its key on the next connection, a call made while not connected waits and is sent
    after the welcome, terminal closes stop it, backoff stays within its bounds."""
    server = ServerProcess(data_dir).start()
    try:
        page = await browser.new_page()
        await page.goto(f"http://{server.addr}/")
        out = await page.evaluate(FAKE_SOCKET_CHECKS)
    finally:
        server.kill()
    assert out["firstUrl"].endswith("?cursor=1")
    assert out["seen"] == [3, 4]
    assert out["duplicates"] == 1
    assert out["state"] == {"count": 3}
    assert out["pending"] == "lost"
    assert out["sockets"] == 2
    assert out["sentBeforeWelcome"] == 0
    assert out["keyLength"] == 32
    assert out["resent"] == [["inc", True], ["queued", False]]  # the same key again; a fresh one
    assert out["answers"] == ["inc", "queued"]
    assert out["callAfterTerminal"] is True  # CallNotSent: never sent
    assert out["secondUrl"].endswith("?cursor=4")
    assert out["afterTerminal"] == 2  # no reconnect after 4401
    assert out["status"] == "closed"
    assert out["reconnects"] == 1
    assert out["terminal"] == [True] * 4 + [False] * 7
    ceilings = [0.25, 0.5, 1.0, 5.0, 5.0, 5.0]
    assert all(0 <= d <= c for d, c in zip(out["backoff"], ceilings, strict=True))
    assert out["backoff"][0] > 0.24  # full jitter up to the ceiling (with random() near 1)
    assert out["urls"] == [  # actorUrl honours the mount prefix (given, or the page's own)
        "ws://h:1/agents/counter/a%20b",
        "wss://h:1/roost/agents/counter/c1",
        "ws://h:1/roost/agents/counter/c1",
        "ws://h:1/roost/agents/counter/c1",
        "ws://h:1/agents/counter/c1",
    ]


async def test_the_chat_renders_streaming_text_and_resumes_mid_stream_after_drop_connection(
    browser: Browser, data_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "roost.toml"
    cfg.write_text("[agent]\nheartbeat_interval = 0.25\nlease_ttl = 1.0\nstream_pace = 0.08\n")
    server = ServerProcess(data_dir, "--config", str(cfg)).start()
    try:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(f"http://{server.addr}/?agent=talk")
        other = await browser.new_page()  # a second tab on the same chat
        await other.goto(f"http://{server.addr}/?agent=talk")
        send = page.get_by_role("button", name="Send message")
        await expect(send).to_be_enabled()
        await send.click()
        answer = page.locator("#chat-log li.assistant").first
        await expect(answer).to_have_text(re.compile(r"\S"))  # text arrives while it streams
        await expect(answer).to_have_class(re.compile("streaming"))
        await page.get_by_role("button", name="Drop connection").click()
        shown_at_drop = await answer.inner_text()
        await expect(answer).to_have_attribute("data-done", "true", timeout=20_000)
        await expect(answer).to_have_class(re.compile("completed"))
        final = await answer.inner_text()
        async with connect(f"{server.ws}/agents/chat/talk") as peer:
            history = await peer.call("messages", timeout=10)
        stored = next(m for m in history["messages"] if m["role"] == "assistant")
        assert final == stored["content"]  # no gap, no repeat across the drop
        in_other = other.locator("#chat-log li.assistant").first
        await expect(in_other).to_have_attribute("data-done", "true")
        assert await in_other.inner_text() == final  # the other tab saw the same stream
        assert 0 < len(shown_at_drop) < len(final)  # the drop landed mid-stream
        assert int(await page.locator("#chat-reconnects").inner_text()) >= 1
        assert int(await page.locator("#chat-gaps").inner_text()) == 0
        assert int(await page.locator("#chat-duplicates").inner_text()) == 0
        assert errors == []
    finally:
        server.kill()
