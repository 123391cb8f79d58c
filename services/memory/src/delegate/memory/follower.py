"""Follows the ledger's committed events in seq order, exactly once each, across restarts.

Live notifications (core NATS) are fast but may be lost; the ledger query is the truth. So:
on start, and whenever a live event skips a seq or nothing arrived for a while, read
``ledger.cmd.query(after_seq=last_seq)`` until caught up.

Unlike the inner plane's follower there is no separate state file: ``last_seq`` is a row of
the index, committed in the same transaction as the events it covers (several per
transaction), so a crash at any instant leaves an index that is exactly the projection of
the ledger up to its ``last_seq``, and the rest is replayed.

An event whose projection raises is tried again a few times with backoff, then dead-lettered
(DEAD stream, with the reason) and passed over: one bad event must not wedge the follower,
nor vanish without a trace.
"""

import asyncio
import logging
from collections.abc import Callable, Sequence

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.contracts.streams import MEMORY_FOLLOWER
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from delegate.runtime.retry import Backoff

from .ids import derived_id
from .index import ApplyFailed, MemoryIndex
from .settings import Settings

log = logging.getLogger(__name__)

PAGE = 1000  # a catch-up page; also the most events one transaction commits
DEAD_LETTER_SOURCE = MEMORY_FOLLOWER


class LedgerFollower:
    def __init__(
        self,
        bus: Bus,
        index: MemoryIndex,
        settings: Settings,
        stop: asyncio.Event,
        on_applied: Callable[[Sequence[Event]], None] = lambda events: None,
    ) -> None:
        self.bus = bus
        self.index = index
        self.settings = settings
        self.stop = stop
        self.on_applied = on_applied  # after each committed batch, with the events it applied
        self.queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=settings.memory_queue_max)
        self.caught_up = asyncio.Event()  # the first catch-up reached the ledger's newest event
        self.applied = asyncio.Condition()  # notified after every committed batch
        self.ledger_seq = 0  # the ledger's newest seq as last seen (for the ping's detail)

    async def start(self) -> None:
        # Subscribe before the first catch-up, so nothing committed in between is missed.
        await self.bus.subscribe(topics.LEDGER_COMMITTED, self._on_live)

    async def _on_live(self, event: Event) -> None:
        # Waits while the queue is full: the subscription stops taking messages. Nothing
        # durable is lost that way; a notification NATS drops meanwhile shows up as a gap.
        await self.queue.put(event)

    async def run(self) -> None:
        await self.catch_up()
        if self.stop.is_set():
            return
        self.caught_up.set()
        log.info("caught up with the ledger at seq %d", self.index.last_seq)
        while not self.stop.is_set():
            try:
                first = await asyncio.wait_for(self.queue.get(), timeout=self.settings.memory_resync_seconds)
            except TimeoutError:
                await self.catch_up()
                continue
            events = [first]
            while not self.queue.empty() and len(events) < PAGE:
                events.append(self.queue.get_nowait())
            await self._take(events)

    async def _take(self, events: list[Event]) -> None:
        run: list[Event] = []
        expected = self.index.last_seq + 1
        for event in events:
            if event.seq is None or event.seq < expected:
                continue  # already applied (replayed by a catch-up, or a duplicate notification)
            if event.seq != expected:
                # A gap: notifications were lost (or seqs are not dense); the ledger fills it in.
                await self._apply(run)
                await self.catch_up()
                return
            run.append(event)
            expected += 1
        await self._apply(run)

    async def _apply(self, events: Sequence[Event]) -> None:
        pending = [e for e in events if e.seq is not None and e.seq > self.index.last_seq]
        while pending:
            try:
                # A worker thread: a long batch (an import) must not stall the searches meanwhile.
                await asyncio.to_thread(self.index.apply_batch, pending)
                done, pending = pending, []
            except ApplyFailed as failed:
                at = pending.index(failed.event)
                done = pending[:at]
                pending = pending[at + 1:]
                await self._notify(done)
                done = []
                await self._retry_or_park(failed)
            await self._notify(done)
        self.ledger_seq = max(self.ledger_seq, self.index.last_seq)

    async def _retry_or_park(self, failed: ApplyFailed) -> None:
        event = failed.event
        attempts = self.settings.memory_event_attempts
        backoff = Backoff(initial=0.1, maximum=1.0)
        error: Exception = failed.cause
        for _ in range(attempts - 1):
            # No stop event here: giving up early at shutdown would dead-letter a good event.
            await backoff.sleep(None)
            try:
                await asyncio.to_thread(self.index.apply_batch, [event])
                await self._notify([event])
                return
            except ApplyFailed as again:
                error = again.cause
        await self._dead_letter(event, f"projection failed {attempts} times: {error!r}")
        await asyncio.to_thread(self.index.skip, event)

    async def _notify(self, events: Sequence[Event]) -> None:
        if not events:
            return
        try:
            self.on_applied(events)
        except Exception:
            log.exception("a listener failed on events through seq %s", events[-1].seq)
        async with self.applied:
            self.applied.notify_all()

    async def _dead_letter(self, event: Event, reason: str) -> None:
        # One letter per event, however often a replay of a rebuilt index fails on it.
        await self.bus.dead_letters.write_data(
            DEAD_LETTER_SOURCE, topics.LEDGER_COMMITTED.subject, event.model_dump_json().encode(),
            f"event {event.id} ({event.kind}, seq {event.seq}): {reason}",
            letter_id=derived_id("dead-letter", event.id),
        )

    async def catch_up(self) -> None:
        """Apply everything committed after ``last_seq``; retried until the ledger answers."""
        backoff = Backoff(initial=0.2, maximum=5.0)
        while not self.stop.is_set():
            try:
                while True:
                    reply = await self.bus.request(
                        topics.LEDGER_QUERY, QueryRequest(after_seq=self.index.last_seq, limit=PAGE)
                    )
                    self.ledger_seq = max(self.ledger_seq, reply.last_seq)
                    await self._apply(reply.events)
                    if not reply.more or not reply.events:
                        return
            except (BusUnavailable, RemoteError) as exc:
                log.warning("ledger catch-up failed (%d), retrying: %s", backoff.failures + 1, exc)
                if not await backoff.sleep(self.stop):
                    return
