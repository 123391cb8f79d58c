"""Calling the owner: prepare a phone call, then have Twilio place it.

The call is prepared first (lock, pre-warm, token), so Twilio only dials when this side can
take the call, and its greeting is ready when the owner picks up. Twilio gets the TwiML
inline: a bidirectional stream to the gateway's ``/call`` with the call's id (the wire's
``session``) and token as parameters, then the apology it plays if our side drops the stream,
and a status callback that turns a call never answered (busy, no-answer, failed) into its end.

The phone rings for VOICE_CALL_RING_TIMEOUT_S (Twilio's ``Timeout``) and the prepared call is
held as long (``Call.claim_within_s``), so a late answer still talks. Answering machine
detection runs in the background (``AsyncAmd``): its verdict comes to the gateway's ``/call/amd``
and, for a machine, becomes a voicemail and an SMS (``voicemail``); until it comes (at most
VOICE_CALL_AMD_TIMEOUT_S, Twilio's MachineDetectionTimeout) the call is screened: what
the callee says is not the owner's yet, nor answered (``Call.on_answered_by``). The ``call.placed`` record,
written once Twilio took the call, keeps the words to leave for whoever acts on that verdict.

The same ``request_id`` twice places one call (a retried tool call must not ring twice); the
answer to the first is the answer to every repeat, for as long as this process remembers.
"""

import asyncio
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit, urlunsplit

from delegate.contracts.events import CallPlaced
from delegate.contracts.voice import CallOwner, CallOwnerReply, PrepareSession

from .manager import Calls
from .settings import Settings

if TYPE_CHECKING:
    from .calls import Call

log = logging.getLogger(__name__)

REMEMBERED = 200  # request ids whose answer is kept


def stream_url(public_base_url: str) -> str:
    """The gateway's media-stream socket as Twilio reaches it: http -> ws, https -> wss, path /call."""
    parts = urlsplit(public_base_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/call", "", ""))


def status_url(public_base_url: str, session_id: str) -> str:
    parts = urlsplit(public_base_url)
    return urlunsplit(
        (parts.scheme, parts.netloc, parts.path.rstrip("/") + "/call/status", urlencode({"session": session_id}), "")
    )


def amd_url(public_base_url: str, session_id: str) -> str:
    return status_url(public_base_url, session_id).replace("/call/status?", "/call/amd?", 1)


def call_twiml(public_base_url: str, session_id: str, token: str) -> str:
    # Twilio's SDK and the call code (with the OpenAI SDK) load when a call is placed.
    from twilio.twiml.voice_response import Connect, VoiceResponse

    from .calls import APOLOGY

    response = VoiceResponse()
    connect = Connect()
    stream = connect.stream(url=stream_url(public_base_url))
    stream.parameter(name="session", value=session_id)
    stream.parameter(name="token", value=token)
    response.append(connect)
    response.say(APOLOGY)
    return str(response.to_xml())


class OwnerCaller:
    def __init__(self, settings: Settings, calls: Calls) -> None:
        self.settings = settings
        self.calls = calls
        self._answers: OrderedDict[str, asyncio.Future[CallOwnerReply]] = OrderedDict()

    async def on_call_owner(self, req: CallOwner) -> CallOwnerReply:
        known = self._answers.get(req.request_id)
        if known is not None:
            return await asyncio.shield(known)
        future: asyncio.Future[CallOwnerReply] = asyncio.get_running_loop().create_future()
        self._answers[req.request_id] = future
        while len(self._answers) > REMEMBERED:
            self._answers.popitem(last=False)
        try:
            reply = await self._place(req)
        except Exception as exc:
            log.exception("call_owner failed")
            reply = CallOwnerReply(ok=False, reason="failed", message=f"the call could not be placed: {exc!r}")
        future.set_result(reply)
        if not reply.ok and reply.reason in ("busy", "unavailable"):
            self._answers.pop(req.request_id, None)  # a later repeat may find the line free
        return reply

    async def _place(self, req: CallOwner) -> CallOwnerReply:
        from twilio.base.exceptions import TwilioException

        from delegate.runtime.twilio_rest import twilio_rest_client

        s = self.settings
        if not s.calls_enabled:
            return CallOwnerReply(
                ok=False, reason="unavailable",
                message="phone calls are not set up (TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN, "
                "TWILIO_PHONE_NUMBER, OWNER_PHONE)",
            )
        prepared, call = await self.calls.prepare(
            PrepareSession(kind="phone", direction="outbound", caller=s.owner_phone), reason=req.reason or None
        )
        if not prepared.ok or call is None:
            return CallOwnerReply(ok=False, reason=prepared.reason, message=prepared.message)
        client = twilio_rest_client(
            s.twilio_account_sid or "", s.twilio_auth_token or "", base_url=s.twilio_api_base_url,
            timeout=s.twilio_http_timeout_s,
        )
        amd: dict[str, str] = {}
        if s.voice_call_machine_detection != "off":
            amd = {
                "machine_detection": s.voice_call_machine_detection, "async_amd": "true",
                "async_amd_status_callback": amd_url(s.public_base_url, call.id),
                "async_amd_status_callback_method": "POST",
                "machine_detection_timeout": str(s.voice_call_amd_timeout_s),
            }
        try:
            placed = await asyncio.to_thread(
                client.calls.create,
                to=s.owner_phone,
                from_=s.twilio_phone_number,
                twiml=call_twiml(s.public_base_url, call.id, call.token),
                status_callback=status_url(s.public_base_url, call.id),
                status_callback_event=["initiated", "ringing", "answered", "completed"],
                status_callback_method="POST",
                timeout=s.voice_call_ring_timeout_s,
                **amd,
            )
        except (TwilioException, OSError) as exc:
            log.error("placing the call to the owner failed: %s", exc)
            call.request_end("error", f"Twilio refused the call: {exc}")
            return CallOwnerReply(
                ok=False, session_id=call.id, reason="failed", message=f"Twilio refused the call: {exc}"
            )
        call.call_sid = str(placed.sid)
        log.info("calling the owner: Twilio call %s, call %s", placed.sid, call.id)
        await self._record_placed(call, str(placed.sid), req.reason)
        return CallOwnerReply(ok=True, call_sid=str(placed.sid), session_id=call.id)

    async def _record_placed(self, call: "Call", call_sid: str, reason: str) -> None:
        s = self.settings
        try:
            await asyncio.wait_for(call.recording.wait(), s.voice_connect_timeout_s)
        except TimeoutError:
            log.warning("Twilio call %s: the call never started recording; no call.placed", call_sid)
            return
        from .voicemail import placed_id, voicemail_words

        call.recorder.write(
            CallPlaced(
                session_id=call.id, call_sid=call_sid, to=s.owner_phone or "", reason=reason,
                voicemail=voicemail_words(reason), ring_timeout_s=s.voice_call_ring_timeout_s,
                machine_detection=None if s.voice_call_machine_detection == "off" else s.voice_call_machine_detection,
            ),
            id=placed_id(call_sid),
        )
