"""Signing out in the browser really ends the session: here, and with "Sign out everywhere", on every tab."""

import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .chat_page import WAIT_MS, ChatPage, ledger_events
from .conftest import shared_delegate

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NewPage = Callable[..., Awaitable[ChatPage]]
SESSION_COOKIE = "delegate_session"


async def session_cookie(page: ChatPage) -> str:
    cookies = await page.page.context.cookies()
    return next(c["value"] for c in cookies if c["name"] == SESSION_COOKIE)


def state_status(system: System, cookie: str) -> int:
    """What the gateway answers that cookie now (as a script replaying it would see)."""
    r = httpx.get(f"{system.http}/api/state", cookies={SESSION_COOKIE: cookie}, timeout=10)
    return r.status_code


@pytest.fixture(scope="module")
def sys_(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, module_standin: StandinProcess
) -> Iterator[System]:
    """One System for the module: each test signs in its own browser contexts, and the one test
    that ends every session signs in again afterwards. Open sockets recheck their session often
    here, so the other tab notices "sign out everywhere" promptly."""
    env = {"GATEWAY_SESSION_RECHECK_S": "0.5"}
    with shared_delegate(request, tmp_path_factory, module_standin, env) as system:
        yield system


async def test_sign_out_revokes_the_session_and_everywhere_ends_every_tab(sys_: System, new_page: NewPage) -> None:
    a = await new_page(sys_)
    cookie_a = await session_cookie(a)
    assert state_status(sys_, cookie_a) == 200

    # "Sign out": the sign-in page, and the cookie, even if someone kept a copy, is dead.
    await a.action("#signout-btn")
    await a.page.wait_for_selector("#signin:not([hidden])", timeout=WAIT_MS)
    assert state_status(sys_, cookie_a) == 401
    await a.page.reload()
    await a.page.wait_for_selector("#signin:not([hidden])", timeout=WAIT_MS)

    # Two browsers signed in; one signs out everywhere: both land on the sign-in page.
    await a.sign_in()
    b = await new_page(sys_)
    cookie_a, cookie_b = await session_cookie(a), await session_cookie(b)
    assert cookie_a != cookie_b
    # It asks first: Cancel keeps every session; confirming signs them all out.
    await a.action("#signout-all-btn")
    dialog = a.page.locator("#signout-all-dialog")
    await dialog.wait_for(state="visible")
    await dialog.locator("button[value=cancel]").click()
    await dialog.wait_for(state="hidden")
    assert state_status(sys_, cookie_a) == state_status(sys_, cookie_b) == 200
    await a.action("#signout-all-btn")
    await dialog.locator("#signout-all-confirm").click()
    await a.page.wait_for_selector("#signin:not([hidden])", timeout=WAIT_MS)
    await a.wait_for_text("#signin-error", "every browser")
    await b.page.wait_for_selector("#signin:not([hidden])", timeout=WAIT_MS)  # its socket was closed 4401
    await b.wait_for_text("#signin-error", "Sign in again")
    assert state_status(sys_, cookie_a) == state_status(sys_, cookie_b) == 401
    await b.screenshot("signed-out-everywhere")

    # Signing in again works.
    await b.sign_in()
    a.assert_clean()
    b.assert_clean()


async def test_the_app_refuses_to_be_framed_by_another_origin(sys_: System, new_page: NewPage) -> None:
    """CSP frame-ancestors 'none', sent as a header: a page elsewhere cannot frame the client."""
    page = await new_page(sys_, sign_in=False)
    await page.page.wait_for_selector("#signin:not([hidden])", timeout=WAIT_MS)  # served, and works on its own
    framer = await page.page.context.new_page()
    refusals: list[str] = []
    framer.on("console", lambda m: refusals.append(m.text) if "frame-ancestors" in m.text else None)
    await framer.set_content(f'<iframe id="f" src="{sys_.http}/"></iframe>')  # about:blank: another origin
    # The positive marker: Chromium reports the refusal; by then the frame would have loaded.
    await eventually(lambda: bool(refusals), "Chromium to refuse the frame", 30)
    assert await framer.frame_locator("#f").locator("#signin").count() == 0


class _AttackServer(ThreadingHTTPServer):
    html = ""


class _AttackPage(BaseHTTPRequestHandler):
    """Serves one page (from ``server.html``) on another local port: same site, foreign origin."""

    server: _AttackServer

    def do_GET(self) -> None:
        body = self.server.html.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def attack_site(html: str) -> Iterator[str]:
    server = _AttackServer(("127.0.0.1", 0), _AttackPage)
    server.html = html
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_page_on_another_local_port_cannot_post_or_end_the_conversation_with_the_cookie(
    sys_: System, new_page: NewPage
) -> None:
    """The probe, in a real browser: SameSite ignores the port, so the cookie goes along."""
    owner = await new_page(sys_)
    before = ledger_events(sys_)
    # A text/plain form post (no CORS preflight), shaped to be valid JSON, as the probe did it.
    html = f"""<!doctype html><body>
      <form id="f" method="POST" enctype="text/plain" action="{sys_.http}/api/messages">
        <input name='{{"text":"pwned","x":"' value='"}}'>
      </form>
      <script>
        fetch("{sys_.http}/api/conversation/end", {{method: "POST", mode: "no-cors", credentials: "include",
              headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}})
          .finally(() => document.getElementById("f").submit());
      </script></body>"""
    with attack_site(html) as url:
        attacker = await owner.page.context.new_page()
        await attacker.goto(url)
        # The positive marker: the form's navigation lands on the gateway's refusal.
        await attacker.wait_for_url(f"{sys_.http}/api/messages", timeout=WAIT_MS)
        body = json.loads(await attacker.locator("body").inner_text())
    assert body["error"]["code"] == "forbidden_origin"

    # The owner's own page still works, and its message is the only thing written since.
    await owner.send("only this one")
    await owner.wait_for_text("#timeline article.msg-user[data-event-id]", "only this one")
    new = [e for e in ledger_events(sys_) if e["id"] not in {b["id"] for b in before}]
    assert [e["payload"].get("text") for e in new if e["kind"] == "message" and e["role"] == "user"] == [
        "only this one"
    ]
    assert not [e for e in new if e["kind"] == "conversation.ended"]
    owner.assert_clean()
