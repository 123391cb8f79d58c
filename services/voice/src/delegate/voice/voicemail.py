"""A machine answered a call we placed: the reason as a voicemail (or a hang-up), and by SMS, once.

Twilio's asynchronous AMD verdict reaches the gateway's ``/call/amd``, which keeps it on stream
CHANNELS (``CallAnsweredBy``, one per CallSid); this consumer acts on it and acks only after the
SMS is on the pollers' outbox. Everything it writes has an id made from the CallSid (the SMS
``voicemail:<sid>``, the record ``voicemail-left:<sid>``), so a verdict handled again after a
SIGKILL of voice, or a Twilio retry, changes nothing: the outbox stream and the pollers'
delivery log send the SMS once, the ledger stores the record once.

Any verdict first ends the call's screening (``Call.on_answered_by``): the callee's
words held until then become the owner's, or are dropped for a machine's.

With the call still here, the record goes in its span and the call says the message after
the beep (or hangs up, VOICE_CALL_ON_MACHINE). A verdict that finds no call (voice was killed
and restarted meanwhile) still sends the SMS, with the words of the ``call.placed`` record, and
writes the record under the voice lock.
"""

import asyncio
import logging

from nats.aio.msg import Msg

from delegate.contracts import streams, topics
from delegate.contracts.channels import OutboundSms
from delegate.contracts.events import CallPlaced, CallVoicemail, Event, make_event
from delegate.contracts.voice import MACHINE_ANSWERS, CallAnsweredBy
from delegate.runtime.bus import Bus, Retryable

from .lock import VoiceLock
from .manager import Calls
from .settings import Settings
from .stale import close_stale_call

log = logging.getLogger(__name__)

STREAM = "CHANNELS"
MAX_DELIVER = 50  # a backstop: a busy lock naks without failing
ACK_WAIT_S = 30.0


class LockBusy(Retryable):
    delay = 2.0


def placed_id(call_sid: str) -> str:
    return f"call:{call_sid}"


def sms_id(call_sid: str) -> str:
    return f"voicemail:{call_sid}"


def record_id(call_sid: str) -> str:
    return f"voicemail-left:{call_sid}"


def voicemail_words(reason: str) -> str:
    """What the message on the machine says: who called, why, and that a text follows."""
    why = f" I called because: {reason.strip()}" if reason.strip() else " I called to talk to you."
    return f"Hello, this is your assistant.{why} I am sending you this by text message as well."[:1600]


def sms_text(reason: str) -> str:
    why = reason.strip() or "I wanted to talk to you."
    return f"I called you and reached your voicemail. {why}"[:1600]


async def hang_up_call(settings: Settings, call_sid: str) -> None:
    """End the call over Twilio's REST API (its status callback then ends our call too)."""
    from delegate.runtime.twilio_rest import twilio_rest_client

    client = twilio_rest_client(
        settings.twilio_account_sid or "", settings.twilio_auth_token or "", base_url=settings.twilio_api_base_url,
        timeout=settings.twilio_http_timeout_s,
    )
    await asyncio.to_thread(lambda: client.calls(call_sid).update(status="completed"))


class AnsweredByConsumer:
    def __init__(self, settings: Settings, bus: Bus, calls: Calls) -> None:
        self.settings = settings
        self.bus = bus
        self.calls = calls

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.consume(
            topics.CALL_ANSWERED, self.handle, durable=streams.VOICE_ANSWERED_BY, stream=STREAM, stop=stop,
            ack_wait=ACK_WAIT_S, max_deliver=MAX_DELIVER,
        )

    async def handle(self, msg: CallAnsweredBy, raw: Msg) -> None:
        call = self.calls.current
        if call is not None and call.id == msg.session_id:
            call.on_answered_by(msg.answered_by)  # ends its screening: whose the callee's words are
        if msg.answered_by not in MACHINE_ANSWERS:
            log.info("call %s answered by %s", msg.call_sid, msg.answered_by)
            return
        if call is not None and (call.id != msg.session_id or not call.recording.is_set()):
            call = None
        placed: Event | None = None
        if call is not None:
            reason, where = call.reason or "", (call.recorder.conversation_id, call.recorder.span_id)
        else:  # voice was restarted since the call was placed: its record has the words
            placed = await self._placed(msg.call_sid)
            reason = placed.typed(CallPlaced).reason if placed else ""
            where = (placed.conversation_id, placed.span_id) if placed else (None, None)
        sms = OutboundSms(
            id=sms_id(msg.call_sid), text=sms_text(reason), origin="voicemail",
            parent_id=placed_id(msg.call_sid) if call is not None or placed is not None else None,
            conversation_id=where[0], span_id=where[1],
        )
        await self.bus.publish(topics.SMS_OUT, sms, msg_id=sms.id)
        speak = call is not None and call.attached and self.settings.voice_call_on_machine == "voicemail"
        words = voicemail_words(reason)
        record = CallVoicemail(
            session_id=msg.session_id, call_sid=msg.call_sid, answered_by=msg.answered_by,
            action="spoken" if speak else "hung_up", text=words if speak else sms.text, sms_id=sms.id,
        )
        log.info("call %s: a machine answered (%s); SMS %s queued", msg.call_sid, msg.answered_by, sms.id)
        if call is not None:
            call.leave_voicemail(
                record, record_id(msg.call_sid), words if speak else None,
                lambda: hang_up_call(self.settings, msg.call_sid),
            )
        else:
            await self._record_alone(record, placed)

    async def _placed(self, call_sid: str) -> Event | None:
        await self.calls.ledger.wait_caught_up()
        return await self.calls.ledger.get(placed_id(call_sid))

    async def _record_alone(self, record: CallVoicemail, placed: Event | None) -> None:
        """The call is gone (voice restarted): write the record under the voice lock, and close
        the span the dead process left open."""
        lock = VoiceLock(
            self.bus.js, self.calls.instance, ttl=self.settings.voice_lock_ttl_s, replicas=self.bus.replicas
        )
        if self.calls.current is not None or not await lock.acquire():
            raise LockBusy("a voice call holds the lock; the voicemail is recorded after it")
        try:
            ledger = self.calls.ledger
            await ledger.wait_caught_up()
            resume = await ledger.resume(turn_limit=0)
            lock.raise_token(resume.fence_marks.get("voice", 0))
            event = make_event(
                record, id=record_id(record.call_sid), channel="phone",
                conversation_id=placed.conversation_id if placed else None,
                span_id=placed.span_id if placed else None,
            )
            await ledger.append(event, lock.fence)
            await close_stale_call(ledger, lock.fence, resume.open_span)
        finally:
            await lock.release()
