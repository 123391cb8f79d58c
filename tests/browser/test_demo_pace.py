"""The offline demo shows the product (issue #31 item 6), in Chromium: with no OpenAI key the
demo's answer streams at a reading pace, so Stop is on screen mid-answer and stops it; and a
table asked for renders as a table. The real system against a stand-in started as `make run`
starts it (the offline key, its default reading pace)."""

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from delegate.openai_standin.settings import Settings as StandinSettings
from tests.support.standin import StandinProcess
from tests.support.system import System

from .chat_page import ChatPage, ledger_events

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.fixture
async def paced_standin() -> AsyncIterator[StandinProcess]:
    """A stand-in with the demo's own default pace, as `make run` has it (tests' are at 0)."""
    standin = StandinProcess(demo_pace_ms=StandinSettings.model_fields["standin_demo_pace_ms"].default).start()
    try:
        yield standin
    finally:
        standin.stop()


async def test_in_demo_mode_stop_is_visible_mid_answer_and_a_table_renders(
    delegate: Callable[..., Awaitable[System]], paced_standin: StandinProcess,
    new_page: Callable[..., Awaitable[ChatPage]],
) -> None:
    sys_ = await delegate(env={"OPENAI_API_KEY": "offline-standin", "OPENAI_BASE_URL": paced_standin.base_url})
    page = await new_page(sys_)
    p = page.page

    await page.send("hello there")
    # The first-run guide streams word by word: Stop is there while it does.
    await page.wait_for("() => (document.querySelector('#timeline .streaming')?.textContent || '').length > 20")
    assert await p.locator("#stop-btn").is_visible()
    await page.screenshot("demo-streaming-stop-visible")
    await p.click("#stop-btn")
    await p.wait_for_selector("#timeline article.msg-assistant .mark-stopped")
    [answer] = [e for e in ledger_events(sys_) if e["kind"] == "message" and e["role"] == "assistant"]
    assert answer["payload"]["stopped"] is True
    assert answer["payload"]["text"].startswith("**Welcome to Delegate.**")
    assert "OPENAI_API_KEY" not in answer["payload"]["text"]  # cut before the guide's last line

    await page.send("show me a table")
    table = "#timeline article.msg-assistant table"
    await p.wait_for_selector(table)
    await p.wait_for_selector("#stop-btn", state="hidden")
    headers = await p.eval_on_selector_all(f"{table} th", "ns => ns.map(n => n.textContent.trim())")
    assert headers == ["What", "In this offline demo", "With a real model"]
    assert await p.locator(f"{table} tbody tr").count() == 5
    await page.screenshot("demo-table")
    page.assert_clean()
