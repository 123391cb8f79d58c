"""A session's instructions: who it is, what it knows, and how to sound.

A Realtime session starts with no conversation of its own, so everything it should know goes
into its instructions, read from the ledger after it caught up: the newest continuity capsule
and the recent verbatim turns from every channel (``select_recent_turns``), rendered as a
"Recent conversation" section of marked turns, then the preset's speaking style.
"""

from collections.abc import Iterable
from datetime import datetime

from delegate.contracts.events import Event
from delegate.runtime.working_context import MARKER_NOTE, Turn, compose_instructions, select_recent_turns

from .presets import Preset

BASE_INSTRUCTIONS = """\
You are Delegate, the owner's personal assistant, speaking with them by voice. The same you \
talks with them by text chat, SMS and email; everything said anywhere is one relationship.

You are heard, not read: answer in short spoken sentences, usually one to three. Never use \
Markdown, lists, headings, links or emoji; say numbers and times the way people say them. Ask \
one short question when something is unclear. If they interrupt you, stop and listen. Use your \
tools when they help, and say briefly what you are doing when a tool takes a moment."""

RECENT_HEADING = "## Recent conversation"


def recent_section(turns: Iterable[Turn]) -> str | None:
    lines = [f"{'User' if t.role == 'user' else 'You'}: {t.marked_text}" for t in turns]
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
    max_turns: int,
    max_chars: int,
    reason: str | None = None,
) -> str:
    """Base persona + capsule + channel and time, the recent turns, then the preset's style."""
    turns = select_recent_turns(messages, capsule, max_turns=max_turns, max_chars=max_chars)
    parts = [compose_instructions(BASE_INSTRUCTIONS, capsule=capsule, channel=channel, now=now)]
    recent = recent_section(turns)
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
