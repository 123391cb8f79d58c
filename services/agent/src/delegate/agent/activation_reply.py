"""Where an activation's answer goes: the route, and the outbound message that takes it there.

By default the answer goes where the owner was last: the newest user message's channel.
Text chat and browser voice read the timeline, so the answer event is all they need; an SMS
owner gets an SMS, an email owner an email, and a phone caller an SMS (their phone, which
shows no timeline). A signal's ``reply_via`` (sms, email) overrides that. A call is placed
when a signal asks for one (``reply_via=call``) or when the batch is urgent and
``ACTIVATION_CALLS`` allows it; the answer is the call's reason, and a call that cannot be
placed falls back to the default route, so the answer is never lost.

Everything goes out through the agent's one sender (``Outbox``), under the answer's event id:
a redelivered activation publishes the same id again, which the outbox stream deduplicates,
and the voice service places no second call for the same request id.
"""

from dataclasses import dataclass
from typing import Any, Literal

from delegate.contracts.channels import MAX_OUTBOUND_TEXT, OutboundEmail, OutboundSms
from delegate.contracts.events import Channel, Event
from delegate.contracts.messages import ActivationInput
from delegate.contracts.signals import EmailReceived

from .composer import decode
from .outbound import Outbound, reply_subject, thread_references

Via = Literal["sms", "email", "call"]
MAX_CALL_REASON = 500  # CallOwner.reason's limit

# The owner's last channel -> where an activation's answer reaches them (None: the timeline).
LAST_CHANNEL_ROUTES: dict[str, Via | None] = {"sms": "sms", "email": "email", "phone": "sms"}
# How the outcome names where the answer went.
REPLY_CHANNEL: dict[Via, Channel] = {"sms": "sms", "email": "email", "call": "phone"}


@dataclass(frozen=True)
class Route:
    via: Via | None  # None: the timeline only
    why: str
    fallback: "Route | None" = None  # where a call's answer goes when no call can be placed


def default_route(last_channel: str | None) -> Route:
    via = LAST_CHANNEL_ROUTES.get(last_channel or "")
    if last_channel is None:
        return Route(None, "the owner has not written yet: the timeline")
    return Route(via, f"the owner's last channel ({last_channel})")


def choose_route(activation: ActivationInput, last_channel: str | None, *, calls_allowed: bool) -> Route:
    base = default_route(last_channel)
    if activation.reply_via == "call":
        return Route("call", "a signal asked for a call", fallback=base)
    if activation.urgent and calls_allowed:
        return Route("call", "urgent, and ACTIVATION_CALLS allows a call", fallback=base)
    if activation.reply_via in ("sms", "email"):
        return Route(activation.reply_via, f"a signal asked for {activation.reply_via}")
    return base


def email_thread(activation: ActivationInput) -> str | None:
    """The user message an email answer threads onto: the newest email the batch is about."""
    found = None
    for raw in activation.signals:
        signal = decode(raw)
        if isinstance(signal, EmailReceived):
            found = signal.payload.event_id
    return found


def activation_outbound(
    via: Literal["sms", "email"],
    answer: Event,
    text: str,
    *,
    title: str,
    thread: dict[str, Any] | None,
) -> Outbound | None:
    """The SMS or email carrying an activation's answer (``answer``: its message or turn.failed).

    ``thread``: the meta of the email it answers (subject, Message-ID, References), if any;
    otherwise the email gets ``title`` as its subject.
    """
    if not text.strip():
        return None
    common: dict[str, Any] = {
        "id": answer.id, "text": text[:MAX_OUTBOUND_TEXT], "origin": "activation", "parent_id": answer.id,
        "conversation_id": answer.conversation_id, "span_id": answer.span_id,
    }
    if via == "sms":
        return OutboundSms(**common)
    if thread:
        message_id = thread.get("message_id")
        return OutboundEmail(
            subject=reply_subject(thread.get("subject")),
            in_reply_to=message_id if isinstance(message_id, str) and message_id.strip() else None,
            references=thread_references(thread),
            **common,
        )
    return OutboundEmail(subject=title or "A note from your assistant", **common)


def call_reason(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_CALL_REASON else text[: MAX_CALL_REASON - 1] + "…"
