"""Preparing and claiming a call: the one-time token, one call at a time, unclaimed ends."""

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.subjects import VOICE_LEASE_BUCKET
from delegate.contracts.voice import HeartbeatOut, PrepareSession
from delegate.runtime.lease import LEASE_KEY
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually
from tests.voice.peer import Caller, events_until, poll_state, session_updates, voice_state

# Short enough to wait out: an unclaimed call's end, a silent gateway. One System serves
# both tests (each of them meets only the timing it is about).
SHORT_TIMEOUTS = {"VOICE_PREWARM_TIMEOUT_S": "2", "VOICE_LOST_AFTER_S": "1.5"}


async def test_prepare_attach_single_use_token_and_busy(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice")
    bus, caller = await connect(system)
    pong = await bus.ping("voice")
    assert pong.ready and pong.detail == "idle"

    prepared = await caller.prepare("phone", call_sid="CA" + "1" * 32, caller="+15550001111")
    assert prepared.ok and prepared.session_id and prepared.token and len(prepared.token) <= 64

    # one call at a time: a second prepare is refused while this one lives
    second = await bus.request(topics.VOICE_PREPARE, PrepareSession(kind="browser"))
    assert not second.ok and second.reason == "busy"

    bad = await caller.attach(token="not-the-token", heartbeat=False)
    assert not bad.ok and bad.reason == "bad_token"
    claimed = await caller.attach()
    assert claimed.ok and claimed.audio_format == "pcmu"
    again = await caller.attach(heartbeat=False)
    assert not again.ok and again.reason == "bad_token"  # the token is single use

    state = await voice_state(bus)
    assert state.active and state.session_id == caller.session_id and state.kind == "phone"
    await eventually(lambda: caller.of(HeartbeatOut), "a heartbeat from voice")
    live = await poll_state(bus, "live")
    assert live.caller == "+15550001111" and live.preset == "quiet"
    assert (await bus.ping("voice")).detail == "live phone call"

    await caller.hang_up()
    end = await eventually(caller.ended, "the end of the call")
    assert end.reason == "caller_hangup"
    await poll_state(bus, "idle")

    events = await events_until(bus, caller.session_id, "span.closed")
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["span.opened", "session.started"] and kinds[-2:] == ["session.ended", "span.closed"]
    assert events[0].payload["type"] == "phone" and events[0].channel == "phone"
    started = events[1].payload
    assert started["session_id"] == caller.session_id and started["call_sid"] == "CA" + "1" * 32
    assert started["preset"] == "quiet" and started["model"] == "gpt-realtime"
    assert events[-2].payload["reason"] == "caller_hangup"

    # the lock was released: the next call may start at once
    assert (await caller.prepare("browser")).ok
    claimed = await caller.attach()
    assert claimed.ok and claimed.audio_format == "pcm16"
    await caller.hang_up("hangup")
    events = await events_until(bus, caller.session_id, "span.closed")
    assert events[0].payload["type"] == "voice" and events[0].channel == "browser_voice"
    updates = session_updates(standin)
    assert updates[0]["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert updates[-1]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}  # the browser's
    assert updates[-1]["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}


async def test_calling_back_the_moment_the_span_closes_is_not_busy(
    make_system: Callable[..., System], connect: Any
) -> None:
    """The owner hangs up and calls straight back: a prepare sent the instant the call's
    ``span.closed`` is committed (what a client sees as "the call is over") is connected. Voice
    used to write the span's close before it let go of the call and its lock, and refused that
    prepare "busy". Several rounds: the window was a few milliseconds wide."""
    system = make_system("voice")
    bus, _ = await connect(system)
    spans: dict[str, str] = {}  # call id -> its span
    closed: asyncio.Queue[str] = asyncio.Queue()

    async def on_committed(event: Event) -> None:
        if event.kind == "session.started" and event.span_id:
            spans[event.payload["session_id"]] = event.span_id
        elif event.kind == "span.closed" and event.span_id:
            closed.put_nowait(event.span_id)

    await bus.subscribe(topics.LEDGER_COMMITTED, on_committed)
    callers: list[Caller] = []
    try:
        for round_ in range(8):
            caller = Caller(bus)
            callers.append(caller)
            reply = await caller.prepare("phone")
            assert reply.ok, (round_, reply)
            assert (await caller.attach()).ok
            span = await eventually(partial(spans.get, caller.session_id), "the call's span opened")
            await caller.hang_up()
            while await asyncio.wait_for(closed.get(), 20) != span:
                pass  # a stale span closed at the call's start, not this call's
        last = Caller(bus)
        callers.append(last)
        assert (await last.prepare("phone")).ok
        await last.hang_up()
    finally:
        for caller in callers:
            await caller.close()


async def test_a_lost_voice_lock_ends_the_call(make_system: Callable[..., System], connect: Any) -> None:
    system = make_system("voice")
    bus, caller = await connect(system)
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await poll_state(bus, "live")
    kv = await bus.js.key_value(VOICE_LEASE_BUCKET)
    await kv.delete(LEASE_KEY)  # as if it expired while the process was paused: the next renewal fails
    end = await eventually(caller.ended, "the call's end", timeout=15)
    assert end.reason == "superseded" and end.message
    events = await events_until(bus, caller.session_id, "span.closed")
    assert next(e for e in events if e.kind == "session.ended").payload["reason"] == "superseded"


async def test_shutdown_mid_call_ends_it_cleanly(make_system: Callable[..., System], connect: Any) -> None:
    system = make_system("voice", fresh=True)  # its voice is stopped
    bus, caller = await connect(system)
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await poll_state(bus, "live")
    system.procs["voice"].stop()  # SIGTERM
    end = await eventually(caller.ended, "the call's end", timeout=15)
    assert end.reason == "error" and end.message  # the gateway closes; Twilio plays the apology
    events = await events_until(bus, caller.session_id, "span.closed")
    ended = next(e for e in events if e.kind == "session.ended")
    assert ended.payload["reason"] == "error" and "stopped" in ended.payload["detail"]


async def test_unclaimed_call_ends_and_frees_the_lock(make_system: Callable[..., System], connect: Any) -> None:
    system = make_system("voice", **SHORT_TIMEOUTS)
    bus, caller = await connect(system)
    assert (await caller.prepare("phone")).ok
    events = await events_until(bus, caller.session_id, "span.closed")
    assert next(e for e in events if e.kind == "session.ended").payload["reason"] == "unclaimed"
    assert not [e for e in events if e.kind == "message"]  # nobody heard anything
    await poll_state(bus, "idle")
    assert (await caller.prepare("phone")).ok


async def test_gateway_silence_ends_the_call(make_system: Callable[..., System], connect: Any) -> None:
    system = make_system("voice", **SHORT_TIMEOUTS)
    bus, caller = await connect(system)
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach(heartbeat=False)).ok  # and then nothing: the gateway died
    end = await eventually(caller.ended, "the call's end", timeout=15)
    assert end.reason == "stream_lost"
    events = await events_until(bus, caller.session_id, "span.closed")
    assert next(e for e in events if e.kind == "session.ended").payload["reason"] == "stream_lost"


async def test_without_prewarm_the_realtime_session_opens_only_when_the_stream_attaches(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice", VOICE_PREWARM="false")
    bus, caller = await connect(system)
    assert (await caller.prepare("phone")).ok
    # A pre-warmed call would be connecting to the model by now; this one waits for its stream.
    assert (await voice_state(bus)).status == "connecting"
    assert standin.realtime_sessions() == []
    assert (await caller.attach()).ok
    await poll_state(bus, "live")
    assert len(standin.realtime_sessions()) == 1 and session_updates(standin)
    await caller.hang_up()
    events = await events_until(bus, caller.session_id, "span.closed")
    assert [e.kind for e in events][:2] == ["span.opened", "session.started"]
