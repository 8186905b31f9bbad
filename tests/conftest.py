from __future__ import annotations

import os

# as `roost serve` does (see roost.cli.MAX_HANDSHAKE_LINE), before websockets is imported
os.environ.setdefault("WEBSOCKETS_MAX_LINE_LENGTH", "32768")

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from roost.examples.kinds import KINDS
from roost.transport import RoostApp, create_app
from roost.transport.limits import Limits
from tests.kinds import Holder
from tests.support import serve_in_process

#: The Chromium the browser tests drive (Debian's package; `make chromium` installs it).
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium driven by Playwright, for the tests of pages (the demo, the React hook)."""
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


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


#: Rate limits off for the tests that drive load; the limits have their own tests (tests/test_limits.py).
NO_RATE_LIMITS = Limits(conn_rate=None, principal_rate=None)


@pytest.fixture
async def app(data_dir: Path) -> RoostApp:
    return create_app(KINDS, data_dir=data_dir, limits=NO_RATE_LIMITS)


@pytest.fixture
async def server(app: RoostApp) -> AsyncIterator[str]:
    """The example app served in process; yields ``host:port``."""
    async with serve_in_process(app) as addr:
        yield addr


@pytest.fixture
def holder() -> Iterator[type[Holder]]:
    """The ``holder`` kind with fresh events: ``hold`` waits for ``release``; set ``start_gate`` to hold
    ``on_start`` too."""
    Holder.start_gate = None
    Holder.release = asyncio.Event()
    Holder.entered = asyncio.Event()
    yield Holder
    Holder.start_gate = Holder.release = Holder.entered = None
