"""call_owner when the owner answers late, or a machine does: real voice, gateway, pollers and ledger
processes, the Twilio stand-in ringing the call and posting its signed status and AMD callbacks to
the gateway, the test playing the stream's side over the bus once the call is answered."""

import asyncio
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from delegate.contracts import streams, topics
from delegate.contracts.messages import GetRequest
from delegate.contracts.voice import AudioOut, CallOwner
from delegate.runtime.bus import Bus
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually
from tests.voice.peer import Caller, events_until, ledger_events

OWNER = "+15550001111"
PUBLIC = "https://delegate.example.test"
REASON = "The nightly build failed."
SMS = f"I called you and reached your voicemail. {REASON}"


@pytest.fixture
def twilio() -> Iterator[TwilioStandin]:
    tw = TwilioStandin().start()
    yield tw
    tw.stop()


def stream_params(twiml: str) -> dict[str, str]:
    return dict(re.findall(r'<Parameter name="(\w+)" value="([^"]+)" />', twiml))


def said_exactly(standin: StandinProcess) -> list[str]:
    """The instructions of every ``response.create`` that asked the model to say given words."""
    return [
        e["response"]["instructions"] for s in standin.realtime_sessions() for e in s["events"]
        if e.get("type") == "response.create" and "Say exactly" in (e.get("response") or {}).get("instructions", "")
    ]


async def drained(bus: Bus, *durables: str) -> bool:
    """Every message on CHANNELS for these consumers was handled and acked."""
    for durable in durables:
        info = await bus.js.consumer_info("CHANNELS", durable)
        if info.num_pending or info.num_ack_pending:
            return False
    return True


async def place_call(system: System, bus: Bus, twilio: TwilioStandin, request_id: str) -> tuple[str, str, str]:
    """call_owner -> (call sid, call id, stream token), with the call's options checked."""
    reply = await bus.request(topics.VOICE_CALL_OWNER, CallOwner(request_id=request_id, reason=REASON))
    assert reply.ok and reply.call_sid and reply.session_id, reply
    call = twilio.call(reply.call_sid)
    assert call["timeout"] == 60
    assert call["status_callback_event"] == ["initiated", "ringing", "answered", "completed"]
    assert call["machine_detection"] == "DetectMessageEnd" and call["async_amd"] == "true"
    assert call["machine_detection_timeout"] in (3, 30)  # VOICE_CALL_AMD_TIMEOUT_S (3 in test_call_screening)
    assert call["async_amd_status_callback"] == f"{PUBLIC}/call/amd?session={reply.session_id}"
    return reply.call_sid, reply.session_id, stream_params(call["twiml"])["token"]


async def answered_call(
    system: System, connect: Any, twilio: TwilioStandin, request_id: str
) -> tuple[Bus, Caller, str, str]:
    """A call placed, rung and answered at once, its stream attached: (bus, caller, call sid, call id)."""
    twilio.callbacks_to(system.http)
    bus, caller = await connect(system)
    call_sid, session_id, token = await place_call(system, bus, twilio, request_id)
    assert await asyncio.to_thread(twilio.ring, call_sid, 0.5)
    caller.session_id = session_id
    assert (await caller.attach(token=token)).ok
    return bus, caller, call_sid, session_id


async def test_an_owner_answering_after_the_prepare_timeout_talks(
    make_system: Callable[..., System], connect: Any, twilio: TwilioStandin
) -> None:
    """Twilio rings the owner for up to 60 s (VOICE_CALL_RING_TIMEOUT_S, its Timeout); an answer
    after 45 s used to find the prepared call gone, ended "unclaimed" by the fixed 30 s
    VOICE_PREWARM_TIMEOUT_S, and the owner heard the apology. Scaled down so the test takes
    seconds: the prepare timeout is 2 s and the stand-in answers after 5 s (45 s against 30 s
    becomes 5 s against 2 s, both past the old fixed hold). The call is now held by Twilio's
    status: until the stream attaches (answered) or a status callback says the call is over,
    with the ring timeout only as the backstop."""
    system = make_system(  # the pollers own stream CHANNELS, where the AMD verdict travels
        "voice", "gateway", "pollers", PUBLIC_BASE_URL=PUBLIC, VOICE_PREWARM_TIMEOUT_S="2",
        **twilio.env(owner_phone=OWNER),
    )
    twilio.callbacks_to(system.http)
    bus, caller = await connect(system)
    call_sid, session_id, token = await place_call(system, bus, twilio, "late-1")

    assert await asyncio.to_thread(twilio.ring, call_sid, 5.0)  # initiated, ringing, 5 s, answered
    statuses = [p["CallStatus"] for url, p, code in twilio.callbacks_sent if code == 204]
    assert statuses == ["initiated", "ringing", "in-progress"]
    caller.session_id = session_id
    assert (await caller.attach(token=token)).ok  # Twilio runs the TwiML: the stream claims the call
    # Its AMD says a person answered: what they say is theirs, and answered (test_call_screening).
    assert (await asyncio.to_thread(twilio.answered_by, call_sid, "human")).status_code == 204
    await caller.say()
    await eventually(lambda: caller.of(AudioOut), "the model's answer to the owner")

    await asyncio.to_thread(twilio.end_call, call_sid)  # the owner hangs up: completed, via the gateway
    events = await events_until(bus, session_id, "span.closed")
    ended = next(e for e in events if e.kind == "session.ended")
    assert ended.payload["reason"] == "hangup" and ended.payload["detail"] == "completed"
    placed = next(e for e in events if e.kind == "call.placed")
    assert placed.id == f"call:{call_sid}" and placed.payload["reason"] == REASON
    assert any(e.kind == "message" and e.role == "assistant" for e in events)


async def test_a_call_nobody_answers_ends_at_once_and_the_owner_can_call_back(
    make_system: Callable[..., System], connect: Any, twilio: TwilioStandin
) -> None:
    """The other half of holding the call for the ring: Twilio's final no-answer status ends it
    then, not at the hold's backstop (here 20 s + the 60 s ring), so the voice lock is free and
    the owner calling back right after the missed call is connected, not refused busy."""
    system = make_system("voice", "gateway", PUBLIC_BASE_URL=PUBLIC, **twilio.env(owner_phone=OWNER))
    twilio.callbacks_to(system.http)
    bus, caller = await connect(system)
    call_sid, session_id, _ = await place_call(system, bus, twilio, "missed-1")

    await asyncio.to_thread(twilio.end_call, call_sid, "no-answer")  # its completed callback, via the gateway
    events = await events_until(bus, session_id, "span.closed", timeout=15)
    ended = next(e for e in events if e.kind == "session.ended")
    assert (ended.payload["reason"], ended.payload["detail"]) == ("hangup", "no-answer")
    assert not any(e.kind == "message" for e in events)  # nobody talked

    callback = await caller.prepare("phone", caller=OWNER)  # the owner calls back
    assert callback.ok, callback


async def test_a_machine_answer_leaves_a_voicemail_and_sends_one_sms(
    make_system: Callable[..., System], connect: Any, twilio: TwilioStandin, standin: StandinProcess
) -> None:
    system = make_system("voice", "gateway", "pollers", PUBLIC_BASE_URL=PUBLIC, **twilio.env(owner_phone=OWNER))
    bus, caller, call_sid, session_id = await answered_call(system, connect, twilio, "machine-1")

    # The greeting ended with a beep: Twilio's verdict, and the same verdict again (a retry).
    assert (await asyncio.to_thread(twilio.answered_by, call_sid, "machine_end_beep")).status_code == 204
    said = await eventually(lambda: said_exactly(standin), "the voicemail asked of the model")
    assert REASON in said[0]
    heard = await eventually(lambda: caller.of(AudioOut), "the voicemail's audio")
    assert heard
    # Once it played, voice hangs up over REST; Twilio's completed callback follows.
    await eventually(lambda: any(u.get("Status") == "completed" for u in twilio.call_updates), "the hang-up")
    events = await events_until(bus, session_id, "span.closed")
    voicemail = next(e for e in events if e.kind == "call.voicemail")
    assert voicemail.payload["action"] == "spoken" and voicemail.payload["answered_by"] == "machine_end_beep"
    assert REASON in voicemail.payload["text"]

    assert (await asyncio.to_thread(twilio.answered_by, call_sid, "machine_end_beep")).status_code == 204
    await eventually(lambda: twilio.bodies(to=OWNER), "the SMS")
    await _settled(bus, call_sid)
    assert twilio.bodies(to=OWNER) == [SMS]


async def test_with_voicemail_off_a_machine_answer_hangs_up_at_once_and_sends_one_sms(
    make_system: Callable[..., System], connect: Any, twilio: TwilioStandin, standin: StandinProcess
) -> None:
    """VOICE_CALL_ON_MACHINE=hangup: nothing is said to the machine; the call is ended over REST,
    the record says so, and the reason still reaches the owner by SMS, once."""
    system = make_system(
        "voice", "gateway", "pollers", PUBLIC_BASE_URL=PUBLIC, VOICE_CALL_ON_MACHINE="hangup",
        **twilio.env(owner_phone=OWNER),
    )
    bus, _, call_sid, session_id = await answered_call(system, connect, twilio, "machine-hangup")

    assert (await asyncio.to_thread(twilio.answered_by, call_sid, "machine_end_silence")).status_code == 204
    await eventually(lambda: any(u.get("Status") == "completed" for u in twilio.call_updates), "the hang-up")
    events = await events_until(bus, session_id, "span.closed")
    voicemail = next(e for e in events if e.kind == "call.voicemail")
    assert (voicemail.payload["action"], voicemail.payload["answered_by"]) == ("hung_up", "machine_end_silence")
    assert voicemail.payload["text"] == SMS
    ended = next(e for e in events if e.kind == "session.ended")
    assert ended.payload["detail"] == "a machine answered"
    await _settled(bus, call_sid)
    assert twilio.bodies(to=OWNER) == [SMS]
    assert said_exactly(standin) == []  # no voicemail was asked of the model


async def test_the_voicemail_sms_goes_once_across_a_sigkill_of_voice(
    make_system: Callable[..., System], connect: Any, twilio: TwilioStandin
) -> None:
    """Voice is killed mid-call, before the machine's verdict comes: the gateway keeps the verdict
    on CHANNELS, the restarted voice sends the SMS from the call.placed record and records the
    voicemail; a retried callback after that changes nothing."""
    system = make_system(
        "voice", "gateway", "pollers", fresh=True, PUBLIC_BASE_URL=PUBLIC, **twilio.env(owner_phone=OWNER)
    )
    bus, _, call_sid, _ = await answered_call(system, connect, twilio, "machine-kill")
    await wait_for_event(bus, f"call:{call_sid}")

    system.kill("voice")
    assert (await asyncio.to_thread(twilio.answered_by, call_sid, "machine_end_beep")).status_code == 204
    system.restart("voice")
    await eventually(lambda: twilio.bodies(to=OWNER), "the SMS after the restart", timeout=60)
    record = await wait_for_event(bus, f"voicemail-left:{call_sid}")
    assert record.payload["action"] == "hung_up" and record.payload["sms_id"] == f"voicemail:{call_sid}"

    assert (await asyncio.to_thread(twilio.answered_by, call_sid, "machine_end_beep")).status_code == 204
    await _settled(bus, call_sid)
    assert twilio.bodies(to=OWNER) == [SMS]
    kinds = [e.kind for e in await ledger_events(bus) if e.span_id == record.span_id]
    assert kinds.count("call.voicemail") == 1 and "span.closed" in kinds  # the dead call's span closed


async def wait_for_event(bus: Bus, event_id: str, timeout: float = 30.0) -> Any:
    async def get() -> Any:
        return (await bus.request(topics.LEDGER_GET, GetRequest(id=event_id))).event

    return await eventually(get, f"event {event_id} in the ledger", timeout, interval=0.1)


async def _settled(bus: Bus, call_sid: str) -> None:
    """The SMS was sent (its delivery recorded) and nothing is left for voice or the outbox."""
    await wait_for_event(bus, f"voicemail:{call_sid}:sent")
    await eventually(lambda: drained(bus, streams.VOICE_ANSWERED_BY, streams.POLLERS_SMS), "CHANNELS drained", 20,
                     interval=0.1)
