"""Email when away (``EMAIL_WHEN_AWAY=signal``): an email is a signal, not an immediate reply.

"Away" means the owner is in no conversation: the agent has no open interaction span (no
chat, SMS or email turn since the last idle checkpoint closed one, IDLE_SPAN_SECONDS after the
last activity) and no voice or phone session is open in the ledger. Then the email is still
recorded as the owner's message (between spans, like a queued signal: it opened no
conversation with the assistant), and an ``email.received`` signal is raised on the INNER
stream instead of a reply; the attention broker activates the agent (or holds it, under quiet
hours), and the activation summarises it, by email since that was the owner's last channel.

The signal's id is derived from the message id, so a redelivered input raises it once
(JetStream's Nats-Msg-Id deduplication, and the broker's dedup key past that window). Like an
outbound reply, it is published only after a fresh read shows the lease ours.
"""

import logging

from delegate.contracts import topics
from delegate.contracts.events import ConversationOpened, Message, SpanOpened, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import UserInput
from delegate.contracts.signals import MAX_TEXT, EmailReceived, EmailReceivedPayload
from delegate.runtime.bus import Bus

from .guard import LeaseGuard
from .ledger import Ledger
from .settings import Settings
from .spans import TICK
from .status import Status

log = logging.getLogger(__name__)

# The spans that are a conversation with the owner (an activation span is the assistant's own).
CONVERSATION_SPANS = frozenset({"interaction"})
CALL_SPANS = frozenset({"voice", "phone"})
MAX_HEADER = 998


def away_signal(msg: UserInput) -> EmailReceived:
    meta = msg.meta or {}
    return EmailReceived(
        id=f"{msg.id}:signal",
        ts=msg.ts,
        source="email",
        dedup_key=f"email:{msg.id}",
        payload=EmailReceivedPayload(
            event_id=msg.id,
            sender=str(meta.get("from") or "")[:MAX_HEADER],
            subject=str(meta.get("subject") or "")[:MAX_HEADER],
            preview=msg.text[:MAX_TEXT],
        ),
    )


class AwayEmail:
    def __init__(self, settings: Settings, bus: Bus, ledger: Ledger, status: Status, guard: LeaseGuard) -> None:
        self.settings = settings
        self.bus = bus
        self.ledger = ledger
        self.status = status
        self.guard = guard

    async def defer(self, msg: UserInput) -> bool:
        """Record an email that came while the owner is away and raise its signal; False: answer it."""
        if msg.channel != "email" or self.settings.email_when_away != "signal":
            return False
        if await self._in_conversation():
            return False
        s = self.status.state
        if s.conversation_id is None:
            conversation_id = new_id()
            await self.ledger.append(
                make_event(
                    ConversationOpened(), conversation_id=conversation_id, span_id=None, channel="email",
                    ts=msg.ts - 2 * TICK,
                )
            )
            s.conversation_id = conversation_id
        await self.ledger.append(
            make_event(
                Message(text=msg.text, client_msg_id=msg.client_msg_id, meta=msg.meta),
                conversation_id=s.conversation_id, span_id=None, channel="email", role="user", id=msg.id, ts=msg.ts,
            )
        )
        await self.guard.confirm()
        signal = away_signal(msg)
        await self.bus.publish(topics.INNER_SIGNAL, signal, msg_id=signal.id)
        log.info("email %s came while the owner is away: raised signal %s instead of replying", msg.id, signal.id)
        await self.status.publish()
        return True

    async def _in_conversation(self) -> bool:
        span = self.status.state.span
        if span is not None and span.type in CONVERSATION_SPANS:
            return True
        # A call's span is the voice service's (the agent does not hold it): ask the ledger.
        opened = (await self.ledger.resume(turn_limit=0)).open_span
        call = opened.payload_as(SpanOpened) if opened is not None else None
        return call is not None and call.type in CALL_SPANS
