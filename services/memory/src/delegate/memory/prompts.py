"""The per-turn extraction prompt: one turn, and the stored facts it might repeat or correct."""

from collections.abc import Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from delegate.contracts.ids import format_ts

from .records import FactRow, PendingTurn

# The stand-in recognizes this request by MARK (keep the phrase in the instructions).
MARK = "remember from this single turn"

TURN_INSTRUCTIONS = """\
You decide what a personal assistant should remember from this single turn of a \
conversation with its owner (the user). Keep only what will still matter later: facts about \
the owner and their world, preferences, commitments (by either side, with dates), and \
adaptations: how the owner wants to be addressed or answered ("call me Sam", "keep answers \
short"). Skip small talk, questions, and what the assistant merely said.
The KNOWN FACTS are what is stored already, each with its id. Restating one is fine (it is \
merged). When the turn corrects or replaces a known fact (a new address, a changed plan, \
"actually ..."), list that fact's id in "contradicts"; never list a fact that is still true.
Answer with JSON only, no prose: {"items": [{"type": "fact|preference|commitment|adaptation", \
"text": "one self-contained sentence about the owner", "subject": "what it is about, in a \
few words", "contradicts": ["known fact ids"], "people": ["names of the people it is about"]}], \
"people": [{"name": "the fullest name said", "aliases": ["other names used"], "relation": "to the \
owner: sister, colleague, ...", "phones": [], "emails": [], "dates": [{"label": "birthday", \
"date": "MM-DD or YYYY-MM-DD"}]}], "commitments": [{"by": "owner|assistant", "what": "what was \
promised", "to": "whom, if anyone", "due": "YYYY-MM-DD or YYYY-MM-DDTHH:MM in the owner's local \
time, or null", "due_text": "the words that said when"}]}. "people": everyone other than the owner \
the turn names, with what it says about them (leave out what it does not say). "commitments": \
promises the owner or the assistant made in this turn ("I'll send Ana the photos on Friday", \
"I'll check the train times tonight"), with the due date read from the OWNER'S LOCAL TIME. \
Answer {"items": []} when nothing is worth remembering."""




def turn_input(turn: PendingTurn, candidates: Sequence[FactRow], zone: ZoneInfo | None = None) -> str:
    known = "\n".join(f"- {f.id}: {f.text}" for f in candidates) or "(none)"
    lines = [f"[{format_ts(turn.ts)}] [{turn.channel}] user: {turn.text}"]
    if turn.answer_text is not None:
        lines.append(f"[{format_ts(turn.ts)}] [{turn.channel}] assistant: {turn.answer_text}")
    # First, so nothing follows the turn's lines (a reader takes trailing lines as the message's).
    head = f"OWNER'S LOCAL TIME: {local_time(turn.ts, zone)}\n\n" if zone is not None else ""
    return head + "KNOWN FACTS (id: text):\n" + known + "\n\nTURN:\n" + "\n".join(lines)


def local_time(ts: datetime, zone: ZoneInfo) -> str:
    """``Friday 2026-12-04 10:00 (Europe/Lisbon)``: what "on Friday" or "tonight" is read against."""
    local = ts.astimezone(zone)
    return f"{local:%A %Y-%m-%d %H:%M} ({zone.key})"
