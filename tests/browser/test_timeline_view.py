"""The hydrated timeline: one flow across channels, spans, inner-plane activity, light/dark/phone."""

from collections.abc import Awaitable, Callable

import pytest

from tests.support.system import System

from .chat_page import ChatPage, ledger_events, rendered_ids
from .seed import demo_timeline, publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]


async def test_one_timeline_across_channels_with_spans_and_inner_activity(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate()
    events = demo_timeline()
    await publish(sys_.nats_url, events)
    page = await new_page(sys_)
    p = page.page
    await page.wait_event_count(len(rendered_ids(events)))

    # Every committed event is on the page once; messages in the ledger's order (a turn's
    # context management folds into one "inner activity" line after its answer).
    ledger = ledger_events(sys_)
    assert sorted(await page.event_ids()) == sorted(rendered_ids(ledger))
    ledger_messages = [e["id"] for e in ledger if e["kind"] == "message"]
    assert [m["id"] for m in await page.messages()] == ledger_messages

    # One span group per span, labelled by its type; no "new chat" boundary, only a subtle divider.
    spans = await p.eval_on_selector_all(
        "#timeline section.span", "ns => ns.map(n => [n.dataset.spanId, n.dataset.spanType])"
    )
    opened = [[e.span_id, e.payload["type"]] for e in events if e.kind == "span.opened"]
    assert spans == opened
    assert await p.locator("#timeline .divider[data-kind='conversation.ended']").count() == 1
    # The inner signal between spans sits at the top level, not inside a span.
    signal = next(e for e in events if e.kind == "inner.signal")
    assert await p.eval_on_selector(f"[data-event-id='{signal.id}']", "n => n.parentElement.id") == "timeline"

    # Each message shows its channel.
    channels = {m["channel"] for m in await page.messages()}
    assert channels == {"text", "inner", "sms", "phone", "email"}
    for label in ("SMS", "Phone", "Email", "Text"):
        assert await p.locator(f"#timeline .channel:has-text('{label}')").count() > 0

    # One flowing conversation: no span folds shut. Every span is a light marker (icon, what,
    # when, a thin rule) and the messages of every span, the oldest included, are on the page
    # without a click; a closed span's summary is the marker's hover note.
    assert await p.locator("#timeline section.span:not(.task-card) > details").count() == 0
    first_span = p.locator("#timeline section.span").first
    assert "Lisbon trip: hotel still open" in (await first_span.locator(".span-head").get_attribute("title") or "")
    for m in await page.messages():
        assert await p.locator(f"#timeline article.msg[data-event-id='{m['id']}']").is_visible(), m
    assert await first_span.locator(".span-rule").count() == 1

    # Inner-plane activity is collapsed and never a message; the capsule text shows only when expanded.
    capsule = next(e for e in events if e.kind == "context.capsule")
    node = p.locator(f".inner[data-event-id='{capsule.id}']")
    assert not await node.is_visible(), "context management is folded by default"
    # One click on the turn's inner activity line shows its rows.
    fold = p.locator(".activity", has=node)
    await fold.locator(":scope > details > summary").click()
    assert await node.is_visible()
    assert not await node.locator(".inner-detail").is_visible()
    capsule_in_messages = await p.eval_on_selector_all(
        "#timeline article.msg", "(ns, t) => ns.some(n => n.textContent.includes(t))", capsule.payload["text"]
    )
    assert capsule_in_messages is False
    # Keyboard: focus the item's summary and press Enter to expand it.
    await node.locator("summary").focus()
    await p.keyboard.press("Enter")
    await node.locator(".inner-detail pre").wait_for(state="visible")
    assert capsule.payload["text"] in await node.locator(".inner-detail pre").inner_text()

    await page.screenshot("timeline-light")

    # Dark and phone-sized renderings of the same timeline.
    dark = await new_page(sys_, color_scheme="dark")
    await dark.wait_event_count(len(rendered_ids(events)))
    bg = await dark.page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert bg != "rgb(246, 245, 242)", "dark scheme keeps the light background"
    await dark.screenshot("timeline-dark")

    phone = await new_page(
        sys_, viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True, has_touch=True
    )
    await phone.wait_for("() => document.querySelectorAll('#timeline section.span').length > 0")
    overflow = await phone.page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px on a phone"
    # A compact bar on a phone: the actions sit in a labelled menu.
    assert not await phone.page.locator("#compact-btn").is_visible()
    assert await phone.page.locator("#menu-btn").inner_text() == "Menu"
    await phone.page.click("#menu-btn")
    assert await phone.page.locator("#compact-btn").is_visible()
    await phone.page.keyboard.press("Escape")
    assert not await phone.page.locator("#compact-btn").is_visible()
    await phone.screenshot("timeline-phone")

    for pg in (page, dark, phone):
        pg.assert_clean()
