"""The Voice button in a real Chromium: a spoken question (espeak-ng through Chromium's fake
microphone) reaches the real voice service over ``/browser-call``, the Realtime stand-in
answers, the page plays the answer and echoes its marks, captions show live and give way to
the committed ``browser_voice`` messages, every other tab shows the call, hang-up ends it.
And a refused microphone says so without opening a socket."""

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, WebSocket, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeout

from tests.support.speech import tools_available
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .chat_page import ChatPage
from .conftest import CHROMIUM_ARGS, PAGE_DEFAULTS, SHELL_ARGS, DelegateFactory

pytestmark = [pytest.mark.browser, pytest.mark.integration]

QUESTION = "What is my sister called?"
ANSWER = "Your sister is called Ingrid."
BUSY = "The line is busy: another call is live."
DENIED = "Microphone access was denied — allow it in the browser's site settings to talk to Delegate"
SERVICES = ("ledger", "agent", "voice", "gateway")
# Two voice presets, so the page offers a choice; the call takes the one picked.
PRESETS = {
    "warm": {"name": "warm", "voice": "marin", "greeting": "Hi, it's Delegate. How can I help?", "default": True},
    "brisk": {"name": "brisk", "voice": "cedar", "greeting": "Delegate here.", "style": "Be brief."},
}
# Chromium reads the fake microphone's file from the moment the page opens the device; the
# call goes live a moment later, so the words come after a pause (and only once: %noloop).
LEAD_SILENCE_S = 3.0
TAIL_SILENCE_S = 4.0

# Every caption text the page showed, whatever replaced it later.
RECORD_CAPTIONS = """() => {
  window.__captionsSeen = [];
  const list = document.getElementById('voice-captions');
  new MutationObserver(() => {
    for (const n of list.querySelectorAll('article.caption')) {
      window.__captionsSeen.push({role: n.dataset.role, text: n.querySelector('.bubble').textContent});
    }
  }).observe(list, {subtree: true, childList: true, characterData: true});
}"""


SAW_CAPTIONS = """([q, a]) => {
  const seen = window.__captionsSeen || [];
  const has = (role, text) => seen.some(c => c.role === role && c.text.includes(text));
  return has('user', q) && has('assistant', a);
}"""


def speech_wav(folder: Path, phrase: str) -> Path:
    """``phrase`` spoken by espeak-ng, as Chromium's fake microphone reads it: 24 kHz mono 16-bit."""
    raw = folder / "raw.wav"
    wav = folder / "speech.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(raw), phrase], check=True, timeout=60)
    pad = ["pad", str(LEAD_SILENCE_S), str(TAIL_SILENCE_S)]
    subprocess.run(["sox", str(raw), "-r", "24000", "-c", "1", "-b", "16", str(wav), *pad], check=True, timeout=60)
    return wav


@pytest.fixture
def speech_tools() -> None:
    if not tools_available():
        pytest.fail("espeak-ng and sox are needed to speak to the page (apt-get install espeak-ng sox)")


@pytest_asyncio.fixture(loop_scope="module")  # the tests' loop (conftest)
async def media_browser(headless_shell: str, tmp_path: Path, speech_tools: None) -> AsyncIterator[Browser]:
    """Chromium whose microphone says QUESTION and whose permission prompt says yes."""
    wav = speech_wav(tmp_path, QUESTION)
    args = [
        *SHELL_ARGS,
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=headless_shell, args=args)
        try:
            yield b
        finally:
            await b.close()


@pytest_asyncio.fixture(loop_scope="module")
async def denying_browser(chromium: str) -> AsyncIterator[Browser]:
    """Chromium with a (fake) microphone but no one to say yes: getUserMedia is refused. The full
    browser: the headless shell has no prompt to refuse, its getUserMedia fails NotSupportedError
    (a missing capability), not the NotAllowedError of a person saying no that this test is about."""
    async with async_playwright() as pw:
        args = [*CHROMIUM_ARGS, "--use-fake-device-for-media-stream"]
        b = await pw.chromium.launch(executable_path=chromium, args=args)
        try:
            yield b
        finally:
            await b.close()


async def open_in(browser: Browser, sys_: System, name: str, width: int = 1100, height: int = 860) -> ChatPage:
    context = await browser.new_context(**{**PAGE_DEFAULTS, "viewport": {"width": width, "height": height}})
    page = ChatPage(await context.new_page(), sys_, name)
    await page.open()
    await page.sign_in()
    return page


def call_sockets(page: ChatPage) -> list[str]:
    urls: list[str] = []

    def seen(ws: WebSocket) -> None:
        if "/browser-call" in ws.url:
            urls.append(ws.url)

    page.page.on("websocket", seen)
    return urls


async def call_info(page: ChatPage) -> dict[str, Any] | None:
    info: dict[str, Any] | None = await page.page.evaluate(
        "() => { const c = window.__delegate.voice.call; return c ? {...c.info, stats: {...c.stats}} : null; }"
    )
    return info


async def test_a_browser_call_is_heard_answered_captioned_and_committed(
    system: System,
    delegate: DelegateFactory,
    standin: StandinProcess,
    media_browser: Browser,
    new_page: Callable[..., Awaitable[ChatPage]],
) -> None:
    # Two turns' worth: a call that went live mid-word would spend the first on a fragment.
    standin.realtime_script({"transcript": QUESTION, "answer": ANSWER, "times": 2})
    presets = system.runtime / "voice-presets"
    presets.mkdir(parents=True, exist_ok=True)
    for name, preset in PRESETS.items():
        (presets / f"{name}.json").write_text(json.dumps(preset))
    sys_ = await delegate(services=SERVICES)
    page = await open_in(media_browser, sys_, "voice-call")
    other = await new_page(sys_)  # a second tab, signed in elsewhere: it sees the call too
    sockets = call_sockets(page)
    await page.page.evaluate(RECORD_CAPTIONS)

    await page.page.wait_for_selector("#voice-preset:not([hidden])")
    options = await page.page.eval_on_selector_all("#voice-preset option", "os => os.map(o => o.value)")
    assert sorted(options) == ["", "brisk", "warm"]
    await page.page.select_option("#voice-preset", "brisk")

    await page.page.click("#voice-btn")
    await page.page.wait_for_selector('#call-panel[data-status="live"]', timeout=30_000)
    assert len(sockets) == 1 and sockets[0].endswith("/browser-call?preset=brisk")
    # The model was set up with the picked preset's voice. "live" means the voice service sent
    # its session.update; the stand-in logs what it received on its own time, so wait for that.
    def configured_voices() -> set[str]:
        return {
            json.dumps(e.get("session", {}).get("audio", {}).get("output", {}).get("voice"))
            for session in standin.realtime_sessions()
            for e in session["events"]
            if e.get("type") == "session.update"
        }

    voices = await eventually(lambda: asyncio.to_thread(configured_voices), "the voice configured on the stand-in")
    assert '"cedar"' in voices, voices
    await page.wait_for_text("#call-timer", "00:0")
    assert await page.page.is_hidden("#voice-btn")
    # The Voice button went away with the click: focus moved to Hang up, not to the page.
    assert await page.page.evaluate("() => document.activeElement.id") == "call-hangup"

    # Every other tab shows the live call and cannot start one of its own.
    await other.wait_for_text("#voice-live", "Voice call live")
    await other.wait_for("() => document.getElementById('voice-btn').disabled")
    assert await other.page.get_attribute("#voice-btn", "title") == BUSY
    # A tab whose state has not caught up yet still gets a clear answer from the gateway.
    late = await open_in(media_browser, sys_, "voice-busy")
    await late.page.evaluate("() => { const b = document.getElementById('voice-btn'); b.disabled = false; b.click(); }")
    await late.page.wait_for_selector('#call-panel[data-status="ended"][data-error="busy"]', timeout=15_000)
    await late.wait_for_text("#call-status", BUSY)

    # The stand-in heard the words (energy VAD), so the question and answer come back as captions...
    await heard_and_answered(page, standin)

    # ...then as committed messages on the one timeline, which replace the captions.
    async def committed() -> list[dict[str, Any]]:
        rows = [m for m in await page.messages() if m["channel"] == "browser_voice"]
        texts = {(m["role"], m["text"].strip()) for m in rows}
        return rows if {("user", QUESTION), ("assistant", ANSWER)} <= texts else []

    rows = await eventually(committed, "the call's question and answer committed", 45)
    assert {m["role"] for m in rows} == {"user", "assistant"}
    await captions_gone(page)
    await other.wait_for_text('#timeline article.msg[data-channel="browser_voice"] .bubble', ANSWER)
    await page.screenshot("voice-call-live")

    # The answer audio reached the player, and its marks were echoed as it played.
    info = await eventually(
        lambda: _when(call_info(page), lambda i: i["stats"]["audioReceived"] > 0 and i["stats"]["marksEchoed"] > 0),
        "answer audio received and its marks echoed",
    )
    assert info["stats"]["framesSent"] > 0
    assert info["sessionId"]

    await page.page.click("#call-hangup")
    await page.page.wait_for_selector('#call-panel[data-status="ended"]', timeout=15_000)
    await page.wait_for_text("#call-status", "Call ended")
    assert await page.page.is_visible("#voice-btn")
    # Hang up went away with the call: focus is back on Voice, ready for the next one.
    assert await page.page.evaluate("() => document.activeElement.id") == "voice-btn"
    # The stand-in's Realtime socket closed with the call, and the other tab may call again.
    await eventually(lambda: all(s["closed_at"] for s in standin.realtime_sessions()),
                     "the stand-in's Realtime sockets closed", 15)
    await other.wait_for("() => !document.getElementById('voice-btn').disabled", timeout=15_000)
    await other.wait_for("() => document.getElementById('voice-live').hidden", timeout=15_000)
    await page.screenshot("voice-call-ended")
    page.assert_clean()
    other.assert_clean()
    late.assert_clean()


async def test_a_refused_microphone_says_so_and_opens_no_socket(
    delegate: DelegateFactory, denying_browser: Browser
) -> None:
    sys_ = await delegate()
    page = await open_in(denying_browser, sys_, "voice-denied", width=390, height=844)  # a phone
    box = await page.page.locator("#voice-btn").bounding_box()
    assert box is not None and box["width"] >= 44 and box["height"] >= 44
    sockets = call_sockets(page)
    await page.page.click("#voice-btn")
    await page.page.wait_for_selector('#call-panel[data-status="ended"][data-error="mic_denied"]', timeout=15_000)
    await page.wait_for_text("#call-status", DENIED)
    assert await page.page.get_attribute("#call-status", "role") == "alert"
    assert sockets == []
    assert await page.page.is_visible("#voice-btn")
    close = await page.page.locator("#call-dismiss").bounding_box()
    assert close is not None and close["height"] >= 44
    await page.screenshot("voice-mic-denied")
    page.assert_clean()


async def heard_and_answered(page: ChatPage, standin: StandinProcess, timeout: float = 45.0) -> None:
    """The question and the answer were captioned; else what the page and the stand-in saw."""
    try:
        await page.wait_for(SAW_CAPTIONS, [QUESTION, ANSWER], timeout=int(timeout * 1000))
    except PlaywrightTimeout:
        seen = await page.page.evaluate("() => (window.__captionsSeen || []).slice(-6)")
        sessions = [
            {"events": [e.get("type") for e in s["events"]][-30:], "sent": s["sent"][-30:], "closed": s["closed_at"]}
            for s in standin.realtime_sessions()
        ]
        raise AssertionError(f"no captions: seen {seen}; call {await call_info(page)}; stand-in {sessions}") from None


async def captions_gone(page: ChatPage, timeout: float = 30.0) -> None:
    """Every caption gave way to its committed message (a deadline, not a pause)."""
    left: list[dict[str, Any]] = []

    async def gone() -> bool:
        left[:] = await page.page.eval_on_selector_all(
            "#voice-captions article.caption",
            "nodes => nodes.map(n => ({role: n.dataset.role, final: n.dataset.final, text: n.textContent}))",
        )
        return not left

    try:
        await eventually(gone, "every caption to give way", timeout)
    except AssertionError:
        messages = [m for m in await page.messages() if m["channel"] == "browser_voice"]
        raise AssertionError(f"captions still shown: {left}; committed: {messages}") from None


async def _when(value: Awaitable[Any], ok: Callable[[Any], bool]) -> Any:
    got = await value
    return got if got is not None and ok(got) else None
