"""The settings base every service's one settings class derives from.

The rules (`delegate.runtime.settings_source`): the environment first, then `.env` in the
working directory; an empty value means unset, so compose's `${VAR:-}` and an empty line in
`.env` leave a setting at its default.
"""

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from .credentials import NatsCredentials
from .settings_source import ENV_FILE, OpenAIEndpoint, export_openai_environment, openai_endpoint


class NatsSettings(NatsCredentials):
    """Where NATS is, who we are there (NATS_USER/NATS_PASSWORD, NATS_CREDS or NATS_NKEY_SEED:
    `credentials`) and how JetStream keeps what we store there: handed to ``Bus.connect``, so
    that several services in one process (``delegate.host``) each connect as their own role."""

    # extra="ignore": one shared .env carries every service's keys.
    model_config = SettingsConfigDict(env_file=ENV_FILE, extra="ignore", env_ignore_empty=True)

    # NATS_URL: one server, or a cluster's seed list separated by commas
    # (nats://10.0.0.1:4222,nats://10.0.0.2:4222,nats://10.0.0.3:4222).
    nats_url: str = "nats://127.0.0.1:4222"
    # NATS_REPLICAS: copies JetStream keeps of every stream and KV bucket we create: 1 on a
    # single server, 3 on a three-node cluster (survives the loss of any one node).
    nats_replicas: int = Field(default=1, ge=1, le=5)


class ServiceSettings(NatsSettings):
    log_level: str = "INFO"  # LOG_LEVEL
    runtime_data_dir: Path = Path("./runtime-data")  # RUNTIME_DATA_DIR
    instance_name: str = ""  # INSTANCE_NAME: tells two processes of one service apart in logs
    # STOP_GRACE_S: how long a stop may take from SIGTERM before the process exits regardless
    # (a launcher, compose or an orchestrator waits on it; the stop is crash-safe either way).
    # The agent divides it (`delegate.agent.main`): 40% for a running turn to finish, 35%
    # for term.ended; a turn cut short is redelivered. 3.5 s keeps `make run`'s whole stop within
    # 5 s on a loaded machine (then NATS's share, the exits; 50 rounds measured: bench/stops.py).
    stop_grace_s: float = Field(default=3.5, gt=0, le=120)

    # Which model answers (see `openai`): a real key selects OpenAI (or OPENAI_BASE_URL);
    # without one the offline stand-in at OPENAI_STANDIN_URL answers.
    openai_api_key: SecretStr | None = None  # OPENAI_API_KEY
    openai_base_url: str | None = None  # OPENAI_BASE_URL
    openai_standin_url: str | None = None  # OPENAI_STANDIN_URL: set by `make run` and compose

    def model_post_init(self, context: object, /) -> None:
        # The OpenAI SDK reads its key and base URL from the process environment itself: give it
        # what these settings say (a key from .env, the stand-in when no key is given).
        export_openai_environment(self.openai)

    @property
    def openai(self) -> OpenAIEndpoint:
        key = self.openai_api_key.get_secret_value() if self.openai_api_key else None
        return openai_endpoint(key, self.openai_base_url, self.openai_standin_url)

    def openai_client_options(self) -> dict[str, Any] | None:
        """``api_key`` and ``base_url`` for an OpenAI SDK client, given explicitly: in one host
        process the environment is shared, so a client must not depend on what it says. None:
        no key and no stand-in, nothing to send a request to (the SDK would refuse too)."""
        endpoint = self.openai
        if endpoint.offline and endpoint.base_url is None:
            return None
        return {"api_key": endpoint.api_key, "base_url": endpoint.base_url}
