"""Ledger events for browser tests, published the way every producer publishes them."""

from datetime import datetime, timedelta
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import (
    ActivationOutcome,
    Channel,
    Checkpoint,
    ContextCapsule,
    ContextCompacted,
    ContextUsage,
    ConversationEnded,
    ConversationOpened,
    Event,
    InnerSignal,
    MemoryExtracted,
    MemoryRetrieved,
    Message,
    SpanClosed,
    SpanOpened,
    SpanType,
    ToolCall,
    ToolResult,
    make_event,
)
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus
from tests.support.waiting import eventually


class Script:
    """Builds a plausible stretch of timeline with strictly increasing timestamps."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self.conversation_id = new_id()
        self.events: list[Event] = []
        self.span_id: str | None = None
        self.last_user: str | None = None

    def _add(self, payload: Any, *, step: float = 20, channel: Channel = "text", **kw: Any) -> Event:
        self.now += timedelta(seconds=step)
        kw.setdefault("span_id", self.span_id)
        ev = make_event(payload, conversation_id=self.conversation_id, channel=channel, ts=self.now, **kw)
        self.events.append(ev)
        return ev

    def open_conversation(self) -> None:
        self._add(ConversationOpened(), span_id=None, step=1)

    def span(self, kind: SpanType, channel: Channel = "text", gap: float = 3600) -> None:
        self.span_id = new_id()
        self._add(SpanOpened(type=kind), channel=channel, step=gap)

    def user(self, text: str, channel: Channel = "text") -> Event:
        ev = self._add(Message(text=text), channel=channel, role="user")
        self.last_user = ev.id
        return ev

    def assistant(self, text: str, channel: Channel = "text") -> Event:
        return self._add(Message(text=text), channel=channel, role="assistant", parent_id=self.last_user, step=6)

    def usage(self, tokens: int, threshold: int = 200_000) -> None:
        self._add(ContextUsage(input_tokens=tokens, output_tokens=120, total_tokens=tokens + 120,
                               compact_threshold=threshold), step=1)

    def inner(self, payload: Any, channel: Channel = "inner", **kw: Any) -> Event:
        return self._add(payload, channel=channel, step=2, **kw)

    def close(self, summary: str | None = None) -> None:
        self._add(SpanClosed(reason="idle", summary=summary), step=900)
        self.span_id = None

    def end_conversation(self) -> None:
        self._add(ConversationEnded(), span_id=None, step=5)
        self.conversation_id = new_id()


def demo_timeline(days_ago: float = 2.0) -> list[Event]:
    """Every channel, every span type, inner activity between and inside spans."""
    s = Script(utcnow() - timedelta(days=days_ago))
    s.open_conversation()
    s.span("interaction")
    s.user("Can you remind me what we decided about the **Lisbon** trip?")
    s.inner(MemoryRetrieved(query="Lisbon trip", items=[{"text": "Flights booked for 12 May"}]), channel="text")
    s.assistant(
        "You booked flights for *12 May* and still need a hotel near `Alfama`.\n\n- Flights: done\n- Hotel: open"
    )
    s.usage(8_400)
    s.close(summary="Lisbon trip: hotel still open")
    s.inner(InnerSignal(source="timer", type="reminder.due", data={"note": "hotel"}), span_id=None)
    s.span("activation", channel="inner", gap=1800)
    s.assistant("Reminder: the Alfama hotel offer expires tonight.", channel="inner")
    s.inner(ActivationOutcome(status="completed", summary="sent a reminder"))
    s.close()
    s.span("interaction", channel="sms")
    s.user("Book the one with the terrace", channel="sms")
    booking = {"name": "Casa do Terraço", "nights": 3}
    s.inner(ToolCall(call_id="c1", name="hotels.book", arguments=booking), channel="sms")
    s.inner(ToolResult(call_id="c1", name="hotels.book", ok=True, output="confirmation LX-2231"), channel="sms")
    s.assistant("Done: Casa do Terraço, 3 nights, confirmation LX-2231.", channel="sms")
    s.usage(61_000)
    s.inner(Checkpoint(after_seq=0, through_seq=12, turn_count=3), channel="text")
    s.inner(MemoryExtracted(items=[{"fact": "prefers hotels with a terrace"}]))
    s.close()
    s.span("phone", channel="phone")
    s.user("Quick one: what time is my flight?", channel="phone")
    s.assistant("Your flight leaves at 07:40 from Terminal 2.", channel="phone")
    s.close()
    s.end_conversation()
    s.open_conversation()
    s.span("interaction", channel="email")
    s.user("Please send me the itinerary as a list.", channel="email")
    s.assistant(
        "Here it is:\n\n1. 12 May — fly out 07:40\n2. 12–15 May — Casa do Terraço\n3. 15 May — fly home",
        channel="email",
    )
    s.inner(ContextCompacted(trigger="auto", input_tokens_before=180_000, input_tokens_after=22_000))
    s.inner(ContextCapsule(text="Facts: Lisbon 12–15 May; prefers terraces.", reason="compaction"))
    s.close()
    return s.events


def long_history(spans: int, per_span: int, days_ago: float = 1.0) -> list[Event]:
    """Many spans of numbered messages (long enough to scroll), with a signal between spans."""
    s = Script(utcnow() - timedelta(days=days_ago))
    s.open_conversation()
    for n in range(spans):
        s.span("interaction", gap=600)
        for i in range(per_span):
            if i % 2 == 0:
                s.user(f"Span {n} message {i}: " + "a thought worth keeping on the timeline. " * 3)
            else:
                s.assistant(f"Span {n} answer {i}: noted, and here is a considered reply to go with it.")
        s.close()
        s.inner(InnerSignal(source="memory", type="consolidated", data={"span": n}), span_id=None)
    return s.events


async def publish(nats_url: str, events: list[Event], timeout: float = 20.0) -> int:
    """Publish on LEDGER_APPEND as a producer and wait until the ledger has committed them all.

    Returns the highest committed seq among them.
    """
    bus = await Bus.connect(nats_url, "browser-test-seed")
    try:
        for ev in events:
            await bus.publish(topics.ledger_append("test"), ev)
        wanted = {ev.id for ev in events}
        seen: dict[str, int] = {}

        async def last_seq() -> int | None:
            reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=0, limit=5000))
            seen.update({ev.id: ev.seq or 0 for ev in reply.events})
            return max(seen[i] for i in wanted) if wanted <= seen.keys() else None

        return await eventually(last_seq, "the ledger to commit the seeded events", timeout,
                                explain=lambda: f"{len(wanted & seen.keys())}/{len(wanted)} committed")
    finally:
        await bus.close()
