"""The memory service's ledger follower: committed events, in seq order, into the index.

The loop (live notifications, gaps and catch-ups, dead letters) is the runtime's
``LedgerFollower``. Unlike the inner plane's there is no separate state file: ``last_seq`` is a
row of the index, committed in the same transaction as the events it covers (several per
transaction), so a crash at any instant leaves an index that is exactly the projection of the
ledger up to its ``last_seq``, and the rest is replayed.

An event whose projection raises is tried again a few times with backoff, then dead-lettered
(DEAD stream, with the reason) and passed over: one bad event must not wedge the follower,
nor vanish without a trace.
"""

import asyncio
import logging
from collections.abc import Callable, Sequence

from delegate.contracts.events import Event
from delegate.contracts.streams import MEMORY_FOLLOWER
from delegate.runtime.bus import Bus
from delegate.runtime.ledger_follower import LedgerFollower as Follower
from delegate.runtime.retry import Backoff

from .ids import derived_id
from .index import ApplyFailed, MemoryIndex
from .settings import Settings

log = logging.getLogger(__name__)

PAGE = 1000  # a catch-up page; also the most events one transaction commits
DEAD_LETTER_SOURCE = MEMORY_FOLLOWER


class LedgerFollower(Follower):
    def __init__(
        self,
        bus: Bus,
        index: MemoryIndex,
        settings: Settings,
        stop: asyncio.Event,
        on_applied: Callable[[Sequence[Event]], None] = lambda events: None,
    ) -> None:
        super().__init__(
            bus, stop, source=DEAD_LETTER_SOURCE, queue_max=settings.memory_queue_max,
            resync_s=settings.memory_resync_seconds, page=PAGE,
        )
        self.index = index
        self.settings = settings
        self.on_applied = on_applied  # after each committed batch, with the events it applied
        self.applied = asyncio.Condition()  # notified after every committed batch

    @property
    def last_seq(self) -> int:
        return self.index.last_seq

    def letter_id(self, event: Event) -> str:
        # One letter per event, however often a replay of a rebuilt index fails on it.
        return derived_id("dead-letter", event.id)

    async def apply_run(self, events: Sequence[Event]) -> None:
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
        await self.dead_letter(event, f"projection failed {attempts} times: {error!r}")
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
