"""The topbar's context controls against the real agent: Compact now, busy state, End conversation."""

from collections.abc import Awaitable, Callable

import pytest

from tests.support.standin import StandinProcess
from tests.support.system import System

from .chat_page import ChatPage

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NewPage = Callable[..., Awaitable[ChatPage]]

# Records every disabled/enabled flip of the button, so a short-lived state is not missed.
WATCH_BUTTON = """() => {
  const btn = document.getElementById('compact-btn');
  window.__compactStates = [btn.disabled];
  new MutationObserver(() => window.__compactStates.push(btn.disabled))
    .observe(btn, {attributes: true, attributeFilter: ['disabled']});
  const notice = document.getElementById('live-notice');
  window.__notices = [];
  new MutationObserver(() => { if (!notice.hidden) window.__notices.push(notice.textContent); })
    .observe(notice, {attributes: true, childList: true, characterData: true, subtree: true});
}"""


async def test_compact_now_and_end_conversation(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: NewPage
) -> None:
    sys_ = await delegate(extra=("inner-plane",))
    # Each answer matches its question: the inner plane's capsule refresh calls the model too.
    standin.script(
        {"action": "text", "text": "Noted: tea, not coffee.", "match": {"input_contains": "I drink tea"}},
        # This answer pauses mid-stream: the agent is busy meanwhile.
        {
            "action": "stall",
            "after_deltas": 1,
            "seconds": 3.0,
            "text": "Still thinking about that, but yes.",
            "match": {"input_contains": "for a moment"},
        },
        # The compaction call takes a moment, so its in-flight state is visible.
        {"action": "stall", "seconds": 1.5, "match": {"endpoint": "compact"}},
        {"action": "text", "text": "A fresh start, same timeline.", "match": {"input_contains": "Hello again"}},
    )
    page = await new_page(sys_)
    p = page.page

    await page.send("Remember: I drink tea, not coffee.")
    await page.wait_for_text("#timeline article.msg-assistant[data-event-id]", "Noted: tea")
    await page.wait_for("() => !document.getElementById('compact-btn').disabled")

    # While a response streams, Compact now is disabled; it comes back when the turn ends.
    await page.send("Can you think about that for a moment?")
    await p.wait_for_selector("#timeline article.streaming")
    await page.wait_for("() => document.getElementById('compact-btn').disabled")
    await page.wait_for_text("#timeline article.msg-assistant[data-event-id]", "Still thinking")
    await page.wait_for("() => !document.getElementById('compact-btn').disabled")

    # Compact now: disabled while it runs, the compaction lands as inner-plane activity, enabled again.
    await p.evaluate(WATCH_BUTTON)
    await page.action("#compact-btn")
    await page.wait_for("() => document.getElementById('compact-label').textContent === 'Compacting…'")
    compacted = p.locator('#timeline .inner[data-kind="context.compacted"]')
    await compacted.wait_for(state="attached")
    # Folded into its turn's one quiet "inner activity" line; one click shows it.
    await page.expand_activity()
    await compacted.wait_for()
    await page.wait_for("() => !document.getElementById('compact-btn').disabled")
    states = await p.evaluate("() => window.__compactStates")
    assert states[0] is False and True in states and states[-1] is False, states
    assert "on request" in await compacted.locator(".inner-text").inner_text()
    await page.wait_for(
        "() => document.getElementById('compacted').textContent.startsWith('Older messages summarized ')"
    )
    # The row's "before" figure is the usage rows' own (one source for chips and rows).
    usage_tokens = await p.eval_on_selector_all(
        '#timeline .inner[data-kind="context.usage"]',
        "ns => ns.map(n => n.querySelector('.inner-text').textContent.match(/^([\\d,]+) tokens/)[1])",
    )
    assert usage_tokens[-1] in await compacted.locator(".inner-text").inner_text()
    # Inner-plane activity never looks like speech: not an article, no bubble.
    assert await compacted.evaluate("n => n.closest('article') === null && n.querySelector('.bubble') === null")
    await compacted.locator(":scope > details > summary").click()
    await compacted.locator(".inner-detail").wait_for(state="visible")

    # The inner plane refreshes the capsule after a compaction; its text stays inner, never a message.
    capsule = p.locator('#timeline .inner[data-kind="context.capsule"]')
    await capsule.wait_for(state="attached", timeout=60_000)
    await page.wait_for("() => document.getElementById('capsule').dataset.active === 'true'")
    # The refresh was announced live while it ran, and the notice is gone now that it is done.
    assert "Updating what I keep in mind…" in await p.evaluate("() => window.__notices")
    assert await p.locator("#live-notice").is_hidden()
    capsule_text = await capsule.evaluate("n => n.querySelector('pre').textContent")
    assert capsule_text and not await p.eval_on_selector_all(
        "#timeline article.msg", "(ns, t) => ns.some(n => n.textContent.includes(t))", capsule_text
    )
    await page.screenshot("compacted")
    # A fresh page (as after a restart) reads the same figures from the timeline: the chip
    # agrees with the compaction row whatever /api/state remembers.
    second = await new_page(sys_)
    await second.wait_for(
        "() => document.getElementById('compacted').textContent.startsWith('Older messages summarized ')"
    )
    await second.page.context.close()

    # End conversation asks first; Cancel changes nothing.
    before = await page.event_ids()
    await page.action("#end-btn")
    dialog = p.locator("#end-dialog")
    await dialog.wait_for(state="visible")
    await dialog.locator("button[value=cancel]").click()
    await dialog.wait_for(state="hidden")
    assert await p.locator("#timeline .divider").count() == 0
    await page.action("#end-btn")
    await dialog.locator("#end-confirm").click()
    await p.wait_for_selector('#timeline .divider[data-kind="conversation.ended"]')
    # Defect 6: a fresh conversation has nothing summarized; the chip must not say otherwise.
    await page.wait_for("() => document.getElementById('compacted').textContent === 'Nothing summarized yet'")

    # A subtle divider, not a wall: the history stays and the next message joins the same timeline.
    shown = await page.event_ids()
    assert set(before) <= set(shown)
    await page.send("Hello again")
    await page.wait_for_text("#timeline article.msg-assistant[data-event-id]", "A fresh start")
    order = await p.eval_on_selector_all(
        "#timeline > *", "ns => ns.map(n => n.classList.contains('divider') ? 'divider' : n.tagName)"
    )
    assert order.index("divider") < len(order) - 1, order
    texts = [m["text"] for m in await page.messages()]
    assert texts[0] == "Remember: I drink tea, not coffee." and texts[-1] == "A fresh start, same timeline."
    await page.screenshot("conversation-ended")
    page.assert_clean()


async def test_a_failed_compact_says_so(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: NewPage
) -> None:
    sys_ = await delegate()
    standin.script(
        {"action": "text", "text": "Noted: tea, not coffee.", "match": {"input_contains": "I drink tea"}},
        # The model no longer knows the chain: the agent's compaction fails (ChainLost).
        {
            "action": "error",
            "status": 400,
            "code": "previous_response_not_found",
            "message": "Previous response not found.",
            "match": {"endpoint": "compact"},
        },
    )
    page = await new_page(sys_)
    p = page.page
    await page.send("Remember: I drink tea, not coffee.")
    await page.wait_for_text("#timeline article.msg-assistant[data-event-id]", "Noted: tea")
    await page.wait_for("() => !document.getElementById('compact-btn').disabled")
    await page.action("#compact-btn")
    # Accepted is said as in progress, never as done; the failure comes back and is said plainly,
    # even when its notice beats the request's own answer to the page (a fast failure under load
    # did: the page started watching only after the answer, and never said it failed).
    await page.wait_for_text("#toasts", "Compact failed")
    toasts = await p.locator("#toasts").inner_text()
    assert "requested" not in toasts and "Older messages summarized" not in toasts, toasts
    assert "Compacting…" not in toasts.split("Compact failed", 1)[1], toasts  # never after it
    assert await p.locator('#timeline .inner[data-kind="context.compacted"]').count() == 0
    await page.wait_for("() => !document.getElementById('compact-btn').disabled")
    await page.screenshot("compact-failed")
    page.assert_clean()
