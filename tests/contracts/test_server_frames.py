"""The server -> browser frames of /chat have models (``contracts.ws``): whatever the gateway's
builders produce validates against them, and the gateway sends no frame type they lack."""

import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from delegate.contracts import ws
from delegate.contracts.events import Message, make_event
from delegate.contracts.messages import AgentState, Delta, LiveNotice, Usage
from delegate.contracts.voice import VoiceState
from delegate.gateway import chat_ws, fanout
from delegate.gateway.voice_state import voice_json

GATEWAY = Path(__file__).resolve().parents[2] / "services" / "gateway" / "src" / "delegate" / "gateway"
TYPES = {cls.model_fields["type"].annotation.__args__[0] for cls in get_args(ws.AnyServerFrame)}


def _frames() -> list[tuple[str, type[Any]]]:
    event = make_event(Message(text="hi"), conversation_id="c", span_id="s", channel="text", role="assistant")
    voice = VoiceState(active=True, session_id="v1", kind="phone", status="live")
    return [
        (fanout.event_frame(event.with_seq(4)), ws.EventFrame),
        (fanout.state_frame(AgentState(usage=Usage(compact_threshold=100), busy=True), voice_json(voice)),
         ws.StateFrame),
        (fanout.state_frame(AgentState(usage=Usage(compact_threshold=100))), ws.StateFrame),
        (fanout.delta_frame(Delta(turn_id="t", attempt=2, index=0, text="he")), ws.DeltaFrame),
        (fanout.live_frame(LiveNotice(kind="capsule", status="started", conversation_id="c")), ws.LiveFrame),
        (fanout.RESYNC_LAGGING, ws.ResyncFrame),
        (fanout.frame("resync", reason="gap"), ws.ResyncFrame),
        (fanout.frame("pong"), ws.PongFrame),
        (fanout.frame("ready", last_seq=3, ledger_last_seq=5), ws.ReadyFrame),
        (fanout.frame("ack", request="message", client_msg_id="k", event_id="e", duplicate=False), ws.AckFrame),
        (fanout.frame("ack", ok=True, request="stop", turn_id="t"), ws.AckFrame),
        (fanout.frame("ack", request="compact", ok=True), ws.AckFrame),
        (chat_ws.error("busy", "a compact request is already in flight", request="compact"), ws.ErrorFrame),
        (chat_ws.error("not_last", "no", request="regenerate", turn_id="t"), ws.ErrorFrame),
        (chat_ws.error("empty_text", "no", request="message", client_msg_id="k"), ws.ErrorFrame),
        (chat_ws.error("unknown_type", "no", known=["message", "ping"]), ws.ErrorFrame),
        (json.dumps(ws.voice_frame(voice_json(voice))), ws.VoiceFrame),
    ]


@pytest.mark.parametrize(("text", "model"), _frames(), ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_what_the_gateway_builds_is_its_frame_model(text: str, model: type[Any]) -> None:
    frame = ws.SERVER_MESSAGE.validate_json(text)
    assert type(frame) is model
    # Nothing the model does not name is sent: the frame is its model's dump, key for key.
    assert set(json.loads(text)) <= set(model.model_fields)


def test_an_unknown_or_malformed_frame_is_refused() -> None:
    with pytest.raises(ValidationError):
        ws.SERVER_MESSAGE.validate_json('{"type":"telepathy"}')
    with pytest.raises(ValidationError):
        ws.SERVER_MESSAGE.validate_json('{"type":"delta","turn_id":"t","index":0,"text":"x"}')  # no attempt


def test_the_gateway_sends_only_frame_types_that_have_a_model() -> None:
    sent: set[str] = set()
    for path in GATEWAY.glob("*.py"):
        text = path.read_text()
        sent |= set(re.findall(r'\bframe\("([a-z_]+)"', text))
    assert sent and sent <= TYPES, sent - TYPES
