"""The voice service's one settings class; env var names in the comments."""

from typing import Literal

from pydantic import Field

from delegate.runtime.openai_bounds import RetentionRatio
from delegate.runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    # BUDGET_HARD_STOP_OWNER (runtime.spend, read by the agent too): over a spend line, a call the
    # owner starts is refused with the figures instead of opening a Realtime session.
    budget_hard_stop_owner: bool = False
    openai_realtime_model: str = "gpt-realtime"  # OPENAI_REALTIME_MODEL
    # OPENAI_TRANSCRIBE_MODEL: transcribes the caller's words (the ledger's user messages)
    openai_transcribe_model: str = "gpt-4o-mini-transcribe"
    realtime_retention_ratio: RetentionRatio = 0.8  # REALTIME_RETENTION_RATIO: context kept when Realtime truncates
    # The voice lock: one call at a time, system-wide, renewed while the call lives.
    voice_lock_ttl_s: float = 6.0  # VOICE_LOCK_TTL_S
    voice_prewarm_timeout_s: float = 30.0  # VOICE_PREWARM_TIMEOUT_S: a prepared call nobody attached ends
    # VOICE_PREWARM: open and configure the Realtime session at prepare, while Twilio reads the
    # TwiML (on), or only once the stream attaches (off: what bench/voice.py compares against).
    voice_prewarm: bool = True
    voice_heartbeat_s: float = 1.0  # VOICE_HEARTBEAT_S: how often voice tells the gateway it is alive
    voice_lost_after_s: float = 3.0  # VOICE_LOST_AFTER_S: silence from the gateway that ends the call
    voice_recent_turns: int = 20  # VOICE_RECENT_TURNS: verbatim messages in the call's instructions
    voice_recent_chars: int = 12_000  # VOICE_RECENT_CHARS: their character budget
    voice_connect_timeout_s: float = 10.0  # VOICE_CONNECT_TIMEOUT_S: Realtime connect + configure
    # Memory in the call's instructions (the same settings as the agent's turns).
    memory_context_tokens: int = 1500  # MEMORY_CONTEXT_TOKENS: memory's budget in the instructions (0: none)
    memory_retrieval_wait_ms: int = 300  # MEMORY_RETRIEVAL_WAIT_MS: longest wait for it, from the search's start
    # Today's remaining calendar events in the call's instructions, when the pollers keep a calendar.
    caldav_url: str | None = None  # CALDAV_URL
    owner_timezone: str = "UTC"  # OWNER_TIMEZONE: the owner's "today"

    # Outbound calls to the owner (VOICE_CALL_OWNER); all four Twilio values or no calls.
    twilio_account_sid: str | None = None  # TWILIO_ACCOUNT_SID
    twilio_auth_token: str | None = None  # TWILIO_AUTH_TOKEN
    twilio_phone_number: str | None = None  # TWILIO_PHONE_NUMBER: the caller id of our calls
    twilio_api_base_url: str | None = None  # TWILIO_API_BASE_URL: a local stand-in in tests
    twilio_http_timeout_s: float = 10.0  # TWILIO_HTTP_TIMEOUT_S
    owner_phone: str | None = None  # OWNER_PHONE: who call_owner calls (E.164)
    public_base_url: str = "http://localhost:8081"  # PUBLIC_BASE_URL: the gateway as Twilio reaches it
    # VOICE_CALL_RING_TIMEOUT_S: how long Twilio lets the owner's phone ring (its Timeout, 1-600);
    # the prepared call is held that long (plus Twilio's 5 s buffer) until the call's status says
    # it was answered (the stream attaches) or not (busy, no-answer, failed, canceled).
    voice_call_ring_timeout_s: int = 60
    # VOICE_CALL_MACHINE_DETECTION: Twilio's answering machine detection on calls to the owner, run
    # in the background (async AMD): DetectMessageEnd (the verdict after the greeting's beep, when a
    # message can be left), Enable (the verdict as soon as known) or off.
    voice_call_machine_detection: Literal["DetectMessageEnd", "Enable", "off"] = "DetectMessageEnd"
    # VOICE_CALL_AMD_TIMEOUT_S: Twilio's MachineDetectionTimeout (3-59): past it Twilio gives up and
    # says "unknown". Until the verdict, what the callee says is held (neither recorded as the
    # owner's words nor answered); a call whose verdict never comes is taken as the owner's after it.
    voice_call_amd_timeout_s: int = Field(default=30, ge=3, le=59)
    # VOICE_CALL_ON_MACHINE: when a machine answers, leave the reason as a voicemail (voicemail) or
    # hang up at once (hangup); either way the same words go to the owner by SMS.
    voice_call_on_machine: Literal["voicemail", "hangup"] = "voicemail"
    voice_voicemail_max_s: float = 40.0  # VOICE_VOICEMAIL_MAX_S: longest wait for the message to play

    @property
    def calls_enabled(self) -> bool:
        return bool(self.twilio_account_sid and self.twilio_auth_token and self.twilio_phone_number
                    and self.owner_phone)
