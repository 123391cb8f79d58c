"""Task steps stop at the owner's spend line (BUDGET_*), and go on when the budget allows.

The tasks service derives spend itself, from the ledger's committed ``model.usage`` events
(``delegate.runtime.spend``), instead of being told by the inner plane: both read the same
events, so both hold at the same line, and neither depends on the other being up. The book is
read once when a term starts; after that a live notice of a usage event (or, failing one, the
resync timer) reads what came after the newest event folded in, so a lost notice is no gap.

``on_change`` runs after every change of spend and when a hold ends: the service resumes the
tasks it paused for the budget once no hold is left (a new period, or the line raised).
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta

from nats.aio.subscription import Subscription

from delegate.contracts import topics
from delegate.contracts.events import Event, ModelUsage
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus, BusUnavailable
from delegate.runtime.ledger_client import LedgerClient, LedgerUnavailable
from delegate.runtime.spend import Hold, SpendBook

from .settings import Settings

log = logging.getLogger(__name__)

PAGE = 1000
RESYNC = timedelta(seconds=5)
PURPOSE = "task_step"


class SpendGate:
    def __init__(self, settings: Settings, bus: Bus, ledger: LedgerClient, on_change: Callable[[], None]) -> None:
        self.settings = settings
        self.bus = bus
        self.ledger = ledger
        self.on_change = on_change
        self.book = SpendBook()
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None

    def hold(self) -> Hold | None:
        """Why a task may not call the model now, or None."""
        return self.book.hold(utcnow(), self.settings.limits, PURPOSE)

    async def start(self) -> None:
        """Read the book from the ledger, then follow it (call once the ledger has caught up)."""
        if self._subscription is None:
            self._subscription = await self.bus.subscribe(topics.LEDGER_COMMITTED, self._on_live)
        await self.sync()
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="tasks-spend")

    async def _on_live(self, event: Event) -> None:
        if event.kind == ModelUsage.KIND:
            self.wake.set()

    async def sync(self) -> bool:
        """Fold every usage event after the newest one folded in; True when spend changed."""
        changed = False
        while True:
            reply = await self.ledger.query(
                QueryRequest(after_seq=self.book.last_seq, kinds=[ModelUsage.KIND], limit=PAGE))
            for event in reply.events:
                changed = self.book.apply(event, self.settings.limits) or changed
            if not reply.events or not reply.more:
                return changed

    async def _follow(self) -> None:
        while True:
            hold = self.hold()
            timeout = RESYNC.total_seconds()
            if hold is not None:
                timeout = min(timeout, max((hold.until - utcnow()).total_seconds(), 0.0) + 0.01)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout)
            self.wake.clear()
            try:
                changed = await self.sync()
            except (BusUnavailable, LedgerUnavailable) as exc:
                log.warning("reading spend from the ledger failed: %s", exc)
                continue
            if changed or (hold is not None and self.hold() is None):
                self.on_change()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
            self._subscription = None
