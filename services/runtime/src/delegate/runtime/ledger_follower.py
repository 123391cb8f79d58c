"""Following the ledger's committed events in seq order, exactly once each, across restarts.

Live notifications (``ledger.live.committed``, core NATS) are fast but may be lost; the ledger
query is the truth. So: on start, and whenever a live event skips a seq or nothing arrived for
a while, read ``ledger.cmd.query(after_seq=last_seq)`` until caught up. The inner plane and the
memory service follow the ledger this way; what differs is how they apply what they read and
where they keep ``last_seq``, which a subclass says (``last_seq``, ``apply_run``, the hooks).

An event that cannot be applied is the subclass's to retry; when it gives up it parks the
event with ``dead_letter`` (DEAD stream, one letter per event however often a replay fails on
it) and passes over it: one bad event must not wedge the follower, nor vanish without a trace.
"""

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest

from .bus import Bus, BusUnavailable, RemoteError
from .retry import Backoff

log = logging.getLogger(__name__)


class LedgerFollower(ABC):
    def __init__(
        self,
        bus: Bus,
        stop: asyncio.Event,
        *,
        source: str,
        queue_max: int,
        resync_s: float,
        page: int,
        caught_up: asyncio.Event | None = None,
    ) -> None:
        self.bus = bus
        self.stop = stop
        self.source = source  # the dead-letter source (``dead.evt.<source>``), named in contracts
        self.resync_s = resync_s
        self.page = page  # a catch-up page; also the most live events taken at once
        self.queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=queue_max)
        self.high_water = 0  # the fullest the queue has been (it is bounded; tests check it)
        # Set once the first catch-up reached the ledger's newest event (never when stopped before).
        self.caught_up = caught_up if caught_up is not None else asyncio.Event()
        self.ledger_seq = 0  # the ledger's newest seq as last seen (for pings' details)

    # ---- what a follower says ---------------------------------------------------------------

    @property
    @abstractmethod
    def last_seq(self) -> int:
        """The seq of the last event applied (or passed over)."""

    @abstractmethod
    async def apply_run(self, events: Sequence[Event]) -> None:
        """Apply consecutive events, each after ``last_seq`` and in seq order; ``last_seq`` follows."""

    @abstractmethod
    def letter_id(self, event: Event) -> str:
        """The id of ``event``'s dead letter: the same for every failure of the same event."""

    async def after_page(self) -> None:
        """After each catch-up page was applied (the inner plane writes its state there)."""
        return None

    def wait_s(self) -> float:
        """How long the live loop waits for an event before ``on_quiet``."""
        return self.resync_s

    async def on_quiet(self) -> None:
        """Nothing came for ``wait_s``: notifications may have been lost, so ask the ledger."""
        await self.catch_up()

    async def after_live(self) -> None:
        """After the live events taken at once were applied."""
        return None

    # ---- the loop ---------------------------------------------------------------------------

    async def start(self) -> None:
        # Subscribe before the first catch-up, so nothing committed in between is missed.
        await self.bus.subscribe(topics.LEDGER_COMMITTED, self._on_live)

    async def _on_live(self, event: Event) -> None:
        # Waits while the queue is full: the subscription stops taking messages. Nothing
        # durable is lost that way; a notification NATS drops meanwhile shows up as a gap.
        await self.queue.put(event)
        self.high_water = max(self.high_water, self.queue.qsize())

    async def run(self) -> None:
        await self.catch_up()
        if self.stop.is_set():
            return  # what waits for ``caught_up`` must not start on a half-read ledger
        self.caught_up.set()
        log.info("caught up with the ledger at seq %d", self.last_seq)
        while not self.stop.is_set():
            try:
                first = await asyncio.wait_for(self.queue.get(), timeout=self.wait_s())
            except TimeoutError:
                await self.on_quiet()
                continue
            events = [first]
            while not self.queue.empty() and len(events) < self.page:
                events.append(self.queue.get_nowait())
            await self._take(events)
            await self.after_live()

    async def _take(self, events: list[Event]) -> None:
        run: list[Event] = []
        expected = self.last_seq + 1
        for event in events:
            if event.seq is None or event.seq < expected:
                continue  # already applied (replayed by a catch-up, or a duplicate notification)
            if event.seq != expected:
                # A gap: notifications were lost (or seqs are not dense); the ledger fills it in,
                # and the rest of what was taken is in what it answers.
                await self.apply_run(run)
                await self.catch_up()
                return
            run.append(event)
            expected += 1
        await self.apply_run(run)

    async def catch_up(self) -> None:
        """Apply everything committed after ``last_seq``; retried until the ledger answers."""
        backoff = Backoff(initial=0.2, maximum=5.0)
        while not self.stop.is_set():
            try:
                while True:
                    reply = await self.bus.request(
                        topics.LEDGER_QUERY, QueryRequest(after_seq=self.last_seq, limit=self.page)
                    )
                    self.ledger_seq = max(self.ledger_seq, reply.last_seq)
                    if not reply.events:
                        return  # nothing new: no page, so no ``after_page`` (a state write) either
                    after = self.last_seq
                    await self.apply_run([e for e in reply.events if e.seq is not None and e.seq > after])
                    await self.after_page()
                    if not reply.more:
                        return
            except (BusUnavailable, RemoteError) as exc:
                log.warning("ledger catch-up failed (%d), retrying: %s", backoff.failures + 1, exc)
                if not await backoff.sleep(self.stop):
                    return

    async def dead_letter(self, event: Event, reason: str) -> None:
        """Park ``event``: it could not be applied (the caller then passes over it)."""
        await self.bus.dead_letters.write_data(
            self.source, topics.LEDGER_COMMITTED.subject, event.model_dump_json().encode(),
            f"event {event.id} ({event.kind}, seq {event.seq}): {reason}",
            letter_id=self.letter_id(event),
        )
