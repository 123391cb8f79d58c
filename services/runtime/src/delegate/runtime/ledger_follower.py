"""Following the ledger's committed events in seq order, exactly once each, across restarts.

Live notifications (``ledger.live.committed``, core NATS) are fast but may be lost; the ledger
query is the truth. So: on start, and whenever a live event skips a seq or nothing arrived for
a while, read ``ledger.cmd.query(after_seq=last_seq)`` until caught up. The inner plane, the
memory service and the gateway's fan-out follow the ledger this way; what differs is how they
apply what they read and where they keep ``last_seq``, which a subclass says (``last_seq``,
``apply_run``, the hooks).

A projection (inner plane, memory) starts at its stored ``last_seq`` and never skips an event.
The gateway's fan-out keeps no position and its clients replay the past themselves, so it
starts at the ledger's newest event (``from_head``), and a gap the ledger leaves unfilled for
``gap_give_up_s`` is given up (``on_gap_lost``, then ``start_at``) rather than holding every
client back for as long as the ledger is silent.

An event that cannot be applied is the subclass's to retry; when it gives up it parks the
event with ``dead_letter`` (DEAD stream, one letter per event however often a replay fails on
it) and passes over it: one bad event must not wedge the follower, nor vanish without a trace.
"""

import asyncio
import logging
import time
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
        source: str | None,
        queue_max: int,
        resync_s: float,
        page: int,
        caught_up: asyncio.Event | None = None,
        from_head: bool = False,
        gap_give_up_s: float | None = None,
    ) -> None:
        self.bus = bus
        self.stop = stop
        # The dead-letter source (``dead.evt.<source>``), named in contracts; None for a follower
        # whose apply cannot fail, which never parks an event.
        self.source = source
        self.resync_s = resync_s
        self.gap_give_up_s = gap_give_up_s  # None: a gap is asked about until the ledger answers
        self._positioned = not from_head  # False until ``start_at`` placed a from_head follower
        self.read = 0  # events read from the ledger (catch-ups and gaps), not from live notifications
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

    def start_at(self, seq: int) -> None:
        """Make ``seq`` the ``last_seq`` without applying anything: only a ``from_head`` follower
        is placed so (at the ledger's newest event, or past a gap it gave up)."""
        raise NotImplementedError(f"{type(self).__name__} follows from its own last_seq and never skips")

    async def on_gap_lost(self) -> None:
        """The ledger did not fill a gap within ``gap_give_up_s``: the events in it are passed over."""
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
                run = []
                if await self.catch_up(give_up_s=self.gap_give_up_s) or self.stop.is_set():
                    return
                # Given up (only with ``gap_give_up_s``): go on from this event, past whatever
                # of the gap the ledger did answer before it fell silent.
                await self.on_gap_lost()
                self.start_at(max(self.last_seq, event.seq - 1))
                expected = self.last_seq + 1
                if event.seq < expected:
                    continue
            run.append(event)
            expected += 1
        await self.apply_run(run)

    async def catch_up(self, *, give_up_s: float | None = None) -> bool:
        """Apply everything committed after ``last_seq``, retried until the ledger answers: True
        once caught up; False when stopped, or when ``give_up_s`` passed without an answer."""
        backoff = Backoff(initial=0.2, maximum=5.0)
        began = time.monotonic()
        while not self.stop.is_set():
            try:
                if not self._positioned:
                    head = await self.bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=0, limit=1))
                    self.ledger_seq = max(self.ledger_seq, head.last_seq)
                    self.start_at(head.last_seq)
                    self._positioned = True
                    return True
                while True:
                    reply = await self.bus.request(
                        topics.LEDGER_QUERY, QueryRequest(after_seq=self.last_seq, limit=self.page)
                    )
                    self.ledger_seq = max(self.ledger_seq, reply.last_seq)
                    if not reply.events:
                        return True  # nothing new: no page, so no ``after_page`` (a state write) either
                    after = self.last_seq
                    page = [e for e in reply.events if e.seq is not None and e.seq > after]
                    self.read += len(page)
                    await self.apply_run(page)
                    await self.after_page()
                    if not reply.more:
                        return True
            except (BusUnavailable, RemoteError) as exc:
                if give_up_s is not None and time.monotonic() - began >= give_up_s:
                    log.error(
                        "the ledger did not answer for %g s (%s): giving up after seq %d",
                        give_up_s,
                        exc,
                        self.last_seq,
                    )
                    return False
                log.warning("ledger catch-up failed (%d), retrying: %s", backoff.failures + 1, exc)
                if not await backoff.sleep(self.stop):
                    return False
        return False

    async def dead_letter(self, event: Event, reason: str) -> None:
        """Park ``event``: it could not be applied (the caller then passes over it)."""
        assert self.source is not None, "a follower without a dead-letter source never parks"
        await self.bus.dead_letters.write_data(
            self.source,
            topics.LEDGER_COMMITTED.subject,
            event.model_dump_json().encode(),
            f"event {event.id} ({event.kind}, seq {event.seq}): {reason}",
            letter_id=self.letter_id(event),
        )
