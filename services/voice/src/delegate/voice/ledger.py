"""The voice service's side of the ledger: fenced appends, and the reads a call starts from.

Like the agent's: events go to ``ledger_append("voice")`` stamped with the voice lock's fence
(the ledger refuses unfenced events on that subject), reads go through request/reply, and
``wait_caught_up`` is the barrier before the resume state is trusted: once the ledger's
consumer has nothing pending, whatever a killed predecessor published is committed.
"""

from delegate.contracts.events import Event, Fence
from delegate.runtime.bus import Bus
from delegate.runtime.ledger_client import PAGE, LedgerClient, LedgerUnavailable

__all__ = ["PAGE", "LedgerUnavailable", "VoiceLedger"]


class VoiceLedger(LedgerClient):
    def __init__(self, bus: Bus) -> None:
        super().__init__(bus, "voice")

    async def append(self, event: Event, fence: Fence, *, deadline: float = 10.0) -> None:
        """Publish under the voice lock's ``fence`` (the ledger refuses voice events without one)."""
        await self.publish(event, fence, deadline=deadline)
