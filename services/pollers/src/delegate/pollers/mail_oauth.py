"""OAuth2 access tokens for XOAUTH2 mail (IMAP and SMTP), from a refresh token.

Outlook.com and Microsoft 365 take nothing else for IMAP and SMTP; Gmail prefers it to app
passwords. The owner registers an app once and gets a refresh token (README, "Connect
email"); from it we fetch short-lived access tokens with the refresh_token grant (RFC 6749
§6): before the first login, when the one we hold has expired, and when a server refuses it
(revoked early, or a clock that disagrees) — then the login is tried once more.

Authlib makes the refresh request and reads the answer: the grant's form, client
authentication at the token endpoint, errors as RFC 6749 §5.2 shapes them, keeping the old
refresh token when the answer carries none, and expiry with a leeway. It is maintained,
async on httpx, and loaded only when a mail OAuth2 setting is given (the pollers without
OAuth2 do not carry it).

A provider that rotates refresh tokens (Microsoft does) hands out a new one with each
refresh; RFC 6749 §6 says the client must then use the new one. It is kept in a private file
under RUNTIME_DATA_DIR, keyed by the configured token, so a restart continues with it and
configuring a new token starts over from that.
"""

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .private_files import store_file
from .settings import Settings

log = logging.getLogger(__name__)

Side = Literal["imap", "smtp"]
LEEWAY_S = 60  # refresh this long before the stated expiry: a login takes a moment
STATE_DIR = Path("mail-oauth2")
# the token endpoints of the providers whose mail servers we recognise
GOOGLE = "https://oauth2.googleapis.com/token"
MICROSOFT = "https://login.microsoftonline.com/common/oauth2/v2.0/token"
KNOWN_TOKEN_URLS = {
    "imap.gmail.com": GOOGLE, "smtp.gmail.com": GOOGLE,
    "outlook.office365.com": MICROSOFT, "smtp.office365.com": MICROSOFT, "smtp-mail.outlook.com": MICROSOFT,
}


class MailOAuthError(Exception):
    """No access token: ``final`` when the endpoint refused (invalid_grant: a new refresh token is
    needed), otherwise it could not be reached and a later try may work."""

    def __init__(self, message: str, *, final: bool) -> None:
        super().__init__(message)
        self.final = final


# A plain frozen record; the agent's FunctionCall has its shape, not its meaning.
@dataclass(frozen=True)
class Credentials:
    client_id: str
    client_secret: str
    refresh_token: str
    token_url: str
    scope: str

    @property
    def key(self) -> str:
        basis = "\n".join((self.token_url, self.client_id, self.refresh_token))
        return hashlib.sha256(basis.encode()).hexdigest()[:24]


def credentials(settings: Settings, side: Side) -> Credentials | None:
    """IMAP_OAUTH2_* / SMTP_OAUTH2_*, each field falling back to MAIL_OAUTH2_*; None (passwords)
    when no refresh token is given for this side."""

    def pick(field: str) -> str:
        own = getattr(settings, f"{side}_oauth2_{field}")
        return str(own or getattr(settings, f"mail_oauth2_{field}") or "").strip()

    refresh = pick("refresh_token")
    if not refresh:
        return None
    host = (settings.imap_host if side == "imap" else settings.smtp_host) or ""
    token_url = pick("token_url") or KNOWN_TOKEN_URLS.get(host.lower(), "")
    return Credentials(pick("client_id"), pick("client_secret"), refresh, token_url, pick("scope"))


def check_settings(settings: Settings) -> list[str]:
    """What keeps OAuth2 mail from ever working, as messages naming the settings."""
    problems = []
    for side, enabled in (("imap", settings.email_enabled), ("smtp", settings.smtp_enabled)):
        creds = credentials(settings, side) if enabled else None  # type: ignore[arg-type]
        if creds is None:
            continue
        upper = side.upper()
        if not creds.client_id:
            problems.append(f"{upper}_OAUTH2_CLIENT_ID (or MAIL_OAUTH2_CLIENT_ID) is needed with a refresh token")
        if not creds.token_url:
            problems.append(f"{upper}_OAUTH2_TOKEN_URL (or MAIL_OAUTH2_TOKEN_URL) is needed: "
                            f"the token endpoint of {getattr(settings, f'{side}_host')} is not known")
        if not getattr(settings, f"{side}_user"):
            problems.append(f"{upper}_USER is needed with OAuth2: it is the mailbox XOAUTH2 logs in as")
    return problems


class AccessTokens:
    """The access token of one set of credentials, shared by IMAP and SMTP when they use the
    same; refreshed by one caller at a time."""

    def __init__(self, creds: Credentials, runtime_dir: Path, timeout: float) -> None:
        self.creds, self.runtime_dir, self.timeout = creds, runtime_dir, timeout
        self._lock = asyncio.Lock()
        self._token: Any = None  # authlib's OAuth2Token (a dict with is_expired)
        self.refreshes = 0

    async def current(self) -> str:
        """A token that has not expired yet, refreshed first if needed."""
        async with self._lock:
            if self._token is None or self._token.is_expired(leeway=LEEWAY_S):
                await self._refresh()
            return str(self._token["access_token"])

    async def after_rejection(self, rejected: str) -> str:
        """The server refused ``rejected``: a new one (unless another login already got one)."""
        async with self._lock:
            if self._token is None or self._token.get("access_token") == rejected:
                await self._refresh()
            return str(self._token["access_token"])

    @property
    def _state_file(self) -> Path:
        return self.runtime_dir / STATE_DIR / f"{self.creds.key}.json"

    def _refresh_token(self) -> str:
        try:
            stored = json.loads(self._state_file.read_text())
            return str(stored["refresh_token"]) or self.creds.refresh_token
        except (OSError, ValueError, KeyError, TypeError):
            return self.creds.refresh_token

    async def _refresh(self) -> None:
        from authlib.integrations.base_client import OAuthError
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        creds, refresh = self.creds, self._refresh_token()
        try:
            async with AsyncOAuth2Client(
                client_id=creds.client_id, client_secret=creds.client_secret or None,
                # Google's and Microsoft's documented form; a public client (no secret) sends only its id
                token_endpoint_auth_method="client_secret_post" if creds.client_secret else "none",
                scope=creds.scope or None, timeout=self.timeout,
            ) as client:
                token = await client.refresh_token(creds.token_url, refresh_token=refresh)
        except OAuthError as exc:
            raise MailOAuthError(
                f"the token endpoint refused the refresh token ({exc.error}: {exc.description or ''}); "
                "a new refresh token is needed", final=True,
            ) from exc
        except Exception as exc:  # unreachable, a timeout, an answer that is not a token: try later
            raise MailOAuthError(f"no access token from {creds.token_url}: {exc!r}", final=False) from exc
        if not token.get("access_token"):
            raise MailOAuthError(f"{creds.token_url} answered without an access_token", final=False)
        self._token, self.refreshes = token, self.refreshes + 1
        rotated = str(token.get("refresh_token") or "")
        if rotated and rotated != refresh:
            self._keep(rotated)
        log.info("mail OAuth2: new access token from %s (expires in %ss)", creds.token_url, token.get("expires_in"))

    def _keep(self, refresh_token: str) -> None:
        try:
            store_file(self.runtime_dir, STATE_DIR, self._state_file.name,
                       json.dumps({"refresh_token": refresh_token}).encode())
        except OSError as exc:  # still usable in this run; a restart falls back to the configured one
            log.warning("mail OAuth2: the rotated refresh token could not be kept: %r", exc)


_shared: dict[tuple[str, Path], AccessTokens] = {}


def tokens(settings: Settings, side: Side) -> AccessTokens | None:
    """The side's access tokens, or None when it logs in with a password."""
    creds = credentials(settings, side)
    if creds is None:
        return None
    key = (creds.key, settings.runtime_data_dir)
    if key not in _shared:
        _shared[key] = AccessTokens(creds, settings.runtime_data_dir, settings.outbox_http_timeout_s)
    return _shared[key]
