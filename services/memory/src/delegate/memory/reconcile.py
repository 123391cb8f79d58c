"""From the model's nominations to fact changes: the rules, in code, never the model's word.

A nominated item is either the same fact stated again (an exact duplicate, or a near one
at ``threshold``) of an active fact, which is then *cited* (its citations grow), or a new
fact. A new fact may supersede the facts the model nominated as contradicted, but only
those the rule accepts: the id is known, the fact is active, and it is not the new fact
itself. Anything else the model named is ignored (and reported, for the log).

A near duplicate of a fact the item itself says it contradicts is a correction, not a
repeat ("I have 3 kids" correcting "I have 2 kids"); an exact one is a repeat whatever the
model says. Items of one batch see each other: the second statement of the same thing in
one turn is a citation of the first, and a fact retired earlier in the batch is retired.
"""

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, get_args

from delegate.contracts.events import FactType

from .dedup import normalize, similarity
from .records import FactRow

FACT_TYPES: frozenset[str] = frozenset(get_args(FactType))
# What older prompts (and other models) call the kinds; anything unknown is a plain fact.
_ALIASES = {"correction": "fact", "decision": "commitment", "promise": "commitment", "style": "adaptation"}
# Not facts at all: a model answer that was not JSON is kept by the inner plane as a "note".
_SKIPPED = frozenset({"note"})
MAX_TEXT = 2000
MAX_SUBJECT = 200
MAX_SUPERSEDES = 20
ACTIVE = "active"
# The time on a batch-local row for a fact added earlier in the batch: never stored or compared.
_UNSTORED = datetime.fromtimestamp(0, UTC)


@dataclass(frozen=True)
class Nomination:
    index: int  # the item's position in the raw list: derived event ids come from it
    type: str
    text: str
    subject: str | None = None
    contradicts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cite:
    index: int
    fact_id: str
    text: str  # the duplicate's own wording
    similarity: float


@dataclass(frozen=True)
class Add:
    index: int
    fact_id: str
    type: str
    text: str
    subject: str | None
    supersedes: tuple[str, ...]
    ignored: tuple[tuple[str, str], ...] = ()  # (nominated id, why it was not retired)


Change = Cite | Add


def fact_type(raw: object) -> str:
    word = str(raw or "fact").strip().lower()
    word = _ALIASES.get(word, word)
    return word if word in FACT_TYPES else "fact"


def nominations(items: Sequence[Mapping[str, Any]]) -> list[Nomination]:
    """The usable items of a model answer, in order; junk (no text, a free-text note) is left out."""
    found: list[Nomination] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type") or item.get("kind")
        if str(kind or "").lower() in _SKIPPED:
            continue
        text = " ".join(str(item.get("text") or "").split())[:MAX_TEXT]
        if not normalize(text):
            continue
        subject = " ".join(str(item.get("subject") or "").split())[:MAX_SUBJECT] or None
        raw = item.get("contradicts") or []
        named = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        contradicts = tuple(dict.fromkeys(str(i).strip() for i in named if str(i).strip()))
        found.append(Nomination(index, fact_type(kind), text, subject, contradicts))
    return found


def reconcile(
    noms: Sequence[Nomination],
    facts: Sequence[FactRow],
    *,
    threshold: float,
    new_fact_id: Callable[[int], str],
) -> list[Change]:
    """What to write for ``noms`` given the facts known now (the candidates and every nominated id
    that exists); ``new_fact_id(index)`` names the fact an item would add."""
    known: dict[str, FactRow] = {f.id: f for f in facts}
    changes: list[Change] = []
    for nom in noms:
        fact_id = new_fact_id(nom.index)
        best, score = _closest(nom, known.values(), threshold)
        if best is not None:
            changes.append(Cite(nom.index, best.id, nom.text, score))
            continue
        accepted: list[str] = []
        ignored: list[tuple[str, str]] = []
        for old_id in nom.contradicts:
            why = _refusal(old_id, known, fact_id)
            if why is None and len(accepted) < MAX_SUPERSEDES:
                accepted.append(old_id)
            else:
                ignored.append((old_id, why or "too_many"))
        add = Add(nom.index, fact_id, nom.type, nom.text, nom.subject, tuple(accepted), tuple(ignored))
        changes.append(add)
        for old_id in accepted:
            known[old_id] = replace(known[old_id], status="superseded")
        known[fact_id] = FactRow(
            id=fact_id, type=nom.type, text=nom.text, status=ACTIVE, valid_at=_UNSTORED,
            invalid_at=None, event_ids=(), subject=nom.subject,
        )
    return changes


def _closest(nom: Nomination, facts: Iterable[FactRow], threshold: float) -> tuple[FactRow | None, float]:
    best: FactRow | None = None
    score = 0.0
    for fact in facts:
        if fact.status != ACTIVE:
            continue
        s = similarity(nom.text, fact.text)
        if s < 1.0 and fact.id in nom.contradicts:
            continue  # near the fact it corrects: a correction, not a repeat
        if s >= threshold and s > score:
            best, score = fact, s
    return best, score


def _refusal(old_id: str, known: Mapping[str, FactRow], new_id: str) -> str | None:
    if old_id == new_id:
        return "self"
    fact = known.get(old_id)
    if fact is None:
        return "unknown"
    if fact.status != ACTIVE:
        return fact.status  # superseded or forgotten: only a current fact is retired
    return None



_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


def parse_extras(answer: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``people`` and ``commitments`` of a per-turn answer (issue #30); none when absent."""
    try:
        data: Any = json.loads(_FENCE.sub("", answer.strip()).strip() or "{}")
    except json.JSONDecodeError:
        return [], []
    if not isinstance(data, dict):
        return [], []

    def entries(key: str) -> list[dict[str, Any]]:
        raw = data.get(key)
        return [e for e in raw if isinstance(e, dict)][:MAX_EXTRAS] if isinstance(raw, list) else []

    return entries("people"), entries("commitments")


MAX_EXTRAS = 20


def parse_answer(answer: str) -> list[dict[str, Any]]:
    """The items of a model answer (``{"items": [...]}``, a bare list, fenced or not); an answer
    that is not JSON holds no items (per-turn extraction keeps nothing it cannot read)."""
    text = _FENCE.sub("", answer.strip()).strip()
    try:
        data: Any = json.loads(text) if text else []
    except json.JSONDecodeError:
        return []
    if isinstance(data, dict):
        data = next((data[k] for k in ("items", "memories", "facts") if isinstance(data.get(k), list)), [data])
    if not isinstance(data, list):
        return []
    items: list[dict[str, Any]] = []
    for entry in data:
        if isinstance(entry, str) and entry.strip():
            items.append({"type": "fact", "text": entry.strip()})
        elif isinstance(entry, dict) and entry.get("text"):
            items.append(entry)
    return items
