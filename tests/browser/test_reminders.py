"""Reminders in the browser: the panel lists the inner plane's reminders, Cancel cancels one, and a
reminder that fires shows in the timeline, all against the real ledger, inner plane and gateway."""

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from delegate.contracts import topics
from delegate.contracts.ids import utcnow
from delegate.contracts.reminders import Reminder, ReminderCommand, ReminderSpec
from delegate.runtime.bus import Bus
from tests.support.system import System

from .chat_page import ChatPage

pytestmark = [pytest.mark.browser, pytest.mark.integration]

ROW = "#reminders-list li.reminder"


async def set_reminder(bus: Bus, text: str, in_s: float) -> Reminder:
    """Through the inner plane's own command subject, as the agent's tool does."""
    spec = ReminderSpec(text=text, at=utcnow() + timedelta(seconds=in_s))
    reply = await bus.request(topics.INNER_REMINDERS, ReminderCommand(op="set", spec=spec))
    [reminder] = reply.reminders
    return reminder


async def listed(bus: Bus) -> dict[str, str]:
    reply = await bus.request(topics.INNER_REMINDERS, ReminderCommand(op="list", include_done=True))
    return {r.id: r.status for r in reply.reminders}


async def test_the_panel_lists_reminders_cancels_one_and_a_fired_one_shows_in_the_timeline(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate(extra=("inner-plane",))
    bus = await Bus.connect(sys_.nats_url, "test-probe")
    try:
        plants = await set_reminder(bus, "Water the <b>plants</b>", in_s=3600)
        page = await new_page(sys_)
        p = page.page

        # Listed, with its text as text (no markup), its time, and a Cancel button naming it.
        await p.click("#reminders-btn")
        await page.wait_for_text(ROW, "Water the <b>plants</b>")
        row = p.locator(f"{ROW}[data-reminder-id='{plants.id}']")
        assert "in 1 h" in await row.locator(".reminder-when").inner_text()
        assert await row.locator("b").count() == 0
        assert await p.locator("#reminders-count").inner_text() == "1"
        await page.screenshot("reminders-panel")

        # Cancel removes it from the panel and from the inner plane; the timeline says so in words.
        await row.get_by_role("button", name="Cancel reminder: Water the <b>plants</b>").click()
        await page.wait_for("sel => document.querySelectorAll(sel).length === 0", ROW)
        assert (await listed(bus))[plants.id] == "cancelled"
        await page.wait_for_text("#timeline .inner[data-kind='reminder.cancelled']", "Water the <b>plants</b>")
        assert await p.locator("#reminders-count").is_hidden()
        assert await p.locator("#reminders-status").inner_text() == (
            "No upcoming reminders. Ask Delegate to remind you of something."
        )

        # A reminder set while the page is open appears by itself (its reminder.set over /chat) …
        stretch = await set_reminder(bus, "Stretch your legs", in_s=4)
        await page.wait_for_text(ROW, "Stretch your legs")
        # … and when it fires it is a reminder row in the timeline, and leaves the panel.
        fired = "#timeline .inner[data-kind='inner.signal'][data-signal-kind='reminder.due']"
        await page.wait_for_text(fired, "Stretch your legs")
        assert "Reminder" in await p.locator(fired).first.locator(".inner-label").inner_text()
        await page.wait_for("sel => document.querySelectorAll(sel).length === 0", ROW)
        assert (await listed(bus))[stretch.id] == "done"
        await page.screenshot("reminders-fired")
        page.assert_clean()
    finally:
        await bus.close()
