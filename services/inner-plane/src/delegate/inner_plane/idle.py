"""The idle checkpoint timer: ask the agent to checkpoint a span nobody touched for a while.

The deadline is the newest activity's ledger timestamp plus IDLE_SPAN_SECONDS, so a
restart inside the idle window still fires on time (or at once when overdue). The
agent decides and writes ``checkpoint`` + ``span.closed``; the inner plane only asks,
once per (span, newest activity): ``fired_seq`` in the state, and the Nats-Msg-Id
``idle:<span>:<seq>`` inside the AGENT stream's day-long duplicate window.
"""

import asyncio
import logging
from datetime import timedelta

from delegate.contracts import topics
from delegate.contracts.events import ConversationEnded, Event, SpanClosed, SpanOpened
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import IdleCheckInput
from delegate.runtime.bus import BusUnavailable
from delegate.runtime.retry import Backoff

from .context import Context, derived_id
from .state import OpenSpan

log = logging.getLogger(__name__)


class IdleTimer:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.wake = asyncio.Event()
        # While NATS is away, unsent checks are tried again after a growing pause.
        self.backoff = Backoff(initial=0.5, maximum=10.0)

    def on_event(self, event: Event) -> None:
        spans = self.ctx.state.spans
        assert event.seq is not None
        if event.span_id and (opened := event.payload_as(SpanOpened)) is not None:
            if opened.type == "task":
                return  # a task's span is its journal, not a conversation: nothing to checkpoint
            spans[event.span_id] = OpenSpan(
                span_id=event.span_id,
                conversation_id=event.conversation_id,
                type=opened.type,
                last_seq=event.seq,
                last_ts=event.ts,
            )
        elif event.span_id and event.is_kind(SpanClosed):
            spans.pop(event.span_id, None)
        elif event.is_kind(ConversationEnded):
            for span_id in [s.span_id for s in spans.values() if s.conversation_id == event.conversation_id]:
                del spans[span_id]
        elif event.span_id in spans:
            # Every event in the span counts, the inner plane's own capsule included: the agent
            # declines a check when anything follows last_activity_seq, so this is the seq to ask with.
            span = spans[event.span_id]
            span.last_seq = event.seq
            span.last_ts = max(span.last_ts, event.ts)
        else:
            return
        self.wake.set()

    async def run(self) -> None:
        await self.ctx.caught_up.wait()
        idle = timedelta(seconds=self.ctx.settings.idle_span_seconds)
        while True:
            self.wake.clear()
            now = utcnow()
            next_due = None
            for span in list(self.ctx.state.spans.values()):
                if span.fired_seq == span.last_seq:
                    continue
                due = span.last_ts + idle
                if due <= now:
                    if await self._fire(span):
                        self.backoff.reset()
                        continue
                    due = now + timedelta(seconds=self.backoff.next_delay())
                next_due = due if next_due is None else min(next_due, due)
            timeout = None if next_due is None else max((next_due - utcnow()).total_seconds(), 0.0)
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except TimeoutError:
                pass

    async def _fire(self, span: OpenSpan) -> bool:
        msg_id = f"idle:{span.span_id}:{span.last_seq}"
        check = IdleCheckInput(
            id=derived_id("idle_check", msg_id), span_id=span.span_id, last_activity_seq=span.last_seq
        )
        try:
            await self.ctx.bus.publish(topics.AGENT_INPUT, check, msg_id=msg_id)
        except BusUnavailable as exc:
            log.warning("idle check for span %s not sent: %s", span.span_id, exc)
            return False
        log.info("span %s idle since seq %d: asked the agent for a checkpoint", span.span_id, span.last_seq)
        # The span may have moved on while publishing; record only what was asked.
        current = self.ctx.state.spans.get(span.span_id)
        if current is not None:
            current.fired_seq = check.last_activity_seq
        await self.ctx.persist()
        return True
