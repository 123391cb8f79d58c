"""A call's instructions (its Realtime session's): who it is, what it knows, and how to sound.

A Realtime session starts with no conversation of its own, so everything it should know goes
into its instructions, read from the ledger after it caught up: the newest continuity capsule
and the recent verbatim messages from every channel (``select_recent_messages``), rendered as a
"Recent conversation" section of marked messages, then the preset's speaking style.

Memory is offered the same way as to a text turn, through the same builder: before the call
is configured, the memory service is asked (purpose ``voice``) with the words of the recent
messages, and what it answers in time goes into the instructions ("Memory", "How the owner wants
to be answered"). The search runs while the Realtime socket opens; it is waited for at most
``MEMORY_RETRIEVAL_WAIT_MS`` from its start, and a later answer is only recorded (a call's
instructions are set once). Either way the search is recorded as ``memory.retrieved``.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from delegate.contracts.events import Event, MemoryRetrieved
from delegate.runtime.bus import Bus
from delegate.runtime.memory_context import (  # the agent's retrieval imports these too: shared, not copied
    MemoryContext,
    MemoryLookup,
    Outage,
    Seen,
    given_in_time,
    retrieved,
    search_request,
)
from delegate.runtime.working_context import (
    MARKER_NOTE,
    VerbatimMessage,
    capsule_text,
    compose_instructions,
    select_recent_messages,
)

from .presets import Preset

QUERY_USER_MESSAGES = 4  # the newest user messages a call's memory query is made of
MAX_QUERY_CHARS = 1000
# With no recent messages at all (a first call), memory is still asked: its adaptations (how the
# owner wants to be addressed) are always given, whatever the query.
FIRST_CALL_QUERY = "the owner, their preferences and what is going on"
OUTAGE = Outage("the voice service")

BASE_INSTRUCTIONS = """\
You are Delegate, the owner's personal assistant, speaking with them by voice. The same you \
talks with them by text chat, SMS and email; everything said anywhere is one relationship.

You are heard, not read: answer in short spoken sentences, usually one to three. Never use \
Markdown, lists, headings, links or emoji; say numbers and times the way people say them. Ask \
one short question when something is unclear. If they interrupt you, stop and listen. Use your \
tools when they help, and say briefly what you are doing when a tool takes a moment."""

RECENT_HEADING = "## Recent conversation"


def recent_section(recent: Iterable[VerbatimMessage]) -> str | None:
    lines = [f"{'User' if m.role == 'user' else 'You'}: {m.marked_text}" for m in recent]
    if not lines:
        return None
    return (
        f"{RECENT_HEADING}\n"
        "The newest turns of your conversation with the owner, oldest first, on every channel. "
        "Continue from them naturally.\n\n" + "\n".join(lines)
    )


def session_instructions(
    *,
    capsule: Event | None,
    messages: Iterable[Event],
    channel: str,
    preset: Preset,
    now: datetime,
    max_messages: int,
    max_chars: int,
    reason: str | None = None,
    memory: MemoryContext | None = None,
    calendar: str | None = None,
) -> str:
    """Base persona + capsule + memory + today's calendar + channel and time, the recent messages, then
    the preset's style."""
    chosen = select_recent_messages(messages, capsule, max_messages=max_messages, max_chars=max_chars)
    parts = [compose_instructions(
        BASE_INSTRUCTIONS, capsule=capsule, channel=channel, now=now, memory=memory, calendar=calendar
    )]
    recent = recent_section(chosen)
    if recent is not None:
        parts.append(MARKER_NOTE)
        parts.append(recent)
    if reason:
        parts.append(
            "## Why you are calling\nYou placed this call to the owner yourself. The reason: "
            f"{reason}\nSay it briefly once they answer."
        )
    if preset.style.strip():
        parts.append(f"## Speaking style\n{preset.style.strip()}")
    return "\n\n".join(parts)


def memory_query(recent: Iterable[VerbatimMessage]) -> str:
    """The words of the newest user messages (the conversation the call continues), newest last."""
    listed = list(recent)
    said = [t.text for t in listed if t.role == "user"][-QUERY_USER_MESSAGES:] or [t.text for t in listed][-2:]
    query = " ".join(" ".join(said).split())
    return query[-MAX_QUERY_CHARS:] if query else FIRST_CALL_QUERY


@dataclass
class CallMemory:
    """One call's search: started before the socket is open, settled before it is configured."""

    lookup: MemoryLookup | None
    seen: Seen  # the verbatim messages and the capsule the instructions carry anyway

    @classmethod
    def start(
        cls, bus: Bus, *, capsule: Event | None, messages: Iterable[Event], max_messages: int, max_chars: int,
        budget_tokens: int,
    ) -> "CallMemory":
        recent = select_recent_messages(messages, capsule, max_messages=max_messages, max_chars=max_chars)
        seen = Seen()
        for t in recent:
            seen.add(t.event_id, t.text)
        seen.add_blob(capsule_text(capsule))
        request = search_request(
            memory_query(recent), purpose="voice", budget_tokens=budget_tokens,
            exclude_event_ids=[t.event_id for t in recent],
        )
        return cls(MemoryLookup(bus, request) if request is not None else None, seen)

    async def settle(self, wait_ms: float) -> tuple[MemoryContext | None, MemoryRetrieved | None]:
        """What the call is given, and its record; (None, None) when memory did not answer in time."""
        lookup = self.lookup
        if lookup is None:
            return None, None
        try:
            reply = await lookup.within(max(wait_ms - lookup.elapsed_ms, 0.0) / 1000.0)
        except Exception as exc:  # whatever it is, the call goes on without memory
            OUTAGE.failed(exc)
            return None, None
        if reply is None:
            return None, None
        OUTAGE.answered()
        return given_in_time(lookup, reply, self.seen)

    async def late(self) -> MemoryRetrieved | None:
        """A search that answered after the call was configured: recorded, not given."""
        lookup = self.lookup
        if lookup is None:
            return None
        try:
            reply = await lookup.task
        except Exception as exc:  # whatever it is, the call goes on without memory
            OUTAGE.failed(exc)
            return None
        OUTAGE.answered()
        return retrieved(lookup.request, reply, given=MemoryContext(), elapsed_ms=lookup.elapsed_ms, late=True,
                         surfaced=False, reason="session_started")

    def cancel(self) -> None:
        if self.lookup is not None and not self.lookup.task.done():
            self.lookup.cancel()

