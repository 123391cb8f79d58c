"""What committed events say, recorded into the broker's state (replay and live alike).

Nothing here decides: a signal joins ``pending`` (marked as a duplicate when its dedup key
came inside the window: that follows from the ledger's order alone), an ``inner.decision``
updates or settles its signal, an ``act`` becomes the batch in flight and, unless urgent, a
wake the budget counts, an ``activation.outcome`` releases the batch. Applying an event twice
changes nothing.
"""

from datetime import timedelta

from delegate.contracts.events import Event, InnerDecision, InnerSignal

from . import budget
from .state import ActivationBatch, BrokerState, DedupEntry, PendingSignal, SignalHold


def record_signal(state: BrokerState, event: Event, dedup_window: timedelta) -> bool:
    payload = event.typed(InnerSignal)
    if not payload.signal or event.id in state.pending:
        return False  # the first broker's untyped signals were settled by it; or seen already
    assert event.seq is not None
    duplicate_of = None
    if payload.dedup_key is not None:
        first = state.dedup.get(payload.dedup_key)
        if first is not None and first.signal_id != event.id and abs(event.ts - first.ts) <= dedup_window:
            duplicate_of = first.signal_id
        elif first is None or first.signal_id != event.id:
            state.dedup[payload.dedup_key] = DedupEntry(signal_id=event.id, ts=event.ts)
        for key in [k for k, e in state.dedup.items() if e.ts < event.ts - dedup_window]:
            del state.dedup[key]
    state.pending[event.id] = PendingSignal(
        id=event.id, seq=event.seq, ts=event.ts, kind=payload.signal_kind, source=payload.source,
        urgency=payload.urgency, dedup_key=payload.dedup_key, expires_at=payload.expires_at,
        signal=payload.signal, duplicate_of=duplicate_of,
    )
    return True


def record_decision(state: BrokerState, event: Event) -> bool:
    decision = event.typed(InnerDecision)
    signal = state.pending.get(event.parent_id or "")
    if signal is None or signal.last_decision == event.id:
        return False  # settled or applied already (a decision applied twice, or one made twice)
    signal.decisions += 1
    signal.last_decision = event.id
    if decision.decision == "hold":
        signal.hold = SignalHold(reason=decision.reason, until=decision.until)
    elif decision.decision == "act":
        members = [state.pending[i] for i in decision.signal_ids if i in state.pending] or [signal]
        urgent = any(s.urgent for s in members)
        state.batch = ActivationBatch(
            activation_id=decision.activation_id or event.id,
            signal_ids=[s.id for s in members],
            signals=[s.signal for s in members],
            sent_at=event.ts,
            urgent=urgent,
            reply_via=members[0].signal.get("reply_via"),
        )
        if not urgent:  # urgent wakes bypass the budget, and do not spend it
            state.wakes = budget.prune([*state.wakes, event.ts], event.ts)
        for member in members:
            state.pending.pop(member.id, None)
    else:  # drop, coalesce
        del state.pending[signal.id]
    return True


def record_outcome(state: BrokerState, event: Event) -> bool:
    batch = state.batch
    if batch is None or event.parent_id not in (batch.activation_id, *batch.signal_ids):
        return False
    state.batch = None
    return True
