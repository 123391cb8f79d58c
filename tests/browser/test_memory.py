"""Memory in the browser, against the real ledger, memory service and gateway: the panel lists
what Delegate remembers, edits and forgets a fact, shows history, and "show source" pages back
to the cited message; the search box finds an old message that is not loaded and jumps to it."""

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest

from delegate.contracts.events import Event, InnerSignal, MemoryFactAdded
from delegate.contracts.ids import new_id, utcnow
from tests.support.system import System
from tests.support.waiting import eventually

from .chat_page import ChatPage, ledger_events
from .seed import Script, publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# A small newest page, so the seeded old messages start out not loaded.
# No per-turn extraction: it would file its records of the seeded old turns in their spans now,
# and a page grows to the start of every span it holds.
ENV = {"TIMELINE_HISTORY_EVENT_LIMIT": "7", "MEMORY_EXTRACTION": "false"}
ROW = "#memory-list li.memory-fact"

# Whether the event is on the page and inside the scroller's visible part.
IN_VIEW = """id => {
  const n = document.querySelector(`#timeline [data-event-id="${id}"]`);
  if (!n) return false;
  const box = document.getElementById('scroller').getBoundingClientRect();
  const r = n.getBoundingClientRect();
  return r.bottom > box.top && r.top < box.bottom && n.classList.contains('jump-target');
}"""


def filler(s: Script, spans: int = 4, per_span: int = 8) -> None:
    """Newer activity on top of what the test looks for, pages of it."""
    for n in range(spans):
        s.span("interaction", gap=600)
        for i in range(per_span):
            if i % 2 == 0:
                s.user(f"Filler {n}.{i}: " + "something else entirely, to push the old turns out of view. " * 2)
            else:
                s.assistant(f"Filler answer {n}.{i}: understood.")
        s.close()
        s.inner(InnerSignal(source="memory", type="consolidated", data={"span": n}), span_id=None)


def fact_added(s: Script, text: str, cites: Event, **fields: Any) -> str:
    """A fact as the memory service writes it, citing the message it was read from."""
    fact_id = new_id()
    payload = MemoryFactAdded(fact_id=fact_id, text=text, valid_at=cites.ts, event_ids=[cites.id], **fields)
    s.inner(payload, channel="inner")
    return fact_id


async def off_loop(check: Callable[[], Any]) -> Any:
    """``eventually`` awaits its check: a blocking HTTP poll runs off the event loop."""
    return await asyncio.to_thread(check)


def memories(sys_: System) -> dict[str, dict[str, Any]]:
    reply = httpx.get(f"{sys_.http}/api/memories", params={"include_retired": "true"}, headers=sys_.auth(), timeout=10)
    if reply.status_code != 200:
        return {}
    return {f["id"]: f for f in reply.json()["facts"]}


def search(sys_: System, q: str) -> list[dict[str, Any]]:
    reply = httpx.get(f"{sys_.http}/api/memory/search", params={"q": q, "limit": 10}, headers=sys_.auth(), timeout=10)
    return list(reply.json()["results"]) if reply.status_code == 200 else []


async def not_loaded(page: ChatPage, event_id: str) -> bool:
    return event_id not in await page.event_ids()


async def test_the_memory_panel_edits_forgets_shows_history_and_the_source(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate(env=ENV, extra=("memory",))
    s = Script(utcnow() - timedelta(days=3))
    s.open_conversation()
    s.span("interaction")
    lisbon = s.user("My sister lives in Lisbon.")
    s.assistant("Noted: your sister lives in Lisbon.")
    old = fact_added(s, "The owner's sister lives in Lisbon", lisbon)
    tea = s.user("I prefer tea to coffee, by the way.")
    s.assistant("Tea it is.")
    tea_fact = fact_added(s, "Prefers tea to coffee", tea, type="preference")
    s.close()
    s.span("interaction")
    porto = s.user("Actually my sister moved to Porto.")
    s.assistant("Got it: Porto now.")
    new = fact_added(s, "The owner's sister lives in Porto", porto, supersedes=[old])
    s.close()
    filler(s)
    await publish(sys_.nats_url, s.events)
    # The memory service takes the facts in from the ledger (its index is their projection).
    facts = await eventually(lambda: off_loop(lambda: (f := memories(sys_)) and len(f) == 3 and f),
                             "the three facts in the memory service")
    assert facts[old]["status"] == "superseded" and facts[old]["superseded_by"] == new

    page = await new_page(sys_)
    p = page.page
    assert await not_loaded(page, porto.id), "the cited message must start out not loaded"

    # The panel: active facts grouped by type; the superseded one only as history.
    await p.click("#memory-btn")
    await page.wait_for_text(ROW, "The owner's sister lives in Porto")
    assert await p.locator("#memory-btn").get_attribute("aria-expanded") == "true"
    groups = await p.eval_on_selector_all(
        "#memory-list .memory-group",
        "ns => ns.map(n => [n.dataset.type, [...n.querySelectorAll('li')].map(li => li.dataset.factId)])",
    )
    assert groups == [["preference", [tea_fact]], ["fact", [new]]]
    await p.check("#memory-history")
    retired = p.locator(f"{ROW}[data-fact-id='{old}']")
    await retired.wait_for()
    assert "memory-superseded" in (await retired.get_attribute("class") or "")
    assert (
        await retired.locator(".memory-text").evaluate("n => getComputedStyle(n).textDecorationLine") == "line-through"
    )
    assert "replaced by “The owner's sister lives in Porto”" in await retired.locator(".memory-retired").inner_text()
    assert await retired.locator(".memory-edit").count() == 0
    await page.screenshot("memory-history")
    await p.uncheck("#memory-history")
    await page.wait_for("sel => !document.querySelector(sel)", f"{ROW}[data-fact-id='{old}']")

    # The panel's search narrows to the matching facts.
    await p.fill("#memory-search", "tea")
    await p.press("#memory-search", "Enter")
    await page.wait_for("sel => document.querySelectorAll(sel).length === 1", ROW)
    assert await p.locator(ROW).get_attribute("data-fact-id") == tea_fact
    assert "match" in await p.locator("#memory-status").inner_text()
    await p.fill("#memory-search", "")
    await page.wait_for("sel => document.querySelectorAll(sel).length === 2", ROW)

    # Edit inline: Enter saves; the change is an event and the fact keeps its citation.
    row = p.locator(f"{ROW}[data-fact-id='{new}']")
    await row.get_by_role("button", name="Edit: The owner's sister lives in Porto").click()
    box = row.locator("textarea")
    assert await box.evaluate("n => n === document.activeElement")
    await box.fill("The owner's sister lives in Porto, near the river")
    await box.press("Enter")
    await page.wait_for_text(f"{ROW}[data-fact-id='{new}'] .memory-text", "near the river")
    edited = memories(sys_)[new]
    assert edited["text"] == "The owner's sister lives in Porto, near the river"
    assert edited["event_ids"][0] == porto.id
    assert any(e["kind"] == "memory.fact.edited" and e["payload"]["fact_id"] == new for e in ledger_events(sys_))

    # Escape in the box cancels an edit and keeps the text.
    await row.get_by_role("button", name="Edit: The owner's sister lives in Porto, near the river").click()
    await row.locator("textarea").fill("something else")
    await row.locator("textarea").press("Escape")
    await page.wait_for("sel => !document.querySelector(sel)", f"{ROW}[data-fact-id='{new}'] textarea")
    assert await row.locator(".memory-text").inner_text() == "The owner's sister lives in Porto, near the river"
    assert not await p.locator("#memory-panel").is_hidden()

    # Forget asks first, inline; then the fact leaves the list and is forgotten for good.
    tea_row = p.locator(f"{ROW}[data-fact-id='{tea_fact}']")
    await tea_row.get_by_role("button", name="Forget: Prefers tea to coffee").click()
    await tea_row.get_by_text("Forget this? Delegate will not use it again.").wait_for()
    await tea_row.get_by_role("button", name="Forget: Prefers tea to coffee").click()
    await page.wait_for("sel => !document.querySelector(sel)", f"{ROW}[data-fact-id='{tea_fact}']")
    assert memories(sys_)[tea_fact]["status"] == "forgotten"
    assert not any(r["kind"] == "fact" and r["id"] == tea_fact for r in search(sys_, "tea coffee"))

    # Show source pages back through history until the cited message is loaded, and shows it.
    await row.get_by_role(
        "button", name="Show where this was said: The owner's sister lives in Porto, near the river"
    ).click()
    await page.wait_for(IN_VIEW, porto.id)
    await page.screenshot("memory-show-source")

    # Escape closes the panel and gives the focus back to its button.
    await p.focus("#memory-search")
    await p.keyboard.press("Escape")
    assert await p.locator("#memory-panel").is_hidden()
    assert await p.evaluate("() => document.activeElement.id") == "memory-btn"
    page.assert_clean()


async def test_the_search_box_finds_an_old_message_that_is_not_loaded_and_jumps_to_it(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate(env=ENV, extra=("memory",))
    s = Script(utcnow() - timedelta(days=20))
    s.open_conversation()
    s.span("interaction", channel="sms")
    boat = s.user("The boat to Tavira leaves from pier seven at dawn.", channel="sms")
    s.assistant("Pier seven, at dawn: noted.", channel="sms")
    s.close()
    filler(s)
    await publish(sys_.nats_url, s.events)
    await eventually(lambda: off_loop(lambda: any(r["id"] == boat.id for r in search(sys_, "Tavira pier"))),
                     "the boat fact found by search")


    page = await new_page(sys_)
    p = page.page
    assert await not_loaded(page, boat.id)
    await p.click("#search-btn")
    await p.fill("#search-input", "Tavira pier")
    # The loaded part has no match; the whole timeline has.
    await page.wait_for_text("#search-count", "No matches (loaded so far)")
    result = p.locator(f"#search-results li.search-result[data-target='{boat.id}']")
    await result.wait_for()
    assert await result.get_attribute("data-kind") == "message"
    assert await result.locator(".kind-badge").inner_text() == "Message"
    assert "The boat to Tavira leaves from pier seven" in await result.locator(".search-result-text").inner_text()
    assert "SMS" in await result.locator(".search-result-meta").inner_text()
    assert "in the whole timeline" in await p.locator("#search-remote-status").inner_text()
    await page.screenshot("timeline-search-whole")

    # Keyboard: ArrowDown reaches the results, Enter on one jumps (paging back until it is loaded).
    await p.press("#search-input", "ArrowDown")
    await p.keyboard.press("Enter")
    await page.wait_for(IN_VIEW, boat.id)
    # The local search now covers it too.
    await page.wait_for_text("#search-count", "1 of 1")

    # Escape closes the search and its results.
    await p.press("#search-input", "Escape")
    assert await p.locator("#search-bar").is_hidden()
    assert await p.locator("#search-results-box").is_hidden()
    page.assert_clean()
