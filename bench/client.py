"""The browser client's own speed: a delta painted after its /chat frame, and a reload of 5,000 events.

    .venv/bin/python bench/client.py [--answers 6] [--events 5000] [--reloads 5]

Starts nats-server, the ledger, the agent and the gateway against the OpenAI stand-in, and
Debian's Chromium through Playwright (headless, 1280x860), signed in as the owner.

1. Frame to paint. The stand-in streams each answer slowly (a delta every 40 ms), --answers
   answers. In the page, a listener on the /chat socket (added before the app's own) notes when
   each ``delta`` frame arrives; a MutationObserver notes when the streaming bubble's text has
   changed after it, and forces style and layout there (what the paint needs). Timed: frame ->
   that point, per delta. The floor is the same page rendering a static copy of the change: on
   each frame, the listener itself schedules a requestAnimationFrame that writes the delta's
   text into an off-screen copy of a bubble in the same document and forces layout, with no
   timeline logic. Target: p95 <= 16 ms (one frame at 60 Hz).

2. Reload. --events events (bench/ledger.py's spans of messages, written into the ledger's
   schema before it starts); TIMELINE_HISTORY_EVENT_LIMIT=5000, so the first page brings them
   all. Timed per reload, from navigation start: the timeline's blocks on the page and the
   composer usable (interactive: the page answers a click on it at once), and the first
   contentful paint of the timeline. The floor is the same page rendering a static copy: the
   rendered document saved without its scripts, served at the same origin, timed to its load
   event. Target: interactive <= 1 s.

Prints figures; asserts nothing. On a shared 2-core machine trust the ratios over the absolutes.
"""

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.async_api import Page, Route, async_playwright  # noqa: E402

from bench.ledger import generate_history  # noqa: E402
from bench.stats import pct  # noqa: E402
from delegate.ledger.store import sqlite_path  # noqa: E402
from tests.browser.conftest import CHROMIUM_ARGS, chromium_path  # noqa: E402
from tests.support.standin import TEST_API_KEY, StandinProcess  # noqa: E402
from tests.support.system import System  # noqa: E402

# Before the app's script: a listener on every /chat socket, first in line for its messages.
FRAME_PROBE = """
(() => {
  const marks = (window.__bench = {frames: [], painted: [], floor: []});
  const copy = document.createElement('div');
  copy.className = 'bubble md';
  copy.style.cssText = 'position: fixed; left: -10000px; top: 0; width: 600px;';
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', (msg) => {
        let f;
        try { f = JSON.parse(msg.data); } catch { return; }
        if (f.type !== 'delta') return;
        const t0 = performance.now();
        marks.frames.push(t0);
        // The floor: the same change, rendered as a static copy, on the next frame.
        requestAnimationFrame(() => {
          if (!copy.isConnected) document.body.appendChild(copy);
          copy.textContent = f.text;
          copy.getBoundingClientRect();
          marks.floor.push(performance.now() - t0);
        });
      });
    }
  };
  const seen = new WeakMap();
  new MutationObserver(() => {
    const node = document.querySelector('#timeline article.streaming .bubble');
    if (!node || !marks.frames.length) return;
    const text = node.textContent;
    if (seen.get(node) === text) return;
    seen.set(node, text);
    node.getBoundingClientRect(); // style and layout: what the paint needs
    const t0 = marks.frames[marks.frames.length - 1];
    marks.painted.push(performance.now() - t0);
  }).observe(document, {subtree: true, childList: true, characterData: true});
})();
"""

READY = """() => {
  const t = document.getElementById('timeline');
  const input = document.getElementById('input');
  return t && t.children.length > 0 && input && !document.getElementById('app').hidden;
}"""


def row(name: str, xs: list[float], floor: list[float] | None = None) -> None:
    figures = "".join(f"{pct(xs, q):9.1f}" for q in (50, 95, 99))
    ratio = f"   x{pct(xs, 95) / pct(floor, 95):.2f} of the floor at p95" if floor else ""
    print(f"  {name:40}{figures}{ratio}")


async def frame_to_paint(page: Page, answers: int) -> tuple[list[float], list[float]]:
    painted: list[float] = []
    floor: list[float] = []
    for n in range(answers):
        await page.evaluate("() => { const b = window.__bench; b.frames = []; b.painted = []; b.floor = []; }")
        answered = "() => document.querySelectorAll('#timeline article.msg-assistant[data-event-id]').length"
        before = await page.evaluate(answered)
        await page.fill("#input", f"Tell me a long story, number {n}.")
        await page.press("#input", "Enter")
        # Its answer committed and on the page (a loaded machine may render it only once done).
        await page.wait_for_function(f"() => ({answered})() > {before}", timeout=180_000)
        marks = await page.evaluate("() => window.__bench")
        # Deltas that arrived within one frame share a paint: each frame's first is the one timed.
        painted += marks["painted"]
        floor += marks["floor"]
    return painted, floor


async def reload_once(page: Page) -> dict[str, float]:
    await page.reload()
    await page.wait_for_function(READY, timeout=60_000)
    figures: dict[str, float] = await page.evaluate(
        """() => new Promise((done) => requestAnimationFrame(() => {
            const shown = performance.now();
            // Interactive: a click on the composer is answered within the same task.
            const input = document.getElementById('input');
            const t = performance.now();
            input.focus();
            const answered = performance.now() - t;
            const fcp = performance.getEntriesByName('first-contentful-paint')[0];
            const mark = (n) => { const m = performance.getEntriesByName(n)[0]; return m ? m.startTime : 0; };
            done({shown, interactive: shown + answered, fcp: fcp ? fcp.startTime : shown,
                  fetched: mark('delegate:timeline-fetched'), rendered: mark('delegate:timeline-rendered'),
                  blocks: document.getElementById('timeline').children.length});
        }))"""
    )
    return figures


async def static_copy(page: Page) -> str:
    html = await page.evaluate("() => document.documentElement.outerHTML")
    html = re.sub(r"<script\b[^>]*>.*?</script>", "", html, flags=re.S)
    return "<!doctype html>\n" + html


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answers", type=int, default=6)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--reloads", type=int, default=5)
    args = parser.parse_args()
    chromium = chromium_path()
    if not chromium:
        sys.exit("bench/client.py needs Chromium (Debian's chromium package)")
    root = Path(tempfile.mkdtemp(prefix="bench-client-"))
    standin = StandinProcess(log_dir=root / "standin").start()
    env = {
        "OPENAI_API_KEY": TEST_API_KEY,
        "OPENAI_BASE_URL": standin.base_url,
        "LOG_LEVEL": "WARNING",
        "IDLE_SPAN_SECONDS": "100000",
        "TIMELINE_HISTORY_EVENT_LIMIT": "5000",
    }
    system = System(root / "system", env=env)
    # The history, written straight into the ledger's schema before it starts (bench/ledger.py's
    # spans of messages): publishing 5,000 events through the bus takes minutes on a loaded machine.
    path = sqlite_path(system.runtime)
    path.parent.mkdir(parents=True, exist_ok=True)
    generate_history(path, args.events)
    story = " ".join(f"word{i}" for i in range(120))
    standin.script(*[{"action": "slow", "delay_ms": 40, "text": story} for _ in range(args.answers)])
    try:
        system.start("ledger", "agent", "gateway", separate=True)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            context = await browser.new_context(viewport={"width": 1280, "height": 860})
            await context.add_init_script(FRAME_PROBE)
            page = await context.new_page()
            await page.goto(system.http + "/")
            await page.fill("#token", system.token)
            await page.press("#token", "Enter")
            t = time.perf_counter()
            await page.wait_for_selector('#conn[data-status="live"]', timeout=180_000)
            print(f"signed in: {time.perf_counter() - t:.1f} s to a live page holding the history")

            print(f"1. /chat delta frame -> its text laid out in the page, {args.answers} streamed answers (ms)")
            painted, floor = await frame_to_paint(page, args.answers)
            print(f"  {'':40}{'p50':>9}{'p95':>9}{'p99':>9}")
            row("floor: a static copy, next frame", floor)
            row(f"the app ({len(painted)} deltas)", painted, floor)
            print(f"  p95 {pct(painted, 95):.1f} ms (target <= 16 ms)")

            print(f"\n2. Reload of the {args.events:,} events written before the start (and the chat's), "
                  f"{args.reloads} reloads (ms from navigation start)")
            await page.reload()
            await page.wait_for_function(READY, timeout=60_000)
            runs = [await reload_once(page) for _ in range(args.reloads)]
            copy = await static_copy(page)
            copy_url = system.http + "/bench-static-copy.html"

            async def serve(route: Route) -> None:
                await route.fulfill(status=200, content_type="text/html", body=copy)

            await page.route(copy_url, serve)
            floor_load: list[float] = []
            for _ in range(args.reloads):
                await page.goto(copy_url)
                timing = await page.evaluate(
                    "() => { const n = performance.getEntriesByType('navigation')[0];"
                    " const f = performance.getEntriesByName('first-contentful-paint')[0];"
                    " return {load: n.loadEventEnd || n.domContentLoadedEventEnd, fcp: f ? f.startTime : 0}; }"
                )
                floor_load.append(timing["load"])
            shown = [r["shown"] for r in runs]
            interactive = [r["interactive"] for r in runs]
            fcp = [r["fcp"] for r in runs]
            print(f"  {'':40}{'p50':>9}{'p95':>9}{'p99':>9}")
            row("floor: the static copy, loaded", floor_load)
            row("first contentful paint", fcp, floor_load)
            row("history fetched (GET /api/timeline)", [r["fetched"] for r in runs], floor_load)
            row("history rendered", [r["rendered"] for r in runs], floor_load)
            row(f"timeline shown ({runs[-1]['blocks']} blocks)", shown, floor_load)
            row("interactive", interactive, floor_load)
            print(f"  interactive p50 {statistics.median(interactive):.0f} ms, max {max(interactive):.0f} ms "
                  "(target <= 1000 ms)")
            print(json.dumps({
                "delta_paint_p95_ms": round(pct(painted, 95), 2), "delta_floor_p95_ms": round(pct(floor, 95), 2),
                "reload_interactive_p50_ms": round(statistics.median(interactive)),
                "reload_floor_p50_ms": round(statistics.median(floor_load)),
            }))
            await browser.close()
    finally:
        system.stop()
        standin.stop()


if __name__ == "__main__":
    asyncio.run(main())
