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

A conversation's events are kept as the bytes that will be published (``Event`` JSON), made
as it is planned: a big import's plan is hundreds of thousands of events, and as models they
would be what the garbage collector scans on every full pass.
"""

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from delegate.contracts import topics
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
LEDGER = topics.ledger_append("gateway")


@dataclass(frozen=True)
class ConversationPlan:
    key: str  # "c:<the source's key>" or "d:<UTC day>"
    part: int  # 1-based
    parts: int
    conversation_id: str
    ids: list[str]  # the events' ids, in order
    events: list[bytes]  # the events as published on LEDGER (``Event`` JSON), in order


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


def build_plan(import_id: str, fmt: Format, lines: list[ImportLine]) -> ImportPlan:
    """The plan of ``lines``, which it consumes (empties): a big body's lines are then freed a
    conversation at a time, not all at once in one long step that holds the GIL."""
    count = len(lines)
    groups: dict[str, list[ImportLine]] = defaultdict(list)
    for line in lines:
        conversation = line.conversation
        day = line.ts.astimezone(UTC).date().isoformat()
        key = f"c:{conversation}" if conversation is not None else f"d:{day}"
        groups[key].append(line)
    lines.clear()
    planned: list[tuple[datetime, str, int, ConversationPlan]] = []
    while groups:
        key, members = groups.popitem()
        members.sort(key=lambda m: (m.ts, m.ordinal))
        chunks = [members[i : i + MAX_PART_MESSAGES] for i in range(0, len(members), MAX_PART_MESSAGES)]
        for part, chunk in enumerate(chunks, start=1):
            planned.append((chunk[0].ts, key, part, _conversation(import_id, key, part, len(chunks), chunk)))
        del members, chunks
    planned.sort(key=lambda c: c[:3])
    return ImportPlan(import_id=import_id, format=fmt, lines=count, conversations=[c[3] for c in planned])


def _conversation(import_id: str, key: str, part: int, parts: int, members: list[ImportLine]) -> ConversationPlan:
    base = derive(import_id, key, str(part))
    conversation_id, span_id = f"ic{base[:30]}", f"is{base[:30]}"
    first, last = members[0], members[-1]
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
        event_id = f"ie{base[:24]}-{member.ordinal:08d}"
        imported = Imported(
            import_id=import_id, line=member.line, ref=member.ref, speaker=member.speaker,
            conversation=member.conversation,
        )
        events.append(
            make_event(
                Message(text=member.text, imported=imported), conversation_id=conversation_id, span_id=span_id,
                channel=member.channel, role=member.role, parent_id=asked if member.role == "assistant" else None,
                id=event_id, ts=member.ts,
            )
        )
        if member.role == "user":
            asked = event_id
    events.append(framing(SpanClosed(reason="imported"), "spanend", last.ts + TICK))
    events.append(framing(ConversationEnded(reason="import"), "end", last.ts + 2 * TICK))
    return ConversationPlan(
        key=key, part=part, parts=parts, conversation_id=conversation_id,
        ids=[e.id for e in events], events=[LEDGER.encode(e) for e in events],
    )


def _bookkeeping(payload: ImportStarted | ImportFinished, digest: str) -> Event:
    return make_event(payload, conversation_id=None, span_id=None, channel="text", id=f"ix{digest[:40]}")
