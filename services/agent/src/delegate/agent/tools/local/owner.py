"""send_sms_to_owner and send_email_to_owner: messages to the owner through the agent's outbox.

The pollers own sending (Twilio REST, SMTP); these tools put an ``OutboundSms``/
``OutboundEmail`` on the outbox, exactly as a reply to an sms/email turn goes out, and wait a
bounded time for the sender's outcome in the ledger. The outbox id is the tool call's id, so a
call that is run again (a retried request of the same response) is deduplicated instead of
sent twice. Registered only when their channel is configured. The only recipient is the owner:
the model cannot choose a number or an address.
"""

import hashlib
from typing import Any, Protocol

from delegate.contracts.channels import SMS_BODY_LIMIT, OutboundEmail, OutboundSms
from delegate.contracts.events import Delivery, Event

from ..base import CURRENT_CALL, FAILED, SIDE_EFFECT, UNAVAILABLE, Tool, ToolError, object_schema
from ..settings import ToolSettings

# Beyond the wait for the sender's outcome (OWNER_DELIVERY_WAIT_S): the wait ends first, so a
# slow sender yields "queued", never a timeout that reads as if nothing was sent.
TIMEOUT_MARGIN_S = 10.0
MAX_OUTBOX_ID = 48  # OutboundSms.id / OutboundEmail.id


class Outbox(Protocol):
    """The agent's sender (delegate.agent.outbound.Outbox), as these tools use it."""

    async def send(self, msg: OutboundSms | OutboundEmail) -> None: ...

    async def outcome(self, outbox_id: str, timeout: float) -> Event | None: ...


def outbox_id(call_id: str) -> str:
    """The call id as the outbox id; a call id too long for one is hashed to a stable one."""
    if 0 < len(call_id) <= MAX_OUTBOX_ID:
        return call_id
    return "call-" + hashlib.sha256(call_id.encode()).hexdigest()[:40]


def _common() -> dict[str, Any]:
    call = CURRENT_CALL.get()
    if call is None:  # a handler run outside the registry: the message still gets a stable id
        return {"origin": "tool"}
    return {
        "id": outbox_id(call.call_id), "origin": "tool", "parent_id": call.event_id,
        "conversation_id": call.conversation_id, "span_id": call.span_id,
    }


async def deliver(outbox: Outbox, msg: OutboundSms | OutboundEmail, what: str, wait: float) -> str:
    """Queue ``msg`` and report the sender's outcome, or that it is still queued."""
    try:
        await outbox.send(msg)
    except Exception as exc:  # NotLeading, BusUnavailable: nothing was queued
        raise ToolError(UNAVAILABLE, f"the {what} could not be queued for sending: {exc}") from exc
    outcome = await outbox.outcome(msg.id, wait)
    if outcome is None:
        return f"queued: the {what} is in the outbox; its delivery will show in the timeline."
    delivery = outcome.typed(Delivery)
    status = delivery.status
    error = delivery.error or delivery.error_code or "no reason given"
    if status == "sent":
        ids = ", ".join(delivery.external_ids)
        return f"sent: the {what} was delivered to the owner" + (f" ({ids})." if ids else ".")
    if status == "failed":
        raise ToolError(FAILED, f"the {what} was not sent: {error}")
    return (
        f"unknown: the sender could not confirm whether the {what} went out ({error}). It may have "
        "arrived; do not send it again unless the owner asks."
    )


def sms_tool(settings: ToolSettings, outbox: Outbox) -> Tool:
    async def handler(args: dict[str, Any]) -> str:
        sms = OutboundSms(text=args["text"], **_common())
        return await deliver(outbox, sms, "SMS", settings.owner_delivery_wait_s)

    return Tool(
        "send_sms_to_owner",
        "Send a text message (SMS) to the owner's phone. Plain text, keep it short.",
        object_schema({"text": {"type": "string", "minLength": 1, "maxLength": SMS_BODY_LIMIT}}, ["text"]),
        handler,
        ("local", "owner_contact", "sms", SIDE_EFFECT),
        timeout_s=settings.owner_delivery_wait_s + TIMEOUT_MARGIN_S,
    )


def email_tool(settings: ToolSettings, outbox: Outbox) -> Tool:
    async def handler(args: dict[str, Any]) -> str:
        subject = " ".join(str(args["subject"]).split())  # a header: no line breaks
        mail = OutboundEmail(subject=subject, text=args["text"], **_common())
        return await deliver(outbox, mail, "email", settings.owner_delivery_wait_s)

    return Tool(
        "send_email_to_owner",
        "Send an email to the owner.",
        object_schema(
            {"subject": {"type": "string", "minLength": 1, "maxLength": 300, "pattern": r"\S"},
             "text": {"type": "string", "minLength": 1, "maxLength": 100_000}},
            ["subject", "text"],
        ),
        handler,
        ("local", "owner_contact", "email", SIDE_EFFECT),
        timeout_s=settings.owner_delivery_wait_s + TIMEOUT_MARGIN_S,
    )
