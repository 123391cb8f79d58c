"""From one turn's nominated people and commitments to ``person.*`` and ``commitment.*`` events.

The model nominated; this code decides who each nominee is (``people.resolve``), what is new
about them, which of the turn's facts are about whom (the item's ``people`` names, or a known
name written in the fact), and whether a commitment is new or one already open said again.
Every event id derives from (the extraction event, the nominee's or commitment's index), so a
replayed or redone reconciliation writes nothing twice.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast
from zoneinfo import ZoneInfo

from delegate.contracts.events import CommitmentBy, CommitmentMade, Payload, PersonAdded, PersonMentioned, PersonUpdated
from delegate.contracts.people import Commitment

from .commitments import promises, same_promise
from .ids import derived_id
from .people import Known, Nominee, additions, name_key, nominees, resolve


def person_id(source_id: str, index: int) -> str:
    return derived_id("person", f"{source_id}:{index}")


def commitment_id(source_id: str, index: int) -> str:
    return derived_id("commitment", f"{source_id}:{index}")


def _event_id(kind: str, source_id: str, index: int) -> str:
    return derived_id(kind, f"{source_id}:{index}")


def _named_in(text: str, person: Known | Nominee, *, first_names: bool = True) -> bool:
    """Whether ``text`` names the person (a whole name or alias, and with ``first_names`` a first
    name too; case and accents aside)."""
    words = f" {name_key(text)} "
    names = [person.name, *person.aliases]
    keys = {name_key(n) for n in names}
    if first_names:
        keys |= {name_key(n).split(" ")[0] for n in names if name_key(n)}
    return any(k and f" {k} " in words for k in keys)


def named_people(text: str, people: Sequence[Known]) -> list[Known]:
    """Who ``text`` names: by a whole name or alias; else by a first name only one of them has."""
    whole = [p for p in people if _named_in(text, p, first_names=False)]
    if whole:
        return whole
    first = [p for p in people if _named_in(text, p)]
    return first if len(first) == 1 else []  # "Ana" with two Anas known: nobody, not both


def item_names(item: Mapping[str, Any]) -> list[str]:
    raw = item.get("people") or []
    return [str(n) for n in (raw if isinstance(raw, list) else [raw]) if isinstance(n, str) and name_key(n)]


def blocked_items(items: Sequence[Mapping[str, Any]], people: Sequence[Known]) -> set[int]:
    """Items about a forgotten person (named by the model, or in the text): never stored again."""
    gone = [p for p in people if p.status == "forgotten"]
    if not gone:
        return set()
    blocked: set[int] = set()
    for index, item in enumerate(items):
        text = str(item.get("text") or "")
        named = item_names(item)
        for person in gone:
            if _named_in(text, person) or any(_named_in(n, person) for n in named):
                blocked.add(index)
    return blocked


@dataclass
class Linked:
    """The events one extraction's people and commitments come to, in order."""

    events: list[tuple[str, Payload]] = field(default_factory=list)

    def add(self, event_id: str, payload: Payload) -> None:
        self.events.append((event_id, payload))


def link(
    *,
    source_id: str,
    raw_people: Sequence[Mapping[str, Any]] | None,
    raw_commitments: Sequence[Mapping[str, Any]] | None,
    items: Sequence[Mapping[str, Any]],
    item_facts: Mapping[int, str],
    turn_ids: list[str],
    said_at: datetime,
    zone: ZoneInfo,
    people: Sequence[Known],
    open_commitments: Sequence[Commitment],
    threshold: float,
) -> Linked:
    out = Linked()
    known = list(people)
    involved: dict[str, Known] = {}  # person id -> person, in order of first involvement
    for index, nominee in enumerate(nominees(raw_people)):
        person = resolve(nominee, known)
        if person is not None and person.status != "active":
            continue  # a forgotten person is never made again
        if person is None:
            person = Known(
                id=person_id(source_id, index), name=nominee.name, aliases=list(nominee.aliases),
                phones=list(nominee.phones), emails=list(nominee.emails), relation=nominee.relation,
                dates=list(nominee.dates),
            )
            known.append(person)
            out.add(_event_id("person.added", source_id, index), PersonAdded(
                person_id=person.id, name=nominee.name, aliases=nominee.aliases, relation=nominee.relation,
                phones=nominee.phones, emails=nominee.emails, dates=nominee.dates, event_ids=turn_ids,
            ))
        elif new := additions(nominee, person):
            out.add(_event_id("person.updated", source_id, index),
                    PersonUpdated(person_id=person.id, event_ids=turn_ids, **new))
            person.aliases += new.get("aliases", [])
            person.phones += new.get("phones", [])
            person.emails += new.get("emails", [])
            person.dates += new.get("dates", [])
            person.relation = person.relation or new.get("relation")
        involved.setdefault(person.id, person)
    active = [p for p in known if p.status == "active"]
    facts_of: dict[str, list[str]] = {pid: [] for pid in involved}
    for index, fact_id in item_facts.items():
        item = items[index]
        text = str(item.get("text") or "")
        in_text = {p.id for p in named_people(text, active)}
        for person in active:
            named = any(resolve(Nominee(n), active) is person for n in item_names(item))
            if named or person.id in in_text:
                facts_of.setdefault(person.id, [])
                involved.setdefault(person.id, person)
                if fact_id not in facts_of[person.id]:
                    facts_of[person.id].append(fact_id)
    for n, (pid, fact_ids) in enumerate(facts_of.items()):
        out.add(_event_id("person.mentioned", source_id, n),
                PersonMentioned(person_id=pid, fact_ids=fact_ids, event_ids=turn_ids))
    still_open = list(open_commitments)
    for promise in promises(raw_commitments, said_at, zone):
        if any(same_promise(promise.what, promise.by, c.what, c.by, threshold) for c in still_open):
            continue  # said again: the open one stands
        to_person = resolve(Nominee(promise.to), active) if promise.to and name_key(promise.to) else None
        if to_person is None:
            to_person = next((p for p in involved.values() if _named_in(promise.what, p)), None)
        cid = commitment_id(source_id, promise.index)
        made = CommitmentMade(
            commitment_id=cid, by=cast(CommitmentBy, promise.by), what=promise.what,
            to=promise.to or (to_person.name if to_person else None),
            person_id=to_person.id if to_person else None, due=promise.due, due_text=promise.due_text,
            event_ids=turn_ids,
        )
        out.add(_event_id("commitment.made", source_id, promise.index), made)
        still_open.append(Commitment(id=cid, by=made.by, what=made.what, state="open", made_at=said_at))
    return out

