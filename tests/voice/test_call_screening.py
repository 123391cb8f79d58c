"""While Twilio's answering machine verdict is pending on a call Delegate placed, what the callee
says is held: not the owner's words on the timeline (nor memory's to extract), and not answered
by the model. Real voice, gateway, pollers and ledger processes; the Twilio stand-in posts the
signed AMD verdicts through the gateway, and the Realtime stand-in transcribes and answers."""

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from delegate.contracts.events import Event
from delegate.contracts.voice import AudioOut, TranscriptOut
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually
from tests.voice.peer import events_until, session_updates
from tests.voice.test_call_owner_answer import OWNER, PUBLIC, REASON, answered_call, said_exactly

MACHINE_GREETING = "Hi, you have reached Sam. Please leave a message after the tone."
OWNER_WORDS = "Hello? Who is this?"
ANSWER = "It is your assistant: the nightly build failed."


@pytest.fixture(scope="module")
def twilio() -> Iterator[TwilioStandin]:
    # One for the module: its address is in the services' settings, so the tests with the same
    # settings share one started System (make_system), each its own call (sid).
    tw = TwilioStandin().start()
    yield tw
    tw.stop()


def messages(events: list[Event]) -> list[tuple[str | None, str]]:
    return [(e.role, e.payload["text"]) for e in events if e.kind == "message"]


def first_audio(caller: Any) -> float:
    first: float = min(a.sent_at for a in caller.of(AudioOut))
    return first


def user_message_at(events: list[Event]) -> float:
    return next(e.ts for e in events if e.kind == "message" and e.role == "user").timestamp()


def asked(standin: StandinProcess) -> list[dict[str, Any]]:
    """The responses voice asked for (not those the model's VAD started by itself)."""
    return [e for s in standin.realtime_sessions() for e in s["events"] if e.get("type") == "response.create"]


def heard(caller: Any, text: str) -> bool:
    """The callee's words were transcribed (the model has them; the timeline may not)."""
    return any(t.role == "user" and t.final and t.text == text for t in caller.of(TranscriptOut))


async def test_a_machines_greeting_is_not_the_owners_words_and_is_not_answered(
    make_system: Callable[..., System], connect: Any, twilio: TwilioStandin, standin: StandinProcess
) -> None:
    """The machine's greeting, spoken while the verdict is pending, used to be written as a user
    message (the owner's words, extracted into memory) and answered by the model over the
    greeting; now it is held, and the machine verdict drops it: the timeline has the voicemail
    and its record, never the machine's words as the owner's."""
    system = make_system("voice", "gateway", "pollers", PUBLIC_BASE_URL=PUBLIC, **twilio.env(owner_phone=OWNER))
    standin.realtime_script({"transcript": MACHINE_GREETING})
    bus, caller, call_sid, session_id = await answered_call(system, connect, twilio, "screen-machine")

    await caller.say()  # the machine's greeting, then the beep's silence
    await eventually(lambda: heard(caller, MACHINE_GREETING), "the machine's greeting transcribed")
    assert (await asyncio.to_thread(twilio.answered_by, call_sid, "machine_end_beep")).status_code == 204
    said = await eventually(lambda: said_exactly(standin), "the voicemail asked of the model")
    assert REASON in said[0]
    events = await events_until(bus, session_id, "span.closed")

    assert not [text for role, text in messages(events) if role == "user"], messages(events)
    assistant = [text for role, text in messages(events) if role == "assistant"]
    assert len(assistant) == 1 and REASON in assistant[0], assistant  # the voicemail, nothing said to the machine
    voicemail = next(e for e in events if e.kind == "call.voicemail")
    assert voicemail.payload["action"] == "spoken"


@pytest.mark.parametrize("verdict", ["human", "unknown"])
async def test_an_owners_words_before_the_human_verdict_are_committed_and_answered_then(
    make_system: Callable[..., System], connect: Any, twilio: TwilioStandin, standin: StandinProcess, verdict: str
) -> None:
    """The owner speaks before Twilio has decided: nothing is answered or recorded yet; the
    "human" verdict (or "unknown": Twilio could not tell within its timeout) commits the words as
    the owner's, in order, and the model answers them."""
    system = make_system("voice", "gateway", "pollers", PUBLIC_BASE_URL=PUBLIC, **twilio.env(owner_phone=OWNER))
    standin.realtime_script(
        {"transcript": OWNER_WORDS, "answer": ANSWER}, {"transcript": "Thanks, bye.", "answer": "Bye."}
    )
    bus, caller, call_sid, session_id = await answered_call(system, connect, twilio, f"screen-{verdict}")

    await caller.say()
    await eventually(lambda: heard(caller, OWNER_WORDS), "the owner's words transcribed")

    verdict_at = time.time()
    assert (await asyncio.to_thread(twilio.answered_by, call_sid, verdict)).status_code == 204
    await eventually(lambda: caller.of(AudioOut), "the answer, once a human is known")
    await eventually(
        lambda: [t for t in caller.of(TranscriptOut) if t.role == "assistant" and t.final], "the answer's transcript"
    )
    # From then on the model answers by itself again: the held turn was the one voice asked for.
    await caller.say()
    await eventually(lambda: [t for t in caller.of(TranscriptOut) if t.text == "Bye."], "the next answer")
    turn_detection = [u["audio"]["input"]["turn_detection"] for u in session_updates(standin)]
    assert [t["create_response"] for t in turn_detection] == [False, True]
    assert len(asked(standin)) == 1
    await asyncio.to_thread(twilio.end_call, call_sid)
    events = await events_until(bus, session_id, "span.closed")
    assert messages(events) == [
        ("user", OWNER_WORDS),
        ("assistant", ANSWER),
        ("user", "Thanks, bye."),
        ("assistant", "Bye."),
    ]
    # Neither answered nor recorded before the verdict (the stand-in answers a turn at once).
    assert first_audio(caller) > verdict_at and user_message_at(events) > verdict_at


async def test_without_a_verdict_the_words_are_the_owners_after_twilios_amd_timeout(
    make_system: Callable[..., System], connect: Any, twilio: TwilioStandin, standin: StandinProcess
) -> None:
    """No AMD callback ever comes: past Twilio's own AMD timeout (MachineDetectionTimeout, here
    its minimum of 3 s) and the grace for its callback, the held words are the owner's."""
    system = make_system(
        "voice",
        "gateway",
        "pollers",
        PUBLIC_BASE_URL=PUBLIC,
        VOICE_CALL_AMD_TIMEOUT_S="3",
        **twilio.env(owner_phone=OWNER),
    )
    standin.realtime_script({"transcript": OWNER_WORDS, "answer": ANSWER})
    bus, caller, call_sid, session_id = await answered_call(system, connect, twilio, "screen-timeout")
    attached_at = time.time()
    assert twilio.call(call_sid)["machine_detection_timeout"] == 3

    await caller.say()
    await eventually(lambda: heard(caller, OWNER_WORDS), "the owner's words transcribed")
    await eventually(lambda: caller.of(AudioOut), "the answer after the AMD timeout", timeout=20)
    await eventually(
        lambda: [t for t in caller.of(TranscriptOut) if t.role == "assistant" and t.final], "the answer's transcript"
    )
    await asyncio.to_thread(twilio.end_call, call_sid)
    events = await events_until(bus, session_id, "span.closed")
    assert messages(events) == [("user", OWNER_WORDS), ("assistant", ANSWER)]
    assert first_audio(caller) > attached_at + 3 and user_message_at(events) > attached_at + 3
