"""A local OAuth2 authorization server for the mail tests: the refresh_token grant of RFC 6749
§6 at ``/token``, and token introspection (RFC 7662) at ``/introspect`` for the mail servers
that must decide whether an XOAUTH2 access token is good (pymap in its own process; the SMTP
server asks ``active`` directly).

    auth = OAuthServer(user="owner@example.com").start()
    auth.token_url, auth.client_id, auth.client_secret, auth.refresh_token
    auth.revoke_access_tokens()     # every access token issued so far stops working
    auth.refreshes                  # the token requests answered with a token, oldest first
    auth.stop()

As strict as Google's and Microsoft's endpoints where RFC 6749 says what to refuse: POST with
an ``application/x-www-form-urlencoded`` body only (§3.2); the client authenticated by HTTP
Basic or by client_id/client_secret in the body, never both (§2.3.1), else 401
``invalid_client``; ``grant_type`` other than refresh_token is ``unsupported_grant_type``; an
unknown or used-up refresh token is ``invalid_grant`` (§5.2). A token answer carries
``Cache-Control: no-store`` (§5.1). With ``rotate=True`` each refresh hands out a new refresh
token and the old one stops working, as Microsoft's may (§6: "the client MUST discard the old
refresh token").
"""

import base64
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote

from .http_thread import HttpThread


@dataclass
class _Access:
    user: str
    expires_at: float
    revoked: bool = False


@dataclass
class _State:
    refresh_tokens: set[str] = field(default_factory=set)
    access: dict[str, _Access] = field(default_factory=dict)
    refreshes: list[dict[str, str]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # the error codes answered
    introspections: int = 0


class OAuthServer:
    def __init__(self, user: str, *, expires_in: int = 3600, rotate: bool = False) -> None:
        self.user, self.expires_in, self.rotate = user, expires_in, rotate
        self.client_id = "delegate-test-client"
        self.client_secret = secrets.token_urlsafe(16)
        self.refresh_token = "1//rt-" + secrets.token_urlsafe(24)
        self._state = _State(refresh_tokens={self.refresh_token})
        self._lock = threading.Lock()
        self._http: HttpThread | None = None

    # -- what tests look at and change ------------------------------------------

    @property
    def url(self) -> str:
        assert self._http is not None, "start() first"
        return self._http.url

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    @property
    def introspect_url(self) -> str:
        return f"{self.url}/introspect"

    @property
    def refreshes(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._state.refreshes)

    @property
    def refused(self) -> list[str]:
        with self._lock:
            return list(self._state.refused)

    @property
    def introspections(self) -> int:
        with self._lock:
            return self._state.introspections

    def revoke_access_tokens(self) -> None:
        with self._lock:
            for access in self._state.access.values():
                access.revoked = True

    def revoke_refresh_tokens(self) -> None:
        with self._lock:
            self._state.refresh_tokens.clear()

    def introspect(self, token: str) -> dict[str, Any]:
        """RFC 7662 §2.2: ``active`` and, for a live token, whose it is and when it expires."""
        with self._lock:
            self._state.introspections += 1
            access = self._state.access.get(token)
            if access is None or access.revoked or access.expires_at <= time.time():
                return {"active": False}
            return {"active": True, "username": access.user, "exp": int(access.expires_at), "token_type": "Bearer"}

    def active(self, token: str, user: str) -> bool:
        """Is ``token`` a live access token of ``user`` (what a mail server checks)?"""
        found = self.introspect(token)
        return bool(found["active"]) and found.get("username") == user

    def env(self, prefix: str = "MAIL") -> dict[str, str]:
        return {
            f"{prefix}_OAUTH2_CLIENT_ID": self.client_id, f"{prefix}_OAUTH2_CLIENT_SECRET": self.client_secret,
            f"{prefix}_OAUTH2_REFRESH_TOKEN": self.refresh_token, f"{prefix}_OAUTH2_TOKEN_URL": self.token_url,
        }

    # -- the grant ---------------------------------------------------------------

    def _grant(self, form: dict[str, str], basic: tuple[str, str] | None) -> tuple[int, dict[str, Any]]:
        in_body = "client_secret" in form
        if basic is not None and in_body:
            return 400, {"error": "invalid_request", "error_description": "more than one client authentication"}
        client_id, secret = basic if basic is not None else (form.get("client_id", ""), form.get("client_secret", ""))
        if client_id != self.client_id or secret != self.client_secret:
            return 401, {"error": "invalid_client", "error_description": "client authentication failed"}
        if form.get("grant_type") != "refresh_token":
            return 400, {"error": "unsupported_grant_type"}
        refresh = form.get("refresh_token")
        if not refresh:
            return 400, {"error": "invalid_request", "error_description": "refresh_token is missing"}
        with self._lock:
            if refresh not in self._state.refresh_tokens:
                return 400, {"error": "invalid_grant", "error_description": "refresh token unknown or revoked"}
            access = "ya29.at-" + secrets.token_urlsafe(24)
            self._state.access[access] = _Access(self.user, time.time() + self.expires_in)
            body: dict[str, Any] = {"access_token": access, "token_type": "Bearer", "expires_in": self.expires_in}
            if form.get("scope"):
                body["scope"] = form["scope"]
            if self.rotate:
                self._state.refresh_tokens.discard(refresh)
                body["refresh_token"] = "1//rt-" + secrets.token_urlsafe(24)
                self._state.refresh_tokens.add(body["refresh_token"])
            self._state.refreshes.append(dict(form))
        return 200, body

    def start(self) -> "OAuthServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any], basic_tried: bool = False) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json;charset=UTF-8")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Pragma", "no-cache")
                if status == 401 and basic_tried:
                    self.send_header("WWW-Authenticate", 'Basic realm="token"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if "error" in body:
                    with server._lock:
                        server._state.refused.append(str(body["error"]))

            def do_GET(self) -> None:
                self._answer(405, {"error": "invalid_request", "error_description": "POST only"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8", "replace")
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
                if ctype != "application/x-www-form-urlencoded":
                    self._answer(400, {"error": "invalid_request", "error_description": "form body required"})
                    return
                form = {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}
                if self.path == "/introspect":
                    self._answer(200, server.introspect(form.get("token", "")))
                    return
                if self.path != "/token":
                    self._answer(404, {"error": "invalid_request", "error_description": "no such endpoint"})
                    return
                basic = _basic(self.headers.get("Authorization"))
                status, body = server._grant(form, basic)
                self._answer(status, body, basic_tried=basic is not None)

        self._http = HttpThread(Handler, "oauth-server")
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.stop()


def _basic(header: str | None) -> tuple[str, str] | None:
    """RFC 6749 §2.3.1: the id and secret are form-urlencoded, then Basic-encoded."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:].strip()).decode()
    except ValueError:
        return ("", "")
    client_id, _, secret = decoded.partition(":")
    return unquote(client_id), unquote(secret)
