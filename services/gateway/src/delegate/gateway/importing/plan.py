"""Imported lines as ledger events: past conversations, each written whole (pure, no I/O).

Lines are grouped by their ``conversation`` key (lines without one: one conversation per UTC
day) and sorted by ``ts``. Each group becomes ``conversation.opened`` (reason "import"),
``span.opened`` (an interaction span), its ``message`` events with their original ``ts``,
``span.closed`` (reason "imported") and ``conversation.ended`` (reason "import"): a past
conversation, opened and ended, so the live one stays the ledger's open conversation. A group
too long for one atomic batch is split into parts, each its own conversation.

Every id derives from (import_id, conversation key, part, line): the same body imported again
under the same import id plans the very same events, and the ledger stores each id once, so a
retried import writes nothing twice. The openings sit 2 and 1 microseconds before the first
message and the closings as far after the last: the timeline orders by (ts, id), and an
opening that shared its message's ts could sort after it.
"""

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from delegate.contracts.events import (
    ConversationEnded,
    ConversationOpened,
    Event,
    Imported,
    ImportFinished,
    ImportLineError,
    ImportStarted,
    Message,
    SpanClosed,
    SpanOpened,
    make_event,
)
from delegate.runtime.bus import MAX_BATCH

from .lines import ImportLine

Format = Literal["ndjson", "chatgpt"]

FRAMING = 4  # conversation.opened, span.opened, span.closed, conversation.ended
MAX_PART_MESSAGES = MAX_BATCH - FRAMING
TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class ConversationPlan:
    key: str  # "c:<the source's key>" or "d:<UTC day>"
    part: int  # 1-based
    parts: int
    events: list[Event]

    @property
    def conversation_id(self) -> str:
        return self.events[0].conversation_id or ""


@dataclass(frozen=True)
class ImportPlan:
    import_id: str
    format: Format
    lines: int
    conversations: list[ConversationPlan]

    @property
    def events(self) -> int:
        return sum(len(c.events) for c in self.conversations)

    def started(self) -> Event:
        payload = ImportStarted(
            import_id=self.import_id, format=self.format, lines=self.lines,
            conversations=len(self.conversations), events=self.events,
        )
        return _bookkeeping(payload, derive(self.import_id, "started", str(self.lines), str(self.events)))

    def finished(self, status: Literal["done", "failed"], written: int, message: str = "") -> Event:
        payload = ImportFinished(
            import_id=self.import_id, status=status, events=written,
            conversations=len(self.conversations), message=message[:2000],
        )
        # The id names the outcome: a retry that completes a failed import records its own end.
        return _bookkeeping(payload, derive(self.import_id, "finished", status, str(written), str(self.events)))


def derive(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def import_id_for(idempotency_key: str | None, fresh: str) -> str:
    """A retried POST (same ``Idempotency-Key``) is the same import; else the fresh id."""
    if idempotency_key is None:
        return f"imp-{fresh}"
    return "imp-" + derive("import", idempotency_key)[:40]


def refused(import_id: str, fmt: Format, lines: int, errors: Sequence[ImportLineError], message: str) -> list[Event]:
    """What a refused body writes: its start and its failed end, no conversation."""
    started = ImportStarted(import_id=import_id, format=fmt, lines=lines, conversations=0, events=0)
    finished = ImportFinished(
        import_id=import_id, status="failed", events=0, conversations=0, errors=list(errors)[:100],
        message=message[:2000],
    )
    digest = derive(import_id, "refused", str(lines), *(f"{e.line}:{e.message}" for e in errors))
    return [_bookkeeping(started, derive(digest, "started")), _bookkeeping(finished, derive(digest, "finished"))]


def build_plan(import_id: str, fmt: Format, lines: Sequence[ImportLine]) -> ImportPlan:
    groups: dict[str, list[ImportLine]] = defaultdict(list)
    for line in lines:
        conversation = line.data.conversation
        day = line.data.ts.astimezone(UTC).date().isoformat()
        key = f"c:{conversation}" if conversation is not None else f"d:{day}"
        groups[key].append(line)
    planned: list[ConversationPlan] = []
    for key, members in groups.items():
        members.sort(key=lambda m: (m.data.ts, m.ordinal))
        chunks = [members[i : i + MAX_PART_MESSAGES] for i in range(0, len(members), MAX_PART_MESSAGES)]
        for part, chunk in enumerate(chunks, start=1):
            planned.append(_conversation(import_id, key, part, len(chunks), chunk))
    planned.sort(key=lambda c: (c.events[0].ts, c.key, c.part))
    return ImportPlan(import_id=import_id, format=fmt, lines=len(lines), conversations=planned)


def _conversation(import_id: str, key: str, part: int, parts: int, members: list[ImportLine]) -> ConversationPlan:
    base = derive(import_id, key, str(part))
    conversation_id, span_id = f"ic{base[:30]}", f"is{base[:30]}"
    first, last = members[0].data, members[-1].data
    channel = first.channel
    source = key[2:] if key.startswith("c:") else None
    label = source if parts == 1 else f"{(source or key[2:])[:480]} part {part}"
    mark = Imported(import_id=import_id, conversation=label)

    def framing(
        payload: ConversationOpened | SpanOpened | SpanClosed | ConversationEnded, name: str, at: datetime
    ) -> Event:
        return make_event(
            payload, conversation_id=conversation_id, span_id=None if name in ("open", "end") else span_id,
            channel=channel, id=f"ie{base[:24]}-{name}", ts=at,
        )

    events = [
        framing(ConversationOpened(reason="import", imported=mark), "open", first.ts - 2 * TICK),
        framing(SpanOpened(type="interaction", imported=mark), "span", first.ts - TICK),
    ]
    asked: str | None = None  # the newest user message: an answer's parent, as a live turn's
    for member in members:
        data = member.data
        event_id = f"ie{base[:24]}-{member.ordinal:08d}"
        imported = Imported(
            import_id=import_id, line=member.line, ref=data.ref, speaker=data.speaker, conversation=data.conversation
        )
        events.append(
            make_event(
                Message(text=data.text, imported=imported), conversation_id=conversation_id, span_id=span_id,
                channel=data.channel, role=data.role, parent_id=asked if data.role == "assistant" else None,
                id=event_id, ts=data.ts,
            )
        )
        if data.role == "user":
            asked = event_id
    events.append(framing(SpanClosed(reason="imported"), "spanend", last.ts + TICK))
    events.append(framing(ConversationEnded(reason="import"), "end", last.ts + 2 * TICK))
    return ConversationPlan(key=key, part=part, parts=parts, events=events)


def _bookkeeping(payload: ImportStarted | ImportFinished, digest: str) -> Event:
    return make_event(payload, conversation_id=None, span_id=None, channel="text", id=f"ix{digest[:40]}")
