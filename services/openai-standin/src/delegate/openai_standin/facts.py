"""What the person stated about themselves, read from the inner plane's transcripts.

Transcripts come one turn per line, `[ts] [channel] role: text` (a message spanning
lines continues on the next). A stated fact is a first-person statement of the user's,
not a question or small talk ("My sister lives in Lisbon.", "I prefer short answers."),
or whatever they asked to have noted; a reminder request is a commitment. Each is sorted
into the kind it reads as. Used for the demo's capsule and memory answers."""

import re
from dataclasses import dataclass

from delegate.openai_standin.clip import one_line, shorten
from delegate.openai_standin.intents import note_request, reminder_request

FACT, PREFERENCE, COMMITMENT, CORRECTION = "fact", "preference", "commitment", "correction"
MAX_STATEMENT = 300

_TURN = re.compile(r"^\[[^\]\n]*\]\s*\[(?P<channel>[^\]\n]*)\]\s*(?P<role>[\w-]+):\s?(?P<text>.*)$")
_FIRST_PERSON = re.compile(r"\b(i|i'm|i’m|i've|i’ve|i'd|i’d|i'll|i’ll|me|my|mine|myself|we|we're|our|us)\b", re.I)
_QUESTION_START = re.compile(
    r"^(who|what|when|where|why|how|which|can|could|would|will|should|do|does|did|is|are|am|was|were|have|has)\b", re.I
)
_SMALL_TALK = re.compile(
    r"^(hi|hello|hey|thanks|thank you|ok(ay)?|yes|no|sure|bye|good (morning|night|evening))\b", re.I
)
_PREFERENCE = re.compile(
    r"\b(prefer|preferably|rather|like|love|enjoy|hate|dislike|favou?rite|always|never"
    r"|please (always|don'?t|do not))\b",
    re.I,
)
_CORRECTION = re.compile(r"^(actually|correction|sorry|no,|wait)\b|\bi meant\b|\bnot\b.*\bbut\b", re.I)
_COMMITMENT = re.compile(
    r"\b(i will|i'll|i’ll|i promise|i'm going to|i am going to|i have to|i need to|i must|i'm meeting|i am meeting)\b",
    re.I,
)
# How the person wants to be addressed or answered (a preference the instructions follow).
_ADAPTATION = re.compile(
    r"\b(call me|address me as|my name is|i go by)\b"
    r"|\b(keep|make)\b.{0,20}\b(answers?|replies|reply|responses?)\b"
    r"|\b(answer|reply|respond|write|talk|speak)( to me)? (briefly|shortly|in|more|less|formally|casually)\b",
    re.I,
)
_CORRECTION_LEAD = re.compile(r"^(actually|correction|sorry|no|wait)\b[,:;!.\s-]*", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class TurnLine:
    channel: str
    role: str
    text: str


@dataclass(frozen=True)
class Statement:
    kind: str  # FACT, PREFERENCE, COMMITMENT or CORRECTION
    text: str  # the person's own words, one sentence


def turn_lines(text: str) -> list[TurnLine]:
    turns: list[TurnLine] = []
    for line in text.splitlines():
        if m := _TURN.match(line):
            turns.append(TurnLine(m.group("channel"), m.group("role").lower(), m.group("text")))
        elif turns and line.strip():  # a message spanning lines
            last = turns[-1]
            turns[-1] = TurnLine(last.channel, last.role, f"{last.text}\n{line}")
    return turns


def stated(text: str) -> list[Statement]:
    """Each thing the person said about themselves in one message of theirs."""
    if (reminder := reminder_request(one_line(text))) is not None:
        what = f"{reminder.task} {reminder.when}".strip()
        return [Statement(COMMITMENT, f"Asked to be reminded: {what}")]
    noted = note_request(one_line(text))
    found: list[Statement] = []
    for sentence in _SENTENCE.split(noted if noted is not None else text):
        sentence = one_line(sentence)
        if not sentence or sentence.endswith("?") or _QUESTION_START.match(sentence):
            continue
        if _SMALL_TALK.match(sentence) and len(sentence.split()) < 4:
            continue
        personal = noted is not None or _FIRST_PERSON.search(sentence) or _ADAPTATION.search(sentence)
        if len(sentence.split()) < 3 or not personal:
            continue
        sentence = sentence[:1].upper() + sentence[1:]
        if sentence[-1] not in ".!":
            sentence += "."
        found.append(Statement(kind_of(sentence), shorten(sentence, MAX_STATEMENT, markdown=False)))
    return found


def kind_of(sentence: str) -> str:
    if _CORRECTION.search(sentence):
        return CORRECTION
    if _PREFERENCE.search(sentence) or _ADAPTATION.search(sentence):
        return PREFERENCE
    if _COMMITMENT.search(sentence):
        return COMMITMENT
    return FACT


def key(text: str) -> str:
    """What two wordings of the same statement share (case, punctuation, escapes aside)."""
    return re.sub(r"[^\w]+", " ", text.replace("\\", "")).strip().lower()


def is_adaptation(sentence: str) -> bool:
    """A statement of how the person wants to be addressed or answered ("call me Sam")."""
    return _ADAPTATION.search(sentence) is not None


def without_correction_lead(sentence: str) -> str:
    """"Actually, my sister moved to Porto." -> "My sister moved to Porto." (the fact itself)."""
    rest = _CORRECTION_LEAD.sub("", sentence, count=1).strip()
    return rest[:1].upper() + rest[1:] if rest else sentence
