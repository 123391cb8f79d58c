"""Closing the call a killed voice process left open.

A voice process that died mid-call (SIGKILL, a crash, the machine) never wrote its
``session.ended`` / ``span.closed``. The next call finds that span still open in the ledger's
resume state (read after the ledger caught up, so whatever the dead process managed to publish
is in) and closes it first, as ``voice_lost``, under its own fence.
"""

import logging

from delegate.contracts.events import (
    Event,
    Fence,
    SessionEnded,
    SessionStarted,
    SpanClosed,
    SpanOpened,
    VoiceSessionType,
    make_event,
)
from delegate.contracts.messages import QueryRequest

from .ledger import VoiceLedger

log = logging.getLogger(__name__)

VOICE_SPANS: dict[str, VoiceSessionType] = {"phone": "phone", "voice": "voice"}  # span type -> session type


async def close_stale_call(ledger: VoiceLedger, fence: Fence, open_span: Event | None) -> None:
    if open_span is None or open_span.span_id is None:
        return
    opened = open_span.payload_as(SpanOpened)
    session_type = VOICE_SPANS.get(opened.type) if opened is not None else None
    if session_type is None:
        return
    started = await ledger.scan(
        QueryRequest(after_seq=max((open_span.seq or 1) - 1, 0), span_id=open_span.span_id, kinds=["session.started"])
    )
    session_id = started[0].typed(SessionStarted).session_id if started else open_span.span_id
    ended = make_event(
        SessionEnded(
            type=session_type,
            session_id=session_id[:64], reason="voice_lost",
            detail="the voice process ended without closing this session",
        ),
        conversation_id=open_span.conversation_id, span_id=open_span.span_id, channel=open_span.channel,
    )
    await ledger.append(ended, fence)
    closed = make_event(
        SpanClosed(reason="superseded"),
        conversation_id=open_span.conversation_id, span_id=open_span.span_id, channel=open_span.channel,
    )
    await ledger.append(closed, fence)
    log.warning("closed call %s left open by a voice process that died (voice_lost)", session_id)
