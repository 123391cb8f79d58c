"""Browser tests: Debian's Chromium driven by Playwright, against the real running system.

Never `playwright install`: the browsers are the system's `chromium-headless-shell` and
`chromium` packages (CI installs them). Locally a missing one skips these tests; with CI set it
fails them.

The headless shell is Chromium's own headless build (what Playwright runs headless): the same
Blink, service workers and fake media, without the full browser's layers, at about half the
CPU. A module that needs the full browser says why in ``FULL_CHROMIUM``: the shell has no
notification platform (``Notification.permission`` is "denied" before anyone asks) and no
permission prompt (a microphone nobody allowed fails NotSupportedError, not NotAllowedError).

One Chromium per test module (a launch costs ~1.5 s of CPU), and every page in a fresh browser
context of its own: a context has its own cookies, storage, cache, service workers and
permissions, so no test sees another's. The module's tests run in the module's event loop, the
one its browser lives in (``pytest_collection_modifyitems`` below).
"""

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, async_playwright

from tests.support.standin import StandinProcess
from tests.support.system import System, module_system

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
# The shell is headless only (no mode to pick). Its compositing runs in the browser process, one
# process fewer per launch; no other switch measured helped (Playwright already passes
# --mute-audio, --disable-extensions, --disable-dev-shm-usage; site isolation off changed nothing).
SHELL_ARGS = [*(a for a in CHROMIUM_ARGS if a != "--headless=new"), "--in-process-gpu"]
# The Debian packages' launchers; CHROMIUM_PATH and CHROMIUM_HEADLESS_SHELL override them.
DEFAULT_CHROMIUM = "/usr/bin/chromium"
DEFAULT_HEADLESS_SHELL = "/usr/bin/chromium-headless-shell"
CORE_SERVICES = ("ledger", "agent", "gateway")


def installed(path: str, command: str) -> str | None:
    if Path(path).exists():
        return path
    return shutil.which(command)


def chromium_path() -> str | None:
    return installed(os.environ.get("CHROMIUM_PATH") or DEFAULT_CHROMIUM, "chromium")


def headless_shell_path() -> str | None:
    return installed(os.environ.get("CHROMIUM_HEADLESS_SHELL") or DEFAULT_HEADLESS_SHELL, "chromium-headless-shell")


def required(path: str | None, package: str) -> str:
    if path is None:
        message = f"{package} is not installed (apt-get install {package}); browser tests cannot run"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def chromium() -> str:
    """The full browser, for what the headless shell lacks (``FULL_CHROMIUM``)."""
    return required(chromium_path(), "chromium")


@pytest.fixture(scope="session")
def headless_shell() -> str:
    return required(headless_shell_path(), "chromium-headless-shell")


HERE = Path(__file__).resolve().parent
IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here runs in its module's event loop: the module's browser (and any other
    module-wide fixture holding a connection) is bound to the loop it was made in."""
    for item in items:
        if item.path.is_relative_to(HERE):
            # First among its own marks: the closest asyncio mark wins over auto mode's plain one.
            item.add_marker(IN_MODULE_LOOP, append=False)


@pytest.fixture(scope="module")
def browser_build(request: pytest.FixtureRequest) -> tuple[str, list[str]]:
    """The module's Chromium and its switches: the headless shell unless the module sets
    ``FULL_CHROMIUM`` (to why it needs the full browser)."""
    if getattr(request.module, "FULL_CHROMIUM", None):
        return request.getfixturevalue("chromium"), CHROMIUM_ARGS
    return request.getfixturevalue("headless_shell"), SHELL_ARGS


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(browser_build: tuple[str, list[str]]) -> AsyncIterator[Browser]:
    executable, args = browser_build
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=executable, args=args)
        try:
            yield b
        finally:
            await b.close()


# No test here watches an animation, and the client's pulses (connecting, a streaming caret, a
# running task) repaint for as long as they show: under prefers-reduced-motion they stand still
# (client/css/app.css). A test that looks at motion passes reduced_motion="no-preference".
PAGE_DEFAULTS: dict[str, Any] = {"viewport": {"width": 1100, "height": 860}, "reduced_motion": "reduce"}

DelegateFactory = Callable[..., Awaitable[System]]
NewPage = Callable[..., Awaitable[ChatPage]]


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
        system.extra_env.update(delegate_env(standin, env))
        await asyncio.to_thread(lambda: system.start(*services, *extra, separate=separate))
        return system

    return start


def delegate_env(standin: StandinProcess, env: dict[str, str] | None = None) -> dict[str, str]:
    """What the browser tests' services run with: the stand-in as the model, ``env`` on top."""
    return {
        "OPENAI_API_KEY": "sk-standin-test",
        "OPENAI_BASE_URL": standin.base_url,
        "DELEGATE_OFFLINE_MODEL": "1",
        "IDLE_SPAN_SECONDS": "3600",  # no idle checkpoint in the middle of a test
        **(env or {}),
    }


def shared_delegate(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    standin: StandinProcess,
    env: dict[str, str] | None = None,
    services: tuple[str, ...] = CORE_SERVICES,
) -> AbstractContextManager[System]:
    """``delegate()``'s System for a whole module (its fixture's ``request``): for tests that each
    bring their own data, or read what the module seeded once, and never what another test
    added. Stopped at the module's end, its logs kept when one of its tests failed."""
    root = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    return module_system(root, request, *services, env=delegate_env(standin, env), extra_log=standin.log_text)


@pytest.fixture(scope="module")
def core_system(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, module_standin: StandinProcess
) -> Iterator[System]:
    """The core services, shared by the module (see ``shared_delegate``)."""
    with shared_delegate(request, tmp_path_factory, module_standin) as system:
        yield system


@pytest_asyncio.fixture(loop_scope="module")
async def new_page(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[NewPage]:
    """Open the client in a fresh browser context (its own cookies), optionally signed in. The
    test's contexts close with it: the browser outlives the test."""
    contexts: list[BrowserContext] = []

    async def open_page(sys_: System, *, sign_in: bool = True, **context_options: Any) -> ChatPage:
        context = await browser.new_context(**{**PAGE_DEFAULTS, **context_options})
        contexts.append(context)
        page = ChatPage(await context.new_page(), sys_, f"{request.node.name}-{len(contexts)}")
        await page.open()
        if sign_in:
            await page.sign_in()
        return page

    yield open_page
    for context in contexts:
        await context.close()
