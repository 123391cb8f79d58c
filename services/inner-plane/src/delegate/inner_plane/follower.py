"""The inner plane's ledger follower: every committed event, in seq order, to ``apply``.

The loop (live notifications, gaps and catch-ups, dead letters) is the runtime's
``LedgerFollower``. What is the inner plane's: events are applied one at a time (``apply`` is
every component's ``on_event``), a failing one is tried again a few times and then parked, and
``last_seq`` lives in the state file, which is written after each catch-up page and, while
live, at most every PERSIST_EVERY_S.
"""

import logging
import time
from collections.abc import Callable, Sequence

from delegate.contracts.events import Event
from delegate.contracts.streams import INNER_FOLLOWER
from delegate.runtime.ledger_follower import LedgerFollower as Follower
from delegate.runtime.retry import retrying

from .context import Context, derived_id

log = logging.getLogger(__name__)

PAGE = 500
PERSIST_EVERY_S = 0.25
# The dead-letter source (``dead.evt.<source>``) of events the follower could not process;
# named in contracts, where the permission to publish there comes from.
DEAD_LETTER_SOURCE = INNER_FOLLOWER


class LedgerFollower(Follower):
    def __init__(self, ctx: Context, apply: Callable[[Event], None]) -> None:
        super().__init__(
            ctx.bus, ctx.stop, source=DEAD_LETTER_SOURCE, queue_max=ctx.settings.inner_queue_max,
            resync_s=ctx.settings.inner_resync_seconds, page=PAGE, caught_up=ctx.caught_up,
        )
        self.ctx = ctx
        self.apply = apply
        # Live events are persisted at most every PERSIST_EVERY_S (and as soon as the queue is
        # quiet that long): the whole state is one file, and writing it after every event of a
        # burst cost more than the events. What is not on disk yet is only replayed after a
        # crash (apply is idempotent); a component persists itself before any side effect.
        self.persisted_at = time.monotonic()
        self.dirty = False

    @property
    def last_seq(self) -> int:
        return self.ctx.state.last_seq

    def letter_id(self, event: Event) -> str:
        # One letter per event, however often a replay after a lost state file fails on it.
        return derived_id("dead-letter", event.id)

    async def after_page(self) -> None:
        await self._persist()

    def wait_s(self) -> float:
        if self.dirty:
            return max(0.0, PERSIST_EVERY_S - (time.monotonic() - self.persisted_at))
        return self.resync_s

    async def on_quiet(self) -> None:
        if self.dirty:
            await self._persist()
        else:
            await self.catch_up()

    async def after_live(self) -> None:
        self.dirty = True
        if time.monotonic() - self.persisted_at >= PERSIST_EVERY_S:
            await self._persist()

    async def _persist(self) -> None:
        await self.ctx.persist()
        self.persisted_at, self.dirty = time.monotonic(), False

    async def apply_run(self, events: Sequence[Event]) -> None:
        for event in events:
            await self._apply(event)

    async def _apply(self, event: Event) -> None:
        assert event.seq is not None
        attempts = self.ctx.settings.inner_event_attempts
        try:
            self.apply(event)  # the common case, without retry machinery: a rebuild applies millions
        except Exception as first:
            if attempts <= 1:
                await self.dead_letter(event, f"processing failed once: {first!r}")
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
            await self.dead_letter(event, f"processing failed {attempts + 1} times: {exc!r}")
