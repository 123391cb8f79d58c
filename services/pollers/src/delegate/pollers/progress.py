"""The inbox's durable progress is the ledger: ``mail.progress`` events, one per handled UID.

There is no local store to lose or to disagree with the ledger. Each message's result (the
agent input, or an ``inbound.refused`` event) is published before its progress event, so a
crash in between re-handles the message, and every id involved is deterministic, so that
second pass is deduplicated (JetStream by Nats-Msg-Id, the ledger by event id) or found by
the look-ups in ``already_handled``.
"""

import hashlib
import logging

from delegate.contracts.events import Event, MailProgress, make_event
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus
from delegate.runtime.ledger_client import PAGE, LedgerClient, LedgerUnavailable

__all__ = ["LedgerUnavailable", "Progress", "progress_id"]

log = logging.getLogger(__name__)


def progress_id(mailbox: str, uidvalidity: int, uid: int) -> str:
    return "mail:" + hashlib.sha256(f"{mailbox}\n{uidvalidity}\n{uid}".encode()).hexdigest()[:40]


class Progress:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.ledger = LedgerClient(bus, "pollers")

    async def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Return once the ledger committed everything already published to it (our own
        last progress events included), so ``newest`` sees them."""
        await self.ledger.wait_caught_up(timeout)

    async def newest(self, mailbox: str, window: int = 2000) -> MailProgress | None:
        """The newest ``mail.progress`` of ``mailbox``, searching back in growing seq windows."""
        event = await self.ledger.newest(
            [MailProgress.KIND], where=lambda e: e.typed(MailProgress).mailbox == mailbox, window=window
        )
        return event.typed(MailProgress) if event is not None else None

    async def handled_event_ids(self, mailbox: str) -> set[str]:
        """Every event this mailbox's messages became, under any UIDVALIDITY: what a re-scan
        after a UIDVALIDITY change must not produce again (even before the agent committed
        the inputs, which ``already_handled`` would find)."""
        events = await self.ledger.scan(QueryRequest(after_seq=0, kinds=[MailProgress.KIND], limit=PAGE))
        found: set[str] = set()
        for event in events:
            progress = event.typed(MailProgress)
            if progress.mailbox == mailbox and progress.event_id:
                found.add(progress.event_id)
        return found

    async def already_handled(self, client_msg_id: str, input_id: str, refused_id: str) -> str | None:
        """The event a message already became (from an earlier pass or mailbox), if any."""
        event = await self.ledger.get_by_client_msg_id(client_msg_id)
        for event_id in (input_id, refused_id):
            if event is None:
                event = await self.ledger.get(event_id)
        return event.id if event is not None else None

    async def record(self, progress: MailProgress) -> None:
        event = make_event(
            progress,
            id=progress_id(progress.mailbox, progress.uidvalidity, progress.uid),
            conversation_id=None,
            span_id=None,
            channel="email",
        )
        await self.append(event)

    async def append(self, event: Event) -> None:
        await self.ledger.publish(event)
