"""The pollers' one settings class: email in and out, and the SMS half of the outbox."""

from datetime import time
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, field_validator

from delegate.runtime.settings import ServiceSettings

from .mail_auth import check_setting


def parse_clock(text: str) -> time | None:
    """HH:MM or HH:MM:SS as a time of day, or None."""
    try:
        return time.fromisoformat(text.strip()) if text.strip().count(":") in (1, 2) else None
    except ValueError:
        return None


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

    # Web Push (the subscriptions the gateway keeps): the VAPID "sub" claim push services may
    # write to about our traffic; how long a push service keeps an undelivered push; how old an
    # event may be and still be pushed; and whether an http or private-address endpoint (a local
    # receiver) is allowed: for tests and development only.
    push_vapid_subject: str = "mailto:owner@localhost"  # PUSH_VAPID_SUBJECT
    push_ttl_s: float = Field(default=86400.0, ge=0, le=28 * 86400.0)  # PUSH_TTL_S
    push_max_age_s: float = Field(default=3600.0, gt=0)  # PUSH_MAX_AGE_S
    push_allow_private_endpoints: bool = False  # PUSH_ALLOW_PRIVATE_ENDPOINTS
    # The VAPID private key (PEM, or base64url): unset -> made once under RUNTIME_DATA_DIR/push;
    # set it (the same for the gateway and the pollers) when they share no runtime dir.
    push_vapid_private_key: SecretStr | None = None  # PUSH_VAPID_PRIVATE_KEY

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

    # The calendar over CalDAV (CALDAV_*): unset URL -> no calendar. CALDAV_URL is the server or
    # the account's home (https://caldav.fastmail.com/dav/, https://apidata.googleusercontent.com/
    # caldav/v2/<id>/events); the username and the password or app password log in to it.
    caldav_url: str | None = None
    caldav_username: str = ""
    caldav_password: str = ""
    # OAuth2 instead of a password (Google): a refresh token switches CalDAV to bearer tokens;
    # CALDAV_OAUTH2_TOKEN_URL defaults to Google's endpoint
    caldav_oauth2_client_id: str = ""
    caldav_oauth2_client_secret: str = ""
    caldav_oauth2_refresh_token: str = ""
    caldav_oauth2_token_url: str = ""
    caldav_oauth2_scope: str = ""
    # CALENDAR_READ: the calendars read, a comma list of display names or URLs (empty: all of the
    # account's); CALENDAR_WRITE: the one written to (empty: the first one read)
    calendar_read: str = ""
    calendar_write: str = ""
    calendar_confirm_writes: bool = True  # CALENDAR_CONFIRM_WRITES: the owner says yes before any write
    calendar_poll_s: float = Field(default=60.0, gt=0)  # CALENDAR_POLL_S: how often the server is asked what changed
    # CALENDAR_UPCOMING_LEAD_S: calendar.upcoming this long before an event with a place or attendees
    calendar_upcoming_lead_s: float = Field(default=15 * 60.0, ge=0)
    # AGENDA_AT: the morning agenda's local time (HH:MM, OWNER_TIMEZONE), once a day; unset: none
    agenda_at: str | None = None
    owner_timezone: str = "UTC"  # OWNER_TIMEZONE: the owner's days (agenda, "today")
    # CALENDAR_REPLY_VIA: how the calendar's signals reach the owner (sms, email, call); empty:
    # the channel the owner used last
    calendar_reply_via: Literal["sms", "email", "call"] | None = None

    # Contacts from the same server's address books (CardDAV), when CALDAV_URL is set:
    # CONTACTS_ENABLED turns them off; CONTACTS_ADDRESSBOOKS, a comma list of display names or
    # URLs (empty: all of the account's); CONTACTS_POLL_S: how often the cards' ETags are compared
    contacts_enabled: bool = True
    contacts_addressbooks: str = ""
    contacts_poll_s: float = Field(default=300.0, gt=0)

    @field_validator("agenda_at")
    @classmethod
    def _agenda_at(cls, value: str | None) -> str | None:
        if value is not None and parse_clock(value) is None:
            raise ValueError("AGENDA_AT is a local time HH:MM (or HH:MM:SS), e.g. 07:30")
        return value

    @field_validator("owner_timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"OWNER_TIMEZONE {value!r} is not an IANA timezone (e.g. Europe/Berlin)") from None
        return value

    @property
    def calendar_enabled(self) -> bool:
        return bool(self.caldav_url)

    @property
    def agenda_time(self) -> time | None:
        return parse_clock(self.agenda_at) if self.agenda_at else None

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
