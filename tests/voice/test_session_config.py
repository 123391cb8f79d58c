"""The session's configuration: voice waits for ``session.updated`` before anything runs on the
session, a refused ``session.update`` ends the call with the apology, and the greeting keeps the
persona (a response's own instructions replace the session's)."""

from collections.abc import Callable
from typing import Any

import pytest

from delegate.contracts.voice import AudioOut
from delegate.runtime.bus import BusUnavailable
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually
from tests.voice.peer import events_until, poll_state, session_updates

APOLOGY = "Sorry, the call dropped. Please call again."  # what voice says when its side fails
REFUSAL = {
    "session_update_error": {
        "type": "invalid_request_error", "code": "invalid_value",
        "message": "Invalid value: 'audio/pcmx'. Supported values are: 'audio/pcm', 'audio/pcmu' and 'audio/pcma'.",
    }
}


def client_events(standin: StandinProcess, kind: str) -> list[dict[str, Any]]:
    return [e for s in standin.realtime_sessions() for e in s["events"] if e.get("type") == kind]


async def test_a_refused_session_update_ends_the_prepared_call_before_anything_runs_on_defaults(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice", quiet=False)  # the built-in preset greets: no greeting may go out
    bus, caller = await connect(system)
    standin.realtime_script(REFUSAL)
    assert (await caller.prepare("phone", call_sid="CA" + "2" * 32)).ok

    events = await events_until(bus, caller.session_id, "span.closed")
    ended = next(e for e in events if e.kind == "session.ended").payload
    assert ended["reason"] == "realtime_lost"
    assert ended["detail"].startswith("the Realtime API refused the session configuration (invalid_value: ")
    assert not [e for e in events if e.kind == "message"]
    # Nothing ran on the session's defaults: no greeting was asked for, no audio went in.
    assert len(session_updates(standin)) == 1
    assert not client_events(standin, "response.create")
    assert not client_events(standin, "input_audio_buffer.append")
    # Nobody takes the stream Twilio opens then (the gateway's AttachRefused: it ends the
    # stream, and Twilio says the TwiML's apology); the lock is free for the next call.
    with pytest.raises(BusUnavailable):
        await caller.attach(heartbeat=False)
    await poll_state(bus, "idle")
    assert (await caller.prepare("phone")).ok
    await caller.hang_up()


async def test_a_refused_session_update_on_an_attached_call_ends_it_with_the_apology(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    # Without pre-warm the session is configured once the stream is there: the caller hears it.
    system = make_system("voice", VOICE_PREWARM="off")
    bus, caller = await connect(system)
    standin.realtime_script(REFUSAL)
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    end = await eventually(caller.ended, "the session's end", timeout=20)
    assert end.reason == "realtime_lost" and end.message == APOLOGY
    assert not caller.of(AudioOut)
    events = await events_until(bus, caller.session_id, "span.closed")
    ended = next(e for e in events if e.kind == "session.ended").payload
    assert "refused the session configuration" in ended["detail"]
    assert not client_events(standin, "response.create")


async def test_the_greeting_keeps_the_sessions_instructions(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice", quiet=False)  # the built-in default preset greets
    _, caller = await connect(system)
    assert (await caller.prepare("browser")).ok
    assert (await caller.attach()).ok
    await eventually(lambda: caller.of(AudioOut), "the greeting's audio")
    await caller.hang_up()
    persona = session_updates(standin)[0]["instructions"]
    assert "Speak naturally and warmly" in persona  # the preset's style, inside the session's
    greeting = client_events(standin, "response.create")[0]["response"]["instructions"]
    assert greeting.startswith(persona)
    assert greeting.endswith('saying exactly: "Hi, it\'s Delegate. How can I help?"')
