"""The tool registry's own settings: env var names as in interfaces.md, plus a few tool knobs."""

from pathlib import Path
from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict


class ToolSettings(BaseSettings):
    # extra="ignore": one shared .env carries every service's keys; the same rules as every
    # service's settings (delegate.runtime.settings_source): an empty value means unset.
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", env_ignore_empty=True)

    runtime_data_dir: Path = Path("./runtime-data")  # RUNTIME_DATA_DIR

    # how the registry runs tools
    tool_timeout_s: float = 30.0  # TOOL_TIMEOUT_S: default per-call timeout (MCP servers may set their own)
    tools_reload_interval_s: float = 2.0  # TOOLS_RELOAD_INTERVAL_S: how often the two JSON files are checked
    mcp_probe_interval_s: float = 5.0  # MCP_PROBE_INTERVAL_S: liveness probe of each connected MCP server
    mcp_start_wait_s: float = 5.0  # MCP_START_WAIT_S: how long start() waits for the servers' first connect
    mcp_max_backoff_s: float = 30.0  # MCP_MAX_BACKOFF_S: cap of the reconnect backoff
    tool_output_limit: int = 60_000  # TOOL_OUTPUT_LIMIT: characters of output handed back to the model

    # web_search (the Responses built-in web search, through the official SDK)
    openai_api_key: str | None = None  # OPENAI_API_KEY
    openai_base_url: str | None = None  # OPENAI_BASE_URL
    openai_model: str = "gpt-5.5"  # OPENAI_MODEL (the agent's default too)
    web_search_timeout_s: float = 60.0  # WEB_SEARCH_TIMEOUT_S

    # send_sms_to_owner (Twilio REST)
    twilio_account_sid: str | None = None  # TWILIO_ACCOUNT_SID
    twilio_auth_token: str | None = None  # TWILIO_AUTH_TOKEN
    twilio_phone_number: str | None = None  # TWILIO_PHONE_NUMBER
    twilio_api_base_url: str | None = None  # TWILIO_API_BASE_URL: a local stand-in in tests
    owner_phone: str | None = None  # OWNER_PHONE

    # send_email_to_owner (SMTP)
    smtp_host: str | None = None  # SMTP_HOST
    smtp_port: int | None = None  # SMTP_PORT: default from SMTP_TLS (465 ssl, 587 starttls, 25 none)
    smtp_user: str | None = None  # SMTP_USER
    smtp_password: str | None = None  # SMTP_PASSWORD
    smtp_tls: Literal["ssl", "starttls", "none"] = "starttls"  # SMTP_TLS
    smtp_from: str | None = None  # SMTP_FROM: default SMTP_USER, else delegate@<smtp host>
    owner_email: str | None = None  # OWNER_EMAIL
    # OWNER_DELIVERY_WAIT_S: how long send_sms/send_email_to_owner wait for the pollers' outcome
    # before answering "queued" (the message stays in the outbox either way)
    owner_delivery_wait_s: float = 20.0

    # the calendar tools: offered when the pollers serve a calendar (CALDAV_URL is set)
    caldav_url: str | None = None  # CALDAV_URL
    owner_timezone: str = "UTC"  # OWNER_TIMEZONE: calendar times without an offset are the owner's

    # GitHub issues and pull requests
    github_token: str | None = None  # GITHUB_TOKEN
    github_api_base_url: str = "https://api.github.com"  # GITHUB_API_BASE_URL
    github_repos: str = ""  # GITHUB_REPOS: comma list of owner/name

    @property
    def sms_configured(self) -> bool:
        return all((self.twilio_account_sid, self.twilio_auth_token, self.twilio_phone_number, self.owner_phone))

    @property
    def email_configured(self) -> bool:
        return bool(self.smtp_host and self.owner_email)

    @property
    def github_repo_list(self) -> list[str]:
        return [r.strip() for r in self.github_repos.split(",") if r.strip()]
