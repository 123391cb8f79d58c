"""``POST /call/amd``: Twilio's asynchronous answering-machine verdict on a call voice placed.

Twilio posts ``AccountSid``, ``CallSid``, ``AnsweredBy`` and ``MachineDetectionDuration`` to the
``AsyncAmdStatusCallback`` the voice service gave (``?session=<id>``), signed like every webhook.
The verdict is published durably (stream CHANNELS, Nats-Msg-Id ``amd:<CallSid>``, so a retried
callback is stored once) for the voice service, which leaves the voicemail and sends the SMS
even when it was restarted in between. Like the status callbacks it goes through the gateway's
spool (``courier``): answered once on local disk, delivered when NATS is up, since Twilio does
not retry a callback that failed.
"""

import logging
import re
from typing import get_args

from fastapi import APIRouter, Request, Response

from delegate.contracts import topics
from delegate.contracts.voice import AnsweredBy, CallAnsweredBy

from .deps import ContextDep
from .errors import ApiError
from .spool import Outgoing
from .twilio_signature import signed_form
from .twilio_voice import voice_enabled
from .twilio_webhooks import form_field, record
from .voice_relay import SESSION_ID

log = logging.getLogger(__name__)

router = APIRouter()

AMD_PATH = "/call/amd"
_CALL_SID = re.compile(r"CA[0-9a-fA-F]{32}")
_ANSWERS = frozenset(get_args(AnsweredBy))


@router.post(AMD_PATH)
async def answered_by(request: Request, ctx: ContextDep) -> Response:
    voice_enabled(ctx.settings, needs_owner=False)
    form = await signed_form(request, ctx.settings)
    session_id = request.query_params.get("session", "")
    if not SESSION_ID.fullmatch(session_id):
        raise ApiError(400, "bad_request", "the session query parameter is missing or not a session id")
    call_sid = form_field(form, "CallSid", limit=64)
    if not _CALL_SID.fullmatch(call_sid):
        raise ApiError(400, "bad_request", "CallSid is not a Twilio call SID")
    answer = form_field(form, "AnsweredBy", limit=64)
    if answer not in _ANSWERS:
        # A value Twilio adds later must not lose the call: unknown is what we cannot classify.
        log.warning("call %s: AnsweredBy %r is not one we know, taken as unknown", call_sid, answer[:64])
        answer = "unknown"
    duration = form_field(form, "MachineDetectionDuration", required=False, limit=12)
    verdict = CallAnsweredBy(
        call_sid=call_sid, session_id=session_id, answered_by=answer,
        detection_ms=int(duration) if duration.isdigit() else None,
    )
    await record(ctx, [Outgoing.publish(topics.CALL_ANSWERED, verdict, msg_id=f"amd:{call_sid}")], "the verdict")
    log.info("call %s (session %s) answered by %s", call_sid, session_id, answer)
    return Response(status_code=204)
