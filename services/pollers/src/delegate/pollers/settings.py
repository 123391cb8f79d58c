"""The pollers' one settings class: email in and out, and the SMS half of the outbox."""

from typing import Literal

from pydantic import Field, field_validator

from delegate.runtime.settings import ServiceSettings

from .mail_auth import check_setting

Tls = Literal["ssl", "starttls", "none"]
DEFAULT_PORTS = {"imap": {"ssl": 993, "starttls": 143, "none": 143}, "smtp": {"ssl": 465, "starttls": 587, "none": 25}}


class Settings(ServiceSettings):
    owner_email: str | None = None  # OWNER_EMAIL: the only sender whose mail is answered
    owner_phone: str | None = None  # OWNER_PHONE: where SMS go (E.164)

    # mail in (IMAP_*): unset host -> email off
    imap_host: str | None = None
    imap_port: int | None = None  # default from IMAP_TLS
    imap_user: str = ""
    imap_password: str = ""
    imap_tls: Tls = "ssl"
    imap_mailbox: str = "INBOX"
    # IMAP_START: on the very first start (no progress in the ledger yet), "new" answers only mail
    # that arrives from then on, so pointing Delegate at a full inbox does not answer years of
    # mail; "all" processes what the mailbox already holds too
    imap_start: Literal["new", "all"] = "new"
    # IMAP_POLL_S: the safety-net poll while IDLE, and the poll interval where IDLE is missing;
    # IMAP_IDLE_S: how long one IDLE runs before it is renewed (servers drop idlers after 30 min)
    imap_poll_s: float = Field(default=60.0, gt=0)
    imap_idle_s: float = Field(default=25 * 60.0, gt=0)
    # EMAIL_AUTHSERV_ID: the owner's provider's authserv-ids in Authentication-Results, comma-
    # separated ids and *.domain patterns, "(none)" for Microsoft's id-less header; when set,
    # owner mail must carry dmarc=pass or an aligned dkim=pass stamped by that provider
    email_authserv_id: str | None = None
    email_attachment_limit: int = Field(default=10 * 1024 * 1024, ge=0)  # EMAIL_ATTACHMENT_LIMIT bytes stored per item
    email_max_bytes: int = Field(default=40 * 1024 * 1024, ge=1024)  # EMAIL_MAX_BYTES: bigger mail is refused unread

    # mail out (SMTP_*): unset host -> email replies off
    smtp_host: str | None = None
    smtp_port: int | None = None  # default from SMTP_TLS
    smtp_user: str = ""
    smtp_password: str = ""
    smtp_tls: Tls = "starttls"
    smtp_from: str = ""  # default SMTP_USER, else delegate@<smtp host>

    # OAuth2 (XOAUTH2) instead of passwords: MAIL_OAUTH2_* for both sides, IMAP_OAUTH2_* and
    # SMTP_OAUTH2_* override it field by field. A refresh token switches the side to OAuth2;
    # *_TOKEN_URL defaults to Google's or Microsoft's endpoint for their mail hosts.
    mail_oauth2_client_id: str = ""
    mail_oauth2_client_secret: str = ""
    mail_oauth2_refresh_token: str = ""
    mail_oauth2_token_url: str = ""
    mail_oauth2_scope: str = ""  # e.g. Microsoft: https://outlook.office.com/IMAP.AccessAsUser.All offline_access
    imap_oauth2_client_id: str = ""
    imap_oauth2_client_secret: str = ""
    imap_oauth2_refresh_token: str = ""
    imap_oauth2_token_url: str = ""
    imap_oauth2_scope: str = ""
    smtp_oauth2_client_id: str = ""
    smtp_oauth2_client_secret: str = ""
    smtp_oauth2_refresh_token: str = ""
    smtp_oauth2_token_url: str = ""
    smtp_oauth2_scope: str = ""

    # SMS out (Twilio REST): unset account -> SMS off
    twilio_account_sid: str | None = None
    twilio_auth_token: str | None = None
    twilio_phone_number: str | None = None
    twilio_api_base_url: str | None = None  # TWILIO_API_BASE_URL: a local stand-in in tests
    public_base_url: str = "http://localhost:8081"  # PUBLIC_BASE_URL: status callbacks point here
    mms_media_limit: int = Field(default=5 * 1024 * 1024, ge=0)  # MMS_MEDIA_LIMIT bytes per media item

    # OUTBOX_*: delivery retries (5xx, timeouts) before a send is recorded as failed
    outbox_attempts: int = Field(default=5, ge=1)
    outbox_backoff_s: float = Field(default=1.0, gt=0)
    outbox_backoff_max_s: float = Field(default=30.0, gt=0)
    outbox_ack_wait_s: float = Field(default=60.0, gt=0)
    # OUTBOX_HTTP_TIMEOUT_S: one Twilio request or SMTP transaction; beyond it the try counts as a timeout
    outbox_http_timeout_s: float = Field(default=30.0, gt=0)

    @field_validator("email_authserv_id")
    @classmethod
    def _authserv_ids(cls, value: str | None) -> str | None:
        problem = check_setting(value)
        if problem:
            raise ValueError(problem)
        return value

    @property
    def email_enabled(self) -> bool:
        return bool(self.imap_host)

    @property
    def smtp_enabled(self) -> bool:
        return bool(self.smtp_host)

    @property
    def sms_enabled(self) -> bool:
        twilio = self.twilio_account_sid and self.twilio_auth_token and self.twilio_phone_number
        return bool(twilio and self.owner_phone)

    @property
    def imap_port_or_default(self) -> int:
        return self.imap_port or DEFAULT_PORTS["imap"][self.imap_tls]

    @property
    def smtp_port_or_default(self) -> int:
        return self.smtp_port or DEFAULT_PORTS["smtp"][self.smtp_tls]

    @property
    def smtp_sender(self) -> str:
        return self.smtp_from or self.smtp_user or f"delegate@{self.smtp_host or 'localhost'}"
