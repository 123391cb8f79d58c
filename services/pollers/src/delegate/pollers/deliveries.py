"""The outbox's memory is the ledger: ``delivery`` events with ids derived from the outbox id.

``<id>:sending:<n>`` is written before attempt ``n``, and ``<id>:sent`` / ``:failed`` /
``:unknown`` end the sender's part, so a redelivered outbox message is looked up by id
(after the ledger has caught up) instead of being sent a second time. Every record is a
JetStream-acknowledged publish, deduplicated by its event id, before the outbox message is
acknowledged.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from nats.aio.msg import Msg

from delegate.contracts import topics
from delegate.contracts.channels import OutboundEmail, OutboundSms
from delegate.contracts.events import Delivery, DeliveryStatus, Event, make_event
from delegate.contracts.messages import GetRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError, in_progress

from .progress import LedgerUnavailable, Progress

log = logging.getLogger(__name__)

RESULTS = ("sent", "failed", "unknown")
MAX_ATTEMPT_RECORDS = 1000  # far beyond attempts x deliveries; bounds the look-up loop


class LedgerBehind(LedgerUnavailable):
    """The ledger has not caught up or did not answer: deliver the message again later."""

    delay = 2.0


def delivery_id(outbox_id: str, status: str, attempt: int | None = None) -> str:
    return f"{outbox_id}:{status}:{attempt}" if attempt is not None else f"{outbox_id}:{status}"


def redelivered(raw: Msg) -> bool:
    try:
        return raw.metadata.num_delivered > 1
    except Exception:  # not a JetStream delivery (a test calling a handler directly)
        return False


class DeliveryLog:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._progress = Progress(bus)

    async def caught_up(self) -> None:
        """Return once everything already published to the ledger is committed, so an earlier
        process's records of this message can be read back."""
        await self._progress.wait_caught_up()

    async def get(self, event_id: str) -> Event | None:
        try:
            return (await self.bus.request(topics.LEDGER_GET, GetRequest(id=event_id))).event
        except RemoteError as exc:
            if exc.code == "not_found":
                return None
            raise LedgerBehind(f"ledger get failed: {exc}") from exc
        except BusUnavailable as exc:
            raise LedgerBehind(f"ledger get failed: {exc}") from exc

    async def outcome(self, outbox_id: str) -> Event | None:
        """The sender's result for ``outbox_id`` (sent, failed or unknown), if one is recorded."""
        for status in RESULTS:
            event = await self.get(delivery_id(outbox_id, status))
            if event is not None:
                return event
        return None

    async def attempts(self, outbox_id: str) -> list[Event]:
        """The ``sending`` records of earlier attempts, in order (numbered from 1 without gaps)."""
        found: list[Event] = []
        for n in range(1, MAX_ATTEMPT_RECORDS + 1):
            event = await self.get(delivery_id(outbox_id, "sending", n))
            if event is None:
                break
            found.append(event)
        return found

    async def record(
        self,
        msg: OutboundSms | OutboundEmail,
        status: DeliveryStatus,
        *,
        attempt: int | None = None,
        external_ids: Sequence[str] = (),
        parts: int | None = None,
        error: str | None = None,
        error_code: str | None = None,
        final: bool = False,
    ) -> Event:
        payload = Delivery(
            outbox_id=msg.id, channel=msg.type, status=status, attempt=attempt, external_ids=list(external_ids),
            parts=parts, error=error[:2000] if error else None, error_code=error_code[:64] if error_code else None,
            final=final,
        )
        event = make_event(
            payload,
            id=delivery_id(msg.id, status, attempt if status == "sending" else None),
            conversation_id=msg.conversation_id,
            span_id=msg.span_id,
            channel=msg.type,
            parent_id=msg.parent_id,
        )
        await self.append(event)
        return event

    async def append(self, event: Event) -> None:
        try:
            await self.bus.publish(topics.ledger_append("pollers"), event, msg_id=event.id)
        except BusUnavailable as exc:
            raise LedgerBehind(f"could not record {event.id}: {exc}") from exc


@contextlib.asynccontextmanager
async def heartbeat(raw: Msg, every: float) -> AsyncIterator[None]:
    """Keep JetStream from redelivering ``raw`` while a long send or retry is under way."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(every)
            await in_progress(raw)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
