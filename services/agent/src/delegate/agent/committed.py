"""What the agent learns from committed events it did not write: capsule refreshes and voice activity.

A newer capsule replaces the one the next fresh working context starts from. A call (phone or
browser voice) is the Realtime protocol taking over the talking: it may open the conversation,
and it ends the Responses chain and the open text span.
"""

import logging

from delegate.contracts.events import ContextCapsule, ConversationOpened, Event, Message, SpanOpened
from delegate.runtime.working_context import RESPONSES_CHANNELS

from .spans import Spans
from .status import Status

log = logging.getLogger(__name__)

# The voice service's own spans and channels (it writes their events; see delegate.voice).
VOICE_SPANS = frozenset({"voice", "phone"})
VOICE_CHANNELS = frozenset({"browser_voice", "phone"})


class Committed:
    def __init__(self, status: Status, spans: Spans) -> None:
        self.status = status
        self.spans = spans

    async def on_committed(self, event: Event) -> None:
        s = self.status.state
        if event.is_kind(ContextCapsule):
            if s.capsule is None or (event.seq or 0) >= (s.capsule.seq or 0):
                s.capsule = event
                await self.status.publish()
        elif s.conversation_id is None and event.channel in VOICE_CHANNELS and event.is_kind(ConversationOpened):
            # A call opened the conversation (nothing was open): later text turns continue it.
            s.conversation_id = event.conversation_id
            await self.status.publish()
        elif (
            event.conversation_id == s.conversation_id
            and (opened := event.payload_as(SpanOpened)) is not None
            and opened.type in VOICE_SPANS
        ):
            await self._voice_started(event)
        elif (
            event.role == "assistant"
            and event.is_kind(Message)
            and event.channel not in RESPONSES_CHANNELS
            and event.conversation_id == s.conversation_id
            and (s.chain_id or s.replacement is not None)
        ):
            # A voice conversation answered: a different protocol ran, so the next text turn
            # starts from the capsule and recent cross-channel turns (the same rule as at resume).
            log.info("voice activity: clearing the Responses chain")
            s.clear_chain()

    async def _voice_started(self, opened: Event) -> None:
        """A phone or browser voice call began: the Realtime protocol takes over the talking.

        The Responses chain is cleared (a different protocol, not a restart of the relationship),
        and the open text span is closed so the call is its own span in the timeline. A turn that
        is running keeps its span: it closes idle later, as any span does.
        """
        s = self.status.state
        if s.chain_id or s.replacement is not None:
            log.info("voice call %s: clearing the Responses chain", opened.span_id)
            s.clear_chain()
        lock = self.status.lock
        if lock.locked() or s.span is None or s.span.type in VOICE_SPANS:
            return
        async with lock:
            if s.span is not None and s.span.id != opened.span_id and s.span.type not in VOICE_SPANS:
                await self.spans.close_span("superseded")
