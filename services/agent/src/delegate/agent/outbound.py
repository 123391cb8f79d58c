"""What the agent sends by SMS or email: turn replies and the owner-contact tools' messages.

Both go through one sender, ``Outbox``: an ``OutboundSms``/``OutboundEmail`` published durably
on stream CHANNELS, whose id is also its Nats-Msg-Id. The pollers deliver it and record
``delivery`` events with ids derived from it (``<id>:sent`` ...), which is how a tool learns
the outcome. Publishing twice with the same id is a no-op within the stream's day-long
duplicate window: a redelivered turn publishes its reply again without sending it twice.

The fence: the ledger refuses a deposed term's events, but CHANNELS is not fenced (the
pollers send whatever is on it). So a message is published only after a fresh read showed the
lease ours, the same rule as the ack of an input. A reply is published after the turn's
events were acked and the lease confirmed: those events then precede a successor's
``term.started`` and are stored, so nothing goes out that the timeline does not hold.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from delegate.contracts import topics
from delegate.contracts.channels import MAX_OUTBOUND_TEXT, OutboundEmail, OutboundSms
from delegate.contracts.events import Event, Message, TurnFailed
from delegate.contracts.voice import CallOwner, CallOwnerReply
from delegate.runtime.bus import Bus, BusUnavailable, Retryable

from .ledger import Ledger

log = logging.getLogger(__name__)

Outbound = OutboundSms | OutboundEmail

# The channels whose turns are answered in their own channel; every other channel's answer is
# seen where it was asked (chat, voice) or nowhere (inner activity).
REPLY_CHANNELS = frozenset({"sms", "email"})
# The terminal outcomes the sender records for an outbound message, in the order checked.
FINAL_STATUSES = ("sent", "failed", "unknown")
MAX_REFERENCES = 100  # OutboundEmail.references' limit
MAX_SUBJECT = 900
MAX_MESSAGE_ID = 998
NO_SUBJECT = "(no subject)"
# Why a failed sms/email turn still sends something: the owner asked from their phone or mail
# client and sees no timeline there; silence would look like the message was lost.
FAILURE_PREFIX = "Sorry, I could not answer that."


class NotLeading(Exception):
    """The lease is not (provably) ours: a deposed leader must not send anything."""


class Outbox:
    """The one way out by SMS or email, for replies and tools alike."""

    def __init__(
        self, bus: Bus, ledger: Ledger, confirm: Callable[[], Awaitable[bool]] | None = None
    ) -> None:
        self.bus = bus
        self.ledger = ledger
        # None only in-process, where nothing else could lead.
        self.confirm = confirm

    async def publish(self, msg: Outbound) -> None:
        """Publish without confirming the lease: for a caller that confirmed it just before."""
        if isinstance(msg, OutboundSms):
            await self.bus.publish(topics.SMS_OUT, msg, msg_id=msg.id)
        else:
            await self.bus.publish(topics.EMAIL_OUT, msg, msg_id=msg.id)
        log.info("outbound %s %s (%s) published for %s", msg.type, msg.id, msg.origin, msg.parent_id)

    async def send(self, msg: Outbound) -> None:
        """Confirm the lease, then publish; ``NotLeading`` when the lease is not ours."""
        if self.confirm is not None and not await self.confirm():
            raise NotLeading("the agent's lease is not ours; nothing was sent")
        await self.publish(msg)

    async def call_owner(self, request_id: str, reason: str) -> CallOwnerReply:
        """Ask the voice service to phone the owner; it places the call and runs it."""
        if self.confirm is not None and not await self.confirm():
            raise NotLeading("the agent's lease is not ours; no call was placed")
        return await self.bus.request(topics.VOICE_CALL_OWNER, CallOwner(request_id=request_id, reason=reason))

    async def outcome(self, outbox_id: str, timeout: float, every: float = 0.25) -> Event | None:
        """The sender's final ``delivery`` event for ``outbox_id``, or None when none came in time.

        Polls the ledger for the deterministic ids: no subscription that could miss an event
        committed before it started, and the ledger answers from what it stored.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                for status in FINAL_STATUSES:
                    event = await self.ledger.get(f"{outbox_id}:{status}")
                    if event is not None:
                        return event
            except (Retryable, BusUnavailable) as exc:
                # The message is queued whatever the ledger says now: keep looking until the deadline.
                log.debug("outbound %s: the ledger did not answer: %s", outbox_id, exc)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await asyncio.sleep(min(every, left))


# ---- replies to turns --------------------------------------------------------------------------


def reply_subject(subject: Any) -> str:
    """``Re: <subject>``, not doubled when the subject already is a reply."""
    text = " ".join(str(subject).split()) if isinstance(subject, str) else ""
    if not text:
        text = NO_SUBJECT
    if text[:3].lower() != "re:":
        text = f"Re: {text}"
    return text[:MAX_SUBJECT]


def _message_id(value: Any) -> str | None:
    if isinstance(value, str) and value.strip() and len(value.strip()) <= MAX_MESSAGE_ID:
        return value.strip()
    return None


def thread_references(meta: dict[str, Any]) -> list[str]:
    """The parent's References plus its Message-ID, capped keeping the thread's root and newest."""
    raw = meta.get("references")
    refs = [r for r in (_message_id(v) for v in raw) if r] if isinstance(raw, list) else []
    own = _message_id(meta.get("message_id"))
    if own is not None and own not in refs:
        refs.append(own)
    if len(refs) > MAX_REFERENCES:
        refs = [refs[0], *refs[-(MAX_REFERENCES - 1):]]
    return refs


def outbound_reply(
    channel: str,
    outbox_id: str,
    text: str,
    meta: dict[str, Any] | None,
    *,
    conversation_id: str | None,
    span_id: str | None,
) -> Outbound | None:
    """The outbound message answering an sms or email turn, or None for any other channel.

    ``outbox_id`` is the answer's event id (and the parent the deliveries are recorded on).
    """
    if channel not in REPLY_CHANNELS or not text.strip():
        return None
    body = text[:MAX_OUTBOUND_TEXT]
    common: dict[str, Any] = {
        "id": outbox_id, "text": body, "origin": "reply", "parent_id": outbox_id,
        "conversation_id": conversation_id, "span_id": span_id,
    }
    if channel == "sms":
        return OutboundSms(**common)
    meta = meta if isinstance(meta, dict) else {}
    return OutboundEmail(
        subject=reply_subject(meta.get("subject")),
        in_reply_to=_message_id(meta.get("message_id")),
        references=thread_references(meta),
        **common,
    )


def failure_text(message: str) -> str:
    return f"{FAILURE_PREFIX} {message}".strip()


def reply_to_outcome(outcome: Event, meta: dict[str, Any] | None) -> Outbound | None:
    """The outbound for a recorded answer or ``turn.failed`` (also when a redelivery finds it).

    A stopped answer is not sent: the owner pressed Stop in the web client, so they do not
    want it on their phone or in their mailbox.
    """
    if (failed := outcome.payload_as(TurnFailed)) is not None:
        text = failure_text(failed.message)
    elif outcome.role == "assistant" and (answer := outcome.payload_as(Message)) is not None and not answer.stopped:
        text = answer.text
    else:
        return None
    return outbound_reply(
        outcome.channel, outcome.id, text, meta, conversation_id=outcome.conversation_id, span_id=outcome.span_id
    )
