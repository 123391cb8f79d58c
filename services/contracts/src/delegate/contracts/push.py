"""Web Push (issue #31): a browser's subscription, and what one push says.

The gateway stores subscriptions in the JetStream KV bucket ``PUSH_SUBSCRIPTIONS_BUCKET``
(one key per browser: the subscription id); the pollers read them to send. The body a
browser posts is the W3C ``PushSubscription.toJSON()`` shape.
"""

import base64
import binascii
import hashlib
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Real push services' endpoints are a few hundred characters; anything longer is not one.
MAX_ENDPOINT = 1024
# The payload a push may carry (RFC 8291 leaves 4078 bytes of plaintext in a 4096-byte record;
# push services take no more than 4 KiB): the JSON notice is cut to fit well below.
MAX_NOTICE_TEXT = 600


def _b64url(value: str, size: int) -> str:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc
    if len(raw) != size:
        raise ValueError(f"must decode to {size} bytes")
    return value


class SubscriptionKeys(BaseModel):
    # Each of these is built on first use, not at import (see events.Payload).
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)
    p256dh: str = Field(max_length=100)  # the browser's P-256 public key, uncompressed (65 bytes)
    auth: str = Field(max_length=40)  # the 16-byte authentication secret

    @field_validator("p256dh")
    @classmethod
    def _point(cls, value: str) -> str:
        _b64url(value, 65)
        if base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))[0] != 4:
            raise ValueError("must be an uncompressed P-256 point")
        return value

    @field_validator("auth")
    @classmethod
    def _secret(cls, value: str) -> str:
        return _b64url(value, 16)


class SubscriptionIn(BaseModel):
    """``POST /api/push/subscriptions``: what ``PushSubscription.toJSON()`` gives in a browser."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)
    endpoint: str = Field(min_length=8, max_length=MAX_ENDPOINT)
    keys: SubscriptionKeys
    expirationTime: float | None = None  # the browser's own field name


def subscription_id(endpoint: str) -> str:
    """One id per browser: the same endpoint posted again is the same subscription."""
    return hashlib.sha256(endpoint.encode()).hexdigest()[:32]


class PushSubscription(BaseModel):
    """One browser's subscription as stored (KV value under key ``id``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)
    id: str = Field(min_length=32, max_length=32)
    endpoint: str = Field(max_length=MAX_ENDPOINT)
    keys: SubscriptionKeys
    created_at: datetime
    # a hash of the sign-in session that made it (sign-out deletes the session's subscriptions);
    # None: made with the bearer token (a script), which only "sign out everywhere" removes
    session: str | None = Field(default=None, max_length=64)

    def info(self) -> dict[str, object]:
        """The ``subscription_info`` shape pywebpush encrypts for."""
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.keys.p256dh, "auth": self.keys.auth}}


NoticeKind = Literal["activation", "reminder", "task", "delivery"]


class Notice(BaseModel):
    """The JSON a push carries; the service worker shows it (``tag`` replaces an earlier one)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    kind: NoticeKind
    title: str = Field(max_length=120)
    body: str = Field(max_length=MAX_NOTICE_TEXT)
    tag: str = Field(max_length=64)  # the event it is about: a repeat replaces, never stacks
    event_id: str = Field(max_length=64)
    ts: datetime
