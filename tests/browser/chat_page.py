"""A Playwright page showing the Delegate client, with the few moves the tests make."""

from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import ConsoleMessage, Dialog, Page

from tests.support.system import System

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-output" / "screenshots"
WAIT_MS = 30_000  # a deadline for conditions, never a pause

# Resources the page is expected to fail to load: the 401 before sign-in, and the gateway's
# "agent not answering" while services start or restart.
EXPECTED_CONSOLE = ("status of 401", "status of 503", "ERR_CONNECTION_REFUSED", "WebSocket connection to")


class ChatPage:
    def __init__(self, page: Page, system: System, name: str) -> None:
        self.page = page
        self.system = system
        self.name = name
        self.page_errors: list[str] = []
        self.console_errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("pageerror", lambda exc: self.page_errors.append(str(exc)))
        page.on("console", self._on_console)
        page.on("dialog", self._on_dialog)

    def _on_console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error" and not any(s in msg.text for s in EXPECTED_CONSOLE):
            self.console_errors.append(msg.text)

    async def _on_dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        await dialog.dismiss()

    # ---- navigation and sign-in -----------------------------------------------------

    async def open(self) -> None:
        await self.page.goto(self.system.http + "/")

    async def sign_in(self, token: str | None = None) -> None:
        await self.page.wait_for_selector("#signin:not([hidden])", timeout=WAIT_MS)
        await self.page.fill("#token", token or self.system.token)
        await self.page.press("#token", "Enter")
        await self.wait_live()

    async def wait_live(self) -> None:
        await self.page.wait_for_selector('#conn[data-status="live"]', timeout=WAIT_MS)

    async def wait_status(self, status: str) -> None:
        await self.page.wait_for_selector(f'#conn[data-status="{status}"]', timeout=WAIT_MS)

    # ---- reading the timeline -------------------------------------------------------

    async def event_ids(self) -> list[str]:
        """Every rendered ledger event, in DOM order."""
        found: list[str] = await self.page.eval_on_selector_all(
            "#timeline [data-event-id]", "nodes => nodes.map(n => n.dataset.eventId)"
        )
        return found

    async def messages(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self.page.eval_on_selector_all(
            "#timeline article.msg[data-event-id]",
            """nodes => nodes.map(n => ({id: n.dataset.eventId, role: n.dataset.role, channel: n.dataset.channel,
                                         text: n.querySelector('.bubble').textContent}))""",
        )
        return found

    async def wait_for(self, expression: str, arg: Any = None, timeout: int = WAIT_MS) -> Any:
        """Poll a JS predicate until it holds (a deadline, not a pause); returns its value."""
        handle = await self.page.wait_for_function(expression, arg=arg, timeout=timeout, polling=50)
        return await handle.json_value()

    async def wait_event_count(self, n: int) -> None:
        await self.wait_for("n => document.querySelectorAll('#timeline [data-event-id]').length === n", n)

    async def wait_for_text(self, selector: str, text: str, timeout: int = WAIT_MS) -> None:
        await self.wait_for(
            "([sel, text]) => [...document.querySelectorAll(sel)].some(n => n.textContent.includes(text))",
            [selector, text],
            timeout,
        )

    # ---- acting ---------------------------------------------------------------------

    async def send(self, text: str) -> None:
        """Type into the composer and press Enter, as a person would."""
        await self.page.click("#input")
        await self.page.fill("#input", text)
        await self.page.keyboard.press("Enter")

    async def action(self, button: str) -> None:
        """Press a top-bar action (`#export-btn`): folded in the labelled menu, it opens the menu first
        (on a phone every action is there; on a wide screen the less-used ones)."""
        if not await self.page.locator(button).is_visible():
            await self.page.click("#menu-btn")
        await self.page.click(button)

    async def expand_activity(self) -> int:
        """Open every folded "inner activity" line (a turn's context management); returns how many."""
        found: int = await self.page.evaluate(
            """() => { const ds = [...document.querySelectorAll('#timeline .activity > details:not([open])')];
                       ds.forEach(d => { d.open = true; }); return ds.length; }"""
        )
        return found

    async def screenshot(self, name: str | None = None, full_page: bool = False) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name or self.name}.png"
        await self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def assert_clean(self) -> None:
        """No script errors, no unexpected console errors, no dialogs."""
        assert self.page_errors == [], self.page_errors
        assert self.console_errors == [], self.console_errors
        assert self.dialogs == [], self.dialogs


def ledger_events(system: System) -> list[dict[str, Any]]:
    """The whole timeline as the gateway serves it (oldest first), via the bearer token."""
    reply = httpx.get(f"{system.http}/api/timeline", params={"limit": 5000}, headers=system.auth(), timeout=10)
    reply.raise_for_status()
    return list(reply.json()["events"])


# Kinds that shape the timeline (span groups) without being a node of their own.
STRUCTURAL = {"conversation.opened", "span.opened", "span.closed"}


def rendered_ids(events: list[Any]) -> list[str]:
    """The ids that become nodes on the page, from API dicts or ``Event`` models."""
    rows = [e if isinstance(e, dict) else e.model_dump(mode="json") for e in events]
    # term.*: the agent's lease bookkeeping, which the client never shows.
    return [e["id"] for e in rows if e["kind"] not in STRUCTURAL and not e["kind"].startswith("term.")]
