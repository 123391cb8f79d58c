"""Renders the PWA icons (client/icons/*.png) from client/favicon.svg with Chromium, through
Playwright, the browser driver the tests already pin: run it again after changing the favicon
(``.venv/bin/python client/icons/render_icons.py``; CHROMIUM_PATH names the browser if it is not
Debian's ``/usr/bin/chromium``). The PNGs are committed, so nothing renders at build or run time.

- ``icon-192.png``, ``icon-512.png`` (purpose ``any``): the mark on a transparent square;
- ``maskable-192.png``, ``maskable-512.png`` (purpose ``maskable``): a full-bleed background
  with the mark inside the central 80% safe zone, so a launcher's circle or squircle mask never
  cuts it.
"""

import os
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
SVG = (HERE.parent / "favicon.svg").read_text()
BACKGROUND = "#f6f5f2"  # the light theme's --bg, also the manifest's background_color

PAGE = """<!doctype html><html><body style="margin:0;background:{bg}">
<div style="width:{size}px;height:{size}px;display:flex;align-items:center;justify-content:center">
<div style="width:{mark}px;height:{mark}px">{svg}</div></div></body></html>"""


def main() -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=os.environ.get("CHROMIUM_PATH") or "/usr/bin/chromium")
        for size in (192, 512):
            for name, bg, fill in (("icon", "transparent", 1.0), ("maskable", BACKGROUND, 0.62)):
                page = browser.new_page(viewport={"width": size, "height": size})
                svg = SVG.replace("<svg ", '<svg width="100%" height="100%" ', 1)
                page.set_content(PAGE.format(bg=bg, size=size, mark=round(size * fill), svg=svg))
                page.screenshot(path=str(HERE / f"{name}-{size}.png"), omit_background=bg == "transparent")
                page.close()
        browser.close()


if __name__ == "__main__":
    main()
