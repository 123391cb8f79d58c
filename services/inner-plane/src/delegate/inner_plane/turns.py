"""Is the owner mid-turn? Derived from committed events, for the broker not to interleave.

A text turn (text, SMS, email) is open from the user ``message`` until its answer is
committed: the agent's assistant ``message`` or ``turn.failed`` with ``parent_id`` = the user
message. A voice or phone call is open from ``session.started`` to ``session.ended``. A turn
with no answer after INNER_TURN_STALE_S no longer counts (an agent that died mid-turn must
not silence the broker forever; its redelivery gives up with ``turn.failed`` well before).
"""

from datetime import datetime, timedelta

from delegate.contracts.events import Event, InnerSignal, Message, SessionEnded, SessionStarted, TurnFailed

from .state import BrokerState

TURN_CHANNELS = frozenset({"text", "sms", "email"})  # voice transcripts belong to their call


def observe(state: BrokerState, event: Event) -> bool:
    """Update the open turns and calls; True when the owner's activity changed."""
    if event.payload.get("imported"):
        return False  # history brought in by an import: nobody is waiting for an answer to it
    if event.role == "user" and event.channel in TURN_CHANNELS and event.is_kind(Message):
        state.open_turns[event.id] = event.ts
        return True
    answer = event.is_kind(TurnFailed) or (event.role == "assistant" and event.is_kind(Message))
    if answer and event.parent_id in state.open_turns:
        del state.open_turns[event.parent_id]
        return True
    if (signal := event.payload_as(InnerSignal)) is not None and signal.signal_kind == "email.received":
        # An email the owner's setting turned into a signal is not a turn the agent answers.
        event_id = signal.signal.get("payload", {}).get("event_id")
        if event_id in state.open_turns:
            del state.open_turns[event_id]
            return True
    if (started := event.payload_as(SessionStarted)) is not None:
        state.open_calls[started.session_id or event.id] = event.ts
        return True
    if (ended := event.payload_as(SessionEnded)) is not None:
        return state.open_calls.pop(ended.session_id, None) is not None
    return False


def busy(state: BrokerState, now: datetime, stale: timedelta) -> tuple[str, datetime | None] | None:
    """What keeps the owner busy at ``now`` (a detail, and when it stops counting), or None."""
    if state.open_calls:
        return f"a call is open ({next(iter(state.open_calls))})", None
    live = {mid: ts for mid, ts in state.open_turns.items() if ts + stale > now}
    if live:
        mid, ts = min(live.items(), key=lambda kv: kv[1])
        return f"the owner's message {mid} is not answered yet", ts + stale
    return None


def prune(state: BrokerState, now: datetime, stale: timedelta) -> None:
    for mid in [m for m, ts in state.open_turns.items() if ts + stale <= now]:
        del state.open_turns[mid]
