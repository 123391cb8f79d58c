"""Twilio's SMS webhooks: ``POST /sms`` (a text or MMS came in) and ``POST /sms/status``.

Both are signed (``twilio_signature``); a bad signature is a 403 and nothing is stored.
With TWILIO_AUTH_TOKEN unset (or, for /sms, OWNER_PHONE) SMS is off and both answer 503
``sms_disabled``: a 404 would read as a wrong webhook URL in Twilio's debugger, while this
says what to set.

Twilio does not retry a webhook that got an HTTP error, so what one carries is stored in the
gateway's spool (``courier``) before it is answered, and reaches the bus when NATS is there:
an SMS is never lost to a NATS outage or a gateway restart. The only refusal after the
signature is 503 ``spool_full``/``spool_unavailable``, when the spool itself cannot write:
then Twilio's fallback URL is the right place for the message. ``/sms`` answers ``<Response/>``
at once: the agent's answer goes out later over the REST API (the pollers' outbox), since
Twilio gives a webhook 15 seconds. Everything published carries a Nats-Msg-Id made from the
MessageSid, and ledger events a deterministic id, so a retried webhook is stored once.
"""

import functools
import hashlib
import logging
import re
from typing import get_args

from fastapi import APIRouter, Request, Response
from starlette.datastructures import FormData

from delegate.contracts import topics
from delegate.contracts.channels import MediaFetch
from delegate.contracts.events import Delivery, DeliveryStatus, InboundRefused, make_event
from delegate.contracts.messages import UserInput
from delegate.runtime.bus import BusUnavailable
from delegate.runtime.known_sender import who

from .deps import ContextDep, GatewayContext
from .errors import ApiError
from .phone import e164, same_number
from .spool import Outgoing, SpoolUnavailable
from .twilio_signature import signed_form

log = logging.getLogger(__name__)

router = APIRouter()

LEDGER = topics.ledger_append("gateway")
MAX_MEDIA = 10  # Twilio's limit per MMS
PREVIEW_CHARS = 200
MAX_TEXT = 64_000  # UserInput.text

# Twilio SIDs: two letters and 32 hex digits (SM..., MM...); they become event and message ids.
_SID = re.compile(r"[A-Za-z]{2}[0-9a-fA-F]{32}")
# Outbox and event ids from our own status-callback URLs: UUIDs or ``<prefix>:<id>``-style ids.
_OWN_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_STATUSES = frozenset(get_args(DeliveryStatus))


@functools.cache
def _empty_twiml() -> str:
    # Twilio's TwiML builders import xml.etree: they load with the first webhook, not with the gateway.
    from twilio.twiml.messaging_response import MessagingResponse

    return str(MessagingResponse())


def twiml_ok() -> Response:
    return Response(_empty_twiml(), media_type="text/xml")


def form_field(form: FormData, name: str, *, required: bool = True, limit: int = 2048) -> str:
    value = form.get(name)
    if value is None or value == "":
        if required:
            raise ApiError(400, "bad_request", f"{name} is missing")
        return ""
    if not isinstance(value, str):  # parse_form makes only strings; an UploadFile is not expected
        raise ApiError(400, "bad_request", f"{name} is not text")
    if len(value) > limit:
        raise ApiError(400, "bad_request", f"{name} is over {limit} characters")
    return value


async def record(ctx: GatewayContext, items: list[Outgoing], what: str) -> None:
    """Make ``items`` durable (the spool, or NATS without one) before the webhook is answered."""
    try:
        await ctx.courier.send(items)
    except SpoolUnavailable as exc:
        raise ApiError(503, exc.code, f"{what} could not be stored: {exc.message}") from exc
    except BusUnavailable as exc:
        raise ApiError(503, "bus_unavailable", f"{what} could not be stored: NATS is not reachable") from exc


def _sid(form: FormData) -> str:
    sid = form_field(form, "MessageSid", limit=64)
    if not _SID.fullmatch(sid):
        raise ApiError(400, "bad_request", "MessageSid is not a Twilio message SID")
    return sid


def _media(form: FormData) -> list[dict[str, str]]:
    raw = form_field(form, "NumMedia", required=False, limit=4) or "0"
    if not raw.isdigit() or int(raw) > MAX_MEDIA:
        raise ApiError(400, "bad_request", f"NumMedia must be a whole number from 0 to {MAX_MEDIA}")
    media: list[dict[str, str]] = []
    for n in range(int(raw)):
        url = form_field(form, f"MediaUrl{n}")
        if not url.startswith(("https://", "http://")):
            raise ApiError(400, "bad_request", f"MediaUrl{n} is not an http(s) URL")
        content_type = form_field(form, f"MediaContentType{n}", required=False, limit=255)
        media.append({"url": url, "content_type": content_type or "application/octet-stream"})
    return media


def mms_text(media: list[dict[str, str]]) -> str:
    """What an MMS without words says to the agent (a message's text may not be empty)."""
    if not media:
        return "(empty SMS)"
    if len(media) == 1:
        return f"(MMS with 1 {media[0]['content_type']} attachment)"
    return f"(MMS with {len(media)} attachments: {', '.join(m['content_type'] for m in media)})"


@router.post("/sms")
async def inbound_sms(request: Request, ctx: ContextDep) -> Response:
    settings = ctx.settings
    if settings.owner_phone is None and settings.twilio_auth_token is not None:
        raise ApiError(503, "sms_disabled", "SMS is off: OWNER_PHONE is not set")
    form = await signed_form(request, settings)
    sid = _sid(form)
    sender = form_field(form, "From", limit=998)
    body = form_field(form, "Body", required=False, limit=MAX_TEXT)
    media = _media(form)
    assert settings.owner_phone is not None  # checked above, before the signature
    if not same_number(sender, settings.owner_phone):
        known = await who(ctx.bus, phone=sender)
        await record(ctx, [refusal(sid, sender, body, known)], "the refusal")
        log.info("refused sms %s from a number that is not the owner's", sid)
        return twiml_ok()

    user_input = UserInput(
        id=f"sms-{sid}",
        channel="sms",
        text=body or mms_text(media),
        client_msg_id=f"sms:{sid}",
        meta={"from": e164(sender), "message_sid": sid, "media": media},
    )
    # The message and its media downloads are stored together: one transaction in the spool.
    items = [Outgoing.publish(topics.AGENT_INPUT, user_input, msg_id=f"sms:{sid}")]
    for n, item in enumerate(media):
        fetch = MediaFetch(
            id=f"media:{sid}:{n}", parent_id=user_input.id, message_sid=sid, index=n,
            url=item["url"], content_type=item["content_type"],
        )
        items.append(Outgoing.publish(topics.MEDIA_FETCH, fetch, msg_id=fetch.id))
    await record(ctx, items, "the message")
    log.info("sms %s from the owner (%d media)", sid, len(media))
    return twiml_ok()


def refusal(sid: str, sender: str, body: str, known: dict[str, str | None] | None = None) -> Outgoing:
    event = make_event(
        InboundRefused(sender=sender, reason="not_owner", external_id=sid, preview=body[:PREVIEW_CHARS],
                       **(known or {})),
        id=f"refused:sms:{sid}", conversation_id=None, span_id=None, channel="sms",
    )
    return Outgoing.publish(LEDGER, event, msg_id=event.id)


def status_event_id(outbox_id: str, sid: str, status: str) -> str:
    return "st:" + hashlib.sha256(f"{outbox_id}|{sid}|{status}".encode()).hexdigest()[:32]


def delivery_status(twilio_status: str) -> DeliveryStatus | None:
    """Twilio's MessageStatus as ours; None for a value Twilio added after this was written."""
    status = twilio_status.strip().lower()
    return status if status in _STATUSES else None  # type: ignore[return-value]


def _own_id(request: Request, name: str, *, required: bool) -> str | None:
    value = request.query_params.get(name)
    if not value:
        if required:
            raise ApiError(400, "bad_request", f"the {name} query parameter is missing")
        return None
    if not _OWN_ID.fullmatch(value) or (name == "outbox" and len(value) > 48):
        raise ApiError(400, "bad_request", f"the {name} query parameter is not an id")
    return value


@router.post("/sms/status")
async def sms_status(request: Request, ctx: ContextDep) -> Response:
    form = await signed_form(request, ctx.settings)
    outbox_id = _own_id(request, "outbox", required=True)
    assert outbox_id is not None
    parent_id = _own_id(request, "parent", required=False)
    sid = _sid(form)
    reported = form_field(form, "MessageStatus", limit=64)
    status = delivery_status(reported)
    if status is None:
        log.info("sms status callback for %s: ignored unknown MessageStatus %r", outbox_id, reported[:64])
        return twiml_ok()
    error_code = form_field(form, "ErrorCode", required=False, limit=64) or None
    event = make_event(
        Delivery(outbox_id=outbox_id, channel="sms", status=status, external_ids=[sid], error_code=error_code),
        id=status_event_id(outbox_id, sid, status), conversation_id=None, span_id=None, channel="sms",
        parent_id=parent_id,
    )
    await record(ctx, [Outgoing.publish(LEDGER, event, msg_id=event.id)], "the status")
    return twiml_ok()
