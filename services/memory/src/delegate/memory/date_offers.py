"""Raises the key-date offers an address book import made (``projection_dates``): each as its
``inner.signal`` ledger event, under the id the index gave it, until the follower sees it
committed. A crash or a lost ledger in between raises it again; the ledger stores it once.
"""

import asyncio
import logging
from collections.abc import Sequence

from delegate.contracts import topics
from delegate.contracts.events import ContactsSynced, Event, InnerSignal, make_event
from delegate.runtime.bus import Bus, BusUnavailable

from .index import MemoryIndex
from .projection_dates import unsent

log = logging.getLogger(__name__)

RESEND_S = 30.0  # an offer not seen committed after this long is published again


class DateOffers:
    def __init__(self, bus: Bus, index: MemoryIndex, stop: asyncio.Event) -> None:
        self.bus, self.index, self.stop = bus, index, stop
        self.wake = asyncio.Event()

    def on_applied(self, events: Sequence[Event]) -> None:
        if any(e.is_kind(ContactsSynced) for e in events):
            self.wake.set()

    async def run(self) -> None:
        while not self.stop.is_set():
            self.wake.clear()
            for signal in unsent(self.index.reader()):
                event = make_event(
                    InnerSignal(source=signal.source, signal_kind=signal.kind, urgency=signal.urgency,
                                dedup_key=signal.dedup_key, expires_at=signal.expires_at,
                                signal=signal.model_dump(mode="json")),
                    conversation_id=None, span_id=None, channel="inner", id=signal.id, ts=signal.ts,
                )
                try:
                    await self.bus.publish(topics.ledger_append("memory"), event, deadline=10.0)
                    log.info("offered %d imported key date(s) as one signal %s", signal.payload.count, signal.id)
                except BusUnavailable as exc:
                    log.warning("could not raise the key-date offer %s yet: %s", signal.id, exc)
            waiters = [asyncio.ensure_future(self.wake.wait()), asyncio.ensure_future(self.stop.wait())]
            await asyncio.wait(waiters, timeout=RESEND_S, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
