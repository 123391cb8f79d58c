"""Follows the ledger's committed events in seq order, exactly once each, across restarts.

Live notifications (core NATS) are fast but may be lost; the ledger query is the
truth. So: on start, and whenever a live event skips a seq or nothing arrived for
a while, read ``ledger.cmd.query(after_seq=last_seq)`` until caught up.
"""

import asyncio
import logging
from collections.abc import Callable

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import BusUnavailable, RemoteError

from .context import Context
from .ledger import read_range

log = logging.getLogger(__name__)

PAGE = 500


class LedgerFollower:
    def __init__(self, ctx: Context, apply: Callable[[Event], None]) -> None:
        self.ctx = ctx
        self.apply = apply
        self.queue: asyncio.Queue[Event] = asyncio.Queue()

    async def start(self) -> None:
        # Subscribe before the first catch-up, so nothing committed in between is missed.
        await self.ctx.bus.subscribe(topics.LEDGER_COMMITTED, self._on_live)

    async def _on_live(self, event: Event) -> None:
        self.queue.put_nowait(event)

    async def run(self) -> None:
        await self.catch_up()
        self.ctx.caught_up.set()
        log.info("caught up with the ledger at seq %d", self.ctx.state.last_seq)
        while True:
            try:
                first = await asyncio.wait_for(self.queue.get(), timeout=self.ctx.settings.inner_resync_seconds)
            except TimeoutError:
                await self.catch_up()
                continue
            events = [first]
            while not self.queue.empty():
                events.append(self.queue.get_nowait())
            for event in events:
                await self._take(event)
            self.ctx.persist()

    async def _take(self, event: Event) -> None:
        if event.seq is None or event.seq <= self.ctx.state.last_seq:
            return  # already processed (replayed by a catch-up, or a duplicate notification)
        if event.seq == self.ctx.state.last_seq + 1:
            self._apply(event)
            return
        # A gap: notifications were lost (or seqs are not dense); the ledger fills it in.
        await self.catch_up()

    def _apply(self, event: Event) -> None:
        assert event.seq is not None
        try:
            self.apply(event)
        except Exception:
            # One malformed event must not wedge the follower forever; it is logged and skipped.
            log.exception("could not process event %s (%s, seq %d)", event.id, event.kind, event.seq)
        self.ctx.state.last_seq = event.seq

    async def catch_up(self) -> None:
        """Process everything committed after ``last_seq``; retried until the ledger answers."""
        delay = 0.2
        while True:
            try:
                async for page in read_range(
                    self.ctx.bus, QueryRequest(after_seq=self.ctx.state.last_seq, limit=PAGE)
                ):
                    for event in page:
                        if event.seq is not None and event.seq > self.ctx.state.last_seq:
                            self._apply(event)
                    self.ctx.persist()
                return
            except (BusUnavailable, RemoteError) as exc:
                log.warning("ledger catch-up failed, retrying in %.1fs: %s", delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
