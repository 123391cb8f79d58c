"""The stand-in's memory answers, read heuristically from what the person stated, as the JSON
the prompts ask for:
- the inner plane's checkpoint (MARK): the episode (`summary`, `decisions`, `open_loops`)
  and its `items`;
- the memory service's per-turn extraction (TURN_MARK): the turn's `items`, each with a
  `type` (`adaptation` for how the person wants to be addressed or answered), a `subject`,
  and, for a correction ("Actually my sister moved to Porto"), `contradicts`: the ids of the
  KNOWN FACTS the prompt lists that share the correction's subject words.
"""

import json
import re
from typing import Any

from delegate.openai_standin import facts
from delegate.openai_standin.clip import one_line, shorten

MARK = "extract durable memories"  # what the checkpoint extractor's instructions say
TURN_MARK = "remember from this single turn"  # what the per-turn extractor's instructions say
EPISODE_MARK = "summary"  # the checkpoint prompt asks for an episode too

_KNOWN = re.compile(r"^- (?P<id>[^:\s]+): (?P<text>.+)$")
_MY_THING = re.compile(r"\bmy (?P<what>\w+)", re.I)
_DECISION = re.compile(r"\b(decided|let's|we will|we'll|i'll go with|i chose|i choose|settled on)\b", re.I)
# Words that say nothing about what a statement is about (`facts.key` splits "I'm" into "i m").
_STOP = frozenset((
    "i", "me", "my", "mine", "myself", "we", "our", "us", "you", "your", "the", "a", "an", "to", "in", "of",
    "at", "on", "for", "and", "or", "but", "is", "am", "are", "was", "were", "be", "been", "now", "actually",
    "correction", "sorry", "no", "wait", "not", "really", "just", "also", "still", "then", "so", "it",
    "that", "this", "there", "m", "s",
))
SUMMARY_CHARS = 600


def is_memory_request(instructions: str) -> bool:
    return MARK in instructions.lower()


def is_turn_request(instructions: str) -> bool:
    return TURN_MARK in instructions.lower()


def write(text: str, instructions: str = "") -> str:
    """The checkpoint's answer: its stated facts and, when asked for, the episode."""
    turns = facts.turn_lines(text)
    items: list[dict[str, str]] = []
    seen: set[str] = set()
    for turn in turns:
        if turn.role != "user":
            continue
        for statement in facts.stated(turn.text):
            if facts.key(statement.text) not in seen:
                seen.add(facts.key(statement.text))
                items.append({"kind": statement.kind, "text": statement.text})
    said = [t for t in turns if t.role == "user"]
    if EPISODE_MARK not in instructions.lower() or not said:
        return json.dumps({"items": items}, ensure_ascii=False)
    return json.dumps({**episode(said, items), "items": items}, ensure_ascii=False)


def episode(said: list[facts.TurnLine], items: list[dict[str, str]]) -> dict[str, Any]:
    channels = sorted({t.channel for t in said})
    quoted = "; ".join(f"“{shorten(one_line(t.text), 120, markdown=False)}”" for t in said)
    summary = shorten(f"The person wrote {len(said)} time(s) by {', '.join(channels)}: {quoted}", SUMMARY_CHARS,
                      markdown=False)
    sentences = [one_line(s) for t in said for s in re.split(r"(?<=[.!?])\s+", t.text) if one_line(s)]
    return {
        "summary": summary,
        "decisions": [s for s in sentences if _DECISION.search(s)] + [
            i["text"] for i in items if i["kind"] == facts.COMMITMENT
        ],
        "open_loops": [s for s in sentences if s.endswith("?")],
    }


def write_turn(text: str) -> str:
    """The per-turn answer: the turn's stated facts, corrections naming what they replace."""
    known, turns = split_turn_input(text)
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    for turn in turns:
        if turn.role != "user":
            continue
        for statement in facts.stated(turn.text):
            correction = statement.kind == facts.CORRECTION
            body = facts.without_correction_lead(statement.text) if correction else statement.text
            if facts.key(body) in seen:
                continue
            seen.add(facts.key(body))
            words = subject_words(body)
            item: dict[str, Any] = {
                "type": type_of(statement.kind, body),
                "text": body,
                "subject": " ".join(sorted(words)) or body,
                "contradicts": [],
            }
            if correction:
                item["contradicts"] = [
                    fact_id for fact_id, fact_text in known
                    if words & _words(fact_text) and facts.key(fact_text) != facts.key(body)
                ]
            items.append(item)
    answer: dict[str, Any] = {"items": items}
    said = [t.text for t in turns if t.role == "user"]
    if people := [p for text in said for p in people_in(text)]:
        answer["people"] = people
        for item in items:
            named = [p["name"] for p in people if p["name"].split()[0].lower() in item["text"].lower()]
            if named:
                item["people"] = named
    if promises := [c for item in items if (c := promise_of(item["text"]))]:
        answer["commitments"] = promises
    return json.dumps(answer, ensure_ascii=False)


# "my sister Ana Costa", "my colleague Ben": a person the owner names, with the relation (issue #30).
_RELATIVE = re.compile(
    r"\b(?i:my) (?P<relation>sister|brother|mother|father|mum|mom|dad|wife|husband|partner|friend|colleague|boss|son"
    r"|daughter|aunt|uncle|cousin|neighbou?r|doctor)\s+(?P<name>[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?)"
)
_PROMISE = re.compile(r"^(i'll|i’ll|i will|i promise to)\b\s*(?P<what>.+?)[.!]?$", re.I)


def people_in(text: str) -> list[dict[str, Any]]:
    """The people the owner names with a relation ("my sister Ana"), as a model would nominate them."""
    found: dict[str, dict[str, Any]] = {}
    for m in _RELATIVE.finditer(text):
        name = re.sub(r"'s$", "", m.group("name"))
        found.setdefault(name, {"name": name, "relation": m.group("relation").lower()})
    return list(found.values())


def promise_of(statement: str) -> dict[str, Any] | None:
    """"I'll send Ana the photos on Friday." -> the owner's commitment; code reads the due words."""
    m = _PROMISE.match(statement.strip())
    if m is None:
        return None
    return {"by": "owner", "what": m.group("what"), "to": None, "due": None, "due_text": m.group("what")}


def split_turn_input(text: str) -> tuple[list[tuple[str, str]], list[facts.TurnLine]]:
    """The per-turn input: `KNOWN FACTS (id: text):` lines `- id: text`, then `TURN:` lines."""
    head, sep, tail = text.partition("\nTURN:\n")
    if not sep:
        return [], facts.turn_lines(text)
    known = [(m.group("id"), m.group("text")) for line in head.splitlines() if (m := _KNOWN.match(line.strip()))]
    return known, facts.turn_lines(tail)


def type_of(kind: str, sentence: str) -> str:
    if facts.is_adaptation(sentence):
        return "adaptation"
    return kind if kind in (facts.PREFERENCE, facts.COMMITMENT) else "fact"


def subject_words(sentence: str) -> set[str]:
    """What a statement is about: the thing after "my" ("my sister ..."), else its content words."""
    if facts.is_adaptation(sentence) and re.search(r"\b(call me|address me|my name|go by)\b", sentence, re.I):
        return {"call", "name"}
    if found := _MY_THING.search(sentence):
        return {found.group("what").lower()}
    return _words(sentence)


def _words(text: str) -> set[str]:
    words = set(facts.key(text).split()) - _STOP
    if re.search(r"\b(call me|address me|my name|go by)\b", text, re.I):
        words |= {"call", "name"}
    return words
