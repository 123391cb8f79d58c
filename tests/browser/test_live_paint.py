"""A streaming answer on a long history: each delta painted at once, without a forced layout.

The real system streams a slow answer from the stand-in while live events land on the timeline.
A probe wrapped around the page's /chat socket looks at every delta frame as the app handles it:
the streaming bubble must show the new text before the handler returns (never deferred behind
a render the live events queued), and the handler must not read the scroller's geometry (that
forces a layout of the whole page on every delta; following the bottom is one scroll a frame).
Where the person reads is theirs: at the bottom the answer stays in view, scrolled up it stays put.
"""

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from delegate.contracts.events import Event, InnerSignal, make_event
from delegate.contracts.ids import new_id, utcnow
from tests.support.standin import StandinProcess
from tests.support.system import System

from .chat_page import ChatPage, rendered_ids
from .seed import long_history, publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]

STORY = " ".join(f"word{i}" for i in range(150))

# Before the app's script: wraps the handler the app sets as `onmessage` on its /chat socket.
DELTA_PROBE = """
(() => {
  const probe = (window.__probe = {deltas: 0, seen: 0, deferred: 0, geometryReads: 0});
  let inDelta = false;
  const desc = Object.getOwnPropertyDescriptor(Element.prototype, 'scrollHeight');
  Object.defineProperty(Element.prototype, 'scrollHeight', {
    configurable: true,
    get() { if (inDelta) probe.geometryReads += 1; return desc.get.call(this); },
  });
  const words = (t) => String(t || '').replace(/\\s+/g, ' ').trim();
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    set onmessage(handler) {
      super.onmessage = handler && ((msg) => {
        let f = null;
        try { f = JSON.parse(msg.data); } catch { /* binary or not ours */ }
        if (!f || f.type !== 'delta') return handler(msg);
        const before = document.querySelector('#timeline article.streaming .bubble');
        inDelta = true;
        try { handler(msg); } finally { inDelta = false; }
        probe.deltas += 1;
        const stream = window.__delegate.tl.streams.get(f.turn_id);
        if (!before || !before.isConnected || !stream) return;
        probe.seen += 1;
        if (words(before.textContent) !== words(stream.text)) probe.deferred += 1;
      });
    }
    get onmessage() { return super.onmessage; }
  };
})();
"""
AT_BOTTOM = """() => { const s = document.getElementById('scroller');
                       return s.scrollHeight - s.scrollTop - s.clientHeight < 4; }"""


def live_signals(n: int) -> list[Event]:
    """Inner signals committed while an answer streams: each one a live event on the page."""
    now = utcnow()
    return [
        make_event(
            InnerSignal(source="memory", type="consolidated", data={"n": i}),
            conversation_id=None,
            span_id=None,
            channel="inner",
            ts=now + timedelta(milliseconds=i),
            id=new_id(),
        )
        for i in range(n)
    ]


async def test_deltas_paint_at_once_and_the_reading_position_is_kept(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate(env={"TIMELINE_HISTORY_EVENT_LIMIT": "1000"})
    history = long_history(8, 20)
    await publish(sys_.nats_url, history)
    standin.script({"action": "slow", "delay_ms": 60, "text": STORY})
    page = await new_page(sys_, viewport={"width": 1000, "height": 700})
    p = page.page
    await p.context.add_init_script(DELTA_PROBE)
    await p.reload()
    await page.wait_live()
    await page.wait_event_count(len(rendered_ids(history)))

    await page.send("Tell me a story.")
    await p.wait_for_selector("#timeline article.streaming")
    signals = live_signals(12)
    # At the bottom: live events land while it streams, and the answer stays in view.
    for ev in signals[:6]:
        await publish(sys_.nats_url, [ev])
    await page.wait_for(AT_BOTTOM)
    assert await p.locator("#timeline article.streaming").count() == 1, "the answer ended too soon for this test"

    # Scrolled up to read: the rest streams and lands below without moving the page.
    await p.eval_on_selector("#scroller", "s => { s.scrollTop = Math.max(0, s.scrollHeight - s.clientHeight - 900); }")
    await page.wait_for("() => !window.__delegate.pane.pinned")
    top = await p.eval_on_selector("#scroller", "s => s.scrollTop")
    for ev in signals[6:]:
        await publish(sys_.nats_url, [ev])
    await page.wait_for("() => document.querySelectorAll('#timeline article.msg-assistant[data-event-id]').length > 80")
    await p.locator("#jump-btn").wait_for(state="visible")
    assert await p.eval_on_selector("#scroller", "s => s.scrollTop") == top

    # Every delta showed at once, live events or not, without reading the page's geometry.
    probe = await p.evaluate("() => window.__probe")
    assert probe["seen"] > 20, probe
    assert probe["deferred"] == 0, probe
    assert probe["geometryReads"] == 0, probe
    await p.click("#jump-btn")
    await page.wait_for(AT_BOTTOM)
    await page.screenshot("live-paint")
    page.assert_clean()
