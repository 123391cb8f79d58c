"""A phone call end to end: the test plays Twilio, every service is a real process.

Twilio's part: a signed ``POST /twiml``, then the Media Stream socket ``/call`` (signed
handshake, ``connected``, ``start`` with the TwiML's parameters), caller speech rendered by
espeak-ng to µ-law and sent at real-time pace, answer audio played at 8 bytes/ms with every
mark echoed when reached, ``clear`` honoured, ``stop``. The OpenAI stand-in plays the Realtime
model (energy VAD, scripted transcripts and answers, audio paced in real time) and the
Responses model for the chat turns; what each model was sent is read from its records.

The seams checked: a fact told by chat, and the capsule, are in the call's first
``session.update`` (text -> voice); the next chat turn starts a fresh working context that
carries the call's turns (voice -> text). The helpers here are shared with
test_voice_failures.py.
"""

import asyncio
import base64
import time
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import websockets

from delegate.contracts.events import ContextCapsule, make_event
from tests.agent.chat import ChatClient, api, timeline
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import Probe, input_texts, response_bodies
from tests.support.speech import phone_audio
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.twilio_media import BYTES_PER_MS, FakeTwilioCall, new_sid
from tests.support.twilio_sign import twilio_signature
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AUTH_TOKEN = "e2e_twilio_auth_token_0123"
# Twilio reaches the gateway through a public https address; the test calls 127.0.0.1 directly
# and signs over the public URLs, as a TLS-terminating proxy in front of the gateway would see it.
PUBLIC = "https://delegate.example.test"
OWNER = "+15550001111"
TWILIO_NUMBER = "+15550002222"
SERVICES = ("ledger", "agent", "inner-plane", "voice", "gateway")

CAPSULE = "CAPSULE-PHONE-9: the owner drinks green tea and likes short answers."
FACT = "My sister's name is Ingrid."
QUESTION = "What is my sister called?"
BARGE_IN = "Stop, thank you."
# Long enough for the stand-in's clamp (8 s of audio): the caller cuts in long before its end.
LONG_ANSWER = (
    "Your sister is called Ingrid, as you told me in the chat earlier today, and I will remember "
    "that for every conversation we have from now on, on every channel."
)
SHORT_ANSWER = "Okay, I will stop."


def voice_env(**extra: str) -> dict[str, str]:
    return {
        "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
        "OWNER_PHONE": OWNER,
        "PUBLIC_BASE_URL": PUBLIC,
        **extra,
    }


@dataclass(frozen=True)
class Stream:
    """The ``<Connect><Stream>`` of a TwiML answer."""

    url: str
    params: dict[str, str]


def call_params(call_sid: str, caller: str = OWNER) -> dict[str, str]:
    """What Twilio posts when a call comes in (twilio-email-wire.md §1.1)."""
    return {
        "AccountSid": "AC" + "c" * 32, "ApiVersion": "2010-04-01", "CallSid": call_sid,
        "CallStatus": "ringing", "Direction": "inbound", "From": caller, "To": TWILIO_NUMBER,
        "Caller": caller, "Called": TWILIO_NUMBER,
    }


async def post_twiml(
    system: System, call_sid: str, *, caller: str = OWNER, signature: str | None = None
) -> httpx.Response:
    """The incoming-call webhook; signed over the public URL unless ``signature`` is given ("" = none)."""
    params = call_params(call_sid, caller)
    if signature is None:
        signature = twilio_signature(AUTH_TOKEN, PUBLIC + "/twiml", params)
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if signature:
        headers["X-Twilio-Signature"] = signature
    async with httpx.AsyncClient(base_url=system.http, timeout=20.0) as http:
        return await http.post("/twiml", content=urlencode(params), headers=headers)


def twiml_root(reply: httpx.Response) -> ET.Element:
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith(("text/xml", "application/xml"))
    root = ET.fromstring(reply.text)
    assert root.tag == "Response"
    return root


def stream_of(reply: httpx.Response) -> Stream:
    root = twiml_root(reply)
    stream = root.find("./Connect/Stream")
    assert stream is not None, reply.text
    params = {p.attrib["name"]: p.attrib["value"] for p in stream.findall("Parameter")}
    assert set(params) >= {"session", "token"}, params
    # The apology after </Connect> plays only if our side closes the stream.
    assert [child.tag for child in root] == ["Connect", "Say"]
    return Stream(stream.attrib["url"], params)


async def start_call(system: System, call_sid: str | None = None) -> tuple[FakeTwilioCall, Stream]:
    """Twilio's part up to a live stream: the webhook, then the signed socket with connected + start."""
    call_sid = call_sid or new_sid("CA")
    stream = stream_of(await post_twiml(system, call_sid))
    assert stream.url == "wss://delegate.example.test/call"
    call = FakeTwilioCall(url=f"{system.ws}/call", signed_url=stream.url, auth_token=AUTH_TOKEN, call_sid=call_sid)
    await call.open(stream.params)
    return call, stream


async def keep_line_open(call: FakeTwilioCall, check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Wait for ``check()`` while the caller's line keeps sending silence, as Twilio's does."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if call.closed.is_set():
            raise AssertionError(f"the call ended while waiting for {what}; close code {call.close_code}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        try:
            await call.silence(100)
        except websockets.ConnectionClosed:
            await call.wait_closed(5)  # the server hung up: the reader notes it, check() decides
    return value


def media_count(call: FakeTwilioCall) -> int:
    return len(call.frames("media"))


def responses_done(rt_standin: StandinProcess) -> int:
    """How many responses the newest Realtime session has finished (completed or cancelled)."""
    sessions = rt_standin.realtime_sessions()
    return sum(1 for s in sessions[-1]["sent"] if s["type"] == "response.done") if sessions else 0


async def hear_everything(call: FakeTwilioCall, rt_standin: StandinProcess, responses: int, what: str,
                          timeout: float = 30.0) -> None:
    """Until the model finished its ``responses``-th answer and the caller heard all of it."""
    def done() -> bool:
        sent = [f["mark"]["name"] for f in call.frames("mark")]
        return (call.queued_ms == 0 and set(sent) <= set(call.marks_echoed)
                and responses_done(rt_standin) >= responses)

    await keep_line_open(call, done, what, timeout)


def item_of_mark(name: str) -> str:
    return name.rsplit(":", 1)[0]


def media_items(received: list[dict[str, Any]]) -> list[str | None]:
    """For each media frame, the answer item it belongs to: the item of the mark that follows it."""
    owners: list[str | None] = []
    pending = 0
    for frame in received:
        if frame.get("event") == "media":
            owners.append(None)
            pending += 1
        elif frame.get("event") == "mark":
            item = item_of_mark(frame["mark"]["name"])
            for i in range(len(owners) - pending, len(owners)):
                owners[i] = item
            pending = 0
    return owners


async def wait_ledger(system: System, check: Callable[[list[dict[str, Any]]], Any], what: str,
                      timeout: float = 30.0) -> Any:
    history: list[dict[str, Any]] = []

    async def found() -> Any:
        history[:] = await timeline(system)
        return check(history)

    return await eventually(found, what, timeout, interval=0.2, explain=lambda: "last events: " + str(
        [(e["kind"], e.get("role"), e.get("channel")) for e in history[-12:]]))


async def voice_released(system: System) -> None:
    """Until /api/state says no call holds the voice lock. The voice service releases it once the
    call's last events are committed, so just after the span.closed a test may have seen."""

    async def idle() -> bool:
        async with api(system) as http:
            return (await http.get("/api/state")).json()["voice"]["active"] is False

    await eventually(idle, "the voice lock released after the call", 15, interval=0.1)


def span_events(history: list[dict[str, Any]], span_id: str) -> list[dict[str, Any]]:
    return [e for e in history if e.get("span_id") == span_id]


def phone_span_id(history: list[dict[str, Any]], session_id: str) -> str | None:
    started = [e for e in history if e["kind"] == "session.started" and e["payload"]["session_id"] == session_id]
    return started[0]["span_id"] if started else None


def closed_span(system_history: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]] | None:
    span = phone_span_id(system_history, session_id)
    if span is None:
        return None
    events = span_events(system_history, span)
    return events if events and events[-1]["kind"] == "span.closed" else None


def realtime_session(rt_standin: StandinProcess, index: int = -1) -> dict[str, Any]:
    sessions = rt_standin.realtime_sessions()
    assert sessions, "the Realtime stand-in saw no session"
    return dict(sessions[index])


def first_session_update(session: dict[str, Any]) -> dict[str, Any]:
    updates = [e for e in session["events"] if e.get("type") == "session.update"]
    assert updates, f"no session.update in {[e.get('type') for e in session['events']][:10]}"
    return dict(updates[0]["session"])


async def test_a_call_knows_the_chat_is_cut_off_by_the_caller_and_lands_in_the_timeline(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]],  # noqa: F811
    standin: StandinProcess,
) -> None:
    system = make_system(**voice_env()).start(*SERVICES)
    probe: Probe = await probe_for(system)
    chat = await ChatClient.open(system)
    call: FakeTwilioCall | None = None
    try:
        # ---- before the call: a capsule, then a fact told by chat --------------------------
        first = await chat.answer(await chat.send("I drink green tea, by the way."))
        await probe.append(make_event(
            ContextCapsule(text=CAPSULE, through_seq=first["seq"], through_event_id=first["id"], reason="test"),
            conversation_id=first["conversation_id"], span_id=None, channel="inner",
        ))
        await chat.wait_for(lambda: [s for s in chat.of_type("state") if s["capsule"]["active"]], "the capsule")
        told = await chat.answer(await chat.send(FACT))
        assert told["kind"] == "message"

        # ---- the call: greeting, a question, the answer cut off by the caller --------------
        standin.realtime_script(
            {"transcript": QUESTION, "answer": LONG_ANSWER},
            {"transcript": BARGE_IN, "answer": SHORT_ANSWER},
        )
        call, stream = await start_call(system)
        session_id = stream.params["session"]
        await hear_everything(call, standin, 1, "the greeting to play")
        greeting_frames = media_count(call)
        heard_before_answer = len(call.played)

        await call.speak(phone_audio(QUESTION))
        await keep_line_open(call, lambda: media_count(call) > greeting_frames, "the answer's first audio")
        # Let the caller hear a little over a second of it, then talk over it.
        await keep_line_open(call, lambda: len(call.played) - heard_before_answer >= 1200 * BYTES_PER_MS,
                             "a second of the answer to play")
        clears_before = call.clears
        talking = asyncio.create_task(call.speak(phone_audio(BARGE_IN)))
        await call.wait_for(lambda c: c.clears > clears_before, timeout=10, what="the clear")
        heard_ms = (len(call.played) - heard_before_answer) / BYTES_PER_MS  # nothing plays after a clear
        clear_index = max(i for i, r in enumerate(call.received) if r.frame["event"] == "clear")
        await talking
        await hear_everything(call, standin, 3, "the answer to the interruption")
        await call.hang_up()

        # ---- what the model side saw: barge-in and truncation ------------------------------
        rt = realtime_session(standin)
        [cut] = rt["truncations"]
        sent_ms = float(cut["audio_sent_ms"])
        frames = [r.frame for r in call.received]
        owners = media_items(frames)
        media = [f for f in frames if f.get("event") == "media"]
        chunks = [f for f, owner in zip(media, owners, strict=True) if owner == cut["item_id"]]
        assert chunks, "no audio of the cut answer reached the caller"
        chunk_ms = max(len(base64.b64decode(f["media"]["payload"])) for f in chunks) / BYTES_PER_MS
        # Voice knows what played only from mark echoes, at most one chunk (plus a player tick
        # and the echo's trip) behind what the caller heard: audio_end_ms = min(sent, played + 50).
        assert heard_ms >= 1200
        expected = min(sent_ms, heard_ms + 50)
        assert expected - chunk_ms - 80 <= cut["audio_end_ms"] <= expected + 1, (cut, heard_ms, chunk_ms)
        # Not one frame of the cut answer after the clear.
        after_clear = owners[len([f for f in frames[:clear_index] if f.get("event") == "media"]):]
        assert cut["item_id"] not in after_clear
        assert after_clear and all(owner is not None for owner in after_clear)
        assert not [f for f in frames[clear_index:] if f.get("event") == "mark"
                    and item_of_mark(f["mark"]["name"]) == cut["item_id"]]

        # ---- the text -> voice seam: the first session.update -----------------------------
        config = first_session_update(rt)
        assert FACT in config["instructions"] and CAPSULE in config["instructions"]
        assert config["type"] == "realtime" and config["output_modalities"] == ["audio"]
        assert config["audio"]["input"]["format"] == {"type": "audio/pcmu"}
        assert config["audio"]["output"]["format"] == {"type": "audio/pcmu"}
        assert config["audio"]["input"]["transcription"]
        assert config["audio"]["input"]["turn_detection"]["interrupt_response"] is True
        assert config["truncation"] == {"type": "retention_ratio", "retention_ratio": 0.8}

        # ---- the ledger: one phone span, both sides' words in spoken order ----------------
        events = await wait_ledger(system, lambda h: closed_span(h, session_id), "the call's span to close")
        kinds = [e["kind"] for e in events]
        assert kinds[:2] == ["span.opened", "session.started"] and kinds[-2:] == ["session.ended", "span.closed"]
        assert events[0]["payload"]["type"] == "phone" and events[0]["channel"] == "phone"
        started, ended = events[1]["payload"], events[-2]["payload"]
        assert started["type"] == "phone" and started["caller"] == OWNER and started["call_sid"] == call.call_sid
        assert ended["reason"] == "caller_hangup" and ended["session_id"] == session_id
        said = [e for e in events if e["kind"] == "message"]
        assert all(e["channel"] == "phone" for e in said)
        assert [e["role"] for e in said] == ["assistant", "user", "assistant", "user", "assistant"]
        greeting, asked, cut_answer, interrupted_by, short = said
        assert greeting["payload"]["text"] and greeting["payload"]["meta"].get("greeting") is True
        assert asked["payload"]["text"] == QUESTION and interrupted_by["payload"]["text"] == BARGE_IN
        assert short["payload"]["text"] == SHORT_ANSWER and not short["payload"]["meta"].get("interrupted")
        meta = cut_answer["payload"]["meta"]
        assert meta["interrupted"] is True and meta["item_id"] == cut["item_id"] and meta["session_id"] == session_id
        assert cut["audio_end_ms"] == int(min(sent_ms, meta["played_ms"] + 50))
        assert LONG_ANSWER.startswith(cut_answer["payload"]["text"]) and cut_answer["payload"]["text"]
        assert [e["id"] for e in said] == [e["id"] for e in sorted(said, key=lambda e: e["seq"])]

        # ---- the voice -> text seam: the next chat turn -----------------------------------
        # A call's end refreshes the capsule (the inner plane folds what was said into it), and
        # the next turn carries the call in that capsule, not verbatim (design: recent turns not
        # already covered by it). Waited for: a turn sent before the refresh commits would carry
        # the call verbatim instead, which only the order of two processes' work decides.
        last_said = said[-1]["seq"]
        [capsule] = await wait_ledger(
            system, lambda h: [e for e in h if e["kind"] == "context.capsule"
                               and (e["payload"].get("through_seq") or 0) >= last_said][-1:],
            "the capsule refreshed with the call")
        [folded] = [b for b in response_bodies(standin) if any(
            "TURNS SINCE THE PREVIOUS CAPSULE" in t and QUESTION in t for t in input_texts(b))]
        lines = "\n".join(input_texts(folded))
        assert f"[phone] user: {QUESTION}" in lines and f"[phone] user: {BARGE_IN}" in lines
        assert f"[phone] assistant: {SHORT_ANSWER}" in lines and CAPSULE in lines
        after = await chat.answer(await chat.send("What did we just talk about on the phone?"))
        assert after["kind"] == "message" and after["channel"] == "text"
        [body] = [b for b in response_bodies(standin)
                  if "What did we just talk about on the phone?" in input_texts(b)]
        assert "previous_response_id" not in body
        assert capsule["payload"]["text"] in body["instructions"]
        assert input_texts(body) == ["What did we just talk about on the phone?"]  # the rest is covered
        await voice_released(system)
    finally:
        if call is not None:
            await call.close()
        await chat.close()
