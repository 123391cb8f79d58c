"""The settings base every service's one settings class derives from."""

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    # extra="ignore": one shared .env carries every service's keys.
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    nats_url: str = "nats://127.0.0.1:4222"  # NATS_URL
    log_level: str = "INFO"  # LOG_LEVEL
    runtime_data_dir: Path = Path("./runtime-data")  # RUNTIME_DATA_DIR
    instance_name: str = ""  # INSTANCE_NAME: tells two processes of one service apart in logs
