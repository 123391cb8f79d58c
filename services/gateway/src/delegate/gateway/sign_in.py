"""Browser sign-in sessions, kept server-side so that signing out really ends one.

A session is a random id (the cookie's whole value) with an expiry, stored in the JetStream
KV bucket ``GATEWAY_SESSIONS_BUCKET`` so every gateway process sees every sign-in and every
sign-out. The key is a hash of the id, not the id: whoever can read the bucket learns which
sessions exist, not a cookie that works. Each record carries a fingerprint of the owner token
it was made under; a gateway started with another ``DELEGATE_TOKEN`` refuses it, so changing
the token signs every browser out.
"""

import asyncio
import hashlib
import hmac
import logging
import secrets
from datetime import UTC, datetime, timedelta

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, ValidationError

from delegate.contracts import subjects
from delegate.runtime.bus import Bus, update_stream

log = logging.getLogger(__name__)

STREAM = f"KV_{subjects.GATEWAY_SESSIONS_BUCKET}"
LOOKUP_TIMEOUT_S = 2.0


class SessionsUnavailable(Exception):
    """The session bucket cannot be read or written right now (NATS is away)."""


class SessionRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    created_at: datetime
    expires_at: datetime
    token_fp: str


def token_fingerprint(token: str) -> str:
    """Names the token a session was made under without being usable as it."""
    return hmac.new(token.encode(), b"delegate-session-token", hashlib.sha256).hexdigest()


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    def __init__(self, token: str, ttl_s: float) -> None:
        self._fp = token_fingerprint(token)
        self.ttl_s = ttl_s
        self._bus: Bus | None = None
        self._kv: KeyValue | None = None

    async def open(self, bus: Bus) -> None:
        """Bind to the bucket, creating it on first use (its TTL is the session lifetime)."""
        try:
            kv = await bus.js.key_value(subjects.GATEWAY_SESSIONS_BUCKET)
        except nats.js.errors.BucketNotFoundError:
            try:
                kv = await bus.js.create_key_value(
                    bucket=subjects.GATEWAY_SESSIONS_BUCKET, ttl=self.ttl_s, history=1, replicas=bus.replicas
                )
            except nats.js.errors.BadRequestError:  # another gateway created it meanwhile
                kv = await bus.js.key_value(subjects.GATEWAY_SESSIONS_BUCKET)
        await self._match_config(bus)
        self._bus = bus
        self._kv = kv

    async def _match_config(self, bus: Bus) -> None:
        """A bucket made under another GATEWAY_SESSION_DAYS keeps its TTL unless told: a shorter
        one would end sessions early, a longer one would keep dead records for nothing. Its
        replica count follows NATS_REPLICAS the same way."""
        config = (await bus.js.stream_info(STREAM)).config
        changed = False
        if config.max_age is not None and abs(config.max_age - self.ttl_s) > 1.0:
            log.info("session bucket ttl %.0fs -> %.0fs", config.max_age, self.ttl_s)
            config.max_age = self.ttl_s
            if config.duplicate_window is not None:  # JetStream wants it no longer than max_age
                config.duplicate_window = min(config.duplicate_window, self.ttl_s)
            changed = True
        if config.num_replicas != bus.replicas:
            log.info("session bucket replicas %s -> %d", config.num_replicas, bus.replicas)
            config.num_replicas = bus.replicas
            changed = True
        if changed:
            await update_stream(bus.js, config)

    def _bucket(self) -> KeyValue:
        if self._kv is None:
            raise SessionsUnavailable("the gateway is not connected to NATS yet")
        return self._kv

    async def create(self) -> tuple[str, SessionRecord]:
        """A new session: its id (the cookie value) and its record."""
        session_id = secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        record = SessionRecord(created_at=now, expires_at=now + timedelta(seconds=self.ttl_s), token_fp=self._fp)
        try:
            await asyncio.wait_for(
                self._bucket().put(_key(session_id), record.model_dump_json().encode()), LOOKUP_TIMEOUT_S
            )
        except (nats.errors.Error, TimeoutError) as exc:
            raise SessionsUnavailable(repr(exc)) from exc
        return session_id, record

    async def check(self, session_id: str | None) -> bool:
        """True for a live session made under the current token; anything else is refused."""
        if not session_id or len(session_id) > 128:
            return False
        key = _key(session_id)
        try:
            entry = await asyncio.wait_for(self._bucket().get(key), LOOKUP_TIMEOUT_S)
        except nats.js.errors.KeyNotFoundError:  # also deleted and purged keys
            return False
        except (nats.errors.Error, TimeoutError) as exc:
            raise SessionsUnavailable(repr(exc)) from exc
        try:
            record = SessionRecord.model_validate_json(entry.value or b"")
        except ValidationError:
            log.warning("unreadable session record %s…: refused", key[:8])
            return False
        if not hmac.compare_digest(record.token_fp, self._fp):
            return False  # made under another owner token
        if record.expires_at <= datetime.now(UTC):
            await self.revoke(session_id)
            return False
        return True

    async def revoke(self, session_id: str | None) -> None:
        """End one session (signing out); an unknown id is not an error."""
        if not session_id or len(session_id) > 128:
            return
        try:
            await asyncio.wait_for(self._bucket().delete(_key(session_id)), LOOKUP_TIMEOUT_S)
        except (nats.errors.Error, TimeoutError) as exc:
            raise SessionsUnavailable(repr(exc)) from exc

    async def revoke_all(self) -> None:
        """End every browser session ("sign out everywhere"): the bucket is emptied at once."""
        if self._bus is None:
            raise SessionsUnavailable("the gateway is not connected to NATS yet")
        try:
            await asyncio.wait_for(self._bus.js.purge_stream(STREAM), LOOKUP_TIMEOUT_S)
        except (nats.errors.Error, TimeoutError) as exc:
            raise SessionsUnavailable(repr(exc)) from exc
