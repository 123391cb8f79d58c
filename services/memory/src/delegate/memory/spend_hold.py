"""Per-turn extraction stops at the owner's spend line (BUDGET_*), like all background work.

The memory service reads spend from the ledger's committed ``model.usage`` events itself
(``delegate.runtime.spend``), as the inner plane and the tasks service do: all three fold the
same events, so all hold at the same line, and none depends on another being up. Before each
extraction it reads what came after the newest usage event it folded in (one indexed query off
the hot path), so a restarted service starts from the ledger's spend, never from zero. A held
turn stays on the index's pending list and is extracted once the hold ends (a new period, the
runaway guard's pause over, or the line raised and the service restarted).
"""

import logging

from delegate.contracts import topics
from delegate.contracts.events import ModelUsage
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus
from delegate.runtime.spend import Hold, Limits, SpendBook

log = logging.getLogger(__name__)

PURPOSE = "memory_extraction"
PAGE = 1000


class SpendHold:
    def __init__(self, bus: Bus, limits: Limits) -> None:
        self.bus = bus
        self.limits = limits
        self.book = SpendBook()
        self._logged: tuple[str, str] | None = None  # the hold last logged: said once, not per wake

    async def check(self) -> Hold | None:
        """Why a per-turn extraction may not call the model now, or None (raises when the
        ledger does not answer: the caller retries, the turn stays pending)."""
        await self._read()
        hold = self.book.hold(utcnow(), self.limits, PURPOSE)
        key = None if hold is None else (hold.scope, hold.period)
        if hold is not None and key != self._logged:
            log.info("per-turn extraction waits: %s (until %s)", hold.detail, hold.until.isoformat())
        self._logged = key
        return hold

    async def _read(self) -> None:
        while True:
            reply = await self.bus.request(
                topics.LEDGER_QUERY, QueryRequest(after_seq=self.book.last_seq, kinds=[ModelUsage.KIND], limit=PAGE)
            )
            for event in reply.events:
                self.book.apply(event, self.limits)
            if not reply.events or not reply.more:
                return
