"""The inbox's durable progress is the ledger: ``mail.progress`` events, one per handled UID.

There is no local store to lose or to disagree with the ledger. Each message's result (the
agent input, or an ``inbound.refused`` event) is published before its progress event, so a
crash in between re-handles the message, and every id involved is deterministic, so that
second pass is deduplicated (JetStream by Nats-Msg-Id, the ledger by event id) or found by
the look-ups in ``already_handled``.
"""

import hashlib
import logging

import nats.errors
import nats.js.errors

from delegate.contracts import streams, topics
from delegate.contracts.events import Event, MailProgress, make_event
from delegate.contracts.messages import GetRequest, QueryReply, QueryRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError, Retryable
from delegate.runtime.retry import retrying

log = logging.getLogger(__name__)

PAGE = 1000


class LedgerUnavailable(Retryable):
    """The ledger did not answer or has not caught up: the inbox reconnects later."""


class _Behind(Exception):
    pass


def progress_id(mailbox: str, uidvalidity: int, uid: int) -> str:
    return "mail:" + hashlib.sha256(f"{mailbox}\n{uidvalidity}\n{uid}".encode()).hexdigest()[:40]


class Progress:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Return once the ledger committed everything already published to it (our own
        last progress events included), so ``newest`` sees them."""
        try:
            async for attempt in retrying(retry_on=_Behind, deadline=timeout, initial=0.05, maximum=0.5):
                with attempt:
                    try:
                        info = await self.bus.js.consumer_info("LEDGER", streams.LEDGER_WRITER)
                    except nats.js.errors.NotFoundError:
                        raise _Behind("the ledger's consumer does not exist yet") from None
                    except (TimeoutError, nats.errors.Error, OSError) as exc:
                        raise _Behind(f"consumer info failed: {exc!r}") from exc
                    if info.num_pending or info.num_ack_pending:
                        raise _Behind(f"{info.num_pending} pending, {info.num_ack_pending} unacknowledged")
        except _Behind as exc:
            raise LedgerUnavailable(f"the ledger has not caught up: {exc}") from None

    async def newest(self, mailbox: str, window: int = 2000) -> MailProgress | None:
        """The newest ``mail.progress`` of ``mailbox``, searching back in growing seq windows."""
        high = (await self._query(QueryRequest(after_seq=2**62, limit=1))).last_seq
        while high > 0:
            low = max(high - window, 0)
            req = QueryRequest(after_seq=low, through_seq=high, kinds=[MailProgress.KIND], limit=PAGE)
            events = await self._scan(req)
            for event in reversed(events):
                progress = event.typed(MailProgress)
                if progress.mailbox == mailbox:
                    return progress
            high, window = low, window * 4
        return None

    async def handled_event_ids(self, mailbox: str) -> set[str]:
        """Every event this mailbox's messages became, under any UIDVALIDITY: what a re-scan
        after a UIDVALIDITY change must not produce again (even before the agent committed
        the inputs, which ``already_handled`` would find)."""
        events = await self._scan(QueryRequest(after_seq=0, kinds=[MailProgress.KIND], limit=PAGE))
        found: set[str] = set()
        for event in events:
            progress = event.typed(MailProgress)
            if progress.mailbox == mailbox and progress.event_id:
                found.add(progress.event_id)
        return found

    async def already_handled(self, client_msg_id: str, input_id: str, refused_id: str) -> str | None:
        """The event a message already became (from an earlier pass or mailbox), if any."""
        for req in (GetRequest(client_msg_id=client_msg_id), GetRequest(id=input_id), GetRequest(id=refused_id)):
            event = await self._get(req)
            if event is not None:
                return event.id
        return None

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
        await self.bus.publish(topics.ledger_append("pollers"), event, msg_id=event.id)

    async def _scan(self, req: QueryRequest) -> list[Event]:
        found: list[Event] = []
        after = req.after_seq
        while True:
            reply = await self._query(req.model_copy(update={"after_seq": after}))
            found.extend(reply.events)
            if not reply.more or not reply.events:
                return found
            after = reply.events[-1].seq or after

    async def _query(self, req: QueryRequest) -> QueryReply:
        try:
            return await self.bus.request(topics.LEDGER_QUERY, req, timeout=10.0)
        except (BusUnavailable, RemoteError) as exc:
            raise LedgerUnavailable(f"ledger query failed: {exc}") from exc

    async def _get(self, req: GetRequest) -> Event | None:
        try:
            return (await self.bus.request(topics.LEDGER_GET, req)).event
        except RemoteError as exc:
            if exc.code == "not_found":
                return None
            raise LedgerUnavailable(f"ledger get failed: {exc}") from exc
        except BusUnavailable as exc:
            raise LedgerUnavailable(f"ledger get failed: {exc}") from exc
