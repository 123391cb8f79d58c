"""The agent's side of the ledger (``delegate.runtime.ledger_client``), under its term's fence.

Every append is stamped with the leadership term's ``fence``; ``wait_caught_up`` is the barrier
a new leader needs: once the ledger's durable consumer has nothing pending, every event a dead
leader managed to publish is committed (or refused) and visible to queries.
"""

from delegate.contracts.events import Event, Fence
from delegate.runtime.bus import Bus
from delegate.runtime.ledger_client import PAGE, LedgerClient, LedgerUnavailable

__all__ = ["PAGE", "Ledger", "LedgerUnavailable"]


class Ledger(LedgerClient):
    def __init__(self, bus: Bus) -> None:
        super().__init__(bus, "agent")
        # The current leadership term's fence, stamped on every append; set by the term.
        self.fence: Fence | None = None

    async def append(self, event: Event) -> None:
        """Publish ``event`` under this term's fence."""
        await self.publish(event, self.fence)
