"""The continuity capsule: refreshed after a compaction, after a call, and when input usage crosses the line.

One relationship, one capsule: each refresh folds the turns committed since the
previous capsule (in any technical conversation) into it, and is recorded in the
conversation whose event asked for it.

One refresh at a time. A request is kept (durably) until a capsule that accounts for
the requesting event exists, so a request arriving during a refresh causes exactly
one more refresh afterwards, a crash mid-refresh redoes it, and replaying history
after a lost state file does not redo refreshes that already happened.
"""

import asyncio
import logging
from collections import deque

from delegate.contracts import topics
from delegate.contracts.events import (
    ContextCapsule,
    ContextCompacted,
    ContextUsage,
    ConversationEnded,
    Event,
    SessionEnded,
    make_event,
)
from delegate.contracts.messages import LiveNotice, QueryRequest
from delegate.runtime.bus import BusUnavailable, RemoteError
from delegate.runtime.metering import Cause

from .budget_watch import background_hold, wait_out
from .context import Context, derived_id
from .ledger import read_range
from .model import ModelFailed
from .prompts import CAPSULE_INSTRUCTIONS, capsule_input, turn_line
from .state import Capsule, CapsuleRequest

log = logging.getLogger(__name__)

NOTICE_KIND = "context.capsule"


class CapsuleRefresher:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.wake = asyncio.Event()
        self.backoff = ctx.work_backoff()
        self.retry_at = 0.0  # loop time; lost on restart, which simply retries at once

    def on_event(self, event: Event) -> None:
        state = self.ctx.state
        assert event.seq is not None
        cid = event.conversation_id
        if cid is not None and (usage := event.payload_as(ContextUsage)) is not None:
            # The agent's own threshold, when it says, is the one its compaction uses.
            compact = usage.compact_threshold or self.ctx.settings.compact_threshold
            above = usage.input_tokens >= self.ctx.settings.capsule_threshold * compact
            if above and not state.usage_above_line.get(cid, False):
                self._request("threshold", event.seq, cid)
            state.usage_above_line[cid] = above
        elif cid is not None and event.is_kind(ContextCompacted):
            self._request("compaction", event.seq, cid)
        elif cid is not None and event.is_kind(SessionEnded):
            # A call ran on the Realtime protocol: fold what was said into the capsule, so the
            # next session of either protocol starts from an account that includes it.
            self._request("call", event.seq, cid)
        elif (capsule := event.payload_as(ContextCapsule)) is not None:
            self._adopt(Capsule(text=capsule.text, through_seq=capsule.through_seq or event.seq, event_id=event.id))
        elif cid is not None and event.is_kind(ConversationEnded):
            state.usage_above_line.pop(cid, None)

    def _request(self, reason: str, seq: int, conversation_id: str) -> None:
        # A newer request replaces an older one: the capsule that answers it covers both.
        self.ctx.state.capsule_request = CapsuleRequest(reason=reason, trigger_seq=seq, conversation_id=conversation_id)
        self.wake.set()

    def _adopt(self, capsule: Capsule) -> None:
        state = self.ctx.state
        if state.capsule is None or capsule.through_seq >= state.capsule.through_seq:
            state.capsule = capsule
        if state.capsule_request is not None and state.capsule_request.trigger_seq <= capsule.through_seq:
            state.capsule_request = None

    async def run(self) -> None:
        await self.ctx.caught_up.wait()
        loop = asyncio.get_running_loop()
        while True:
            self.wake.clear()
            request = self.ctx.state.capsule_request
            timeout = None
            if request is not None:
                timeout = self.retry_at - loop.time()
                hold = background_hold(self.ctx, "capsule")
                if hold is not None:  # the request stays (durably): refreshed after the reset
                    await wait_out(self.ctx, hold, self.wake, f"capsule refresh ({request.reason})")
                    continue
                if timeout <= 0:
                    await self.refresh(request)
                    continue
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except TimeoutError:
                pass

    async def refresh(self, request: CapsuleRequest) -> None:
        state = self.ctx.state
        cid = request.conversation_id
        # Everything processed so far; the requesting event is among it.
        through_seq, through_event_id = state.last_seq, state.last_event_id
        previous = state.capsule
        started = LiveNotice(kind=NOTICE_KIND, status="started", conversation_id=cid, detail=request.reason)
        await self.ctx.bus.emit(topics.INNER_NOTICE, started)
        try:
            turns, omitted = await self._turns_since(previous.through_seq if previous else 0, through_seq)
            text = await self.ctx.model.complete(
                model=self.ctx.settings.capsule_model_name,
                instructions=CAPSULE_INSTRUCTIONS,
                text=capsule_input(previous.text if previous else None, turns, omitted),
                meter=self.ctx.meter,
                # The conversation's, in no span: a refresh the end of a span asked for finishes
                # after that span.closed, and a span's events end with its close.
                cause=Cause("capsule", "inner", cid, conversation_id=cid),
            )
            text = text.strip()
            if not text:
                raise ModelFailed("the model wrote an empty capsule")
            capsule = ContextCapsule(
                text=text, through_seq=through_seq, through_event_id=through_event_id, reason=request.reason
            )
            event = make_event(
                capsule,
                conversation_id=cid,
                # In no span, as its model call: the span open now may close before this lands
                # (a call's session.ended asks for it, its span.closed follows at once), and a
                # span's events end with its close.
                span_id=None,
                channel="inner",
                # One capsule per request: a redo after a crash between publish and the state
                # write is deduplicated instead of landing twice.
                id=derived_id("context.capsule", f"{cid}:{request.trigger_seq}"),
            )
            await self.ctx.bus.publish(topics.ledger_append("inner-plane"), event)
        except (ModelFailed, BusUnavailable, RemoteError) as exc:
            delay = self.backoff.next_delay()
            self.retry_at = asyncio.get_running_loop().time() + delay
            log.warning("capsule refresh failed (%d), retry in %.1fs: %s", self.backoff.failures, delay, exc)
            failed = LiveNotice(kind=NOTICE_KIND, status="failed", conversation_id=cid, detail=str(exc)[:500])
            await self.ctx.bus.emit(topics.INNER_NOTICE, failed)
            return
        self.backoff.reset()
        self.retry_at = 0.0
        self._adopt(Capsule(text=text, through_seq=through_seq, event_id=event.id))
        await self.ctx.persist()
        log.info("capsule refreshed through seq %d (%s, %d turns)", through_seq, request.reason, len(turns))

    async def _turns_since(self, after_seq: int, through_seq: int) -> tuple[list[Event], int]:
        """The newest turns after the previous capsule, bounded in count and characters."""
        recent: deque[Event] = deque(maxlen=self.ctx.settings.capsule_max_turns)
        total = 0
        query = QueryRequest(after_seq=after_seq, through_seq=through_seq, kinds=["message"])
        async for page in read_range(self.ctx.bus, query):
            # Imported history is committed now but said long ago: it is not what is going on.
            current = [e for e in page if not e.payload.get("imported")]
            recent.extend(current)
            total += len(current)
        turns = list(recent)
        size = sum(len(turn_line(t)) + 1 for t in turns)
        while len(turns) > 1 and size > self.ctx.settings.capsule_max_chars:
            size -= len(turn_line(turns.pop(0))) + 1
        return turns, total - len(turns)
