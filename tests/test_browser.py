"""The demo page in a real browser: headless Chromium (Debian's package) driven by Playwright.

The page runs the docs flow, approves, sees completion; then the server is SIGKILLed, events happen
while the page is away, the server comes back on the same address, and the page reconnects and
resumes from its cursor with no duplicate and no gap.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from actors.agent import AgentConfig
from actors.agent.docs_agent import DocsAgent
from actors.testing import ActorKit
from demo_client.demo import free_port
from tests.support import ServerProcess

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CONFIG = """
[agent]
heartbeat_interval = 0.25
lease_ttl = 1.0
[agent.tools.analyze_documents]
delay_s = 0.3
"""
#: Where the finished flow's screenshot goes; `make screenshot` refreshes the one in docs/.
SCREENSHOT_ENV = "ROOST_SCREENSHOT"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium package")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield browser
        finally:
            await browser.close()


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
        await page.get_by_role("button", name="Send").click()
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
        shot = os.environ.get(SCREENSHOT_ENV) or str(tmp_path / "demo-page.png")
        await page.screenshot(path=shot, full_page=True)

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
