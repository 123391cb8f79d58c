"""A fresh working context: continuity capsule + recent verbatim messages.

Pure functions, no I/O. The agent uses them whenever it has no Responses chain to continue
(first start, after End conversation, after a voice call cleared the chain, after the
chain was lost); the voice service uses them to seed a Realtime session. Both read the same
ledger events, so every protocol starts from the same account of the relationship:

- the newest ``context.capsule`` goes into the instructions (it is model context, never a
  user or assistant message);
- message events newer than the capsule (``seq > through_seq``), from every channel, follow
  as verbatim messages, newest kept first within a count and character budget, each marked with
  its channel and time so the model knows where and when it was said; imported history
  (``payload.imported``: brought in by ``POST /api/import``) is never a recent message;
- memory retrieved for the request (``MemoryContext``) goes into the instructions too: the
  owner's adaptations ("How the owner wants to be answered") and the retrieved items ("Memory"),
  each with its kind, date and source, so every protocol is given memory the same way.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from delegate.contracts.events import ContextCapsule, Event, Message
from delegate.contracts.memory import MemoryResult

from .memory_context import MemoryContext

CHANNEL_NAMES = {
    "text": "text chat",
    "browser_voice": "browser voice",
    "phone": "phone call",
    "sms": "SMS",
    "email": "email",
    "inner": "inner activity",
}

# Channels whose turns run on the Responses chain; voice calls run on Realtime sessions.
RESPONSES_CHANNELS = frozenset({"text", "sms", "email", "inner"})

DEFAULT_MAX_MESSAGES = 20
DEFAULT_MAX_CHARS = 16_000

MARKER_NOTE = (
    "Earlier turns given to you below start with a bracketed marker such as "
    "[SMS · 2026-05-01 14:03 UTC] saying where and when they were said. The markers are "
    "context for you; never write such a marker in your own answers."
)


@dataclass(frozen=True)
class VerbatimMessage:
    """One verbatim user or assistant message, as a fresh working context holds it.

    The design's "recent verbatim turns" are these: messages, not turns (``agent.turn_types.Turn``).
    """

    event_id: str
    seq: int | None
    ts: datetime
    role: Literal["user", "assistant"]
    channel: str
    text: str

    @property
    def marker(self) -> str:
        when = self.ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        return f"[{CHANNEL_NAMES.get(self.channel, self.channel)} · {when}]"

    @property
    def marked_text(self) -> str:
        return f"{self.marker} {self.text}"


@dataclass(frozen=True)
class WorkingContext:
    instructions: str
    messages: list[VerbatimMessage] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)  # Responses input items
    capsule_id: str | None = None


def capsule_text(capsule: Event | None) -> str | None:
    payload = capsule.payload_as(ContextCapsule) if capsule is not None else None
    return (payload.text.strip() or None) if payload is not None else None


def capsule_through_seq(capsule: Event | None) -> int:
    """The newest seq the capsule accounts for (its own seq when the producer left it out)."""
    if capsule is None:
        return 0
    payload = capsule.payload_as(ContextCapsule)
    if payload is not None and payload.through_seq is not None:
        return payload.through_seq
    return capsule.seq or 0


def select_recent_messages(
    messages: Iterable[Event],
    capsule: Event | None = None,
    *,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_chars: int = DEFAULT_MAX_CHARS,
    exclude_ids: Iterable[str] = (),
) -> list[VerbatimMessage]:
    """Newest message events not covered by the capsule, oldest first, within both budgets.

    The newest message is always kept (cut to the character budget if it alone exceeds it);
    older ones are dropped whole rather than cut, so no message is shown half-said.
    """
    through = capsule_through_seq(capsule)
    skip = set(exclude_ids)
    seen: set[str] = set()
    candidates: list[VerbatimMessage] = []
    for event in messages:
        if event.role not in ("user", "assistant") or event.id in skip:
            continue
        if event.id in seen or (event.seq is not None and event.seq <= through):
            continue
        message = event.payload_as(Message)
        if message is None:
            continue
        if message.imported is not None:
            continue  # history from elsewhere, stored late: memory offers it, not the recent messages
        text = message.text.strip()
        if not text:
            continue
        seen.add(event.id)
        candidates.append(VerbatimMessage(event.id, event.seq, event.ts, event.role, event.channel, text))
    # Commit order when known; uncommitted events (no seq yet) are the newest.
    candidates.sort(key=lambda t: (t.seq is None, t.seq or 0, t.ts, t.event_id))
    chosen: list[VerbatimMessage] = []
    used = 0
    for candidate in reversed(candidates):
        if len(chosen) >= max_messages:
            break
        size = len(candidate.marked_text)
        if used + size > max_chars:
            if chosen:
                break
            room = max(max_chars - len(candidate.marker) - 2, 0)
            c = candidate
            candidate = VerbatimMessage(c.event_id, c.seq, c.ts, c.role, c.channel, _clip(c.text, room))
            size = len(candidate.marked_text)
        chosen.append(candidate)
        used += size
    chosen.reverse()
    return chosen


def responses_items(messages: Iterable[VerbatimMessage]) -> list[dict[str, Any]]:
    """The messages as Responses API input messages (easy-message form, plain text content)."""
    items: list[dict[str, Any]] = []
    for m in messages:
        content: Any = [{"type": "input_text", "text": m.marked_text}] if m.role == "user" else m.marked_text
        items.append({"type": "message", "role": m.role, "content": content})
    return items


def capsule_section(text: str) -> str:
    return (
        "## Continuity capsule\n"
        "Your own notes from earlier in this relationship (facts, commitments, unresolved work, "
        "corrections, preferences, context from other channels). They are not the user's words "
        "and not shown to the user; rely on them, and prefer newer turns where they disagree.\n\n"
        f"{text}"
    )


MEMORY_HEADING = "## Memory"
ADAPTATIONS_HEADING = "## How the owner wants to be answered"
MEMORY_NOTE = (
    "Retrieved from your long-term memory for this request: facts, past episodes and earlier "
    "messages, each marked with its kind, date and source. It is your own background knowledge, "
    "not something the user just said: use what is relevant, prefer the current conversation and "
    "newer items where they disagree, and do not mention the retrieval itself. A fact's id is "
    "what memory_forget takes when the owner asks you to forget it."
)
ADAPTATIONS_NOTE = "The owner asked for these; follow them unless they ask otherwise now."


def source_marker(item: MemoryResult) -> str:
    """Where an item came from, in a word or two: the channel, the speaker, an import."""
    parts = [CHANNEL_NAMES.get(item.channel, item.channel) if item.channel else None, item.speaker]
    if item.refs:
        parts.append("imported")
    return ", ".join(p for p in parts if p)


def memory_line(item: MemoryResult) -> str:
    """``- [preference · 2026-05-01 · SMS] text (id …)``: kind, date and source first."""
    kind = item.type if item.kind == "fact" and item.type and item.type != "fact" else item.kind
    head = [kind, item.ts.astimezone(UTC).strftime("%Y-%m-%d")]
    source = source_marker(item)
    if source:
        head.append(source)
    tail = f" (id {item.id})" if item.kind == "fact" else ""
    return f"- [{' · '.join(head)}] {' '.join(item.text.split())}{tail}"


def memory_section(items: Iterable[MemoryResult]) -> str | None:
    lines = [memory_line(i) for i in items]
    if not lines:
        return None
    return f"{MEMORY_HEADING}\n{MEMORY_NOTE}\n\n" + "\n".join(lines)


def adaptations_section(adaptations: Iterable[MemoryResult]) -> str | None:
    lines = [f"- {' '.join(a.text.split())}" for a in adaptations]
    if not lines:
        return None
    return f"{ADAPTATIONS_HEADING}\n{ADAPTATIONS_NOTE}\n\n" + "\n".join(lines)


def memory_sections(memory: MemoryContext | None) -> list[str]:
    """Adaptations first (they shape every answer), then the retrieved items."""
    if not memory:
        return []
    sections = [adaptations_section(memory.adaptations), memory_section(memory.items)]
    return [s for s in sections if s]


# How an answer must look on the channel it goes out on. Said in the instructions of every
# request (not a separate code path), so a tool round or a retried request keeps the rule, and
# a chain that moves between channels is told the current one each time.
CHANNEL_GUIDANCE = {
    "sms": (
        "Your answer is sent to their phone as an SMS: write plain text only, no Markdown, no "
        "lists or headings, no links in brackets. Keep it short: one or two SMS, under about 300 "
        "characters, unless they ask for more."
    ),
    "email": (
        "Your answer is sent to them as the body of an email reply: write the body only (no "
        "subject line; the reply keeps their subject), in plain paragraphs; a greeting is "
        "optional. Light Markdown (emphasis, simple lists) is converted, so keep formatting light."
    ),
}


def now_note(channel: str, now: datetime) -> str:
    when = now.astimezone(UTC).strftime("%A %Y-%m-%d %H:%M UTC")
    note = f"## Now\nThe user is reaching you by {CHANNEL_NAMES.get(channel, channel)}. It is {when}."
    guidance = CHANNEL_GUIDANCE.get(channel)
    return f"{note}\n{guidance}" if guidance else note


def compose_instructions(
    base: str,
    *,
    capsule: Event | None,
    channel: str,
    now: datetime,
    with_markers: bool = False,
    memory: MemoryContext | None = None,
    calendar: str | None = None,
) -> str:
    """Instructions for one request: base text, the capsule when there is one, memory, today's
    calendar (``calendar_now``), channel and time.

    Sent on every request: the Responses API does not carry instructions along a chain.
    """
    parts = [base.strip()]
    text = capsule_text(capsule)
    if text:
        parts.append(capsule_section(text))
    parts.extend(memory_sections(memory))
    if calendar:
        parts.append(calendar)
    if with_markers:
        parts.append(MARKER_NOTE)
    parts.append(now_note(channel, now))
    return "\n\n".join(parts)


def build_working_context(
    base_instructions: str,
    capsule: Event | None,
    messages: Iterable[Event],
    *,
    channel: str,
    now: datetime,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_chars: int = DEFAULT_MAX_CHARS,
    exclude_ids: Iterable[str] = (),
    memory: MemoryContext | None = None,
) -> WorkingContext:
    """Everything a fresh working context needs: instructions (capsule, memory) and recent messages as items."""
    recent = select_recent_messages(
        messages, capsule, max_messages=max_messages, max_chars=max_chars, exclude_ids=exclude_ids
    )
    instructions = compose_instructions(
        base_instructions, capsule=capsule, channel=channel, now=now, with_markers=bool(recent), memory=memory
    )
    return WorkingContext(
        instructions=instructions,
        messages=recent,
        items=responses_items(recent),
        capsule_id=capsule.id if capsule is not None and capsule_text(capsule) else None,
    )


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"
