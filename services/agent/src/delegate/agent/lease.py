"""The singleton lease: one key in a JetStream KV bucket whose entries expire after a short ttl.

``create`` succeeds only when nobody holds the key (never written, deleted, or expired by the
bucket's ttl), so exactly one process wins. The holder renews with a compare-and-set on the
revision it wrote last; any failure to renew means it may no longer be the leader, and it
must stop at once. A clean shutdown deletes the key so a standby takes over immediately.
"""

import asyncio
import logging
import os
import secrets

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from delegate.contracts import subjects

log = logging.getLogger(__name__)

LEASE_KEY = "leader"


class Lease:
    def __init__(self, js: JetStreamContext, holder: str, *, ttl: float, renew_every: float) -> None:
        self.js = js
        self.ttl = ttl
        self.renew_every = renew_every
        # Unique per process run: a restarted process never mistakes an old entry for its own.
        self.token = f"{holder}:{os.getpid()}:{secrets.token_hex(4)}".encode()
        self.revision: int | None = None
        self._kv: KeyValue | None = None

    @property
    def held(self) -> bool:
        return self.revision is not None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(subjects.AGENT_LEASE_BUCKET)
            except nats.js.errors.BucketNotFoundError:
                try:
                    self._kv = await self.js.create_key_value(
                        bucket=subjects.AGENT_LEASE_BUCKET, ttl=self.ttl, history=1
                    )
                except nats.js.errors.BadRequestError:
                    # Another process created it between our look-up and our create.
                    self._kv = await self.js.key_value(subjects.AGENT_LEASE_BUCKET)
            await self._match_ttl()
        return self._kv

    async def _match_ttl(self) -> None:
        """A bucket made with another AGENT_LEASE_TTL keeps it unless told: the ttl is the lease."""
        stream = f"KV_{subjects.AGENT_LEASE_BUCKET}"
        config = (await self.js.stream_info(stream)).config
        if config.max_age is not None and abs(config.max_age - self.ttl) > 0.01:
            log.info("lease bucket ttl %.2fs -> %.2fs", config.max_age, self.ttl)
            config.max_age = self.ttl
            config.duplicate_window = min(self.ttl, 120.0)
            await self.js.update_stream(config)

    async def try_acquire(self) -> bool:
        try:
            kv = await self._bucket()
            self.revision = await kv.create(LEASE_KEY, self.token)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.debug("lease acquire failed: %r", exc)
            self._kv = None
            return False
        log.info("acquired the agent lease (revision %d)", self.revision)
        return True

    async def renew(self) -> bool:
        if self.revision is None:
            return False
        try:
            kv = await self._bucket()
            self.revision = await asyncio.wait_for(
                kv.update(LEASE_KEY, self.token, last=self.revision), timeout=max(self.ttl - self.renew_every, 0.5)
            )
            return True
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.warning("lost the agent lease: renew failed: %r", exc)
            self.revision = None
            return False

    async def hold(self, lost: asyncio.Event) -> None:
        """Renew until a renewal fails (then set ``lost``) or the task is cancelled."""
        while True:
            await asyncio.sleep(self.renew_every)
            if not await self.renew():
                lost.set()
                return

    async def release(self) -> None:
        """Delete our entry (only if it is still ours) so a standby need not wait for the ttl."""
        if self.revision is None:
            return
        revision, self.revision = self.revision, None
        try:
            kv = await self._bucket()
            await asyncio.wait_for(kv.delete(LEASE_KEY, last=revision), timeout=2.0)
            log.info("released the agent lease")
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.info("lease release skipped (%r); it expires by itself", exc)
