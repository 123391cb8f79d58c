"""Small builders for ledger events with controlled timestamps."""

from datetime import UTC, datetime, timedelta
from typing import Any

from delegate.contracts.events import (
    Checkpoint,
    ContextCapsule,
    ContextCompacted,
    ContextUsage,
    ConversationEnded,
    ConversationOpened,
    Event,
    Message,
    SpanClosed,
    SpanOpened,
    TermEnded,
    TermStarted,
    ToolCall,
    make_event,
)
from delegate.contracts.ids import new_id

BASE = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def message(
    text: str = "hi",
    *,
    conv: str | None = "c1",
    span: str | None = "s1",
    role: str = "user",
    t: float | None = None,
    id: str | None = None,
    **payload: Any,
) -> Event:
    return make_event(
        Message(text=text, **payload), conversation_id=conv, span_id=span, channel="text", role=role,  # type: ignore[arg-type]
        id=id or new_id(), ts=at(t) if t is not None else None,
    )


def span_opened(span: str, *, conv: str | None = "c1", t: float | None = None, id: str | None = None) -> Event:
    return make_event(
        SpanOpened(type="interaction"), conversation_id=conv, span_id=span, channel="text",
        id=id or new_id(), ts=at(t) if t is not None else None,
    )


def span_closed(span: str, *, conv: str | None = "c1", t: float | None = None) -> Event:
    return make_event(
        SpanClosed(reason="idle"), conversation_id=conv, span_id=span, channel="text",
        ts=at(t) if t is not None else None,
    )


def conversation_opened(conv: str, *, t: float | None = None) -> Event:
    return make_event(
        ConversationOpened(), conversation_id=conv, span_id=None, channel="text", ts=at(t) if t is not None else None
    )


def conversation_ended(conv: str, *, t: float | None = None) -> Event:
    return make_event(
        ConversationEnded(), conversation_id=conv, span_id=None, channel="text", ts=at(t) if t is not None else None
    )


def capsule(text: str, *, conv: str = "c1", span: str | None = None, t: float | None = None) -> Event:
    return make_event(
        ContextCapsule(text=text), conversation_id=conv, span_id=span, channel="inner",
        ts=at(t) if t is not None else None,
    )


def usage(tokens: int, *, conv: str = "c1", span: str | None = "s1", t: float | None = None) -> Event:
    return make_event(
        ContextUsage(input_tokens=tokens), conversation_id=conv, span_id=span, channel="text",
        ts=at(t) if t is not None else None,
    )


def compacted(trigger: str = "manual", *, conv: str = "c1", span: str | None = "s1", t: float | None = None) -> Event:
    return make_event(
        ContextCompacted(trigger=trigger), conversation_id=conv, span_id=span, channel="text",
        ts=at(t) if t is not None else None,
    )


def checkpoint(after: int, through: int, *, conv: str = "c1", span: str | None = "s1", t: float | None = None) -> Event:
    return make_event(
        Checkpoint(after_seq=after, through_seq=through), conversation_id=conv, span_id=span, channel="inner",
        ts=at(t) if t is not None else None,
    )


def tool_call(name: str = "clock", *, conv: str = "c1", span: str | None = "s1", t: float | None = None) -> Event:
    return make_event(
        ToolCall(call_id=new_id(), name=name), conversation_id=conv, span_id=span, channel="text",
        ts=at(t) if t is not None else None,
    )


def term_started(
    term: str, *, holder: str = "agent-a", supersedes: str | None = None, t: float | None = None,
    id: str | None = None,
) -> Event:
    return make_event(
        TermStarted(term_id=term, type="agent", holder=holder, supersedes=supersedes),
        conversation_id=None, span_id=None, channel="inner", id=id or new_id(), ts=at(t) if t is not None else None,
    )


def term_ended(term: str, reason: str = "shutdown", *, t: float | None = None) -> Event:
    return make_event(
        TermEnded(term_id=term, reason=reason),
        conversation_id=None, span_id=None, channel="inner", ts=at(t) if t is not None else None,
    )


def key(event: Event) -> tuple[datetime, str]:
    return (event.ts, event.id)
