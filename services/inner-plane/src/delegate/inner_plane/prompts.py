"""Instructions for the inner plane's model calls, and how turns are shown to the model."""

from collections.abc import Iterable

from delegate.contracts.events import Event, Message
from delegate.contracts.ids import format_ts

MEMORY_INSTRUCTIONS = """\
You extract durable memories from a slice of a conversation between a person and their \
personal assistant, and summarize the slice as an episode.
The episode: a short summary of what happened (a few sentences), the decisions made, and the \
open loops (questions, tasks or promises left unresolved at the end of the slice).
The memories: only what will still matter in later conversations: facts about the person and \
their world, preferences, commitments and promises (by either side, with dates), adaptations \
(how the person wants to be addressed or answered: "call me Sam", "keep answers short"), and \
corrections of earlier facts (as the corrected fact). Skip small talk, one-off questions and \
anything only relevant to this moment.
Answer with JSON only, no prose: {"summary": "...", "decisions": ["..."], "open_loops": ["..."], \
"items": [{"type": "fact|preference|commitment|adaptation", "text": "one self-contained sentence", \
"subject": "what it is about, in a few words", "when": "date or time it refers to, if any"}]}. \
Use empty lists when there is nothing of a kind."""

CAPSULE_INSTRUCTIONS = """\
You maintain the continuity capsule of a personal assistant: a compact, self-contained \
account that lets a fresh model session continue the relationship with one person without \
the full transcript. Rewrite the previous capsule with the new turns folded in. Keep these \
sections, each a few terse bullet points (omit a section only if it is empty):
- Established facts (about the person, their people, places, projects)
- Commitments (who promised what, by when)
- Unresolved work (open questions, tasks in progress, what the assistant owes next)
- Corrections (earlier statements that turned out wrong, and the right version)
- Preferences (how the person wants things done, tone, channels)
- Cross-channel context (what happened on which channel: text, voice, phone, SMS, email)
Newer turns win over the previous capsule where they conflict. Drop what no longer matters. \
Write plain text, at most about 400 words; never address the person."""


def turn_line(event: Event) -> str:
    text = event.typed(Message).text
    return f"[{format_ts(event.ts)}] [{event.channel}] {event.role or 'unknown'}: {text}"


def transcript(events: Iterable[Event]) -> str:
    return "\n".join(turn_line(e) for e in events)


def capsule_input(previous: str | None, turns: list[Event], omitted: int) -> str:
    head = "PREVIOUS CAPSULE:\n" + (previous.strip() if previous else "(none yet)")
    note = f"; {omitted} older turns omitted" if omitted else ""
    body = transcript(turns) if turns else "(no new turns)"
    return f"{head}\n\nTURNS SINCE THE PREVIOUS CAPSULE (oldest first{note}):\n{body}"
