"""Load older: pages prepend whole spans, without duplicates, without moving what is being read."""

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from delegate.contracts.events import Message, SpanOpened, make_event
from delegate.contracts.ids import new_id, utcnow
from tests.support.system import System

from .chat_page import ChatPage, ledger_events, rendered_ids
from .seed import long_history, publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]

SPANS = 4
PER_SPAN = 8  # messages per span; with span.opened/closed and a signal after it: 11 events

# The first block of the timeline, and where it sits on screen.
ANCHOR = """() => {
  const first = document.querySelector('#timeline').firstElementChild;
  return {key: first.dataset.spanId || first.dataset.eventId, top: first.getBoundingClientRect().top};
}"""
WHERE = """key => {
  const n = document.querySelector(`[data-span-id="${key}"], [data-event-id="${key}"]`);
  return n ? n.getBoundingClientRect().top : null;
}"""


async def test_load_older_across_span_boundaries(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate(env={"TIMELINE_HISTORY_EVENT_LIMIT": "7"})
    events = long_history(SPANS, PER_SPAN)
    await publish(sys_.nats_url, events)
    page = await new_page(sys_, viewport={"width": 1000, "height": 700})
    p = page.page
    older = p.locator("#older-btn")
    await older.wait_for(state="visible")
    # The newest page is small (the ledger may widen it to the start of the span it cuts).
    first_page = await page.event_ids()
    assert 0 < len(first_page) <= PER_SPAN + 1

    live_span = new_id()
    loads = 0
    while await older.is_visible():
        await p.eval_on_selector("#scroller", "s => { s.scrollTop = 0; }")
        anchor = await p.evaluate(ANCHOR)
        await older.click()
        # The click starts the load (the button disables itself); wait for it to finish.
        await page.wait_for("() => { const b = document.getElementById('older-btn'); return b.hidden || !b.disabled; }")
        # What was at the top of the view is still exactly there.
        top = await p.evaluate(WHERE, anchor["key"])
        assert top is not None and abs(top - anchor["top"]) < 2, (anchor, top)
        loads += 1
        if loads == 1:
            # Meanwhile, life goes on: a new span arrives live and lands at the newest end.
            now = utcnow()
            live = [
                make_event(SpanOpened(type="interaction"), conversation_id=None, span_id=live_span,
                           channel="sms", ts=now),
                make_event(Message(text="Arrived while you were reading history"), conversation_id=None,
                           span_id=live_span, channel="sms", role="user", ts=now + timedelta(milliseconds=5)),
            ]
            await publish(sys_.nats_url, live)
            await page.wait_for(
                "id => document.querySelector('#timeline').lastElementChild.dataset.spanId === id", live_span
            )
    assert loads >= 3, "the history should take several pages"
    await p.locator("#older-end").wait_for(state="visible")

    # Every span is one whole group, in order; nothing is shown twice; nothing is missing.
    groups = await p.eval_on_selector_all(
        "#timeline section.span",
        "ns => ns.map(n => [n.dataset.spanId, n.dataset.spanType, n.querySelectorAll('article.msg').length])",
    )
    seeded_spans = [e.span_id for e in events if e.kind == "span.opened"]
    assert groups == [[s, "interaction", PER_SPAN] for s in seeded_spans] + [[live_span, "interaction", 1]]
    shown = await page.event_ids()
    assert len(shown) == len(set(shown))
    assert sorted(shown) == sorted(rendered_ids(ledger_events(sys_)))
    # Signals between spans stay between them, at the top level.
    signals = await p.eval_on_selector_all(
        "#timeline > .inner[data-kind='inner.signal']", "ns => ns.length"
    )
    assert signals == SPANS
    await page.screenshot("load-older")
    page.assert_clean()


# Before the app's script: how many span blocks the timeline holds after each change to it.
DRAWN_SPANS = """
document.addEventListener('DOMContentLoaded', () => {
  const timeline = document.getElementById('timeline');
  window.__drawnSpans = [];
  new MutationObserver(() => window.__drawnSpans.push(timeline.querySelectorAll(':scope > section.span').length))
    .observe(timeline, {childList: true});
});
"""
AT_BOTTOM = """() => { const s = document.getElementById('scroller');
                       return s.scrollHeight - s.scrollTop - s.clientHeight < 4; }"""


async def test_a_reload_draws_the_newest_first_then_the_rest_above_it(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    # 12 spans of 30 messages, all in the first page: more than the 150 items drawn first.
    sys_ = await delegate(env={"TIMELINE_HISTORY_EVENT_LIMIT": "1000"})
    events = long_history(12, 30)
    oldest = next(e for e in events if e.kind == "span.opened")
    # A word said once, in the oldest span: what search is asked for right after a reload.
    events.append(make_event(Message(text="The zanzibar itinerary, first draft."), conversation_id=None,
                             span_id=oldest.span_id, channel="text", role="user",
                             ts=oldest.ts + timedelta(milliseconds=1)))
    await publish(sys_.nats_url, events)
    page = await new_page(sys_, viewport={"width": 1000, "height": 700})
    p = page.page
    everything = sorted(rendered_ids(ledger_events(sys_)))
    await page.wait_event_count(len(everything))

    await p.context.add_init_script(DRAWN_SPANS)
    await p.reload()
    await page.wait_event_count(len(everything))
    drawn = await p.evaluate("() => window.__drawnSpans")
    # The first drawing held the newest spans only (150 items: five spans of 30), the rest came above.
    assert drawn[0] == 5 and drawn[-1] == 12 and drawn == sorted(drawn), drawn
    spans = await p.eval_on_selector_all("#timeline section.span", "ns => ns.map(n => n.dataset.spanId)")
    assert spans == [e.span_id for e in events if e.kind == "span.opened"]
    shown = await page.event_ids()
    assert sorted(shown) == everything  # nothing twice, nothing missing
    # Drawing above kept the newest messages in view: the timeline is still at its bottom.
    assert await p.evaluate(AT_BOTTOM)

    # Search right after a reload finds the oldest message, drawn or not yet, and shows it.
    await p.reload()
    await page.wait_for("() => document.querySelectorAll('#timeline section.span').length > 0")
    await p.click("#search-btn")
    await p.fill("#search-input", "zanzibar")
    await page.wait_for_text("#search-count", "1 of 1")
    current = p.locator("#timeline .search-current")
    assert "zanzibar itinerary" in await current.inner_text()
    await current.wait_for(state="visible")
    page.assert_clean()
