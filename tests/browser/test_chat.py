"""Talking to Delegate in the browser: sign-in, streaming, many tabs, reconnection, hostile text."""

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts.events import InnerSignal, make_event
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .chat_page import ChatPage, ledger_events, rendered_ids
from .seed import publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]

ANSWER = "Good morning. Your calendar is clear until noon, and the Lisbon hotel is confirmed."

NewPage = Callable[..., Awaitable[ChatPage]]


async def same_as_ledger(page: ChatPage, system: System) -> None:
    """Wait until the page shows exactly the committed events, each once.

    Order is checked by the callers on messages: an event outside any span that lands while a
    span is open renders after that span's group, which is the point of grouping.
    """

    async def check() -> bool:
        return sorted(await page.event_ids()) == sorted(rendered_ids(ledger_events(system)))

    try:
        await eventually(check, "the page to show every ledger event", 15)
    except AssertionError:
        events = ledger_events(system)
        kinds = {e["id"]: e["kind"] for e in events}
        shown = await page.event_ids()
        assert sorted(kinds.get(i, i) for i in shown) == sorted(kinds[i] for i in rendered_ids(events))
        raise
    shown = await page.event_ids()
    assert len(shown) == len(set(shown)), "an event is shown twice"


async def test_sign_in_send_and_watch_the_answer_stream(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: NewPage
) -> None:
    sys_ = await delegate()
    standin.script(
        # The first attempt breaks off mid-stream; the agent retries the turn as attempt 2 ...
        {"action": "drop_stream", "after_deltas": 3, "text": "Wrong start, soon replaced by the retry."},
        # ... which pauses after three deltas, so the partial answer stays on screen for a while.
        {"action": "stall", "after_deltas": 3, "seconds": 3.0, "text": ANSWER},
    )
    page = await new_page(sys_, sign_in=False)
    p = page.page

    # Signed out: the sign-in page; a wrong token is refused.
    await p.wait_for_selector("#signin:not([hidden])")
    assert await p.locator("#app").is_hidden()
    await p.fill("#token", "not-the-token")
    await p.press("#token", "Enter")
    await page.wait_for_text("#signin-error", "not accepted")
    await page.screenshot("sign-in")
    # The agent's term start is all the ledger holds: bookkeeping, so still "nothing here yet".
    async def term_recorded() -> bool:
        return any(e["kind"] == "term.started" for e in ledger_events(sys_))

    await eventually(term_recorded, "the agent's term.started in the ledger", 15)
    await page.sign_in()
    await p.wait_for_selector("#empty:not([hidden])")
    assert await page.event_ids() == [] and await p.locator("#older-end").is_hidden()
    # The token is in no URL and no script-readable storage (the session cookie is HttpOnly).
    assert sys_.token not in p.url
    readable = await p.evaluate("() => JSON.stringify({...localStorage, ...sessionStorage}) + document.cookie")
    assert sys_.token not in readable
    assert await p.evaluate("() => document.cookie") == ""

    await page.send("Good morning! What's **on** today?")
    await p.wait_for_selector("#timeline article.msg-user")
    # The retry's text replaces the first attempt's partial text.
    partial = await page.wait_for(
        """() => { const s = document.querySelector('#timeline article.streaming[data-attempt="2"] .bubble');
                   return s && s.textContent.trim() ? s.textContent : null; }"""
    )
    assert ANSWER.startswith(partial.strip()) and len(partial.strip()) < len(ANSWER)
    assert "Wrong" not in partial
    # The streaming bubble sits right under the committed user message it answers. The message's
    # commit reaches the page after the first deltas (the agent commits a turn's opening events
    # once its answer has begun: AGENT_OPENING_HOLD_MS), so this waits for it, and the page must
    # then put it above the answer, not below.
    under = await page.wait_for(
        """() => { const n = document.querySelector('#timeline article.streaming');
                   return !!(n && n.previousElementSibling
                             && n.previousElementSibling.matches('article.msg-user[data-event-id]')); }"""
    )
    assert under is True
    await page.screenshot("streaming")

    # The committed answer replaces the stream.
    await page.wait_for_text("#timeline article.msg-assistant[data-event-id]", ANSWER)
    assert await p.locator("#timeline article.streaming").count() == 0
    assert await p.locator("#timeline article.pending").count() == 0
    msgs = await page.messages()
    assert [(m["role"], m["channel"]) for m in msgs] == [("user", "text"), ("assistant", "text")]
    assert await p.locator("#timeline article.msg-user .bubble strong").inner_text() == "on"
    # The usage the turn recorded shows as inner-plane activity (folded into the turn's one
    # "inner activity" line, after the answer) and in the topbar.
    activity = p.locator("#timeline .activity").last
    await activity.wait_for()
    assert not await p.locator('#timeline .inner[data-kind="context.usage"]').is_visible()
    await activity.locator(":scope > details > summary").click()
    await p.wait_for_selector('#timeline .inner[data-kind="context.usage"]')
    assert await p.locator("#usage-text").inner_text() != "–"
    await same_as_ledger(page, sys_)
    assert await p.locator("#announcer").inner_text() == f"Delegate: {ANSWER}"

    # Shift+Enter makes a new line; Enter alone would send.
    await p.click("#input")
    await p.keyboard.type("line one")
    await p.keyboard.press("Shift+Enter")
    await p.keyboard.type("line two")
    assert await p.input_value("#input") == "line one\nline two"
    await p.fill("#input", "")
    await page.screenshot("conversation")

    # Signing out clears the session: a reload lands on the sign-in page again.
    await page.action("#signout-btn")
    await p.wait_for_selector("#signin:not([hidden])")
    await p.reload()
    await p.wait_for_selector("#signin:not([hidden])")
    page.assert_clean()


async def test_two_tabs_see_the_same_timeline(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: NewPage
) -> None:
    sys_ = await delegate()
    standin.script(
        {"action": "text", "text": "Answer for tab A."},
        {"action": "text", "text": "Answer for tab B."},
        {"action": "error", "status": 400, "message": "The prompt was refused.", "code": "invalid_prompt"},
    )
    a = await new_page(sys_)
    # The second tab is a phone: the same timeline, and it works on a small touch screen.
    b = await new_page(sys_, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)

    await a.send("Hello from tab A")
    await b.wait_for_text("#timeline article.msg-assistant[data-event-id]", "Answer for tab A.")
    await b.send("And hello from tab B")
    await a.wait_for_text("#timeline article.msg-assistant[data-event-id]", "Answer for tab B.")

    await same_as_ledger(a, sys_)
    await same_as_ledger(b, sys_)
    assert await a.messages() == await b.messages()
    assert [m["text"] for m in await a.messages()] == [
        "Hello from tab A",
        "Answer for tab A.",
        "And hello from tab B",
        "Answer for tab B.",
    ]
    # A turn that fails shows as a clear notice, in both tabs.
    await a.send("This one will fail")
    for tab in (a, b):
        await tab.page.wait_for_selector('#timeline .notice-failed[data-kind="turn.failed"]')
        assert "couldn’t answer" in await tab.page.locator("#timeline .notice-failed").inner_text()
    await same_as_ledger(a, sys_)
    await same_as_ledger(b, sys_)
    assert await b.page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    await a.screenshot("two-tabs-a")
    await b.screenshot("two-tabs-b-phone")
    a.assert_clean()
    b.assert_clean()


async def test_gateway_restart_reconnects_without_gaps_or_duplicates(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: NewPage
) -> None:
    sys_ = await delegate(separate=("gateway",))
    standin.script({"action": "text", "text": "Before the restart."}, {"action": "text", "text": "After the restart."})
    page = await new_page(sys_)
    await page.send("First, before anything breaks")
    await page.wait_for_text("#timeline article.msg-assistant[data-event-id]", "Before the restart.")
    await same_as_ledger(page, sys_)

    await asyncio.to_thread(sys_.kill, "gateway")
    await page.wait_status("reconnecting")
    # While the page is cut off, something is committed that it must not miss.
    missed = make_event(
        InnerSignal(source="timer", type="reminder.due", data={"note": "call the hotel"}),
        conversation_id=None, span_id=None, channel="inner",
    )
    await publish(sys_.nats_url, [missed])
    await page.screenshot("gateway-down")

    def restart_gateway() -> None:
        sys_.procs["gateway"].start()
        sys_.wait_ready(["gateway"])

    await asyncio.to_thread(restart_gateway)
    await page.wait_live()
    await page.page.wait_for_selector(f"[data-event-id='{missed.id}']")
    await same_as_ledger(page, sys_)

    # And the conversation carries on over the new connection.
    await page.send("Still there?")
    await page.wait_for_text("#timeline article.msg-assistant[data-event-id]", "After the restart.")
    await same_as_ledger(page, sys_)
    texts = [m["text"] for m in await page.messages()]
    assert texts == ["First, before anything breaks", "Before the restart.", "Still there?", "After the restart."]
    await page.screenshot("gateway-restarted")
    page.assert_clean()


HOSTILE = (
    '<script>window.__pwned = "script"; alert("script")</script> '
    '<img src=x onerror="window.__pwned = \'img\'; alert(\'img\')"> '
    '[click](javascript:alert("link")) <iframe src="javascript:alert(1)"></iframe>'
)


async def test_hostile_text_renders_as_text(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: NewPage
) -> None:
    sys_ = await delegate()
    standin.script({"action": "text", "text": "You wrote: " + HOSTILE + "\n\n**bold** `<b>code</b>`"})
    page = await new_page(sys_)
    p = page.page
    await page.send(HOSTILE)
    await page.wait_for_text("#timeline article.msg-assistant[data-event-id]", "You wrote:")
    user_text = await p.locator("#timeline article.msg-user .bubble").inner_text()
    assert "<script>" in user_text and "<img src=x onerror=" in user_text
    injected = await p.evaluate(
        """() => ({
            scripts: document.querySelectorAll('script').length,
            inTimeline: document.querySelectorAll('#timeline img, #timeline script, #timeline iframe').length,
            jsLinks: [...document.querySelectorAll('a[href]')].filter(a => !/^https?:/.test(a.href)).length,
            pwned: window.__pwned ?? null,
        })"""
    )
    assert injected == {"scripts": 1, "inTimeline": 0, "jsLinks": 0, "pwned": None}
    # Markdown still works around it, as elements we made, not parsed HTML.
    assert await p.locator("#timeline article.msg-assistant strong").inner_text() == "bold"
    assert await p.locator("#timeline article.msg-assistant code").inner_text() == "<b>code</b>"
    await page.screenshot("hostile-text")
    page.assert_clean()  # includes: no dialog fired
