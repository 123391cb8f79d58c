"""Settings of the stand-in, read once in `main.run()` and passed down."""

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    standin_host: str = "127.0.0.1"  # STANDIN_HOST
    standin_port: int = 8765  # STANDIN_PORT
    # Pause before each streamed delta, so the offline demo visibly "types".
    standin_latency_ms: int = 0  # STANDIN_LATENCY_MS
    # Fake context window: over it, `truncation: "disabled"` fails like OpenAI does.
    standin_context_window: int = 400_000  # STANDIN_CONTEXT_WINDOW
    log_level: str = "INFO"  # LOG_LEVEL
