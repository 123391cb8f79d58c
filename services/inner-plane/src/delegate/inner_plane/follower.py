"""Follows the ledger's committed events in seq order, exactly once each, across restarts.

Live notifications (core NATS) are fast but may be lost; the ledger query is the
truth. So: on start, and whenever a live event skips a seq or nothing arrived for
a while, read ``ledger.cmd.query(after_seq=last_seq)`` until caught up.

An event whose processing raises is tried again a few times with backoff, then
dead-lettered (DEAD stream, with the reason) and passed over: one bad event must not
wedge the follower, nor vanish without a trace.
"""

import asyncio
import logging
import time
from collections.abc import Callable

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.contracts.streams import INNER_FOLLOWER
from delegate.runtime.bus import BusUnavailable, RemoteError
from delegate.runtime.retry import Backoff, retrying

from .context import Context, derived_id
from .ledger import read_range

log = logging.getLogger(__name__)

PAGE = 500
PERSIST_EVERY_S = 0.25
# The dead-letter source (``dead.evt.<source>``) of events the follower could not process;
# named in contracts, where the permission to publish there comes from.
DEAD_LETTER_SOURCE = INNER_FOLLOWER


class LedgerFollower:
    def __init__(self, ctx: Context, apply: Callable[[Event], None]) -> None:
        self.ctx = ctx
        self.apply = apply
        self.queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=ctx.settings.inner_queue_max)
        self.high_water = 0  # the fullest the queue has been (it is bounded; tests check it)

    async def start(self) -> None:
        # Subscribe before the first catch-up, so nothing committed in between is missed.
        await self.ctx.bus.subscribe(topics.LEDGER_COMMITTED, self._on_live)

    async def _on_live(self, event: Event) -> None:
        # Waits while the queue is full: the subscription stops taking messages. Nothing
        # durable is lost that way; a notification NATS drops meanwhile shows up as a gap.
        await self.queue.put(event)
        self.high_water = max(self.high_water, self.queue.qsize())

    async def run(self) -> None:
        await self.catch_up()
        self.ctx.caught_up.set()
        log.info("caught up with the ledger at seq %d", self.ctx.state.last_seq)
        # Live events are persisted at most every PERSIST_EVERY_S (and as soon as the queue is
        # quiet that long): the whole state is one file, and writing it after every event of a
        # burst cost more than the events. What is not on disk yet is only replayed after a
        # crash (apply is idempotent); a component persists itself before any side effect.
        persisted_at = time.monotonic()
        dirty = False
        while not self.ctx.stop.is_set():
            wait = self.ctx.settings.inner_resync_seconds
            if dirty:
                wait = max(0.0, PERSIST_EVERY_S - (time.monotonic() - persisted_at))
            try:
                first = await asyncio.wait_for(self.queue.get(), timeout=wait)
            except TimeoutError:
                if dirty:
                    await self.ctx.persist()
                    persisted_at, dirty = time.monotonic(), False
                else:
                    await self.catch_up()
                continue
            events = [first]
            while not self.queue.empty():
                events.append(self.queue.get_nowait())
            for event in events:
                await self._take(event)
            dirty = True
            if time.monotonic() - persisted_at >= PERSIST_EVERY_S:
                await self.ctx.persist()
                persisted_at, dirty = time.monotonic(), False

    async def _take(self, event: Event) -> None:
        if event.seq is None or event.seq <= self.ctx.state.last_seq:
            return  # already processed (replayed by a catch-up, or a duplicate notification)
        if event.seq == self.ctx.state.last_seq + 1:
            await self._apply(event)
            return
        # A gap: notifications were lost (or seqs are not dense); the ledger fills it in.
        await self.catch_up()

    async def _apply(self, event: Event) -> None:
        assert event.seq is not None
        attempts = self.ctx.settings.inner_event_attempts
        try:
            self.apply(event)  # the common case, without retry machinery: a rebuild applies millions
        except Exception as first:
            if attempts <= 1:
                await self._dead_letter(event, f"processing failed once: {first!r}")
            else:
                await self._apply_again(event, attempts - 1, first)
        self.ctx.state.last_seq = event.seq

    async def _apply_again(self, event: Event, attempts: int, first: Exception) -> None:
        log.warning("processing event %s (%s, seq %s) failed, trying again: %r", event.id, event.kind, event.seq, first)
        try:
            # Trying again after a partial failure is safe: every component's on_event keys
            # what it records by event id or seq, so applying an event twice changes nothing.
            async for attempt in retrying(
                # No stop event here: giving up early at shutdown would dead-letter a good event.
                retry_on=Exception, attempts=attempts, initial=0.1, maximum=1.0,
                what=f"processing event {event.id} ({event.kind}, seq {event.seq})",
            ):
                with attempt:
                    self.apply(event)
        except Exception as exc:
            await self._dead_letter(event, f"processing failed {attempts + 1} times: {exc!r}")

    async def _dead_letter(self, event: Event, reason: str) -> None:
        # One letter per event, however often a replay after a lost state file fails on it.
        await self.ctx.bus.dead_letters.write_data(
            DEAD_LETTER_SOURCE, topics.LEDGER_COMMITTED.subject, event.model_dump_json().encode(),
            f"event {event.id} ({event.kind}, seq {event.seq}): {reason}",
            letter_id=derived_id("dead-letter", event.id),
        )

    async def catch_up(self) -> None:
        """Process everything committed after ``last_seq``; retried until the ledger answers."""
        backoff = Backoff(initial=0.2, maximum=5.0)
        while True:
            try:
                async for page in read_range(
                    self.ctx.bus, QueryRequest(after_seq=self.ctx.state.last_seq, limit=PAGE)
                ):
                    for event in page:
                        if event.seq is not None and event.seq > self.ctx.state.last_seq:
                            await self._apply(event)
                    await self.ctx.persist()
                return
            except (BusUnavailable, RemoteError) as exc:
                log.warning("ledger catch-up failed (%d), retrying: %s", backoff.failures + 1, exc)
                if not await backoff.sleep(self.ctx.stop):
                    return
