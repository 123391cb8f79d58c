"""axe-core in the page: the accessibility audit the browser tests run, from disk (never a CDN).

`make install` puts axe-core in tests/browser/axe/node_modules (npm ci against its lockfile).
The page's context needs ``bypass_csp=True``: its policy (script-src 'self') refuses the tag.
"""

from pathlib import Path
from typing import Any

from playwright.async_api import Page

AXE = Path(__file__).resolve().parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
# What a page may not have: the two levels axe calls blocking for some users.
BLOCKING = ("critical", "serious")


async def axe_findings(page: Page, state: str) -> list[dict[str, Any]]:
    """The critical and serious axe findings on the page as it is now, each naming `state`."""
    if not AXE.exists():
        raise AssertionError(f"{AXE} is missing: run `make install` (it runs npm ci in tests/browser/axe)")
    if not await page.evaluate("() => typeof window.axe === 'object'"):
        await page.add_script_tag(path=str(AXE))
    found: list[dict[str, Any]] = await page.evaluate(
        """async (blocking) => {
            const r = await axe.run(document, {resultTypes: ['violations']});
            return r.violations.filter(v => blocking.includes(v.impact)).map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.slice(0, 4).map(n => ({target: n.target.join(' '), summary: n.failureSummary})),
            }));
        }""",
        list(BLOCKING),
    )
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
