"""A signal as its ``inner.signal`` ledger event: the one shape every intake path writes.

The event id is the signal id, so a redelivered signal (or a reminder fire delivered twice,
whose signal id is derived from its occurrence) is stored once: the ledger's commit of this
event is the claim.
"""

from delegate.contracts.events import Event, InnerSignal, make_event
from delegate.contracts.signals import AnySignal


def signal_event(signal: AnySignal, *, conversation_id: str | None) -> Event:
    # make_event(Model(field=...)) is how every event is built (broker.py, memory.py): the shape, not shared logic.
    return make_event(
        InnerSignal(
            source=signal.source,
            signal_kind=signal.kind,
            urgency=signal.urgency,
            dedup_key=signal.dedup_key,
            expires_at=signal.expires_at,
            signal=signal.model_dump(mode="json"),
        ),
        conversation_id=conversation_id,
        span_id=None,  # queued signals sit between spans
        channel="inner",
        id=signal.id,
        ts=signal.ts,
    )
