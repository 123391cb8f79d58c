"""call_owner: a prepared phone call, then Twilio dialling into it (the stand-in's Calls API)."""

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.voice import CallOwner
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually
from tests.voice.peer import events_until, session_updates

OWNER = "+15550001111"
PUBLIC = "https://delegate.example.test"


@pytest.fixture
def twilio() -> Iterator[TwilioStandin]:
    tw = TwilioStandin().start()
    yield tw
    tw.stop()


async def test_call_owner_places_one_twilio_call_into_a_prepared_call(
    make_system: Callable[..., System], connect: Any, twilio: TwilioStandin, standin: StandinProcess
) -> None:
    system = make_system("voice", PUBLIC_BASE_URL=PUBLIC, **twilio.env(owner_phone=OWNER))
    bus, caller = await connect(system)
    ask = CallOwner(request_id="call-1", reason="The nightly build failed.")
    reply = await bus.request(topics.VOICE_CALL_OWNER, ask)
    assert reply.ok and reply.call_sid and reply.call_sid.startswith("CA") and reply.session_id
    again = await bus.request(topics.VOICE_CALL_OWNER, ask)  # a retried tool call
    assert again.call_sid == reply.call_sid and len(twilio.calls) == 1

    call = twilio.calls[0]
    assert call["to"] == OWNER and call["from"] == twilio.phone_number
    assert call["status_callback"] == f"{PUBLIC}/call/status?session={reply.session_id}"
    twiml = call["twiml"]
    assert '<Stream url="wss://delegate.example.test/call">' in twiml
    params = dict(re.findall(r'<Parameter name="(\w+)" value="([^"]+)" />', twiml))
    assert params["session"] == reply.session_id
    assert twiml.index("</Connect>") < twiml.index("<Say>")  # the apology, if our side drops the stream

    update = (await eventually(lambda: session_updates(standin), "the session.update"))[0]
    assert "The nightly build failed." in update["instructions"]

    caller.session_id = reply.session_id
    assert (await caller.attach(token=params["token"])).ok  # Twilio's stream claims it
    await caller.hang_up("completed")  # the call status callback, relayed by the gateway
    events = await events_until(bus, reply.session_id, "span.closed")
    started = next(e for e in events if e.kind == "session.started")
    assert started.payload["direction"] == "outbound" and started.payload["caller"] == OWNER
    ended = next(e for e in events if e.kind == "session.ended")
    assert ended.payload["reason"] == "hangup" and ended.payload["detail"] == "completed"


async def test_call_owner_without_twilio_is_unavailable(make_system: Callable[..., System], connect: Any) -> None:
    system = make_system("voice")
    bus, _ = await connect(system)
    reply = await bus.request(topics.VOICE_CALL_OWNER, CallOwner(request_id="call-2"))
    assert not reply.ok and reply.reason == "unavailable" and reply.call_sid is None
