"""``WS /call``: a Twilio Media Stream relayed to the voice service's live subjects and back.

Twilio is the fake media-stream client (tests/support/twilio_media.py: signed handshake,
real-time 20 ms frames with string counters, a player that echoes marks); the voice service's
side is played by the test over the real bus (``voice_peer``); the caller says a real phrase
rendered by espeak-ng.
"""

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from delegate.contracts.voice import AudioIn, AudioOut, ClearOut, EndOut, HangupIn, MarkIn, MarkOut, TranscriptOut
from delegate.launcher.procs import NatsServer
from tests.support.speech import phone_audio
from tests.support.twilio_media import FRAME_BYTES, FakeTwilioCall

from .voice_peer import SESSION, TOKEN, VOICE_LOST_FAST_S, VoiceRig, voice_rig

PARAMS = {"session": SESSION, "token": TOKEN}


@pytest.fixture
async def rig(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[VoiceRig]:
    async with voice_rig(nats_server, tmp_path) as r:
        yield r


@pytest.fixture
async def call(rig: VoiceRig) -> AsyncIterator[FakeTwilioCall]:
    twilio = rig.twilio()
    await twilio.open(PARAMS)
    await rig.voice.wait_for(lambda v: bool(v.attaches), what="the stream to attach")
    yield twilio
    await twilio.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_the_stream_attaches_with_its_token_and_sids(rig: VoiceRig, call: FakeTwilioCall) -> None:
    (attach,) = rig.voice.attaches
    assert (attach.token, attach.stream_sid, attach.call_sid) == (TOKEN, call.stream_sid, call.call_sid)
    # the gateway's heartbeat runs while the socket is open
    await rig.voice.wait_for(lambda v: v.heartbeats_in >= 2, what="heartbeats from the gateway")


async def test_caller_audio_reaches_voice_unchanged_with_its_timestamps(rig: VoiceRig, call: FakeTwilioCall) -> None:
    speech = phone_audio("Remind me to call the plumber tomorrow.")
    frames = -(-len(speech) // FRAME_BYTES)
    await call.speak(speech)
    await rig.voice.wait_for(lambda v: len(v.of_type("audio")) >= frames, what="every audio frame")
    audio: list[AudioIn] = rig.voice.of_type("audio")
    assert b"".join(base64.b64decode(a.audio) for a in audio) == speech.ljust(frames * FRAME_BYTES, b"\xff")
    # Twilio's timestamp is a string; voice gets the number
    assert [a.ts_ms for a in audio] == [n * 20 for n in range(frames)]
    assert all(a.sent_at is not None for a in audio)


async def test_answer_audio_and_marks_go_to_twilio_and_the_echoes_come_back(
    rig: VoiceRig, call: FakeTwilioCall
) -> None:
    first, second = bytes(range(256)) * 2 + b"\x10" * 288, b"\x7f" * 400  # 100 ms, 50 ms
    await rig.voice.send(
        AudioOut(audio=b64(first)), MarkOut(name="item_1:1"), TranscriptOut(role="assistant", text="Sure."),
        AudioOut(audio=b64(second)), MarkOut(name="item_1:2"),
    )
    await rig.voice.wait_for(lambda v: len(v.of_type("mark")) == 2, what="both marks echoed")
    assert rig.voice.of_type("mark") == [MarkIn(name="item_1:1"), MarkIn(name="item_1:2")]
    assert bytes(call.played) == first + second  # played in full before the last mark came back
    sent = [r.frame for r in call.received]
    assert [f["event"] for f in sent] == ["media", "mark", "media", "mark"]  # no captions on a phone
    assert all(f["streamSid"] == call.stream_sid for f in sent)
    assert sent[0]["media"] == {"payload": b64(first)}  # relayed as voice sent it
    assert sent[1]["mark"] == {"name": "item_1:1"}


async def test_clear_reaches_twilio_which_drops_the_audio_and_echoes_the_pending_mark(
    rig: VoiceRig, call: FakeTwilioCall
) -> None:
    long_answer = b"\x55" * 8 * 5000  # five seconds
    await rig.voice.send(AudioOut(audio=b64(long_answer)), MarkOut(name="long:1"))
    await call.wait_for(lambda c: len(c.played) > 0, what="playback to start")
    await rig.voice.send(ClearOut())
    await rig.voice.wait_for(lambda v: bool(v.of_type("mark")), what="the mark echoed by the clear")
    assert rig.voice.of_type("mark") == [MarkIn(name="long:1")]
    assert call.clears == 1
    assert call.frames("clear") == [{"event": "clear", "streamSid": call.stream_sid}]
    assert len(call.played) < len(long_answer)
    assert call.queued_ms == 0


async def test_stop_becomes_a_caller_hangup(rig: VoiceRig, call: FakeTwilioCall) -> None:
    await call.silence(100)
    await call.hang_up()
    await rig.voice.wait_for(lambda v: bool(v.of_type("hangup")), what="the hang-up")
    assert rig.voice.of_type("hangup") == [HangupIn(reason="caller_hangup")]


async def test_a_socket_gone_without_stop_is_a_hangup_too(rig: VoiceRig, call: FakeTwilioCall) -> None:
    await call.close()
    await rig.voice.wait_for(lambda v: bool(v.of_type("hangup")), what="the hang-up")
    assert rig.voice.of_type("hangup") == [HangupIn(reason="caller_hangup")]


async def test_end_from_voice_closes_the_socket_so_twilio_plays_the_apology(
    rig: VoiceRig, call: FakeTwilioCall
) -> None:
    await rig.voice.send(AudioOut(audio=b64(b"\x11" * 160)), EndOut(reason="hangup", message="goodbye"))
    assert await call.wait_closed() == 1000
    assert call.frames("media")  # what came before the end was relayed first
    assert rig.voice.of_type("hangup") == []  # voice ended it: nothing to tell it


async def test_voice_going_silent_ends_the_call_on_our_side(nats_server: NatsServer, tmp_path: Path) -> None:
    async with voice_rig(nats_server, tmp_path, voice_lost_after_s=VOICE_LOST_FAST_S) as rig:
        call = rig.twilio()
        await call.open(PARAMS)
        await rig.voice.wait_for(lambda v: bool(v.attaches), what="the stream to attach")
        await call.silence(200)
        await rig.voice.stop_heartbeats()  # the voice process died
        assert await call.wait_closed(timeout=10) == 1000
        assert rig.voice.of_type("hangup") == []


async def test_bad_frames_are_skipped_and_the_call_goes_on(rig: VoiceRig, call: FakeTwilioCall) -> None:
    await call.send_raw("this is not json")
    await call.send_raw("[1, 2, 3]")
    await call.send("media", media={"chunk": "1"})  # no payload
    await call.send("mark", mark="not an object")
    await call.dtmf("5")  # not used by voice: ignored
    await call.speak(b"\x01" * FRAME_BYTES)
    await rig.voice.wait_for(lambda v: bool(v.of_type("audio")), what="audio after the bad frames")
    assert [m.type for m in rig.voice.inbox] == ["audio"]
    assert not call.closed.is_set()


async def test_a_stream_with_a_wrong_token_is_closed_with_1008(rig: VoiceRig) -> None:
    twilio = rig.twilio()
    await twilio.open({"session": SESSION, "token": "someone-elses-token"})
    assert await twilio.wait_closed() == 1008
    assert [a.token for a in rig.voice.attaches] == ["someone-elses-token"]


async def test_a_start_without_session_parameters_is_closed_with_1008(rig: VoiceRig) -> None:
    twilio = rig.twilio()
    await twilio.open({"caller": "+15550001111"})
    assert await twilio.wait_closed() == 1008
    assert rig.voice.attaches == []


async def test_a_stream_that_goes_silent_is_ended_as_stream_lost(nats_server: NatsServer, tmp_path: Path) -> None:
    """Twilio sends media every 20 ms while a call lives: a socket that still answers pings but
    sends nothing is a lost stream, and holding it would keep the voice lock for ever."""
    async with voice_rig(nats_server, tmp_path, voice_media_timeout_s=1.0) as rig:
        call = rig.twilio()
        await call.open(PARAMS)
        await rig.voice.wait_for(lambda v: bool(v.attaches), what="the stream to attach")
        await call.silence(1500)  # audio for longer than the timeout keeps the call up
        assert not call.closed.is_set()
        # then nothing more, while the client library keeps answering the gateway's pings
        assert await call.wait_closed(timeout=1.0 + 2.0) == 1000  # Twilio goes on to the apology
        await rig.voice.wait_for(lambda v: bool(v.of_type("hangup")), what="the hang-up")
        assert rig.voice.of_type("hangup") == [HangupIn(reason="stream_lost")]
