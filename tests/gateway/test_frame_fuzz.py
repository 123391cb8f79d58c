"""Hypothesis-driven frames at the three WebSockets (issue #32, item 6): ``/chat`` and
``/browser-call`` frames shaped after their models (every known ``type`` with fields of any JSON
type, and any JSON at all), and Twilio Media Streams messages (every event with any body).

Each generated frame goes to the real gateway (a real uvicorn, the real bus; voice's side played
by ``voice_peer``). What must hold for every one: the socket stays open, the frame gets at most an
error frame with a stable code (never ``internal``), and the next valid frame still works.
"""

import json
from pathlib import Path
from typing import Any

import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate.gateway.browser_call_ws import KNOWN_TYPES as CALL_TYPES
from delegate.gateway.chat_ws import KNOWN_TYPES as CHAT_TYPES
from delegate.launcher.procs import NatsServer
from tests.support.twilio_media import FRAME_BYTES

from .helpers import Gateway, connect, recv_until
from .test_voice_browser import live_call, next_json
from .voice_peer import SESSION, TOKEN, voice_rig

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ("text", "client_msg_id", "turn_id", "after_seq", "name", "edit_of")
TWILIO_EVENTS = ("connected", "start", "media", "mark", "stop", "dtmf", "clear")


def frames_of(types: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """A known type with its fields of any JSON type, or any JSON at all."""
    shaped = st.builds(
        lambda kind, fields: {"type": kind, **fields},
        st.sampled_from(types) | st.text(max_size=12),
        st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=3),
    )
    return shaped | JSON


TWILIO = st.builds(
    lambda event, body, extra: {"event": event, event: body, **extra},
    st.sampled_from(TWILIO_EVENTS) | st.text(max_size=12),
    JSON,
    st.dictionaries(st.sampled_from(("streamSid", "sequenceNumber", "media", "mark")), JSON, max_size=2),
)
SHARED = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def as_text(frame: Any) -> str:
    return frame if isinstance(frame, str) else json.dumps(frame)


@SHARED
@given(frame=frames_of(tuple(t for t in CHAT_TYPES if t != "hello")))  # hello needs a ledger: none runs here
async def test_chat_survives_any_frame(gateway: Gateway, frame: Any) -> None:
    async with await connect(gateway.ws) as ws:
        await ws.send(as_text(frame))
        await ws.send(json.dumps({"type": "ping"}))
        got = await recv_until(ws, lambda f: f.get("type") == "pong")
        assert not [f for f in got if f.get("code") == "internal"], got


@SHARED
@given(frames=st.lists(frames_of(CALL_TYPES).filter(lambda f: not (isinstance(f, dict) and f.get("type") == "hangup")),
                       min_size=1, max_size=5))
async def test_browser_call_survives_any_frame(nats_server: NatsServer, tmp_path: Path, frames: list[Any]) -> None:
    async with voice_rig(nats_server, tmp_path) as rig:
        rig.voice.audio_format = "pcm16"
        ws = await live_call(rig)
        for frame in frames:
            await ws.send(as_text(frame))
        await ws.send(b"\x01\x00" * 480)  # audio after them still reaches voice
        await rig.voice.wait_for(lambda v: bool(v.of_type("audio")), what="audio after the fuzzed frames")
        await ws.send(json.dumps({"type": "hangup"}))
        while (frame := await next_json(ws)).get("type") != "state":
            assert frame.get("code") != "internal", frame
        assert (frame["status"], frame["reason"]) == ("ended", "caller_hangup")
        await ws.close()


@SHARED
@given(messages=st.lists(TWILIO | JSON, min_size=1, max_size=5))
async def test_media_stream_survives_any_message(nats_server: NatsServer, tmp_path: Path, messages: list[Any]) -> None:
    async with voice_rig(nats_server, tmp_path) as rig:
        call = rig.twilio()
        await call.open({"session": SESSION, "token": TOKEN})
        await rig.voice.wait_for(lambda v: bool(v.attaches), what="the stream to attach")
        for message in messages:
            if isinstance(message, dict) and message.get("event") == "stop":
                continue  # a real hang-up: the one message that may end the call
            try:
                await call.send_raw(as_text(message))
            except websockets.ConnectionClosed as exc:
                raise AssertionError(f"the gateway closed the stream on {message!r}") from exc
        await call.speak(b"\x01" * FRAME_BYTES)
        await rig.voice.wait_for(lambda v: bool(v.of_type("audio")), what="audio after the fuzzed messages")
        assert not call.closed.is_set()
        await call.close()
