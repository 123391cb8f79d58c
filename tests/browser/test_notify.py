"""It tells you (issue #31), in Chromium against the real system: the app is an installable PWA
(a valid manifest served as application/manifest+json, PNG icons of the sizes it names, a service
worker that controls the page and shows a "not connected" page offline without ever storing an
API answer), and a reminder firing while the tab is in the background raises a system
notification (read back from the service worker's registration), marks the tab title and shows
a toast; permission is offered when the owner sets a reminder, not asked at sign-in."""

import json
import struct
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.ids import utcnow
from delegate.contracts.reminders import ReminderCommand, ReminderSpec
from delegate.runtime.bus import Bus
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .chat_page import ChatPage
from .conftest import CORE_SERVICES, shared_delegate

pytestmark = [pytest.mark.browser, pytest.mark.integration]
FULL_CHROMIUM = "notifications: the headless shell has none (Notification.permission is denied before anyone asks)"

HIDE = """() => {
  Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "hidden"});
  Object.defineProperty(document, "hidden", {configurable: true, get: () => true});
  document.dispatchEvent(new Event("visibilitychange"));
}"""
SHOW = """() => {
  delete document.visibilityState;
  delete document.hidden;
  document.dispatchEvent(new Event("visibilitychange"));
}"""
CONTROLLED = "() => navigator.serviceWorker.ready.then(() => !!navigator.serviceWorker.controller)"


async def set_reminder(bus: Bus, text: str, in_s: float) -> None:
    spec = ReminderSpec(text=text, at=utcnow() + timedelta(seconds=in_s))
    await bus.request(topics.INNER_REMINDERS, ReminderCommand(op="set", spec=spec))


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


async def test_the_manifest_is_valid_and_the_service_worker_controls_the_page_and_serves_the_offline_shell(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate(separate=("gateway",))
    page = await new_page(sys_)
    p = page.page

    href = await p.eval_on_selector("link[rel=manifest]", "l => l.href")
    answer = await p.request.get(href)
    assert answer.status == 200 and answer.headers["content-type"].startswith("application/manifest+json")
    manifest = json.loads(await answer.body())
    assert manifest["name"] == "Delegate" and manifest["display"] == "standalone"
    assert manifest["start_url"] == "/" and manifest["scope"] == "/"
    assert manifest["theme_color"] == await p.eval_on_selector("meta[name=theme-color]", "m => m.content")
    pngs = {(i["sizes"], i["purpose"]): i["src"] for i in manifest["icons"] if i["type"] == "image/png"}
    assert {("192x192", "any"), ("512x512", "any"), ("192x192", "maskable"), ("512x512", "maskable")} <= set(pngs)
    for (sizes, _), src in pngs.items():
        icon = await p.request.get(sys_.http + src)
        assert icon.status == 200 and icon.headers["content-type"] == "image/png"
        assert "x".join(map(str, png_size(await icon.body()))) == sizes

    # The worker is served from the root, so its scope is the whole app, and it takes control.
    worker = await p.request.get(sys_.http + "/sw.js")
    assert worker.status == 200 and "javascript" in worker.headers["content-type"]
    await page.wait_for(CONTROLLED)
    assert await p.evaluate("() => navigator.serviceWorker.controller.scriptURL") == sys_.http + "/sw.js"
    assert await p.evaluate("() => navigator.serviceWorker.getRegistration().then(r => r.scope)") == sys_.http + "/"

    # Using the app stores nothing but the shell: no API answer, no timeline, no page.
    await page.send("hello")
    await page.wait_for("() => document.querySelectorAll('#timeline article.msg').length >= 2")
    cached = await p.evaluate(
        """async () => { const out = [];
             for (const name of await caches.keys()) {
               for (const r of await (await caches.open(name)).keys()) out.push(new URL(r.url).pathname); }
             return out.sort(); }"""
    )
    assert cached == ["/favicon.svg", "/icons/icon-192.png", "/offline.css", "/offline.html"]

    # The server gone (its process killed), opening the app shows the "not connected" page
    # instead of the browser's error page.
    sys_.kill("gateway")
    await p.goto(sys_.http + "/")
    assert await p.locator("main.offline h1").inner_text() == "Not connected"
    assert await p.title() == "Not connected · Delegate"
    await page.screenshot("pwa-offline-shell")
    sys_.restart("gateway")
    await p.goto(sys_.http + "/")
    await page.wait_live()
    page.console_errors.clear()  # the requests that failed while the gateway was down


@pytest.fixture(scope="module")
def with_reminders(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, module_standin: StandinProcess
) -> Iterator[System]:
    """One System for the tests below: each reads its own browser context's permission, service
    worker and notifications, and the offer follows the reminders set live while its page is open
    (the one reminder that fires in the module fires 3 s after it is set)."""
    with shared_delegate(request, tmp_path_factory, module_standin, services=(*CORE_SERVICES, "inner-plane")) as sys_:
        yield sys_


async def test_a_reminder_firing_with_the_tab_in_the_background_raises_a_notification(
    with_reminders: System, new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = with_reminders
    page = await new_page(sys_, permissions=["notifications"])
    p = page.page
    await page.wait_for(CONTROLLED)
    assert await p.evaluate("() => Notification.permission") == "granted"

    # The tab goes to the background. Headless Chromium keeps every page visible whatever is in
    # front (another tab, a minimized window: tried), so the page is told what a browser tells
    # it: document.hidden and a visibilitychange event. The notification path itself is real.
    await p.evaluate(HIDE)

    bus = await Bus.connect(sys_.nats_url, "test-probe")
    try:
        await set_reminder(bus, "Stretch your legs", in_s=3)

        async def notifications() -> list[dict[str, str]]:
            found: list[dict[str, str]] = await p.evaluate(
                """async () => (await (await navigator.serviceWorker.getRegistration()).getNotifications())
                     .map(n => ({title: n.title, body: n.body, tag: n.tag}))"""
            )
            return found

        shown = await eventually(notifications, "the notification shown", 40)
    finally:
        await bus.close()
    assert [(n["title"], n["body"]) for n in shown] == [("Reminder", "Stretch your legs")]
    assert shown[0]["tag"]  # the event's id: the push for the same event replaces it, never stacks
    assert (await p.title()).startswith("(1) ")
    await page.wait_for_text("#toasts .toast", "Reminder: Stretch your legs")

    # Back to the tab: the title stops counting.
    await p.evaluate(SHOW)
    await page.wait_for("() => !/^\\(\\d+\\) /.test(document.title)")
    page.assert_clean()


async def test_permission_is_offered_when_the_owner_sets_a_reminder_not_asked_at_sign_in(
    with_reminders: System, new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = with_reminders
    page = await new_page(sys_)
    p = page.page
    assert await p.evaluate("() => Notification.permission") == "default"  # nobody asked
    assert await p.locator("#notify-offer").count() == 0
    assert await p.locator("#notify-btn").get_attribute("aria-pressed") == "false"

    bus = await Bus.connect(sys_.nats_url, "test-probe")
    try:
        await set_reminder(bus, "Call the dentist", in_s=3600)
        await page.wait_for("() => !!document.querySelector('#notify-offer')")
        offer = p.locator("#notify-offer")
        assert "reminder fires" in await offer.inner_text()
        await page.screenshot("notify-offer")
        await offer.get_by_role("button", name="Not now").click()
        await page.wait_for("() => !document.querySelector('#notify-offer')")
        await set_reminder(bus, "Pay the rent", in_s=3600)  # offered once, not on every reminder
        await page.wait_for_text("#timeline", "Pay the rent")
        assert await p.locator("#notify-offer").count() == 0
    finally:
        await bus.close()
    page.assert_clean()


async def test_a_push_the_service_worker_receives_shows_one_notification_per_event(
    with_reminders: System, new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    """The worker's push handler, fed through DevTools' ServiceWorker.deliverPushMessage (headless
    Chromium has no push service to receive from); the payload is the pollers' notice JSON."""
    sys_ = with_reminders
    page = await new_page(sys_, permissions=["notifications"])
    p = page.page
    await page.wait_for(CONTROLLED)
    cdp = await p.context.new_cdp_session(p)
    registrations: list[dict[str, Any]] = []
    cdp.on("ServiceWorker.workerRegistrationUpdated", lambda e: registrations.extend(e["registrations"]))
    await cdp.send("ServiceWorker.enable")

    async def registration() -> str | None:
        ids = [r["registrationId"] for r in registrations if r["scopeURL"] == sys_.http + "/" and not r["isDeleted"]]
        return ids[0] if ids else None

    registration_id = await eventually(registration, "the service worker registered")
    notice = {"kind": "task", "title": "Task finished", "body": "The shop opens at 8.", "tag": "event-1",
              "event_id": "event-1", "ts": "2026-12-06T06:00:00Z"}
    for _ in range(2):  # the same event twice (a resend): it replaces, never stacks
        await cdp.send("ServiceWorker.deliverPushMessage",
                       {"origin": sys_.http, "registrationId": registration_id, "data": json.dumps(notice)})

    async def notifications() -> list[dict[str, str]]:
        found: list[dict[str, str]] = await p.evaluate(
            """async () => (await (await navigator.serviceWorker.getRegistration()).getNotifications())
                 .map(n => ({title: n.title, body: n.body, tag: n.tag}))"""
        )
        return found

    shown = await eventually(notifications, "the pushed notification shown")
    assert shown == [{"title": "Task finished", "body": "The shop opens at 8.", "tag": "event-1"}]
    page.assert_clean()
