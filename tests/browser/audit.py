"""axe-core in the page: the accessibility audit the browser tests run, from disk (never a CDN).

`make install` puts axe-core in tests/browser/axe/node_modules (npm ci against its lockfile).
axe runs in an isolated world of the page's main frame (CDP ``Page.createIsolatedWorld``, what
an extension's content script gets): it shares the DOM and the computed styles but not the
page's globals, and the browser puts it there itself, so the page keeps its own
Content-Security-Policy (script-src 'self') and no test context needs ``bypass_csp``.
"""

import json
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from playwright.async_api import CDPSession, Page
from playwright.async_api import Error as PlaywrightError

AXE = Path(__file__).resolve().parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
# What a page may not have: the two levels axe calls blocking for some users.
BLOCKING = ("critical", "serious")
WORLD = "axe-audit"

RUN = """(async (blocking) => {
    const r = await axe.run(document, {resultTypes: ['violations']});
    return r.violations.filter(v => blocking.includes(v.impact)).map(v => ({
        id: v.id, impact: v.impact, help: v.help,
        nodes: v.nodes.slice(0, 4).map(n => ({target: n.target.join(' '), summary: n.failureSummary})),
    }));
})(%s)"""

# One CDP session per page, and the isolated world holding axe (gone with the document it was
# made for: a navigation makes a new one).
_worlds: "WeakKeyDictionary[Page, tuple[CDPSession, int]]" = WeakKeyDictionary()


class AuditError(AssertionError):
    pass


async def _evaluate(cdp: CDPSession, context: int, expression: str) -> Any:
    reply = await cdp.send(
        "Runtime.evaluate",
        {"expression": expression, "contextId": context, "awaitPromise": True, "returnByValue": True},
    )
    if "exceptionDetails" in reply:
        raise AuditError(f"axe failed in the page: {reply['exceptionDetails']}")
    return reply["result"].get("value")


async def _axe_world(page: Page) -> tuple[CDPSession, int]:
    held = _worlds.get(page)
    if held is not None:
        cdp, context = held
        try:
            if await _evaluate(cdp, context, "typeof axe === 'object'"):
                return held
        except (PlaywrightError, AuditError):
            pass  # the world went with its document: make a new one
    else:
        cdp = await page.context.new_cdp_session(page)
    if not AXE.exists():
        raise AuditError(f"{AXE} is missing: run `make install` (it runs npm ci in tests/browser/axe)")
    tree = await cdp.send("Page.getFrameTree")
    frame = tree["frameTree"]["frame"]["id"]
    world = await cdp.send("Page.createIsolatedWorld", {"frameId": frame, "worldName": WORLD})
    context = int(world["executionContextId"])
    await _evaluate(cdp, context, AXE.read_text(encoding="utf-8"))
    _worlds[page] = (cdp, context)
    return cdp, context


async def in_audit_world(page: Page, expression: str) -> Any:
    """Evaluate `expression` where axe runs (the tests' check that it sees the page)."""
    cdp, context = await _axe_world(page)
    return await _evaluate(cdp, context, expression)


async def axe_findings(page: Page, state: str) -> list[dict[str, Any]]:
    """The critical and serious axe findings on the page as it is now, each naming `state`."""
    found: list[dict[str, Any]] = await in_audit_world(page, RUN % json.dumps(list(BLOCKING)))
    return [{"state": state, **f} for f in found]


async def shell_fits(page: Page) -> dict[str, Any]:
    """Where the composer is and whether the document itself scrolls (it must not)."""
    result: dict[str, Any] = await page.evaluate(
        """() => {
            const c = document.getElementById('composer').getBoundingClientRect();
            const doc = document.scrollingElement;
            const app = document.getElementById('app').getBoundingClientRect();
            return {
                appTop: app.top, appBottom: app.bottom,
                shellScrolled: document.documentElement.scrollTop + document.body.scrollTop,
                composerTop: c.top, composerBottom: c.bottom, composerLeft: c.left, composerRight: c.right,
                height: window.innerHeight, width: window.innerWidth,
                docScrolls: doc.scrollHeight > doc.clientHeight || doc.scrollWidth > doc.clientWidth,
                scrollY: window.scrollY,
            };
        }"""
    )
    return result
