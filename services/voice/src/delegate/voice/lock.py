"""The voice lock: one voice call at a time, system-wide.

The same fenced lease as the agent's (``delegate.runtime.lease``) in its own bucket. Each call
takes it anew, so each call is a fencing term of its own: its token, raised above the ledger's
mark for ``voice``, goes on every event the call writes, and a call that lost the lock (its
renewal failed: paused, cut off) can write nothing more. The lock is renewed for the whole
call; a failed renewal sets ``lost``, which ends the call.
"""

import asyncio
import contextlib
import logging

from nats.js import JetStreamContext

from delegate.contracts.events import Fence
from delegate.contracts.subjects import VOICE_LEASE_BUCKET
from delegate.runtime.lease import Lease

log = logging.getLogger(__name__)


class VoiceLock:
    def __init__(self, js: JetStreamContext, holder: str, *, ttl: float, replicas: int | None = None) -> None:
        """``replicas``: the bucket's copies (NATS_REPLICAS from the service's settings)."""
        self._lease = Lease(js, holder, bucket=VOICE_LEASE_BUCKET, singleton="voice", ttl=ttl, renew_every=ttl / 3,
                            replicas=replicas)
        self.lost = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None

    async def acquire(self) -> bool:
        """Take the lock and start renewing it; False when another call holds it."""
        if not await self._lease.try_acquire():
            return False
        self._holder = asyncio.create_task(self._lease.hold(self.lost), name="voice-lock")
        return True

    def raise_token(self, mark: int) -> None:
        """Above the ledger's highest voice token (read after the ledger caught up)."""
        self._lease.raise_token(mark)

    @property
    def fence(self) -> Fence:
        fence = self._lease.fence
        if fence is None:
            raise RuntimeError("the voice lock was never acquired")
        return fence

    @property
    def held(self) -> bool:
        return self._lease.held and not self.lost.is_set()

    async def release(self) -> None:
        if self._holder is not None:
            self._holder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._holder
            self._holder = None
        await self._lease.release()
