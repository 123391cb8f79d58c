"""Voice on the bus: setting a Realtime session up, and the live audio relay around it.

The gateway speaks Twilio Media Streams and the browser's ``/browser-call`` socket; the voice
service speaks the Realtime API. Between them travel only these models:

- ``PrepareSession`` takes the voice lock and pre-warms a Realtime session before any audio
  exists (while Twilio is still reading the TwiML answer); its one-time token goes into the
  TwiML, and the stream that presents it claims the session (``AttachSession``).
- Then each side publishes on its own per-session live subject: ``VoiceIn`` (caller audio,
  mark echoes, hang-up, heartbeats) and ``VoiceOut`` (answer audio, marks, clear, captions,
  end, heartbeats). Audio stays base64 end to end: Twilio's payload is what the Realtime API
  takes, so the phone path never decodes it.
- Both sides send a heartbeat every ``VOICE_HEARTBEAT_S``: a side that hears nothing for
  ``VOICE_LOST_AFTER_S`` knows its peer died and ends the call cleanly.
"""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, TypeAdapter

from .ids import new_id
from .messages import BusModel, Reply

VoiceKind = Literal["phone", "browser"]
Direction = Literal["inbound", "outbound"]
AudioFormat = Literal["pcmu", "pcm16"]  # G.711 µ-law 8 kHz (phone), PCM16 LE 24 kHz (browser)
VoiceStatus = Literal["idle", "connecting", "live", "ending"]
# budget: BUDGET_HARD_STOP_OWNER is on and a spend line is reached (the message has the figures)
RefusalReason = Literal["busy", "unavailable", "bad_preset", "bad_token", "unknown_session", "budget"]

MAX_AUDIO_B64 = 1_000_000  # one relayed chunk; Twilio sends 216 characters per 20 ms
TOKEN_MAX = 64


class PrepareSession(BusModel):
    kind: VoiceKind
    direction: Direction = "inbound"
    call_sid: str | None = Field(default=None, max_length=64)
    caller: str | None = Field(default=None, max_length=64)
    preset: str | None = Field(default=None, max_length=100)


class PrepareReply(Reply):
    ok: bool
    session_id: str | None = None
    token: str | None = Field(default=None, max_length=TOKEN_MAX)
    reason: RefusalReason | None = None
    message: str = ""


class AttachSession(BusModel):
    token: str = Field(min_length=1, max_length=TOKEN_MAX)
    stream_sid: str | None = Field(default=None, max_length=64)
    call_sid: str | None = Field(default=None, max_length=64)


class AttachReply(Reply):
    ok: bool
    reason: RefusalReason | None = None
    message: str = ""
    audio_format: AudioFormat = "pcmu"


# ---- caller side -> voice -------------------------------------------------------------------


class AudioIn(BusModel):
    type: Literal["audio"] = "audio"
    audio: str = Field(max_length=MAX_AUDIO_B64)  # base64: Twilio's media.payload, or browser PCM16
    ts_ms: int | None = None  # Twilio's media.timestamp (ms since the stream started)
    sent_at: float | None = None  # wall clock when the gateway received it (benchmarks read it)


class MarkIn(BusModel):
    """The caller's side echoed this mark: the audio queued before it has played (or was cleared)."""

    type: Literal["mark"] = "mark"
    name: str = Field(max_length=200)


class HangupIn(BusModel):
    type: Literal["hangup"] = "hangup"
    reason: str = Field(default="caller_hangup", max_length=100)


class HeartbeatIn(BusModel):
    type: Literal["heartbeat"] = "heartbeat"


AnyVoiceIn = AudioIn | MarkIn | HangupIn | HeartbeatIn
VoiceIn = Annotated[AnyVoiceIn, Field(discriminator="type")]
voice_in_adapter: TypeAdapter[AnyVoiceIn] = TypeAdapter(VoiceIn, config=ConfigDict(defer_build=True))


# ---- voice -> caller side -------------------------------------------------------------------


class AudioOut(BusModel):
    type: Literal["audio"] = "audio"
    audio: str = Field(max_length=MAX_AUDIO_B64)  # base64 in the session's format
    sent_at: float | None = None  # wall clock when voice received it from the model (benchmarks)


class MarkOut(BusModel):
    type: Literal["mark"] = "mark"
    name: str = Field(max_length=200)


class ClearOut(BusModel):
    """Drop every buffered answer audio at once: the caller started speaking."""

    type: Literal["clear"] = "clear"


class TranscriptOut(BusModel):
    type: Literal["transcript"] = "transcript"
    role: Literal["user", "assistant"]
    text: str = Field(max_length=20_000)
    final: bool = False


class EndOut(BusModel):
    type: Literal["end"] = "end"
    reason: str = Field(max_length=100)
    message: str = Field(default="", max_length=500)


class HeartbeatOut(BusModel):
    type: Literal["heartbeat"] = "heartbeat"


AnyVoiceOut = AudioOut | MarkOut | ClearOut | TranscriptOut | EndOut | HeartbeatOut
VoiceOut = Annotated[AnyVoiceOut, Field(discriminator="type")]
voice_out_adapter: TypeAdapter[AnyVoiceOut] = TypeAdapter(VoiceOut, config=ConfigDict(defer_build=True))


# ---- state and the outbound call -------------------------------------------------------------


class VoiceStateRequest(BusModel):
    pass


class VoiceState(Reply):
    """What every open tab shows: is a call live, of which kind, since when."""

    active: bool = False
    session_id: str | None = None
    kind: VoiceKind | None = None
    status: VoiceStatus = "idle"
    started_at: datetime | None = None
    caller: str | None = None
    preset: str | None = None
    presets: list[str] = Field(default_factory=list)
    default_preset: str | None = None
    preset_errors: dict[str, str] = Field(default_factory=dict)  # file name -> why it was not loaded


class CallOwner(BusModel):
    """Place a call to the owner (the ``call_owner`` tool, later an urgent activation)."""

    request_id: str = Field(default_factory=new_id, max_length=64)  # a repeat places no second call
    reason: str = Field(default="", max_length=500)


# Twilio's AnsweredBy values (answering machine detection): ``machine_start`` with
# MachineDetection=Enable, the ``machine_end_*`` ones with DetectMessageEnd (after the greeting).
AnsweredBy = Literal[
    "human", "machine_start", "machine_end_beep", "machine_end_silence", "machine_end_other", "fax", "unknown",
]
MACHINE_ANSWERS: frozenset[str] = frozenset(
    {"machine_start", "machine_end_beep", "machine_end_silence", "machine_end_other", "fax"}
)


class CallAnsweredBy(BusModel):
    """Twilio's asynchronous AMD verdict on a call we placed, kept on stream CHANNELS until the
    voice service has acted on it (a voicemail and its SMS survive a voice process killed first)."""

    call_sid: str = Field(max_length=64)
    session_id: str = Field(max_length=64)
    answered_by: AnsweredBy
    detection_ms: int | None = Field(default=None, ge=0)  # MachineDetectionDuration


class CallOwnerReply(Reply):
    ok: bool
    call_sid: str | None = None
    session_id: str | None = None
    reason: str | None = None
    message: str = ""
