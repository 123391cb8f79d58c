"""A fenced singleton lease: one key in a JetStream KV bucket whose entries expire after a ttl.

``create`` succeeds only when nobody holds the key (never written, deleted, or expired by the
bucket's ttl), so exactly one process wins. The holder renews with a compare-and-set on the
revision it wrote last; any failure to renew means it may no longer be the leader, and it
must stop at once. A clean shutdown deletes the key so a standby takes over immediately.

The revision ``create`` returned is the term's fencing token (``fence``): the bucket's
revisions only grow, so every later term has a higher one. The ledger remembers the highest
token per singleton and refuses events carrying an older one, which is what stops a leader
that was paused or cut off from writing after its successor took over: it cannot know it
was deposed until it looks, but the ledger always knows.

Nothing here is agent-specific: the bucket and the singleton's name are parameters, so the
voice service's lock is the same class with ``VOICE_LEASE_BUCKET`` and ``"voice"``. A term's
token also exceeds the ledger's fencing mark (``raise_token``), which keeps the order when
the bucket was recreated and its revisions started over.
"""

import asyncio
import logging
import os
import secrets

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from delegate.contracts.events import Fence, Singleton

from .bus.connection import update_stream
from .settings import NatsSettings

log = logging.getLogger(__name__)

LEASE_KEY = "leader"
# The lease counts as in doubt once no renewal succeeded for this share of the ttl: the
# rest of the ttl is the margin for a clock step or a renewal still on its way.
DOUBT_AFTER = 0.8


class Lease:
    def __init__(
        self,
        js: JetStreamContext,
        holder: str,
        *,
        bucket: str,
        singleton: Singleton,
        ttl: float,
        renew_every: float,
        replicas: int | None = None,
    ) -> None:
        self.js = js
        # the bucket's copies in JetStream: NATS_REPLICAS unless told
        self.replicas = NatsSettings().nats_replicas if replicas is None else replicas
        self.holder = holder
        self.bucket = bucket
        self.singleton: Singleton = singleton
        self.ttl = ttl
        self.renew_every = renew_every
        # Unique per process run: a restarted process never mistakes an old entry for its own.
        self.value = f"{holder}:{os.getpid()}:{secrets.token_hex(4)}".encode()
        self.revision: int | None = None  # the revision we wrote last, while we hold the lease
        # The revision at acquisition: this term's fencing token. Kept after a loss, so what
        # the deposed term still publishes (its term.ended) carries it and is judged by it.
        self.token: int | None = None
        self._confirmed_at = 0.0  # loop time of the last write or read that showed the lease ours
        self._kv: KeyValue | None = None

    @property
    def held(self) -> bool:
        return self.revision is not None

    @property
    def fence(self) -> Fence | None:
        return Fence(singleton=self.singleton, token=self.token) if self.token is not None else None

    def in_doubt(self) -> bool:
        """True when the lease may have expired: no renewal or read showed it ours recently.

        No I/O: a process resumed after a pause sees at once, from the monotonic clock, that
        its lease may be gone, before its renewal task has had a chance to run.
        """
        if self.revision is None:
            return True
        return asyncio.get_running_loop().time() - self._confirmed_at > self.ttl * DOUBT_AFTER

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(self.bucket)
            except nats.js.errors.BucketNotFoundError:
                try:
                    self._kv = await self.js.create_key_value(
                        bucket=self.bucket, ttl=self.ttl, history=1, replicas=self.replicas
                    )
                except nats.js.errors.BadRequestError:
                    # Another process created it between our look-up and our create.
                    self._kv = await self.js.key_value(self.bucket)
            await self._match_config()
        return self._kv

    async def _match_config(self) -> None:
        """A bucket made with another lease ttl or replica count keeps them unless told: the
        ttl is the lease, and the replicas are how many NATS nodes it survives losing."""
        config = (await self.js.stream_info(f"KV_{self.bucket}")).config
        changed = False
        if config.max_age is not None and abs(config.max_age - self.ttl) > 0.01:
            log.info("lease bucket %s ttl %.2fs -> %.2fs", self.bucket, config.max_age, self.ttl)
            config.max_age = self.ttl
            config.duplicate_window = min(self.ttl, 120.0)
            changed = True
        if config.num_replicas != self.replicas:
            log.info("lease bucket %s replicas %s -> %d", self.bucket, config.num_replicas, self.replicas)
            config.num_replicas = self.replicas
            changed = True
        if changed:
            await update_stream(self.js, config)

    async def try_acquire(self) -> bool:
        started = asyncio.get_running_loop().time()
        try:
            kv = await self._bucket()
            revision = await kv.create(LEASE_KEY, self.value)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.debug("lease acquire failed: %r", exc)
            self._kv = None
            return False
        self.revision = self.token = revision
        self._confirmed_at = started  # the entry's ttl runs from the write, at the latest
        log.info("acquired the %s lease (fencing token %d)", self.singleton, revision)
        return True

    async def try_reclaim(self) -> bool:
        """Take over an entry an earlier run of this same holder left behind, at once.

        For a supervised process with a stable holder name (one process per name: the
        supervisor starts the next only after the last one exited), an entry under its name
        but not its value is a dead predecessor's: waiting out the ttl would only delay the
        restart. The swap is a compare-and-set on that entry's revision, and the new revision
        is a new term's token, so the ledger fences anything the predecessor still had in flight.
        """
        try:
            kv = await self._bucket()
            entry = await kv.get(LEASE_KEY)
        except nats.js.errors.KeyNotFoundError:
            return await self.try_acquire()
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.debug("lease reclaim failed: %r", exc)
            self._kv = None
            return False
        value = entry.value or b""
        if value == self.value or value.split(b":", 1)[0] != self.holder.encode() or entry.revision is None:
            return False
        started = asyncio.get_running_loop().time()
        try:
            revision = await kv.update(LEASE_KEY, self.value, last=entry.revision)
        except (nats.js.errors.KeyWrongLastSequenceError, TimeoutError, nats.errors.Error, OSError):
            return False  # it changed meanwhile: someone else's now
        self.revision = self.token = revision
        self._confirmed_at = started
        log.info("reclaimed the %s lease from an earlier run of %s (fencing token %d)", self.singleton,
                 self.holder, revision)
        return True

    def raise_token(self, mark: int) -> None:
        """Make this term's token exceed ``mark``, the highest the ledger has accepted so far.

        Revisions only grow while the bucket lives; a bucket recreated (the NATS store wiped,
        the volume replaced) starts over at 1 while the ledger remembers the old terms' tokens
        and would refuse this one forever. Taking the next token after the ledger's mark keeps
        the order: every earlier term's token is at most the mark. The new leader reads the mark
        after the ledger caught up with the stream, so only a term whose events were still
        unwritten then could tie with it, and a tie needs the bucket reset as well.
        """
        if self.token is not None and self.token <= mark:
            log.warning(
                "the %s lease revision %d is not above the ledger's fencing mark %d (was the lease "
                "bucket recreated?): this term's token is %d",
                self.singleton, self.token, mark, mark + 1,
            )
            self.token = mark + 1

    async def renew(self) -> bool:
        if self.revision is None:
            return False
        started = asyncio.get_running_loop().time()
        try:
            kv = await self._bucket()
            self.revision = await asyncio.wait_for(
                kv.update(LEASE_KEY, self.value, last=self.revision), timeout=max(self.ttl - self.renew_every, 0.5)
            )
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.warning("lost the %s lease: renew failed: %r", self.singleton, exc)
            self.revision = None
            return False
        self._confirmed_at = started
        return True

    async def confirm(self) -> bool:
        """A fresh read of the key: is the lease still ours? False also when the read fails.

        Used before an input is taken on and before it is acknowledged: an entry holding our
        value can only be ours (nobody else writes it, and an expired one is gone).
        """
        if self.revision is None:
            return False
        started = asyncio.get_running_loop().time()
        try:
            kv = await self._bucket()
            entry = await asyncio.wait_for(kv.get(LEASE_KEY), timeout=max(self.ttl / 2, 0.5))
        except nats.js.errors.KeyNotFoundError:
            entry = None  # expired (or deleted): not ours any more
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.warning("could not confirm the %s lease: %r", self.singleton, exc)
            return False
        if entry is None or entry.value != self.value:
            log.warning("the %s lease is not ours any more (fencing token %s)", self.singleton, self.token)
            self.revision = None  # certainly lost: no renewal or release may touch the key now
            return False
        self._confirmed_at = max(self._confirmed_at, started)
        return True

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
        if not self.js._nc.is_connected:
            # NATS is gone or coming back: the delete cannot go out now, and waiting for it spent
            # 2 s of a stop's grace for nothing (a SIGTERM after NATS died hit the 3.5 s bound).
            log.info("lease release skipped (not connected to NATS); it expires by itself")
            return
        try:
            kv = await self._bucket()
            try:
                await asyncio.wait_for(kv.delete(LEASE_KEY, last=revision), timeout=2.0)
            except nats.js.errors.BadRequestError:
                # A renewal cancelled mid-flight may have landed on the server after all, so the
                # entry has a newer revision than we know: still ours if it holds our value.
                entry = await asyncio.wait_for(kv.get(LEASE_KEY), timeout=2.0)
                if entry.value != self.value or entry.revision is None:
                    log.info("lease release skipped: the entry is no longer ours")
                    return
                await asyncio.wait_for(kv.delete(LEASE_KEY, last=entry.revision), timeout=2.0)
            log.info("released the %s lease", self.singleton)
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.info("lease release skipped (%r); it expires by itself", exc)
