"""The Usage panel in the browser: 30 days of spend stacked by purpose from a seeded ledger (real
ledger, gateway and page), a known day's total on hover, the costliest runs with their calls, and
today's spend in the topbar."""

from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, time, timedelta

import pytest
import pytest_asyncio

from delegate.contracts.events import ActivationOutcome, Channel, Event, ModelUsage, UsagePurpose, make_event
from delegate.contracts.ids import new_id, utcnow
from tests.support.standin import StandinProcess
from tests.support.system import System

from .chat_page import ChatPage
from .conftest import shared_delegate
from .seed import Script, publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]


# The activation segment's fill, the legend swatch's, and the theme's --spend-activation (as rgb()).
THEME_FILLS = """(day) => {
    const probe = document.createElement('span');
    probe.style.color = getComputedStyle(document.documentElement).getPropertyValue('--spend-activation');
    document.body.appendChild(probe);
    const theme = getComputedStyle(probe).color;
    probe.remove();
    const bar = document.querySelector(`#usage-chart g[data-day="${day}"] rect[data-purpose="activation"]`);
    const swatch = document.querySelector('#usage-legend rect[data-purpose="activation"]');
    return {theme, bar: getComputedStyle(bar).fill, swatch: getComputedStyle(swatch).fill};
}"""

# The empty state's box against the panel it sits on and the theme's own tokens.
EMPTY_LOOK = """() => {
    const box = getComputedStyle(document.getElementById('usage-empty'));
    const root = getComputedStyle(document.documentElement);
    const probe = document.createElement('span');
    document.body.appendChild(probe);
    const rgb = (v) => { probe.style.color = root.getPropertyValue(v); return getComputedStyle(probe).color; };
    const out = {background: box.backgroundColor, text: box.color, surface2: rgb('--surface-2'), fg: rgb('--text')};
    probe.remove();
    return out;
}"""


def call(
    purpose: UsagePurpose, at: datetime, cost: float | None, *, span: str | None = None, channel: Channel = "text"
) -> Event:
    payload = ModelUsage(
        model="gpt-5.5",
        purpose=purpose,
        cause_id=span,
        input_tokens=1200,
        cached_tokens=200,
        output_tokens=90,
        cost_usd=cost,
    )
    return make_event(payload, conversation_id=None, span_id=span, channel=channel, ts=at, id=new_id())


def seeded() -> tuple[list[Event], str, str]:
    today = utcnow().date()
    noon = datetime.combine(today, time(12), UTC)
    known = noon - timedelta(days=3)
    events = [call("owner_turn", noon - timedelta(days=d), 0.1 * (d % 4 + 1)) for d in range(0, 29, 2)]
    events += [
        call("activation", known, 0.25, span="act-costly", channel="inner"),
        call("web_search", known + timedelta(minutes=1), 0.0125, span="act-costly", channel="inner"),
        call("task_step", known - timedelta(hours=1), 0.40, span="task-costly", channel="inner"),
        call("capsule", known + timedelta(hours=2), None, channel="inner"),  # an unpriced model's call
    ]
    # known day: owner_turn 0.2 (d=3 is odd: none) -> activation 0.25 + search 0.0125 + task 0.40
    return events, known.date().isoformat(), today.isoformat()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def spent(core_system: System) -> tuple[System, str, str]:
    """30 days of spend, seeded once: both schemes only read it."""
    events, known_day, today = seeded()
    await publish(core_system.nats_url, events)
    return core_system, known_day, today


@pytest.fixture(scope="module")
def no_spend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, module_standin: StandinProcess
) -> Iterator[System]:
    """A System with nothing spent, for both schemes' empty panel."""
    with shared_delegate(request, tmp_path_factory, module_standin) as system:
        yield system


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_the_usage_panel_draws_30_days_and_a_known_days_total(
    spent: tuple[System, str, str], new_page: Callable[..., Awaitable[ChatPage]], scheme: str
) -> None:
    sys_, known_day, today = spent
    page = await new_page(sys_, color_scheme=scheme)
    p = page.page

    # The topbar: today's spend next to the working-memory gauge (today's seeded turn: $0.10).
    await page.wait_for_text("#spend-today", "Today: $0.10")

    await page.action("#usage-btn")
    await page.wait_for("() => document.querySelectorAll('#usage-chart g.spend-bar').length === 30")
    bars = p.locator("#usage-chart g.spend-bar")
    first_day = await bars.first.get_attribute("data-day")
    assert first_day is not None and first_day < today
    assert await bars.last.get_attribute("data-day") == today
    # Stacked by purpose: the known day has its three purposes as segments.
    known = p.locator(f"#usage-chart g.spend-bar[data-day='{known_day}']")
    purposes = await known.locator("rect[data-purpose]").evaluate_all("rs => rs.map(r => r.dataset.purpose)")
    assert purposes == ["activation", "task_step", "web_search"]
    # Laid out with a height each, once the panel shows (the chart is drawn while it is closed
    # too, for the topbar's figure, and a hidden SVG's boxes measure 0: seen once).
    await page.wait_for(
        """day => !document.getElementById('usage-panel').hidden && [...document.querySelectorAll(
               `#usage-chart g.spend-bar[data-day='${day}'] rect[data-purpose]`)].every(r => r.getBBox().height > 0)""",
        known_day,
    )
    # Its colours are the theme's (the stylesheet's --spend-*), the legend's swatches the same.
    fills = await p.evaluate(THEME_FILLS, known_day)
    assert fills["bar"] == fills["theme"] == fills["swatch"], fills
    assert await p.locator("#usage-empty").is_hidden()

    # Hovering the day shows its total and its split; its label says the total too.
    await known.hover()
    await page.wait_for_text("#usage-day", f"{known_day}: $0.66")
    day_text = await p.locator("#usage-day").inner_text()
    assert "Activations $0.25" in day_text and "Tasks $0.40" in day_text and "1 unpriced" in day_text
    assert await known.get_attribute("aria-label") == f"{known_day}: $0.66"
    assert "unpriced" in await p.locator("#usage-status").inner_text()
    assert "no budget set" in await p.locator("#usage-today").inner_text()

    # The costliest runs, the task first; hovering the activation lists its calls.
    runs = p.locator("#usage-top button.spend-run")
    await page.wait_for("() => document.querySelectorAll('#usage-top button.spend-run').length === 2")
    assert await runs.nth(0).inner_text() == "Tasks · 1 call · $0.40"
    assert await runs.nth(1).inner_text() == "Activations · 2 calls · $0.26"
    await runs.nth(1).hover()
    await page.wait_for_text("#usage-top .spend-calls li", "gpt-5.5 · Web search · 1,200 in / 90 out · $0.01")
    await page.screenshot(f"usage-panel-{scheme}")
    page.assert_clean()


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_with_no_spend_the_panel_says_so_in_the_themes_colours(
    no_spend: System, new_page: Callable[..., Awaitable[ChatPage]], scheme: str
) -> None:
    page = await new_page(no_spend, color_scheme=scheme)
    p = page.page
    await page.wait_for_text("#spend-today", "Today: $0.00")
    await page.action("#usage-btn")
    await p.locator("#usage-empty").wait_for(state="visible")
    assert (await p.locator("#usage-empty").inner_text()).startswith("No spend yet")
    # No empty box of invisible bars in its place.
    assert await p.locator("#usage-chart").is_hidden()
    assert await p.locator("#usage-legend").is_hidden() and await p.locator("#usage-day").is_hidden()
    look = await p.evaluate(EMPTY_LOOK)
    assert look["background"] == look["surface2"] and look["text"] == look["fg"], look
    dark = scheme == "dark"
    assert look["background"] == ("rgb(36, 38, 43)" if dark else "rgb(239, 238, 233)"), look
    await page.screenshot(f"usage-empty-{scheme}")
    page.assert_clean()


async def test_an_activation_shows_its_cost_and_the_panel_leads_to_it(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate()
    s = Script(utcnow() - timedelta(hours=3))
    s.open_conversation()
    s.span("activation", channel="inner")
    span_id = s.span_id
    s.inner(
        ModelUsage(
            model="gpt-5.5", purpose="activation", cause_id=span_id, input_tokens=1200, output_tokens=90, cost_usd=0.25
        )
    )
    s.assistant("The parcel is at the post office until Friday.", channel="inner")
    s.inner(
        ModelUsage(
            model="gpt-5.5",
            purpose="web_search",
            cause_id="ws-1",
            input_tokens=300,
            output_tokens=20,
            web_search_calls=1,
            cost_usd=0.0125,
        )
    )
    s.inner(ActivationOutcome(status="completed", summary="told the owner"))
    s.close()
    for n in range(6):  # newer turns, so the activation is out of view
        s.span("interaction", gap=600)
        for i in range(6):
            s.user(f"Later {n}.{i}: " + "something else, to push the activation up and away. " * 3)
            s.assistant(f"Answer {n}.{i}: noted.")
        s.close()
    await publish(sys_.nats_url, s.events)
    page = await new_page(sys_)
    p = page.page

    # The activation's own cost, in its head: both calls, the search's fee included.
    cost = p.locator(f"#timeline [data-span-id='{span_id}'] .span-cost")
    await cost.wait_for(state="attached")
    assert await cost.inner_text() == "$0.26 · 2 model calls"

    # The Usage panel's costliest run leads to that activation on the timeline.
    await page.action("#usage-btn")
    run = p.locator(f"#usage-top button.spend-run[data-span='{span_id}']")
    await run.wait_for()
    await run.click()
    await page.wait_for(
        """span => {
      const box = document.getElementById('scroller').getBoundingClientRect();
      const n = document.querySelector('#timeline .jump-target');
      if (!n || !n.closest(`[data-span-id="${span}"]`)) return false;
      const r = n.getBoundingClientRect();
      return r.bottom > box.top && r.top < box.bottom;
    }""",
        span_id,
    )
    page.assert_clean()
