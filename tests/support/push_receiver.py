"""A local Web Push service: what a browser's push service is to our sender, on 127.0.0.1.

``subscribe(name)`` makes a subscription the way a browser does (a P-256 key pair and a
16-byte auth secret of its own) whose endpoint is this server; every POST to it is kept, and
``decrypt`` opens a push with the subscription's private key (RFC 8291, aes128gcm, through
``http_ece``), and ``vapid_claims`` checks the VAPID JWT (RFC 8292) against the key it names.
``hold_next(seconds)`` takes the next push but answers late (a sender killed meanwhile cannot
know it arrived); ``answer(name, 410)`` makes a subscription's endpoint say it is gone.
"""

import base64
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.http_thread import HttpThread


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Received:
    name: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Browser:
    name: str
    endpoint: str
    private_key: ec.EllipticCurvePrivateKey
    auth: bytes
    status: int = 201

    def json(self) -> dict[str, Any]:
        """``PushSubscription.toJSON()``, as a browser posts it."""
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {"endpoint": self.endpoint, "expirationTime": None,
                "keys": {"p256dh": b64url(point), "auth": b64url(self.auth)}}


@dataclass
class PushReceiver:
    browsers: dict[str, Browser] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    _hold: float | None = None
    _released: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _http: HttpThread | None = None

    def start(self) -> "PushReceiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size)
                name = self.path.rsplit("/", 1)[-1]
                browser = receiver.browsers.get(name)
                with receiver._lock:
                    receiver.received.append(Received(name, {k.lower(): v for k, v in self.headers.items()}, body))
                    hold, receiver._hold = receiver._hold, None
                if hold is not None:
                    receiver._released.wait(hold)
                try:
                    self.send_response(browser.status if browser else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender is gone (killed while we held the answer)

        self._http = HttpThread(Handler, "push-receiver")
        return self

    def stop(self) -> None:
        self._released.set()
        if self._http is not None:
            self._http.stop()

    @property
    def url(self) -> str:
        assert self._http is not None
        return self._http.url

    def subscribe(self, name: str) -> Browser:
        browser = Browser(name, f"{self.url}/push/{name}", ec.generate_private_key(ec.SECP256R1()), os.urandom(16))
        self.browsers[name] = browser
        return browser

    def answer(self, name: str, status: int) -> None:
        self.browsers[name].status = status

    def hold_next(self, seconds: float) -> None:
        with self._lock:
            self._hold = seconds

    def pushes(self, name: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.received if name is None or r.name == name]

    def decrypt(self, push: Received) -> dict[str, Any]:
        """The push's JSON, opened with the subscription's own private key (RFC 8291)."""
        assert push.headers.get("content-encoding") == "aes128gcm", push.headers
        browser = self.browsers[push.name]
        plain = http_ece.decrypt(push.body, private_key=browser.private_key, auth_secret=browser.auth,
                                 version="aes128gcm")
        decoded: dict[str, Any] = json.loads(plain)
        return decoded

    def vapid_claims(self, push: Received, server_key: str) -> dict[str, Any]:
        """The VAPID JWT's claims, verified with ``server_key`` (the one ``GET /api/push/key``
        gives browsers), which must also be the key the header names."""
        scheme, _, params = push.headers["authorization"].partition(" ")
        assert scheme == "vapid", push.headers["authorization"]
        fields = dict(part.strip().split("=", 1) for part in params.split(","))
        assert fields["k"] == server_key
        point = unb64url(server_key)
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        claims: dict[str, Any] = jwt.decode(fields["t"], key=public, algorithms=["ES256"], audience=self.url)
        assert time.time() < claims["exp"] <= time.time() + 24 * 3600  # RFC 8292: at most a day ahead
        return claims
