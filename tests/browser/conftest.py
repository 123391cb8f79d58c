"""Browser tests: Debian's Chromium driven by Playwright, against the real running system.

Never `playwright install`: the browser is the system's `chromium` package (CI installs it).
Locally a missing Chromium skips these tests; with CI set it fails them.
"""

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, async_playwright

from tests.support.standin import StandinProcess
from tests.support.system import System

from .chat_page import ChatPage

CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The Debian package's launcher; CHROMIUM_PATH overrides it.
DEFAULT_CHROMIUM = "/usr/bin/chromium"
CORE_SERVICES = ("ledger", "agent", "gateway")


def chromium_path() -> str | None:
    path = os.environ.get("CHROMIUM_PATH") or DEFAULT_CHROMIUM
    if Path(path).exists():
        return path
    return shutil.which("chromium")


@pytest.fixture(scope="session")
def chromium() -> str:
    path = chromium_path()
    if path is None:
        message = "Chromium is not installed (apt-get install chromium); browser tests cannot run"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


DelegateFactory = Callable[..., Awaitable[System]]


@pytest.fixture
def delegate(system: System, standin: StandinProcess) -> DelegateFactory:
    """Start the real system (ledger, agent, gateway, plus any extras) against the stand-in.

    Usage: ``sys_ = await delegate(env={...}, extra=("inner-plane",))``; ``separate`` as for
    ``System.start`` (a test that kills the gateway names it). The ``system``
    fixture stops every process and keeps the logs of a failed test.
    """

    async def start(
        env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (),
        services: tuple[str, ...] = CORE_SERVICES,
        separate: tuple[str, ...] = (),
    ) -> System:
        system.extra_env.update(
            {
                "OPENAI_API_KEY": "sk-standin-test",
                "OPENAI_BASE_URL": standin.base_url,
                "DELEGATE_OFFLINE_MODEL": "1",
                "IDLE_SPAN_SECONDS": "3600",  # no idle checkpoint in the middle of a test
                **(env or {}),
            }
        )
        await asyncio.to_thread(lambda: system.start(*services, *extra, separate=separate))
        return system

    return start


@pytest.fixture
def new_page(browser: Browser, request: pytest.FixtureRequest) -> Callable[..., Awaitable[ChatPage]]:
    """Open the client in a fresh browser context (its own cookies), optionally signed in."""
    counter = {"n": 0}

    async def open_page(sys_: System, *, sign_in: bool = True, **context_options: Any) -> ChatPage:
        counter["n"] += 1
        context = await browser.new_context(**{"viewport": {"width": 1100, "height": 860}, **context_options})
        page = ChatPage(await context.new_page(), sys_, f"{request.node.name}-{counter['n']}")
        await page.open()
        if sign_in:
            await page.sign_in()
        return page

    return open_page
