"""Twilio's voice webhooks: ``POST /twiml`` (a call came in) and ``POST /call/status``.

``/twiml`` takes the voice lock and pre-warms a voice call (``voice.cmd.prepare``)
while Twilio waits for the answer, then answers ``<Connect><Stream>`` with the call's id and its
one-time token as stream parameters; the ``<Say>`` after ``</Connect>`` plays only if our side
closes the stream, so it is the apology when voice fails mid-call. With NATS or voice away the
caller hears a spoken apology (200), never a 5xx: Twilio would only play its own error message.
Both routes are signed (``twilio_signature``); without TWILIO_AUTH_TOKEN (or, for /twiml,
OWNER_PHONE) voice is off and they answer 503 ``voice_disabled``.

What a call's status callback says goes through the spool (``courier``), like the
SMS webhooks: recorded late when NATS is away, never dropped.
"""

import logging
import re
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit, urlunsplit

from fastapi import APIRouter, Request, Response
from starlette.datastructures import FormData

from delegate.contracts import subjects, topics
from delegate.contracts.events import InboundRefused, make_event
from delegate.contracts.voice import HangupIn, PrepareSession
from delegate.runtime.bus import BusUnavailable
from delegate.runtime.known_sender import who

from .deps import ContextDep, GatewayContext
from .errors import ApiError
from .phone import e164, same_number
from .settings import Settings
from .spool import Outgoing, SpoolUnavailable
from .twilio_signature import signed_form
from .twilio_webhooks import form_field, record
from .voice_relay import SESSION_ID, VOICE_IN

if TYPE_CHECKING:
    # Twilio's TwiML builders import xml.etree (~15-50 ms of CPU, ~5% of a host's start): they
    # load with the first call, not with the gateway.
    from twilio.twiml.voice_response import VoiceResponse

log = logging.getLogger(__name__)

router = APIRouter()

LEDGER = topics.ledger_append("gateway")
CALL_PATH = "/call"
STATUS_PATH = "/call/status"
# Twilio's CallStatus values after which the call is over.
TERMINAL_STATUSES = frozenset({"completed", "busy", "failed", "no-answer", "canceled"})
# Twilio call SIDs: CA and 32 hex digits; they become event ids.
_CALL_SID = re.compile(r"CA[0-9a-fA-F]{32}")

REFUSAL = "Sorry, this number only takes calls from its owner. Goodbye."
UNAVAILABLE = "Sorry, the assistant cannot take calls right now. Please try again later."
APOLOGY = "Sorry, the call dropped. Please call again."
# BUDGET_HARD_STOP_OWNER and a spend line reached: the figures are on the timeline and the Usage panel.
BUDGET_REACHED = ("Your spending limit is reached, so I can't take calls until it resets or you raise it. "
                  "Goodbye.")


def twiml(response: "VoiceResponse") -> Response:
    return Response(response.to_xml(), media_type="text/xml")


def public_url(settings: Settings, path: str, *, websocket: bool = False) -> str:
    """PUBLIC_BASE_URL + ``path``; its ws/wss form for the stream (Twilio signs that one)."""
    parts = urlsplit(settings.public_base_url.rstrip("/"))
    scheme = {"https": "wss", "http": "ws"}.get(parts.scheme, parts.scheme) if websocket else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path + path, "", ""))


def stream_twiml(settings: Settings, session_id: str, token: str) -> "VoiceResponse":
    from twilio.twiml.voice_response import Connect, VoiceResponse

    response = VoiceResponse()
    connect = Connect()
    stream = connect.stream(
        url=public_url(settings, CALL_PATH, websocket=True),
        status_callback=public_url(settings, STATUS_PATH) + f"?session={quote(session_id)}",
        status_callback_method="POST",
    )
    stream.parameter(name="session", value=session_id)
    stream.parameter(name="token", value=token)
    response.append(connect)
    response.say(APOLOGY)
    return response


def say_and_hang_up(text: str) -> "VoiceResponse":
    from twilio.twiml.voice_response import VoiceResponse

    response = VoiceResponse()
    response.say(text)
    response.hangup()
    return response


def voice_enabled(settings: Settings, *, needs_owner: bool) -> None:
    if settings.twilio_auth_token is None:
        raise ApiError(503, "voice_disabled", "phone calls are off: TWILIO_AUTH_TOKEN is not set")
    if needs_owner and settings.owner_phone is None:
        raise ApiError(503, "voice_disabled", "phone calls are off: OWNER_PHONE is not set")


def _call_sid(form: FormData) -> str:
    sid = form_field(form, "CallSid", limit=64)
    if not _CALL_SID.fullmatch(sid):
        raise ApiError(400, "bad_request", "CallSid is not a Twilio call SID")
    return sid


@router.post("/twiml")
async def incoming_call(request: Request, ctx: ContextDep) -> Response:
    settings = ctx.settings
    voice_enabled(settings, needs_owner=True)
    form = await signed_form(request, settings)
    call_sid = _call_sid(form)
    # Calls we place carry their TwiML inline (the voice service prepares those itself), so
    # every call here is an incoming one: its caller must be the owner.
    caller = form_field(form, "From", required=False, limit=998)
    assert settings.owner_phone is not None  # voice_enabled checked it
    if not same_number(caller, settings.owner_phone):
        await _refuse(ctx, call_sid, caller)
        return twiml(say_and_hang_up(REFUSAL))
    bus = ctx.bus
    if bus is None or not bus.nc.is_connected:
        # Asking would only wait out the request's timeout while Twilio holds the caller.
        log.warning("call %s: NATS is not reachable, the caller hears the apology", call_sid)
        return twiml(say_and_hang_up(UNAVAILABLE))
    prepare = PrepareSession(kind="phone", call_sid=call_sid, caller=e164(caller))
    try:
        reply = await bus.request(topics.VOICE_PREPARE, prepare)
    except Exception as exc:  # whatever failed, the caller hears words, not Twilio's error
        log.warning("call %s: the voice service did not prepare a call: %r", call_sid, exc)
        return twiml(say_and_hang_up(UNAVAILABLE))
    if not reply.ok or reply.session_id is None or reply.token is None:
        log.info("call %s: voice refused it (%s) %s", call_sid, reply.reason, reply.message)
        if reply.reason == "busy":
            from twilio.twiml.voice_response import VoiceResponse

            response = VoiceResponse()
            response.reject(reason="busy")
            return twiml(response)
        if reply.reason == "budget":
            return twiml(say_and_hang_up(BUDGET_REACHED))
        return twiml(say_and_hang_up(UNAVAILABLE))
    if not SESSION_ID.fullmatch(reply.session_id):
        log.error("call %s: voice named its session %r, which cannot be relayed", call_sid, reply.session_id[:80])
        return twiml(say_and_hang_up(UNAVAILABLE))
    log.info("call %s from the owner: session %s prepared", call_sid, reply.session_id)
    return twiml(stream_twiml(settings, reply.session_id, reply.token))


async def _refuse(ctx: GatewayContext, call_sid: str, caller: str) -> None:
    known = await who(ctx.bus, phone=caller)  # named on the timeline, refused all the same
    event = make_event(
        InboundRefused(sender=caller[:998] or "unknown", reason="not_owner", external_id=call_sid, preview="(a call)",
                       **known),
        id=f"refused:phone:{call_sid}", conversation_id=None, span_id=None, channel="phone",
    )
    try:
        await ctx.courier.send([Outgoing.publish(LEDGER, event, msg_id=event.id)])
    except (SpoolUnavailable, BusUnavailable) as exc:
        # The stranger is refused either way; a 5xx would only play Twilio's error message.
        log.error("call %s: the refusal could not be recorded: %r", call_sid, exc)
    log.info("refused call %s from a number that is not the owner's", call_sid)


@router.post(STATUS_PATH)
async def call_status(request: Request, ctx: ContextDep) -> Response:
    """A call's (or its stream's) status callback; the end of a call becomes a hang-up for voice."""
    voice_enabled(ctx.settings, needs_owner=False)
    form = await signed_form(request, ctx.settings)
    session_id = request.query_params.get("session")
    if session_id is None:
        # The number's own "call status changes" callback (the README need not set it): Delegate
        # puts ?session= on every callback it asks for, so this call has no session of ours.
        log.debug("call status without a session parameter (%s): nothing to end", form.get("CallStatus"))
        return Response(status_code=204)
    if not SESSION_ID.fullmatch(session_id):
        raise ApiError(400, "bad_request", "the session query parameter is not a session id")
    status = form_field(form, "CallStatus", required=False, limit=64).strip().lower()
    stream_event = form_field(form, "StreamEvent", required=False, limit=64).strip().lower()
    reason = status if status in TERMINAL_STATUSES else None
    if reason is None and stream_event == "stream-error":
        reason = "stream_lost"  # a stopped stream is told by its socket closing; an error may not be
    if reason is not None:
        hangup = Outgoing.live(
            subjects.voice_in(session_id), VOICE_IN.encode(HangupIn(reason=reason)),
            key=f"call-status:{session_id}:{reason}",
        )
        await record(ctx, [hangup], "the call status")
        log.info("call status for session %s: %s", session_id, reason)
    return Response(status_code=204)
