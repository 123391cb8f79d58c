"""The owner's token: where it comes from, and how a request proves it holds it.

Three proofs are accepted: ``Authorization: Bearer <token>``, the HttpOnly session
cookie set by ``POST /api/session`` (what the browser uses), and, for WebSocket
scripts only, a ``token`` query parameter. All comparisons are constant-time.
"""

import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from .settings import Settings

log = logging.getLogger(__name__)

SESSION_COOKIE = "delegate_session"
TOKEN_FILE = "delegate-token"

Proof = Literal["bearer", "cookie", "query"]


def session_value(token: str) -> str:
    """The cookie value: proves the token without being it (a leaked cookie is not the token)."""
    return hmac.new(token.encode(), b"delegate-session", hashlib.sha256).hexdigest()


def load_or_create_token(runtime_dir: Path) -> str:
    """The stored token, or a new one written with mode 0600 and logged once.

    The file appears complete or not at all (written to a temporary name, then hard-linked
    into place, which fails if it exists): two gateways starting together agree on one
    token, and nobody (a second gateway, the launcher) ever reads a half-written file.
    """
    path = runtime_dir / TOKEN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return _read_token(path)
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return _read_token(path)
        except OSError:  # no hard links here (some network mounts): a rename is still atomic
            if path.exists():
                return _read_token(path)
            os.replace(tmp, path)
            token = _read_token(path)
    finally:
        tmp.unlink(missing_ok=True)
    log.warning("Delegate owner token: %s (stored in %s; set DELEGATE_TOKEN to choose your own)", token, path)
    return token


def _read_token(path: Path) -> str:
    text = path.read_text().strip()
    if not text:
        raise RuntimeError(f"{path} is empty: delete it to generate a new owner token")
    return text


class OwnerAuth:
    def __init__(self, token: str, settings: Settings) -> None:
        self._token = token.encode()
        self._session = session_value(token).encode()
        self.secure_cookies = settings.secure_cookies
        self.public_origin = settings.public_origin

    def check_token(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._token)

    def check_session(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._session)

    def session_cookie(self) -> str:
        return self._session.decode()

    def authenticate(
        self, headers: Mapping[str, str], cookies: Mapping[str, str], query_token: str | None = None
    ) -> Proof | None:
        """Which proof the request carries, or None. ``query_token`` only for WebSockets."""
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.check_token(credentials.strip()):
            return "bearer"
        if self.check_session(cookies.get(SESSION_COOKIE)):
            return "cookie"
        if query_token is not None and self.check_token(query_token):
            return "query"
        return None

    def origin_allowed(self, headers: Mapping[str, str]) -> bool:
        """A cookie-authenticated WebSocket must come from our own page (cross-site WS hijacking).

        SameSite=Strict already keeps the cookie off cross-site handshakes in current browsers;
        this is the second lock. No Origin header means a non-browser client.
        """
        origin = headers.get("origin")
        if not origin:
            return True
        origin = origin.lower()
        if origin == self.public_origin:
            return True
        host = headers.get("host", "").lower()
        return bool(host) and urlsplit(origin).netloc == host
