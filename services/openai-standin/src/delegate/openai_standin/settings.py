"""Settings of the stand-in, read once in `main.run()` and passed down."""

from typing import Literal

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The API key `make run` and compose give the services when no OPENAI_API_KEY is set:
# a request carrying it comes from someone trying Delegate, not from a test.
OFFLINE_KEY = "offline-standin"

DemoMode = Literal["auto", "on", "off"]
RealtimePace = Literal["realtime", "instant"]


class Settings(BaseSettings):
    # The rules of every service's settings (delegate.runtime.settings_source, which the
    # stand-in does not depend on): the environment, then .env; an empty value means unset.
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", env_ignore_empty=True)

    standin_host: str = "127.0.0.1"  # STANDIN_HOST
    standin_port: int = 8765  # STANDIN_PORT
    # Pause before each streamed delta, so the offline demo visibly "types".
    standin_latency_ms: int = 0  # STANDIN_LATENCY_MS
    # Fake context window: over it, `truncation: "disabled"` fails like OpenAI does.
    standin_context_window: int = 400_000  # STANDIN_CONTEXT_WINDOW
    # The offline demo's answers (first-run guide, notes, reminders, capsule): "on", "off",
    # or "auto" = for requests made with OFFLINE_KEY. Tests' plain answers stay the default.
    standin_demo: DemoMode = "auto"  # STANDIN_DEMO
    # The offline demo's answers stream at a reading pace: a pause before each word, so an answer
    # takes seconds and Stop can be seen working. Tests' stand-ins set 0 unless they ask for it.
    standin_demo_pace_ms: int = 35  # STANDIN_DEMO_PACE_MS
    # Realtime answers: audio deltas at the pace they play ("realtime"), or all at once
    # ("instant", for benchmarks that measure our side, not the audio's length).
    standin_realtime_pace: RealtimePace = "realtime"  # STANDIN_REALTIME_PACE
    log_level: str = "INFO"  # LOG_LEVEL

    @field_validator("standin_demo", mode="before")
    @classmethod
    def _demo_words(cls, value: object) -> object:
        # Compose passes unset variables as "", and people write 1/0 or true/false.
        if isinstance(value, str):
            word = value.strip().lower()
            if word in ("", "auto"):
                return "auto"
            if word in ("1", "true", "yes", "on"):
                return "on"
            if word in ("0", "false", "no", "off"):
                return "off"
        return value

    def latency_for(self, demo: bool) -> int:
        """Milliseconds before each streamed delta: the demo's reading pace, or the plain latency."""
        return max(self.standin_latency_ms, self.standin_demo_pace_ms) if demo else self.standin_latency_ms

    def demo_for(self, api_key: str) -> bool:
        """Whether a request made with `api_key` gets the offline demo's answers."""
        if self.standin_demo == "auto":
            return api_key == OFFLINE_KEY
        return self.standin_demo == "on"
