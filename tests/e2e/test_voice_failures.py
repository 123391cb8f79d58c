"""Phone calls refused and phone calls broken, end to end with every service a real process.

Refusals: a second call while one is live is rejected busy; a forged or unsigned webhook and an
unsigned or forged stream handshake get 403. Failures: the Realtime socket dropping mid-answer
and the voice process SIGKILLed mid-call each end the call on our side (the gateway closes
Twilio's socket, so Twilio plays the TwiML's apology instead of leaving the caller in silence),
with what was said so far in the ledger; after the kill, a restarted voice service takes the
next call and closes the dead session's span.
"""

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from tests.agent.chat import api, timeline
from tests.agent.conftest import make_system  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import agent_env, dump_on_failure
from tests.e2e.test_phone_call import (
    AUTH_TOKEN,
    PUBLIC,
    QUESTION,
    SERVICES,
    call_params,
    hear_everything,
    keep_line_open,
    media_count,
    phone_span_id,
    post_twiml,
    span_events,
    start_call,
    stream_of,
    twiml_root,
    voice_env,
    voice_released,
    wait_ledger,
)
from tests.support.speech import phone_audio
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.twilio_media import FakeTwilioCall, new_sid
from tests.support.twilio_sign import twilio_signature
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LONG_ANSWER = (
    "Here is a long answer that keeps going for several seconds, so that something can go "
    "wrong while it is still being spoken to the caller on the phone line."
)


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def started_system(tmp_path_factory: pytest.TempPathFactory, shared_standin: StandinProcess) -> Iterator[System]:
    # shared_standin (tests/conftest.py) is reset by ``phone_system`` once the previous call has ended
    system = System(tmp_path_factory.mktemp("phone"), env=agent_env(shared_standin, **voice_env()))
    try:
        yield system.start(*SERVICES)
    finally:  # a start that fails (not ready in time) must not leave its processes running
        system.stop()


@pytest.fixture
async def phone_system(
    started_system: System, shared_standin: StandinProcess, request: pytest.FixtureRequest
) -> AsyncIterator[System]:
    """Every service started once for the tests that leave it whole: each gets it back with no
    call in progress and a reset stand-in (calls are told apart by their session ids)."""
    async def no_call() -> bool:
        async with api(started_system) as http:
            return (await http.get("/api/state")).json()["voice"]["active"] is False

    # A previous test's last call may still be ending (or, prepared, timing out).
    await eventually(no_call, "the previous test's call to end", 40, interval=0.1)
    shared_standin.reset()
    yield started_system
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        dump_on_failure(started_system, shared_standin, ROOT / "test-output" / "logs" / request.node.name)


def user_words(events: list[dict[str, Any]]) -> list[str]:
    return [e["payload"]["text"] for e in events if e["kind"] == "message" and e["role"] == "user"]


def session_end(history: list[dict[str, Any]], session_id: str) -> dict[str, Any] | None:
    ended = [e for e in history if e["kind"] == "session.ended" and e["payload"]["session_id"] == session_id]
    return ended[0] if ended else None


async def test_forged_and_unsigned_webhooks_and_streams_get_403(
    phone_system: System, shared_standin: StandinProcess
) -> None:
    system = phone_system
    # Webhooks that Twilio did not sign, or signed with another account's token.
    unsigned = await post_twiml(system, new_sid("CA"), signature="")
    assert unsigned.status_code == 403, unsigned.text
    params = call_params(new_sid("CA"))
    forged = await post_twiml(
        system, params["CallSid"], signature=twilio_signature("not-the-token", PUBLIC + "/twiml", params)
    )
    assert forged.status_code == 403, forged.text
    # Signed for another URL: the signature covers where Twilio sent it.
    elsewhere = await post_twiml(
        system, params["CallSid"], signature=twilio_signature(AUTH_TOKEN, PUBLIC + "/sms", params)
    )
    assert elsewhere.status_code == 403, elsewhere.text

    # Stream handshakes that Twilio did not sign: refused before the socket opens.
    for signature in ("", twilio_signature("not-the-token", PUBLIC.replace("https", "wss") + "/call", {})):
        headers = {"X-Twilio-Signature": signature} if signature else {}
        with pytest.raises(InvalidStatus) as refused:
            async with websockets.connect(f"{system.ws}/call", additional_headers=headers):
                pass
        assert refused.value.response.status_code == 403

    # None of it reached the voice service: no session was prepared, nothing is in the ledger.
    async with api(system) as http:
        assert (await http.get("/api/state")).json()["voice"]["active"] is False
    assert not shared_standin.realtime_sessions()
    history = await timeline(system)
    assert not [e for e in history if e["kind"] in ("session.started", "span.opened") and e["channel"] == "phone"]


async def test_the_realtime_socket_dropping_mid_answer_ends_the_call_cleanly(
    phone_system: System, shared_standin: StandinProcess
) -> None:
    system = phone_system
    call: FakeTwilioCall | None = None
    try:
        shared_standin.realtime_script({"transcript": QUESTION, "answer": LONG_ANSWER, "disconnect_after_deltas": 3})
        call, stream = await start_call(system)
        session_id = stream.params["session"]
        await hear_everything(call, shared_standin, 1, "the greeting")
        greeting_frames = media_count(call)
        await call.speak(phone_audio(QUESTION))
        await keep_line_open(call, lambda: media_count(call) > greeting_frames, "the answer to start")
        # Our side ends the call: Twilio then plays the apology after </Connect>.
        await keep_line_open(call, lambda: call.closed.is_set(), "the gateway to close the stream", timeout=15)

        history = await wait_ledger(system, lambda h: session_end(h, session_id) and h, "session.ended")
        ended = session_end(history, session_id)
        assert ended is not None and ended["payload"]["reason"] == "realtime_lost"
        span = phone_span_id(history, session_id)
        assert span is not None
        events = await wait_ledger(
            system, lambda h: (e := span_events(h, span)) and e[-1]["kind"] == "span.closed" and e, "span.closed"
        )
        assert QUESTION in user_words(events)
        cut = [e for e in events if e["kind"] == "message" and e["role"] == "assistant"
               and e["payload"]["meta"].get("interrupted")]
        assert all(LONG_ANSWER.startswith(e["payload"]["text"]) for e in cut)
        await voice_released(system)
    finally:
        if call is not None:
            await call.close()


async def test_a_second_call_while_one_is_live_is_rejected_busy(
    phone_system: System, shared_standin: StandinProcess
) -> None:
    system = phone_system
    call: FakeTwilioCall | None = None
    try:
        # One call at a time: a second one while the first is live is rejected busy.
        call, stream = await start_call(system)
        await hear_everything(call, shared_standin, 1, "the greeting")
        second = twiml_root(await post_twiml(system, new_sid("CA")))
        assert [(c.tag, c.attrib) for c in second] == [("Reject", {"reason": "busy"})]
        async with api(system) as http:
            voice = (await http.get("/api/state")).json()["voice"]
        assert voice["active"] is True and voice["session_id"] == stream.params["session"]
        assert voice["kind"] == "phone" and voice["status"] == "live"

        # The first call's token is spent: replaying it on a new stream is refused.
        replay = FakeTwilioCall(url=f"{system.ws}/call", signed_url=stream.url, auth_token=AUTH_TOKEN)
        await replay.open(stream.params)
        assert await replay.wait_closed(10) == 1008
        assert not replay.frames("media")
        await replay.close()

        # The first call is unharmed, and once it is over the next call gets through.
        assert not call.closed.is_set()
        await call.hang_up()
        session_id = stream.params["session"]
        await wait_ledger(system, lambda h: session_end(h, session_id), "the first call to end")
        async def connected() -> bool:  # the lock is released as the session's last step, after session.ended
            return bool(twiml_root(await post_twiml(system, new_sid("CA")))[0].tag == "Connect")

        await eventually(connected, "the next call to get through", 20, interval=0.1)
    finally:
        if call is not None:
            await call.close()


async def test_a_killed_voice_process_ends_the_call_and_its_successor_closes_the_span(
    make_system: Callable[..., System], standin: StandinProcess  # noqa: F811
) -> None:
    # A short lock ttl: the dead process's lock frees itself soon after the kill.
    system = make_system(**voice_env(VOICE_LOCK_TTL_S="3")).start(*SERVICES, separate=("voice",))
    call: FakeTwilioCall | None = None
    try:
        standin.realtime_script({"transcript": QUESTION, "answer": LONG_ANSWER})
        call, stream = await start_call(system)
        session_id = stream.params["session"]
        await hear_everything(call, standin, 1, "the greeting")
        greeting_frames = media_count(call)
        await call.speak(phone_audio(QUESTION))
        await keep_line_open(call, lambda: media_count(call) > greeting_frames + 3, "the answer to play")
        await wait_ledger(system, lambda h: QUESTION in user_words(h), "the caller's words in the ledger")

        system.kill("voice")
        # The gateway hears no heartbeat for VOICE_LOST_AFTER_S (3 s) and hangs up on Twilio.
        await keep_line_open(call, lambda: call.closed.is_set(), "the gateway to close the stream", timeout=15)

        system.procs["voice"].start()
        system.wait_ready(["voice"])
        async def through() -> httpx.Response | None:  # busy until the dead holder's lock has expired
            reply = await post_twiml(system, new_sid("CA"))
            root = twiml_root(reply)
            if root[0].tag == "Connect":
                return reply
            assert [(c.tag, c.attrib) for c in root] == [("Reject", {"reason": "busy"})]
            return None

        second_stream = stream_of(await eventually(through, "the dead holder's lock to expire", 20, interval=0.2))
        call2 = FakeTwilioCall(url=f"{system.ws}/call", signed_url=second_stream.url, auth_token=AUTH_TOKEN)
        await call2.open(second_stream.params)
        try:
            await hear_everything(call2, standin, 1, "the new call's greeting")
            await call2.hang_up()
        finally:
            await call2.close()

        # The dead session's span was closed by its successor; what was said survived.
        history = await wait_ledger(
            system, lambda h: session_end(h, second_stream.params["session"]) and h, "the new call to end"
        )
        ended = session_end(history, session_id)
        assert ended is not None and ended["payload"]["reason"] == "voice_lost"
        span = phone_span_id(history, session_id)
        assert span is not None
        events = span_events(history, span)
        assert events[0]["kind"] == "span.opened" and events[-1]["kind"] == "span.closed"
        assert QUESTION in user_words(events)
        new_span = phone_span_id(history, second_stream.params["session"])
        assert new_span is not None and new_span != span
        stale_closed = next(i for i, e in enumerate(history) if e["kind"] == "span.closed" and e["span_id"] == span)
        new_opened = next(i for i, e in enumerate(history) if e["kind"] == "span.opened" and e["span_id"] == new_span)
        assert stale_closed < new_opened
    finally:
        if call is not None:
            await call.close()
