"""The courier: what Twilio's webhooks produce reaches the bus, however long NATS is away.

``send`` stores a webhook's messages in the spool (``spool``) and returns: the webhook can be
answered 200 as soon as its messages are on local disk. A background task drains the spool into
NATS, oldest first, and deletes a row only after JetStream acknowledged it (a live message:
after a flush, i.e. the server has it). A restarted gateway finds what its predecessor left and
drains it. Publishing again what was already stored is harmless: every message carries the same
``Nats-Msg-Id`` a direct publish would, so JetStream stores it once.

With GATEWAY_SPOOL=false there is no spool: ``send`` publishes at once and fails when NATS does
(the webhook then answers 503 and Twilio's fallback URL, if any, applies).
"""

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import nats.errors
import nats.js.errors

from delegate.runtime.bus import MSG_ID, PUBLISH_RETRY, Bus, BusUnavailable
from delegate.runtime.retry import Backoff, retrying

from .settings import Settings
from .spool import Outgoing, Spool

log = logging.getLogger(__name__)

BATCH = 256  # rows read from the spool at a time (deleted together after their acks)
PUBLISH_TIMEOUT_S = 2.0  # one publish's wait for its ack; the row stays for the next round after that
DIRECT_DEADLINE_S = 6.0  # without a spool: within Twilio's 15-second webhook budget
# The bus refuses these for good, whatever the retry: such a row is parked, not retried forever.
UNDELIVERABLE = (nats.errors.MaxPayloadError, nats.js.errors.BadRequestError)


class NotConnected(Exception):
    """The gateway has no NATS connection right now: the drain waits."""


async def deliver(bus: Bus, item: Outgoing, timeout: float = PUBLISH_TIMEOUT_S) -> None:
    """One message onto the bus, returning once NATS has it (JetStream's ack, or a flush)."""
    if item.durable:
        await bus.js.publish(item.subject, item.data, headers={MSG_ID: item.msg_id}, timeout=timeout)
    else:
        await bus.nc.publish(item.subject, item.data)
        await bus.nc.flush(timeout=max(1, round(timeout)))  # typed int by nats-py


class Courier:
    def __init__(self, settings: Settings, bus: Callable[[], Bus | None]) -> None:
        self.spool: Spool | None = None
        if settings.gateway_spool:
            self.spool = Spool(settings.spool_path, max_rows=settings.gateway_spool_max_rows)
        self._bus = bus
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0  # rows drained since start, for logs and tests

    @property
    def backlog(self) -> int:
        return self.spool.pending if self.spool is not None else 0

    async def start(self) -> None:
        if self.spool is None:
            return
        try:
            await self.spool.open()
        except Exception as exc:
            # Not fatal: chat works without it; each webhook tries to open it again, and is
            # refused (503, so Twilio's fallback URL applies) while it cannot be written.
            log.error("the webhook spool at %s cannot be opened: %r", self.spool.path, exc)
        else:
            if self.spool.pending:
                log.info("the webhook spool holds %d message(s) from before: delivering them", self.spool.pending)
        self._task = asyncio.create_task(self._drain_forever(), name="gateway-spool-drain")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.spool is not None:
            await self.spool.close()

    def wake(self) -> None:
        self._wake.set()

    async def send(self, items: Sequence[Outgoing]) -> None:
        """Durable once this returns: on the spool's disk, or (no spool) acknowledged by NATS.

        Raises ``spool.SpoolUnavailable`` (spool) or ``BusUnavailable`` (no spool).
        """
        if self.spool is None:
            await self._send_now(items)
            return
        await self.spool.put(items)
        self._wake.set()

    async def _send_now(self, items: Sequence[Outgoing]) -> None:
        bus = self._bus()
        if bus is None:
            raise BusUnavailable("the gateway is not connected to NATS")
        deadline = time.monotonic() + DIRECT_DEADLINE_S
        try:
            for item in items:
                remaining = max(0.1, deadline - time.monotonic())
                async for attempt in retrying(retry_on=PUBLISH_RETRY, deadline=remaining, initial=0.05, maximum=1.0):
                    with attempt:
                        await deliver(bus, item)
        except PUBLISH_RETRY as exc:
            raise BusUnavailable(f"publish failed: {exc!r}") from exc

    # ---- the drain ------------------------------------------------------------------------

    async def _drain_forever(self) -> None:
        backoff = Backoff(initial=0.05, maximum=1.0)
        while True:
            self._wake.clear()  # before looking: a row stored from here on wakes the wait below
            try:
                await self._drain()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # NATS away (or the spool's disk): try again after a pause, not on every wake.
                if backoff.failures in (0, 10) or (backoff.failures + 1) % 100 == 0:
                    log.warning("the webhook spool waits for the bus (%d held): %r", self.backlog, exc)
                await backoff.sleep()
                continue
            backoff.reset()
            await self._wake.wait()

    async def _drain(self) -> None:
        assert self.spool is not None
        while True:
            rows = await self.spool.peek(BATCH)
            if not rows:
                return
            bus = self._bus()
            if bus is None or not bus.nc.is_connected:
                raise NotConnected("no NATS connection")
            done: list[int] = []
            try:
                for row in rows:
                    try:
                        await deliver(bus, row)
                    except UNDELIVERABLE as exc:
                        log.error("spooled %s on %s is refused by NATS; parked: %r", row.msg_id, row.subject, exc)
                        await self.spool.park(row.seq, repr(exc))
                        continue
                    done.append(row.seq)
            finally:
                # What was acknowledged leaves the spool even when a later row failed.
                if done:
                    await self.spool.remove(done)
                    self.delivered += len(done)
                    waited = time.time() - rows[0].stored_at
                    if waited > 1.0:
                        log.info("delivered %d spooled message(s), the oldest %.1f s late", len(done), waited)

