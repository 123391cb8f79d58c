"""A timeline people can read, and the everyday controls around it (issue #11, the client).

Folded inner activity, tables and code with copy, search, export, phone-sized touch targets,
the first-run helpers (starter prompts, the Offline badge's setup guide, the sign-in hint) and
the outage banner with a reconnect driven by readiness.
"""

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
import pytest_asyncio

from delegate.contracts.events import ContextCapsule, ContextUsage, Event, InnerDecision, InnerSignal, MemoryRetrieved
from delegate.contracts.ids import utcnow
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .chat_page import ChatPage, ledger_events, rendered_ids
from .seed import Script, long_history, publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NewPage = Callable[..., Awaitable[ChatPage]]
CLIPBOARD = ["clipboard-read", "clipboard-write"]

CODE = 'def greet(name):\n    return f"Hello, {name} <b>&"'
RICH_ANSWER = (
    "Here is the plan:\n\n"
    "| Day | City | Hotel |\n|:----|:----:|------:|\n| 12 May | Lisbon | Casa do Terraço |\n| 15 May | Porto | — |\n\n"
    "- Packing\n  - passport\n  - charger\n    1. USB-C\n- Tickets\n\n"
    f"```python\n{CODE}\n```\n\nDone."
)


def readable_timeline() -> list[Event]:
    """Two turns in one span, each with context management around it."""
    s = Script(utcnow() - timedelta(hours=2))
    s.open_conversation()
    s.span("interaction")
    s.user("What is the plan for the Lisbon trip?")
    s.inner(MemoryRetrieved(query="Lisbon trip", items=[{"text": "Flights booked for 12 May"}]))
    s.assistant(RICH_ANSWER)
    s.usage(8_400)
    s.inner(ContextCapsule(text="Facts: Lisbon 12–15 May.", reason="threshold"))
    s.user("And the hotel in Porto?")
    s.assistant("Not booked yet: want me to look for one with a **terrace**?")
    s._add(ContextUsage(input_tokens=9_100, output_tokens=80, total_tokens=9_180, compact_threshold=200_000), step=1)
    return s.events


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def seeded(core_system: System) -> tuple[System, list[Event]]:
    """The two turns, seeded once: the two tests below only read them (search, copy, export and
    the phone's menu write nothing)."""
    events = readable_timeline()
    await publish(core_system.nats_url, events)
    return core_system, events


async def test_folded_activity_tables_code_copy_search_and_export(
    seeded: tuple[System, list[Event]], new_page: NewPage, tmp_path: Any
) -> None:
    sys_, events = seeded
    page = await new_page(sys_, permissions=CLIPBOARD)
    p = page.page
    await page.wait_event_count(len(rendered_ids(events)))

    # One quiet line per turn instead of a row between every question and answer.
    folds = p.locator("#timeline .activity")
    assert await folds.count() == 2
    first = folds.first
    assert "3 background steps: memory lookup, context used, what I keep in mind" in await first.inner_text()
    folded_kinds = ["memory.retrieved", "context.usage", "context.capsule"]
    for kind in folded_kinds:
        assert not await p.locator(f'#timeline .inner[data-kind="{kind}"]').first.is_visible()
    # The line sits after the answer it belongs to, never between the question and the answer.
    order = await p.eval_on_selector_all(
        "#timeline .span-body > *", "ns => ns.map(n => n.dataset.role || n.dataset.kind)"
    )
    assert order == ["user", "assistant", "activity", "user", "assistant", "activity"], order
    # One click shows every row, nothing hidden from someone who looks.
    await first.locator(":scope > details > summary").click()
    rows = first.locator(".activity-body > .inner")
    assert await rows.count() == 3
    assert [await rows.nth(i).get_attribute("data-kind") for i in range(3)] == folded_kinds
    for i in range(3):
        assert await rows.nth(i).is_visible()
    # The capsule's text is still one more click away, inside its row.
    await rows.nth(2).locator("summary").click()
    assert "Lisbon 12–15 May" in await rows.nth(2).locator(".inner-detail pre").inner_text()
    # A channel badge only where the channel changes: the first message has one, the rest not.
    badges = await p.eval_on_selector_all(
        "#timeline article.msg", "ns => ns.map(n => !n.querySelector('.channel').hidden)"
    )
    assert badges == [True, False, False, False]
    await page.screenshot("activity-expanded")

    # A table, a nested list and a labelled code block with copy.
    answer = p.locator("#timeline article.msg-assistant").first
    heads = await answer.locator("table th").all_inner_texts()
    assert heads == ["Day", "City", "Hotel"]
    assert await answer.locator("table tbody tr").count() == 2
    assert await answer.locator("td[data-align=right]").first.inner_text() == "Casa do Terraço"
    assert await answer.locator("ul > li > ul > li > ol > li").inner_text() == "USB-C"
    assert await answer.locator(".md-code-lang").inner_text() == "python"
    assert await answer.locator("pre code").inner_text() == CODE
    await answer.locator(".code-copy").click()
    await page.wait_for("() => document.querySelector('.code-copy').textContent === 'Copied'")
    assert await p.evaluate("() => navigator.clipboard.readText()") == CODE
    assert await p.evaluate("() => window.__pwned") is None
    await answer.scroll_into_view_if_needed()
    await page.screenshot("table-and-code")
    # Copy a whole message: the Markdown source as written.
    await answer.hover()
    await answer.locator(".act-copy").click()
    await page.wait_for("() => document.querySelector('.act-copy[data-copied=\"true\"]') !== null")
    assert await p.evaluate("() => navigator.clipboard.readText()") == RICH_ANSWER

    # Search: every loaded event, matches counted and marked, the current one scrolled to.
    await p.click("#search-btn")
    await p.fill("#search-input", "lisbon")
    await page.wait_for("() => document.getElementById('search-count').textContent.includes('of')")
    count = await p.locator("#search-count").inner_text()
    # The question, the answer (its table) and the memory lookup's summary ("… for “Lisbon trip”").
    hits = [
        e
        for e in ledger_events(sys_)
        if e["kind"] in ("message", "memory.retrieved") and "lisbon" in json.dumps(e["payload"]).lower()
    ]
    assert count.startswith(f"{len(hits)} of {len(hits)}"), count
    assert await p.locator("#timeline .search-hit").count() == len(hits)
    assert await p.locator("#timeline .search-current").count() == 1
    await p.press("#search-input", "Enter")
    assert (await p.locator("#search-count").inner_text()).startswith(f"{len(hits) - 1} of")
    await p.fill("#search-input", "no such words anywhere")
    await page.wait_for_text("#search-count", "No matches")
    await p.fill("#search-input", "terrace")
    await page.wait_for_text("#search-count", "1 of 1")
    await page.screenshot("search")
    await p.click("#search-close")
    assert await p.locator("#timeline .search-hit").count() == 0

    # Export: a real download, as Markdown and as JSON.
    await page.action("#export-btn")
    async with p.expect_download() as md_info:
        await p.click("#export-md")
    md_download = await md_info.value
    assert md_download.suggested_filename.endswith(".md")
    md_path = tmp_path / "export.md"
    await md_download.save_as(md_path)
    md = md_path.read_text()
    assert md.startswith("# Delegate timeline")
    assert "What is the plan for the Lisbon trip?" in md and "| Day | City | Hotel |" in md and CODE in md
    await page.action("#export-btn")
    await page.screenshot("export-dialog")
    async with p.expect_download() as json_info:
        await p.click("#export-json")
    json_path = tmp_path / "export.json"
    await (await json_info.value).save_as(json_path)
    exported = json.loads(json_path.read_text())["events"]
    shown = [e["id"] for e in ledger_events(sys_) if not e["kind"].startswith("term.")]
    assert [e["id"] for e in exported] == shown
    page.assert_clean()


async def test_phone_layout_has_44px_touch_targets(seeded: tuple[System, list[Event]], new_page: NewPage) -> None:
    sys_, events = seeded
    phone = await new_page(
        sys_, viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True, has_touch=True
    )
    p = phone.page
    await phone.wait_event_count(len(rendered_ids(events)))
    await phone.expand_activity()
    # The actions live in the labelled menu on a phone: search is one of them.
    await p.click("#menu-btn")
    await p.click("#search-btn")
    await p.wait_for_selector("#search-bar:not([hidden])")
    assert await p.locator("#menu-btn").get_attribute("aria-expanded") == "false"
    # With the menu open again, its actions are measured too.
    await p.click("#menu-btn")
    await p.locator("#signout-all-btn").wait_for(state="visible")
    small = await p.evaluate(
        """() => [...document.querySelectorAll('button, a[href], input, textarea, select, summary')]
              // links inside running text are exempt (WCAG 2.5.8's inline exception)
              .filter(n => !n.closest('.bubble p, .bubble li, .bubble td, .bubble th'))
              .filter(n => { const r = n.getBoundingClientRect(); return r.width > 0 && r.height > 0; })
              .map(n => { const r = n.getBoundingClientRect();
                          const what = n.id || n.className || n.tagName;
                          return {what, w: Math.round(r.width), h: Math.round(r.height)}; })
              .filter(x => x.w < 44 || x.h < 44)"""
    )
    assert small == [], small
    # Icons say what they do: every button has a name, and End conversation is not an "×".
    unnamed = await p.evaluate(
        """() => [...document.querySelectorAll('button')].filter(b => b.getClientRects().length)
              .filter(b => !(b.getAttribute('aria-label') || b.textContent.trim())).map(b => b.id || b.className)"""
    )
    assert unnamed == [], unnamed
    end_label = await p.evaluate(
        "() => { const b = document.getElementById('end-btn'); return b.textContent.trim() + '|' + b.title; }"
    )
    assert end_label.startswith("End conversation|") and "×" not in end_label
    assert await p.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    await phone.screenshot("phone-44px-targets")
    phone.assert_clean()


async def test_first_run_starters_offline_guide_and_sign_in_hint(
    delegate: Callable[..., Awaitable[System]], new_page: NewPage
) -> None:
    sys_ = await delegate()
    page = await new_page(sys_, sign_in=False)
    p = page.page
    await p.wait_for_selector("#signin:not([hidden])")
    hint = await p.locator("#token-hint").inner_text()
    assert "make token" in hint and "runtime-data/delegate-token" in hint and "RUNTIME_DATA_DIR" in hint
    await page.screenshot("sign-in-token-hint")
    await page.sign_in()

    # The empty timeline offers starter prompts; the Offline badge explains how to connect a model.
    await p.wait_for_selector("#empty:not([hidden]) .starter")
    badge = p.locator("#offline-badge")
    await badge.wait_for()
    await badge.click()
    dialog = p.locator("#setup-dialog")
    await dialog.wait_for(state="visible")
    assert "OPENAI_API_KEY" in await dialog.inner_text() and ".env" in await dialog.inner_text()
    await page.screenshot("offline-setup-guide")
    await dialog.locator("button").click()
    await dialog.wait_for(state="hidden")
    await page.screenshot("empty-starters")

    # A starter sends itself, through the real path.
    await p.locator(".starter", has_text="Note that my sister lives in Lisbon").click()
    await p.wait_for_selector("#timeline article.msg-user[data-event-id]")
    texts = [m["text"] for m in await page.messages()]
    assert texts[0] == "Note that my sister lives in Lisbon"
    await p.wait_for_selector("#timeline article.msg-assistant[data-event-id]")
    assert await p.locator("#empty").is_hidden()
    await page.screenshot("starter-sent")
    page.assert_clean()


async def test_outage_banner_and_reconnect_on_readiness(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: NewPage
) -> None:
    sys_ = await delegate(separate=("gateway",))
    standin.script({"action": "text", "text": "Before the restart."})
    page = await new_page(sys_)
    p = page.page
    await page.send("Hello before the outage")
    await page.wait_for_text("#timeline article.msg-assistant[data-event-id]", "Before the restart.")
    await page.wait_for("() => !document.getElementById('compact-btn').disabled")

    await asyncio.to_thread(sys_.kill, "gateway")
    await page.wait_status("reconnecting")
    # A visible banner, and the actions that need the bus are paused.
    await p.wait_for_selector("#outage:not([hidden])")
    assert await p.locator("#compact-btn").is_disabled()
    assert await p.locator("#end-btn").is_disabled()
    config = await p.evaluate("() => window.__delegate.conn.config")
    await page.screenshot("outage-banner")

    sys_.procs["gateway"].start()
    # When is the gateway ready, as anyone outside sees it?
    async with httpx.AsyncClient() as client:

        async def ready_at() -> float | None:
            try:
                ready = (await client.get(f"{sys_.http}/readyz", timeout=0.5)).status_code == 200
            except httpx.HTTPError:
                return None
            return time.monotonic() if ready else None

        # Polled often: the figure printed below is measured from this moment.
        t_ready = await eventually(ready_at, "the gateway's /readyz to answer 200", 30, interval=0.02)
    await page.wait_live()
    t_live = time.monotonic()
    print(f"reconnected {t_live - t_ready:.3f} s after /readyz answered 200; policy {config}", file=sys.stderr)  # noqa: T201

    # The reconnect came from the readiness poll (at most 1 s apart), not from a long backoff.
    reconnects = await p.evaluate("() => window.__delegate.conn.reconnects")
    assert reconnects and reconnects[-1]["reason"] == "ready", reconnects
    assert config["probesReadiness"] is True and config["readyPollCapMs"] <= 1000, config
    await p.wait_for_selector("#outage", state="hidden")
    await page.wait_for("() => !document.getElementById('end-btn').disabled")
    await page.screenshot("outage-recovered")
    page.assert_clean()


async def test_search_all_history_loads_older_pages(
    delegate: Callable[..., Awaitable[System]], new_page: NewPage
) -> None:
    sys_ = await delegate(env={"TIMELINE_HISTORY_EVENT_LIMIT": "7"})
    events = long_history(5, 6)
    await publish(sys_.nats_url, events)
    page = await new_page(sys_)
    p = page.page
    await p.locator("#older-btn").wait_for(state="visible")
    await p.click("#search-btn")
    # The oldest span is not loaded yet: search says what it covers, and offers the rest.
    await p.fill("#search-input", '"Span 0 message"')
    await page.wait_for_text("#search-count", "No matches (loaded so far)")
    await p.click("#search-all")
    # Each page drawn re-runs the search, so "3 of 3 (loaded so far)" shows while the last page
    # is still coming: the end is the count without that qualifier and the button done loading.
    await page.wait_for(
        "() => document.getElementById('search-count').textContent === '3 of 3'"
        " && !document.getElementById('search-all').disabled"
    )
    assert await p.locator("#search-all").is_hidden()  # nothing older is left to offer
    assert sorted(await page.event_ids()) == sorted(rendered_ids(ledger_events(sys_)))
    # The current hit is on screen.
    current = p.locator("#timeline .search-current")
    await current.wait_for()
    assert "Span 0 message 4" in await current.inner_text()
    await page.screenshot("search-all-history")
    page.assert_clean()


# Every decision reason services/inner-plane writes (attention.py, budget.py, runtime/spend.py),
# the "due" an older broker wrote, and one this client has never heard of.
DECISIONS = [
    ("act", "ready"),
    ("act", "urgent"),
    ("act", "due"),
    ("coalesce", "coalesced"),
    ("hold", "quiet_hours"),
    ("hold", "budget"),
    ("hold", "wake_gap"),
    ("hold", "budget_usd"),
    ("hold", "runaway"),
    ("hold", "owner_mid_turn"),
    ("drop", "duplicate"),
    ("drop", "expired"),
    ("drop", "late"),
    ("drop", "some_future_code"),
]


async def test_context_and_decisions_read_in_plain_words(
    delegate: Callable[..., Awaitable[System]], new_page: NewPage
) -> None:
    sys_ = await delegate()
    s = Script(utcnow() - timedelta(hours=2))
    s.open_conversation()
    s.span("interaction")
    s.user("How full is the conversation?")
    s.assistant("About a twentieth.")
    s.usage(9_100)
    s.close()
    signal = s.inner(InnerSignal(source="timer", type="reminder.due", data={"note": "stretch"}), span_id=None)
    for decision, reason in DECISIONS:
        until = s.now + timedelta(hours=1) if decision == "hold" and reason != "owner_mid_turn" else None
        # The detail is written for the logs, codes and all: the row must not show it.
        s.inner(
            InnerDecision(decision=decision, reason=reason, detail=f"held before: {reason}", until=until),
            span_id=None,
            parent_id=signal.id,
        )
    await publish(sys_.nats_url, s.events)
    page = await new_page(sys_)
    p = page.page
    await page.wait_event_count(len(rendered_ids(s.events)))
    assert await page.expand_activity() >= 2
    text = await p.locator("#timeline").inner_text()
    # The rows say what the meter says: "Context used", never the model's "working context".
    assert "Context used" in text and "9,100 tokens" in text
    assert "working context" not in text.lower() and "context check" not in text.lower()
    titles = await p.eval_on_selector_all(
        "[title], [aria-label]", "ns => ns.map(n => n.title + ' ' + (n.getAttribute('aria-label') || ''))"
    )
    assert not [t for t in titles if "working context" in t.lower()]
    # Every decision in words: no code, no "(due)", no log detail.
    rows = await p.locator("#timeline .inner-decision .inner-text").all_inner_texts()
    assert len(rows) == len(DECISIONS), rows
    for (decision, reason), row in zip(DECISIONS, rows, strict=True):
        assert "_" not in row and f"({reason}" not in row and "held" not in row, (decision, reason, row)
    assert rows[0] == "Acting" and rows[2] == "Acting"
    assert rows[4].startswith("Waiting (quiet hours until ")
    assert rows[9] == "Waiting (for your turn to end)"
    assert rows[-1] == "Skipped"
    await page.screenshot("decisions-in-words")
    page.assert_clean()
