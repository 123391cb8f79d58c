"""An axe-core audit of every state, phone-first sheets, and a conversation that stays open.

At 1280×860 and 390×844, in light and dark: 0 critical and 0 serious axe findings on the main
view, every panel, dialog and expanded state; with a panel open the composer is fully on screen
and the document itself does not scroll; Escape closes what is open and gives focus back.
"""

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Page

from delegate.contracts.events import (
    ContextCapsule,
    Event,
    InnerDecision,
    InnerSignal,
    MemoryRetrieved,
    SessionEnded,
    SessionStarted,
    TaskEvent,
    ThoughtflowArtifact,
)
from delegate.contracts.ids import new_id, utcnow
from tests.support.system import System

from .audit import axe_findings, in_audit_world, shell_fits
from .chat_page import ChatPage, rendered_ids
from .seed import Script, demo_timeline, publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NewPage = Callable[..., Awaitable[ChatPage]]
VIEWPORTS: dict[str, dict[str, Any]] = {  # new_page's keywords per screen
    "desktop": {"viewport": {"width": 1280, "height": 860}},
    "phone": {
        "viewport": {"width": 390, "height": 844},
        "device_scale_factor": 2,
        "is_mobile": True,
        "has_touch": True,
    },
}
# A panel's read of the API has ended, in its data or in the words for its failure (the memory
# panel's, with no memory service here), and is drawn (client/js/panel.js). Search reads nothing.
PANEL_READ = """panel => { if (panel === 'search-bar') return true;
                           const p = window.__delegate[panel.replace(/-panel$/, '')];
                           return (p.loaded || !!p.error) && !p.inFlight; }"""
DIALOGS = {"end-btn": "end-dialog", "export-btn": "export-dialog", "signout-all-btn": "signout-all-dialog"}


async def use_action(p: Page, button: str) -> None:
    """Press a top-bar action: folded in the labelled menu (all of them on a phone, the less-used on a wide screen)."""
    if not await p.locator(f"#{button}").is_visible():
        await p.click("#menu-btn")
        assert await p.locator("#menu-btn").get_attribute("aria-expanded") == "true"
    await p.click(f"#{button}")


async def panels(p: Page) -> list[tuple[str, str]]:
    """Every action that opens a panel: (its button, the panel), People and Commitments included."""
    found: list[list[str]] = await p.eval_on_selector_all(
        "#actions [aria-controls]", "bs => bs.map(b => [b.id, b.getAttribute('aria-controls')])"
    )
    return [(b, s) for b, s in found]


def assert_fits(fit: dict[str, Any], state: str) -> None:
    assert fit["composerTop"] >= 0 and fit["composerBottom"] <= fit["height"] + 0.5, (state, fit)
    assert fit["composerLeft"] >= 0 and fit["composerRight"] <= fit["width"] + 0.5, (state, fit)
    assert not fit["docScrolls"] and fit["scrollY"] == 0 and fit["shellScrolled"] == 0, (state, fit)
    # The shell fills the window exactly: nothing scrolled away above, no gap below the composer.
    assert abs(fit["appTop"]) < 1 and abs(fit["appBottom"] - fit["height"]) < 1, (state, fit)


async def audit_everything(page: ChatPage, label: str) -> list[dict[str, Any]]:
    """Walk the states of one page (one viewport, one theme); return every blocking finding."""
    p = page.page
    findings = await axe_findings(p, f"{label}: main view")
    assert_fits(await shell_fits(p), f"{label}: main view")
    await page.screenshot(f"a11y-{label}-main")

    # Expanded states: every inner activity line open, and one of its rows.
    assert await page.expand_activity() > 0
    row = p.locator("#timeline .activity .inner > details").first
    await row.evaluate("d => { d.open = true; }")
    findings += await axe_findings(p, f"{label}: inner activity expanded")

    if await p.locator("#menu-btn").is_visible():
        await p.click("#menu-btn")
        findings += await axe_findings(p, f"{label}: menu open")
        await page.screenshot(f"a11y-{label}-menu")
        await p.keyboard.press("Escape")
        assert await p.evaluate("() => document.activeElement.id") == "menu-btn"
        assert not await p.locator("#export-btn").is_visible()  # folded away again

    for button, panel in await panels(p):
        await use_action(p, button)
        sheet = p.locator(f"#{panel}")
        await sheet.wait_for(state="visible")
        # Never inside the header, and with a close control of its own (search closes the same way).
        assert await sheet.evaluate("n => !n.closest('header')"), panel
        assert await sheet.locator("button[id$='-close']").count() == 1 or panel == "search-bar", panel
        if panel == "search-bar":
            await p.fill("#search-input", "Lisbon")
            await page.wait_for_text("#search-count", "of")
        if panel == "tasks-panel":
            await p.locator("#task-new > summary").click()
        await page.wait_for(PANEL_READ, panel)
        state = f"{label}: {panel} open"
        findings += await axe_findings(p, state)
        assert_fits(await shell_fits(p), state)
        await page.screenshot(f"a11y-{label}-{panel}")
        # Escape closes it; focus goes back to what opened it (or the menu that holds it).
        await p.locator(f"#{panel} input, #{panel} button").first.focus()
        await p.keyboard.press("Escape")
        await sheet.wait_for(state="hidden")
        focused = await p.evaluate("() => document.activeElement.id")
        assert focused in (button, "menu-btn"), (panel, focused)

    for button, dialog in DIALOGS.items():
        await use_action(p, button)
        await p.locator(f"#{dialog}").wait_for(state="visible")
        findings += await axe_findings(p, f"{label}: {dialog}")
        await page.screenshot(f"a11y-{label}-{dialog}")
        await p.keyboard.press("Escape")
        await p.locator(f"#{dialog}").wait_for(state="hidden")
    if await p.locator("#offline-badge").is_visible():
        await p.click("#offline-badge")
        await p.locator("#setup-dialog").wait_for(state="visible")
        findings += await axe_findings(p, f"{label}: setup-dialog")
        await p.keyboard.press("Escape")
    return findings


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def demo(core_system: System) -> tuple[System, list[Event]]:
    """The demo timeline, seeded once: the audits below only read it (panels, dialogs and search
    open and close again; nothing is sent), each in a browser context of its own."""
    events = demo_timeline()
    await publish(core_system.nats_url, events)
    return core_system, events


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_axe_finds_nothing_serious_in_any_state(
    demo: tuple[System, list[Event]], new_page: NewPage, size: str, scheme: str
) -> None:
    sys_, events = demo
    page = await new_page(sys_, color_scheme=scheme, **VIEWPORTS[size])
    await page.wait_event_count(len(rendered_ids(events)))
    findings = await audit_everything(page, f"{size}-{scheme}")
    said = [f"{f['state']}: {f['impact']} {f['id']} ({f['help']}) {f['nodes']}" for f in findings]
    assert findings == [], "\n".join(said)
    page.assert_clean()


async def test_the_audit_sees_the_page_under_its_own_content_security_policy(
    demo: tuple[System, list[Event]], new_page: NewPage
) -> None:
    sys_, events = demo
    page = await new_page(sys_)
    await page.wait_event_count(len(rendered_ids(events)))
    p = page.page
    # The page's policy is in force in this context (no bypass_csp): it refuses an inline script.
    refused = await p.evaluate(
        """() => new Promise((done) => {
            document.addEventListener('securitypolicyviolation', (e) => done(e.violatedDirective), {once: true});
            const s = document.createElement('script');
            s.textContent = 'window.__inlineRan = true';
            document.head.appendChild(s);
            s.remove();
            if (window.__inlineRan) done('ran');
        })"""
    )
    assert refused.startswith("script-src"), refused
    page.console_errors.clear()  # the refusal is reported on the console, as it should be
    assert await axe_findings(p, "main view") == []
    # axe lives beside the page, not in it: the page's globals are its own.
    assert await p.evaluate("() => typeof window.axe") == "undefined"
    assert await in_audit_world(p, "typeof axe.run") == "function"
    # And it sees what the page shows: a planted image without a text alternative is caught.
    await p.evaluate(
        """() => { const i = document.createElement('img'); i.id = 'planted'; i.src = '/favicon.svg';
                   document.getElementById('timeline').appendChild(i); }"""
    )
    found = await axe_findings(p, "planted image")
    assert [f["id"] for f in found] == ["image-alt"], found
    await p.evaluate("() => document.getElementById('planted').remove()")
    page.assert_clean()


def one_relationship() -> list[Event]:
    """A chat, then a fired reminder, a finished task and a voice call, each in its own span."""
    s = Script(utcnow() - timedelta(hours=3))
    s.open_conversation()
    s.span("interaction")
    s.user("Can you find me a hotel in Porto for the 15th?")
    s.inner(MemoryRetrieved(query="Porto hotel", items=[]), channel="text")
    s.assistant("I'll look: Casa do Rio has a room with a terrace for the 15th.")
    s.user("Book it, and remind me to pack on the 14th.")
    s.assistant("Booked. I'll remind you to pack on the 14th at 18:00.")
    s.close()
    s.inner(ContextCapsule(text="Porto: Casa do Rio on the 15th.", reason="threshold"), span_id=None)
    # The reminder fires: a signal, a decision, an activation that says it.
    s.inner(InnerSignal(source="timer", type="reminder.due", data={"note": "pack"}), span_id=None)
    s.inner(InnerDecision(decision="act", reason="due"), span_id=None)
    s.span("activation", channel="inner", gap=600)
    s.assistant("Reminder: pack for Porto tonight.", channel="inner")
    s.close()
    # A task runs and finishes in its own span (a card), with its run picture after it.
    task_id = new_id()
    s.span_id = task_id
    s._add(TaskEvent(task_id=task_id, data={"goal": "Check the Porto train times"}), kind="task.created", step=600)
    s._add(TaskEvent(task_id=task_id, data={"summary": "Trains at 09:05 and 11:05"}), kind="task.finished")
    s.span_id = None
    d2 = f"thoughtflow/{task_id}/flow.d2"
    picture = ThoughtflowArtifact(run_id=task_id, run_type="task", span_id=task_id, d2_path=d2)
    s.inner(picture, span_id=None)
    # A browser voice call.
    s.span("voice", channel="browser_voice", gap=600)
    session = new_id()
    s.inner(SessionStarted(type="voice", session_id=session), channel="browser_voice")
    s.user("What time is my train?", channel="browser_voice")
    s.assistant("09:05 from São Bento.", channel="browser_voice")
    s.inner(SessionEnded(type="voice", session_id=session, reason="hangup", duration_s=40), channel="browser_voice")
    s.close()
    s.inner(ContextCapsule(text="Porto trip, trains at 09:05.", reason="span_end"), span_id=None)
    return s.events


async def test_after_a_reminder_a_task_and_a_call_the_chat_stays_open_after_a_reload(
    delegate: Callable[..., Awaitable[System]], new_page: NewPage
) -> None:
    sys_ = await delegate()
    events = one_relationship()
    await publish(sys_.nats_url, events)
    for size in ("desktop", "phone"):
        page = await new_page(sys_, **VIEWPORTS[size])
        p = page.page
        await page.wait_event_count(len(rendered_ids(events)))
        await p.reload()
        await page.wait_live()
        await page.wait_event_count(len(rendered_ids(events)))
        texts = [e for e in events if e.kind == "message" and e.channel == "text"]
        # The chat's last text messages are on the page without a click, in one scroll.
        for ev in texts:
            node = p.locator(f"#timeline article.msg[data-event-id='{ev.id}']")
            assert await node.is_visible(), ev.payload
            assert await node.evaluate("n => !n.closest('details')"), "a message inside something that folds"
        last = p.locator(f"#timeline article.msg[data-event-id='{texts[-1].id}']")
        await last.scroll_into_view_if_needed()
        assert await last.is_visible()
        # Bookkeeping after the spans is folded into their inner activity: no raw kind, no
        # "carry-over note" row between spans.
        body = await p.locator("#timeline").inner_text()
        assert "thoughtflow" not in body and "Carry-over" not in body
        top_level = await p.eval_on_selector_all("#timeline > .inner", "ns => ns.map(n => n.dataset.kind)")
        assert top_level == ["inner.signal"], top_level
        # The newest block is the call, and it is not collapsed: its messages show.
        assert await p.locator("#timeline > section.span").last.get_attribute("data-span-type") == "voice"
        # The task card with its steps open, the call and the activation pass the audit too.
        await p.locator("#timeline .task-card-steps > summary").click()
        await page.expand_activity()
        # Opened, the folded rows name what they are in words too ("Run picture"), never a kind.
        assert "thoughtflow" not in await p.locator("#timeline").inner_text()
        findings = await axe_findings(p, f"{size}: a task card, a call, an activation")
        assert findings == [], [(f["id"], f["nodes"]) for f in findings]
        await page.screenshot(f"one-relationship-{size}")
        page.assert_clean()
