"""Conversations and spans: opening them just before the first event that needs them, closing
them, and the idle checkpoint that closes a span nobody used for a while.

Every part that records events in a span asks this one to open it (``publish_opening``) or close
it; the conversation state takes each id only once its event is acked.
"""

import logging
from datetime import datetime, timedelta
from typing import Any

from delegate.contracts.events import (
    Channel,
    Checkpoint,
    ConversationOpened,
    Event,
    Message,
    SpanClosed,
    SpanOpened,
    SpanType,
    make_event,
)
from delegate.contracts.ids import new_id
from delegate.contracts.messages import IdleCheckInput, QueryRequest

from .conversation_state import SpanRef
from .ledger import PAGE, Ledger
from .status import Status

log = logging.getLogger(__name__)

TICK = timedelta(microseconds=1)


class Spans:
    def __init__(self, ledger: Ledger, status: Status) -> None:
        self.ledger = ledger
        self.status = status

    async def ensure_open(self, channel: Channel, span_type: SpanType, ts: datetime) -> tuple[str, SpanRef]:
        """The open conversation and span, opening them just before ``ts`` when there are none."""
        conversation_id, span = self.open_ids(channel, span_type)
        await self.publish_opening(conversation_id, span, ts)
        return conversation_id, span

    def open_ids(self, channel: Channel, span_type: SpanType) -> tuple[str, SpanRef]:
        """The open conversation and span, or new ids for them: ``publish_opening`` opens those."""
        s = self.status.state
        conversation_id = s.conversation_id or new_id()
        span = s.span or SpanRef(new_id(), span_type, channel)
        return conversation_id, span

    async def publish_opening(
        self, conversation_id: str, span: SpanRef, ts: datetime, *then: Event, opened: SpanOpened | None = None
    ) -> None:
        """Open the conversation and span if they are new, just before ``ts``; then publish ``then``.

        ``opened``: the span's opening payload when it says more than its type (an activation's batch).

        One publish at a time, each acked before the next: a retried publish can never land
        behind a later one. The state takes each id only once its event is acked.
        """
        s = self.status.state
        if s.conversation_id is None:
            await self.ledger.append(
                make_event(
                    ConversationOpened(), conversation_id=conversation_id, span_id=None, channel=span.channel,
                    ts=ts - 2 * TICK,
                )
            )
            s.conversation_id = conversation_id
        if s.span is None:
            await self.ledger.append(
                make_event(
                    opened or SpanOpened(type=span.type), conversation_id=conversation_id, span_id=span.id,
                    channel=span.channel, ts=ts - TICK,
                )
            )
            s.span = span
        for event in then:
            await self.ledger.append(event)
        await self.status.publish()

    async def close_span(self, reason: Any) -> None:
        s = self.status.state
        span = s.span
        if span is None:
            return
        await self.ledger.append(
            make_event(
                SpanClosed(reason=reason), conversation_id=s.conversation_id, span_id=span.id, channel=span.channel
            )
        )
        s.span = None
        await self.status.publish()

    # ---- idle checkpoint ------------------------------------------------------------------------

    async def idle_check(self, msg: IdleCheckInput, delivery: int) -> None:
        async with self.status.lock:
            await self.ledger.wait_caught_up()
            s = self.status.state
            span = s.span
            if span is None or span.id != msg.span_id or s.conversation_id is None:
                log.info("idle check for span %s ignored: it is not the open span", msg.span_id)
                return
            since = await self.ledger.scan(QueryRequest(after_seq=msg.last_activity_seq, span_id=span.id, limit=PAGE))
            through = msg.last_activity_seq
            ours = [e for e in since if (cp := e.payload_as(Checkpoint)) is not None and cp.through_seq == through]
            if len(since) > len(ours):
                log.info("idle check for span %s ignored: activity after seq %d", span.id, msg.last_activity_seq)
                return
            if not ours:  # a redelivered check may find its checkpoint already written
                previous = await self.ledger.newest(
                    ["checkpoint"], conversation_id=s.conversation_id, below=msg.last_activity_seq
                )
                found = previous.payload_as(Checkpoint) if previous else None
                after = found.through_seq if found else 0
                if msg.last_activity_seq > after:
                    await self._checkpoint(s.conversation_id, span, after, msg.last_activity_seq)
            await self.close_span("idle")

    async def _checkpoint(self, conversation_id: str, span: SpanRef, after: int, through: int) -> None:
        events = await self.ledger.scan(
            QueryRequest(after_seq=after, through_seq=through, conversation_id=conversation_id, limit=PAGE)
        )
        turn_ids = [e.id for e in events if e.role == "user" and e.is_kind(Message)]
        await self.ledger.append(
            make_event(
                Checkpoint(
                    after_seq=after,
                    through_seq=through,
                    first_event_id=events[0].id if events else None,
                    last_event_id=events[-1].id if events else None,
                    turn_count=len(turn_ids),
                    turn_ids=turn_ids,
                ),
                conversation_id=conversation_id,
                span_id=span.id,
                channel=span.channel,
            )
        )
