"""The gateway's one settings class; env var names as in interfaces.md."""

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from delegate.runtime.settings import ServiceSettings
from delegate.runtime.spend import known_timezone

from .phone import e164

# services/gateway/src/delegate/gateway/settings.py -> the repository root is five levels up.
_REPO_ROOT = Path(__file__).resolve().parents[5]


def default_client_dir() -> Path:
    """The repo's ``client/`` for a source checkout; containers set CLIENT_DIR instead."""
    for candidate in (_REPO_ROOT / "client", Path.cwd() / "client"):
        if candidate.is_dir():
            return candidate
    return _REPO_ROOT / "client"


class Settings(ServiceSettings):
    # Loopback by default: the owner's machine should not expose the API to its LAN unasked.
    # The container image sets DELEGATE_HOST=0.0.0.0.
    delegate_host: str = "127.0.0.1"  # DELEGATE_HOST
    delegate_port: int = 8081  # DELEGATE_PORT
    delegate_token: SecretStr | None = None  # DELEGATE_TOKEN; unset -> generated and stored once
    public_base_url: str = "http://localhost:8081"  # PUBLIC_BASE_URL
    # Twilio webhooks: unset token -> /sms and /sms/status answer 503 sms_disabled; unset owner
    # phone -> /sms does too (nobody could be let in, so refusing everyone would only fill the ledger).
    twilio_auth_token: SecretStr | None = None  # TWILIO_AUTH_TOKEN
    # A Webhook Rule may have Twilio sign with a SharedKey (HMAC-SHA256) instead of the Auth
    # Token: the SharedKeys' secrets, comma-separated (two while one replaces the other).
    twilio_webhook_shared_keys: SecretStr | None = None  # TWILIO_WEBHOOK_SHARED_KEYS
    owner_phone: str | None = None  # OWNER_PHONE, normalised to E.164
    client_dir: Path = Field(default_factory=default_client_dir)  # CLIENT_DIR
    timeline_history_event_limit: int = Field(default=500, ge=1, le=5000)  # TIMELINE_HISTORY_EVENT_LIMIT
    compact_threshold: int = 200_000  # COMPACT_THRESHOLD, only for the state shown while the agent is down

    # Browser sign-in (GATEWAY_*): how long a session lasts (also the session bucket's TTL);
    # how often an open /chat socket checks that its session still exists;
    # the addresses of reverse proxies whose X-Forwarded-Proto/-For are believed (comma-separated
    # IPs or networks; empty: none, so no client can claim https for itself); whether a generated
    # owner token is printed on stderr (`make run` shows it on its terminal itself and turns this off).
    # Web Push: a subscription's endpoint must be https on a public address (real push services
    # are); true lets a local receiver in, for tests and development only.
    push_allow_private_endpoints: bool = False  # PUSH_ALLOW_PRIVATE_ENDPOINTS
    # The VAPID private key (PEM, or base64url): unset -> made once under RUNTIME_DATA_DIR/push;
    # set it (the same for the gateway and the pollers) when they share no runtime dir.
    push_vapid_private_key: SecretStr | None = None  # PUSH_VAPID_PRIVATE_KEY

    gateway_session_days: float = Field(default=30.0, gt=0, le=400)
    gateway_session_recheck_s: float = Field(default=15.0, gt=0)  # how soon a signed-out /chat closes
    gateway_trusted_proxies: str = ""
    gateway_announce_token: bool = True

    # /chat fan-out tuning (GATEWAY_*): frames a connection may have queued before it is told to
    # resync; how long a lagging client may take to read the frames before its resync before the
    # hub lets it go (its connection still waits for the socket, so a client that resumes reads
    # resync and close 4408); when such a connection is cut even so (past the WebSocket keepalive,
    # which closes a client that reads nothing with 1011 first); how long a new connection
    # may take to say hello before it is switched to live delivery, and how long without a committed
    # event before the hub asks the ledger whether it missed one (lost live messages after a NATS restart).
    gateway_ws_queue_limit: int = Field(default=1000, ge=8)
    gateway_ws_lag_close_s: float = Field(default=10.0, gt=0)
    gateway_ws_drop_s: float = Field(default=120.0, gt=0)
    gateway_hello_grace_s: float = Field(default=1.0, ge=0)
    gateway_tail_check_s: float = Field(default=2.0, gt=0)

    # Voice (VOICE_*): the gateway and the voice service each send a heartbeat every
    # VOICE_HEARTBEAT_S on a live call; hearing nothing from voice for VOICE_LOST_AFTER_S means
    # it died, and the call is ended (the phone hears the TwiML's apology). A Media Stream must
    # say ``start`` within VOICE_START_TIMEOUT_S of opening. Twilio sends caller audio every 20 ms
    # for as long as a call lives, and the page sends audio (or, muted, a heartbeat frame) as
    # often: nothing from the caller's side for VOICE_MEDIA_TIMEOUT_S means the stream is lost
    # though its socket still answers pings, and the call ends (``stream_lost``), freeing the lock.
    voice_heartbeat_s: float = Field(default=1.0, gt=0)
    voice_lost_after_s: float = Field(default=3.0, gt=0)
    voice_start_timeout_s: float = Field(default=10.0, gt=0)
    voice_media_timeout_s: float = Field(default=10.0, gt=0)
    # GATEWAY_STALLED_PEER_S: how long what we sent may wait unacknowledged, or unsent behind a
    # peer's zero window (a client that stopped reading), before the kernel drops the connection
    # (TCP_USER_TIMEOUT on every accepted socket). Bounds SSE streams, which have no ping of their
    # own; /chat's ping closes a stalled reader first (1011).
    gateway_stalled_peer_s: float = Field(default=60.0, ge=1, le=3600)

    # Twilio's webhooks (/sms, /sms/status, /call/status) are answered once what they carry is
    # in a local spool, drained into NATS by a background task (GATEWAY_SPOOL*): Twilio does not
    # retry a webhook that got an error, so nothing may depend on NATS being up at that moment.
    # GATEWAY_SPOOL=false answers only after JetStream stored it (a gateway with no writable disk);
    # GATEWAY_SPOOL_PATH defaults to RUNTIME_DATA_DIR/spool/<INSTANCE_NAME or gateway>.sqlite, one
    # file per gateway; past GATEWAY_SPOOL_MAX_ROWS waiting messages a webhook gets 503 spool_full.
    gateway_spool: bool = True
    gateway_spool_path: Path | None = None
    gateway_spool_max_rows: int = Field(default=100_000, ge=1)

    # POST /api/import: the largest body taken (NDJSON or a ChatGPT conversations.json export).
    import_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)  # IMPORT_MAX_BYTES

    # GET /api/usage: the owner's days (OWNER_TIMEZONE, an IANA name), as budgets count them.
    owner_timezone: str = "UTC"

    @field_validator("owner_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        return known_timezone(value)

    @field_validator("delegate_token", mode="before")
    @classmethod
    def _empty_token_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("twilio_auth_token", mode="before")
    @classmethod
    def _empty_twilio_token_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("owner_phone", mode="before")
    @classmethod
    def _owner_phone_e164(cls, value: object) -> object:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            return value
        number = e164(value)
        if number is None:
            raise ValueError("OWNER_PHONE must be a phone number in international form, e.g. +15550101")
        return number

    @property
    def spool_path(self) -> Path:
        if self.gateway_spool_path is not None:
            return self.gateway_spool_path
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.instance_name) or "gateway"
        return self.runtime_data_dir / "spool" / f"{name}.sqlite"

    @property
    def session_ttl_s(self) -> float:
        return self.gateway_session_days * 24 * 3600

    @property
    def twilio_webhook_shared_key_secrets(self) -> list[str]:
        keys = self.twilio_webhook_shared_keys
        return [k.strip() for k in keys.get_secret_value().split(",") if k.strip()] if keys else []

    @property
    def trusted_proxies(self) -> list[str]:
        return [p.strip() for p in self.gateway_trusted_proxies.split(",") if p.strip()]

    @property
    def secure_cookies(self) -> bool:
        return urlsplit(self.public_base_url).scheme == "https"

    @property
    def public_origin(self) -> str:
        parts = urlsplit(self.public_base_url)
        return f"{parts.scheme}://{parts.netloc}".lower()

    @property
    def own_origins(self) -> frozenset[str]:
        """The origins the owner's pages come from: PUBLIC_BASE_URL's when it is set, and the
        address the gateway listens on (its loopback names when it listens on every interface)."""
        port = self.delegate_port
        if self.delegate_host in ("0.0.0.0", "::", "", "127.0.0.1", "localhost", "::1"):
            hosts = ["localhost", "127.0.0.1", "[::1]"]
        else:
            hosts = [f"[{self.delegate_host}]" if ":" in self.delegate_host else self.delegate_host]
        origins = {f"http://{host}:{port}".lower() for host in hosts}
        if "public_base_url" in self.model_fields_set:
            origins.add(self.public_origin)
        return frozenset(origins)
