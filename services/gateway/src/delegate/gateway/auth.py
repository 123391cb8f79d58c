"""The owner's token: where it comes from, and how a request proves it holds it.

Three proofs are accepted: ``Authorization: Bearer <token>``, the HttpOnly cookie of a
browser session made by ``POST /api/session`` (see ``sign_in``), and, for WebSocket
scripts only, a ``token`` query parameter. Token comparisons are constant-time.
"""

import hmac
import logging
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from .settings import Settings
from .sign_in import SessionStore

log = logging.getLogger(__name__)

SESSION_COOKIE = "delegate_session"
TOKEN_FILE = "delegate-token"

Proof = Literal["bearer", "cookie", "query"]
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def load_or_create_token(runtime_dir: Path, *, announce: bool = True) -> str:
    """The stored token, or a new one written with mode 0600 and printed once (``announce``).

    The announcement goes to stderr directly, never through logging: no log handler, file or
    shipper ever holds the token, and later starts (which find the file) say nothing.

    The file appears complete or not at all (written to a temporary name, then hard-linked
    into place, which fails if it exists): two gateways starting together agree on one
    token, and nobody (a second gateway, the launcher) ever reads a half-written file.
    """
    path = runtime_dir / TOKEN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return _read_token(path)
    token = secrets.token_urlsafe(32)
    tmp = private_temp_file(path, token)
    try:
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
    log.warning("generated a new owner token in %s (set DELEGATE_TOKEN to choose your own)", path)
    if announce:
        sys.stderr.write(f"Delegate owner token: {token} (shown once; it is stored in {path})\n")
        sys.stderr.flush()
    return token


def private_temp_file(path: Path, token: str) -> Path:
    """A fsynced file beside ``path`` (mode 0600, a unique name) holding ``token``: moved or
    linked into place by the caller, so readers never see a half-written token."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _read_token(path: Path) -> str:
    text = path.read_text().strip()
    if not text:
        raise RuntimeError(f"{path} is empty: delete it to generate a new owner token")
    return text


class OwnerAuth:
    def __init__(self, token: str, settings: Settings) -> None:
        self._token = token.encode()
        self.sessions = SessionStore(token, settings.session_ttl_s)
        self.always_secure = settings.secure_cookies
        self.origins = settings.own_origins
        self.hosts = frozenset(_host_port(origin) for origin in self.origins)

    def check_token(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._token)

    async def authenticate(
        self, headers: Mapping[str, str], cookies: Mapping[str, str], query_token: str | None = None
    ) -> Proof | None:
        """Which proof the request carries, or None. ``query_token`` only for WebSockets.

        Raises ``SessionsUnavailable`` when only a cookie is offered and the session bucket
        cannot be read: the caller answers "try again", not "signed out".
        """
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.check_token(credentials.strip()):
            return "bearer"
        if query_token is not None and self.check_token(query_token):
            return "query"
        if await self.sessions.check(cookies.get(SESSION_COOKIE)):
            return "cookie"
        return None

    def cookie_secure(self, scheme: str) -> bool:
        """``Secure`` whenever the request came over https: directly, or as a trusted proxy says
        (uvicorn rewrites the scheme from X-Forwarded-Proto for GATEWAY_TRUSTED_PROXIES only)."""
        return self.always_secure or scheme in ("https", "wss")

    def host_allowed(self, headers: Mapping[str, str]) -> bool:
        """The request was sent to one of our own names (DNS rebinding: a foreign name that
        resolves to this machine reaches the gateway with that name as its Host)."""
        name, port = _host_port(f"//{headers.get('host', '')}")
        if not name:
            return False
        if port is None:  # the scheme's default port, whichever scheme it came over
            return (name, 80) in self.hosts or (name, 443) in self.hosts
        return (name, port) in self.hosts

    def origin_allowed(self, headers: Mapping[str, str], *, required: bool = False) -> bool:
        """A cookie-authenticated request must come from our own page (CSRF, WebSocket hijacking).

        SameSite=Strict keeps the cookie off cross-site requests, but "site" ignores the port:
        another local app's page is same-site. So the Origin must be ours exactly: one of the
        configured origins (``Settings.own_origins``), never whatever the request's own Host
        says (a forged Host would vouch for itself), and the Host must be one of ours too.
        Browsers send Origin on every WebSocket handshake and every POST/DELETE, so ``required``
        (REST writes) refuses a missing one; a WebSocket without Origin is a non-browser client.
        """
        if not self.host_allowed(headers):
            return False
        origin = headers.get("origin")
        if not origin or origin == "null":
            return not required and not origin
        return origin.lower() in self.origins


def _host_port(origin: str) -> tuple[str, int | None]:
    """(host, port) of an origin (or of ``//host:port``), the scheme's default port filled in."""
    parts = urlsplit(origin.lower())
    try:
        port = parts.port
    except ValueError:
        return ("", None)
    return (parts.hostname or "", port if port is not None else {"http": 80, "https": 443}.get(parts.scheme))
