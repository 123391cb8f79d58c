"""``WS /browser-call``: the page's Voice button, relayed to the voice service's live subjects.

The page is a websockets client sending PCM16 24 kHz binary frames (a real phrase, rendered by
espeak-ng); the voice service's side is played by the test over the real bus (``voice_peer``).
"""

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from delegate.contracts.voice import AudioIn, AudioOut, ClearOut, EndOut, HangupIn, MarkIn, MarkOut, TranscriptOut
from delegate.launcher.procs import NatsServer
from tests.support.speech import browser_audio

from .helpers import TOKEN as OWNER_TOKEN
from .voice_peer import SESSION, VOICE_LOST_FAST_S, VoiceRig, voice_rig

CHUNK = 4800  # 100 ms of PCM16 at 24 kHz, as the page's worklet batches it


@pytest.fixture
async def rig(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[VoiceRig]:
    async with voice_rig(nats_server, tmp_path) as r:
        r.voice.audio_format = "pcm16"
        yield r


async def open_call(rig: VoiceRig, query: str = "") -> ClientConnection:
    url = f"{rig.gw.ws}/browser-call?token={OWNER_TOKEN}" + (f"&{query}" if query else "")
    return await websockets.connect(url, max_size=None)


async def next_json(ws: ClientConnection, timeout: float = 20.0) -> dict[str, Any]:
    """The next text frame (binary frames in between are skipped)."""
    while True:
        message = await asyncio.wait_for(ws.recv(), timeout)
        if isinstance(message, str):
            frame: dict[str, Any] = json.loads(message)
            return frame


async def live_call(rig: VoiceRig, query: str = "") -> ClientConnection:
    ws = await open_call(rig, query)
    assert await next_json(ws) == {"type": "state", "status": "connecting", "session_id": None}
    assert await next_json(ws) == {"type": "state", "status": "live", "session_id": SESSION}
    return ws


async def test_without_the_owner_token_the_socket_is_closed_4401(rig: VoiceRig) -> None:
    async with websockets.connect(f"{rig.gw.ws}/browser-call?token=wrong") as ws:
        frame = json.loads(await ws.recv())
        assert (frame["type"], frame["code"]) == ("error", "unauthorized")
        await ws.wait_closed()
        assert ws.close_code == 4401
    assert rig.voice.prepares == []


async def test_busy_voice_is_an_error_frame_and_close_4409(rig: VoiceRig) -> None:
    rig.voice.refuse = "busy"
    ws = await open_call(rig)
    assert (await next_json(ws))["status"] == "connecting"
    frame = await next_json(ws)
    assert (frame["type"], frame["code"]) == ("error", "busy")
    await ws.wait_closed()
    assert ws.close_code == 4409


async def test_audio_both_ways_with_marks_clear_and_captions(rig: VoiceRig) -> None:
    ws = await live_call(rig, "preset=calm")
    (prepare,) = rig.voice.prepares
    assert (prepare.kind, prepare.preset) == ("browser", "calm")
    assert rig.voice.attaches[0].token == rig.voice.token

    speech = browser_audio("What is on my calendar today?")
    chunks = [speech[i:i + CHUNK] for i in range(0, len(speech), CHUNK)]
    for chunk in chunks:
        await ws.send(chunk)
    await rig.voice.wait_for(lambda v: len(v.of_type("audio")) == len(chunks), what="every audio frame")
    audio: list[AudioIn] = rig.voice.of_type("audio")
    assert b"".join(base64.b64decode(a.audio) for a in audio) == speech
    assert all(a.ts_ms is None and a.sent_at is not None for a in audio)

    answer = bytes(range(256)) * 19  # PCM16 bytes, any content
    await rig.voice.send(
        TranscriptOut(role="user", text="What is on my calendar today?", final=True),
        AudioOut(audio=base64.b64encode(answer).decode()), MarkOut(name="7"), ClearOut(),
    )
    assert await next_json(ws) == {
        "type": "transcript", "role": "user", "text": "What is on my calendar today?", "final": True,
    }
    assert await asyncio.wait_for(ws.recv(), 20) == answer  # a binary frame, decoded
    assert await next_json(ws) == {"type": "mark", "name": "7"}
    assert await next_json(ws) == {"type": "clear"}

    await ws.send(json.dumps({"type": "mark", "name": "7"}))
    await rig.voice.wait_for(lambda v: bool(v.of_type("mark")), what="the mark echo")
    assert rig.voice.of_type("mark") == [MarkIn(name="7")]

    await ws.send(json.dumps({"type": "hangup"}))
    ended = await next_json(ws)
    assert (ended["type"], ended["status"], ended["reason"]) == ("state", "ended", "caller_hangup")
    await ws.wait_closed()
    assert ws.close_code == 1000
    await rig.voice.wait_for(lambda v: bool(v.of_type("hangup")), what="the hang-up")
    assert rig.voice.of_type("hangup") == [HangupIn(reason="caller_hangup")]


async def test_bad_frames_get_error_frames_and_the_call_goes_on(rig: VoiceRig) -> None:
    ws = await live_call(rig)
    await ws.send(b"\x00" * (64 * 1024 + 1))
    assert (await next_json(ws))["code"] == "too_large"
    await ws.send(b"\x00" * (4 * 1024 * 1024 + 1))  # past uvicorn's old limit: closed 1009, unexplained
    assert (await next_json(ws))["code"] == "too_large"
    await ws.send("{not json")
    assert (await next_json(ws))["code"] == "bad_json"
    await ws.send(json.dumps({"type": "dance"}))
    assert (await next_json(ws))["code"] == "unknown_type"
    await ws.send(json.dumps({"type": "mark"}))
    assert (await next_json(ws))["code"] == "bad_frame"
    await ws.send(json.dumps({"type": "preset", "name": "other"}))  # after the start: ignored
    await ws.send(b"\x01\x00" * 480)
    await rig.voice.wait_for(lambda v: bool(v.of_type("audio")), what="audio after the bad frames")
    assert [m.type for m in rig.voice.inbox] == ["audio"]
    await ws.close()
    await rig.voice.wait_for(lambda v: bool(v.of_type("hangup")), what="the hang-up when the page leaves")


async def test_end_from_voice_is_an_ended_state_then_close(rig: VoiceRig) -> None:
    ws = await live_call(rig)
    await rig.voice.send(EndOut(reason="hangup", message="Goodbye!"))
    assert await next_json(ws) == {
        "type": "state", "status": "ended", "session_id": SESSION, "reason": "hangup", "message": "Goodbye!",
    }
    await ws.wait_closed()
    assert ws.close_code == 1000


async def test_voice_going_silent_ends_the_call_with_voice_lost(nats_server: NatsServer, tmp_path: Path) -> None:
    async with voice_rig(nats_server, tmp_path, voice_lost_after_s=VOICE_LOST_FAST_S) as rig:
        rig.voice.audio_format = "pcm16"
        ws = await live_call(rig)
        await rig.voice.stop_heartbeats()
        ended = await next_json(ws, timeout=10)
        assert (ended["status"], ended["reason"]) == ("ended", "voice_lost")
        assert ended["message"]
        await ws.wait_closed()
        assert rig.voice.of_type("hangup") == []


async def test_a_page_sending_neither_audio_nor_heartbeats_is_ended_as_stream_lost(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with voice_rig(nats_server, tmp_path, voice_media_timeout_s=1.0) as rig:
        rig.voice.audio_format = "pcm16"
        ws = await live_call(rig)
        # Muted: no audio, but a heartbeat frame now and then keeps the call up past the timeout.
        for _ in range(6):
            await ws.send(json.dumps({"type": "heartbeat"}))
            try:
                frame = await next_json(ws, timeout=0.4)
            except TimeoutError:
                continue
            raise AssertionError(f"the muted call got {frame}")
        # Then the page goes quiet (its socket still answers pings).
        ended = await next_json(ws, timeout=1.0 + 2.0)
        assert (ended["status"], ended["reason"]) == ("ended", "stream_lost")
        await ws.wait_closed()
        assert ws.close_code == 4408
        await rig.voice.wait_for(lambda v: bool(v.of_type("hangup")), what="the hang-up")
        assert rig.voice.of_type("hangup") == [HangupIn(reason="stream_lost")]
        assert rig.voice.of_type("audio") == []
