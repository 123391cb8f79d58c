"""People the model nominated, read and resolved to who they are: the model nominates, code links.

Identity is resolved by exact matches only, in this order: a phone number (digits, a leading
``+`` kept), an email address (case-insensitive), then a name or alias (case, accents and
punctuation aside; a single-word name also matches a known person's first name when exactly
one person has it). Never by similarity: two people called "Ana" told apart by a surname stay
two people, and a wrong merge is worse than a duplicate the owner can merge by an edit.
"""

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_NAME = 200
MAX_LIST = 20
_DATE = re.compile(r"^(?:(?P<year>\d{4})-)?(?P<month>\d{2})-(?P<day>\d{2})$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def name_key(name: str) -> str:
    """``"Ana  Costa!"`` and ``"ana costa"`` are one key."""
    text = unicodedata.normalize("NFKD", name)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return " ".join(re.sub(r"[\W_]+", " ", text.lower()).split())


def phone_key(phone: str) -> str:
    digits = re.sub(r"\D", "", phone)
    return ("+" if phone.strip().startswith("+") else "") + digits if len(digits) >= 5 else ""


def email_key(email: str) -> str:
    text = email.strip().lower()
    return text if _EMAIL.match(text) else ""


def date_ok(value: str) -> bool:
    m = _DATE.match(value)
    return bool(m) and 1 <= int(m["month"]) <= 12 and 1 <= int(m["day"]) <= 31  # type: ignore[index]


@dataclass
class Nominee:
    """One nominated person, cleaned: what the turn says about them."""

    name: str
    aliases: list[str] = field(default_factory=list)
    relation: str | None = None
    phones: list[str] = field(default_factory=list)
    emails: list[str] = field(default_factory=list)
    dates: list[dict[str, str]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [self.name, *self.aliases]


@dataclass
class Known:
    """A person the index holds (active or forgotten: a forgotten one is never made again)."""

    id: str
    name: str
    aliases: list[str]
    phones: list[str]
    emails: list[str]
    status: str = "active"
    relation: str | None = None
    dates: list[dict[str, str]] = field(default_factory=list)


def _strings(raw: object, limit: int = MAX_LIST) -> list[str]:
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    out = [" ".join(str(v).split())[:MAX_NAME] for v in values if isinstance(v, str | int)]
    return list(dict.fromkeys(v for v in out if v))[:limit]


def nominees(raw: Sequence[Mapping[str, Any]] | None) -> list[Nominee]:
    """The usable people of a model answer; one without a name is left out."""
    found: list[Nominee] = []
    for entry in raw or []:
        if not isinstance(entry, Mapping):
            continue
        name = " ".join(str(entry.get("name") or "").split())[:MAX_NAME]
        if not name_key(name):
            continue
        aliases = [a for a in _strings(entry.get("aliases")) if name_key(a) and name_key(a) != name_key(name)]
        phones = [p for p in _strings(entry.get("phones") or entry.get("phone")) if phone_key(p)]
        emails = [e.strip().lower() for e in _strings(entry.get("emails") or entry.get("email")) if email_key(e)]
        dates: list[dict[str, str]] = []
        for d in entry.get("dates") or []:
            if isinstance(d, Mapping) and date_ok(str(d.get("date") or "")):
                label = " ".join(str(d.get("label") or "date").split())[:100] or "date"
                dates.append({"label": label, "date": str(d["date"])})
        relation = " ".join(str(entry.get("relation") or "").split())[:MAX_NAME] or None
        found.append(Nominee(name, aliases, relation, phones, emails, dates[:MAX_LIST]))
    return found


def resolve(nominee: Nominee, people: Iterable[Known]) -> Known | None:
    """The known person this nominee is, by phone, email, then name or alias; None: someone new."""
    people = list(people)
    phones = {phone_key(p) for p in nominee.phones} - {""}
    emails = {email_key(e) for e in nominee.emails} - {""}
    for person in people:
        if phones & {phone_key(p) for p in person.phones}:
            return person
    for person in people:
        if emails & {email_key(e) for e in person.emails}:
            return person
    keys = {name_key(n) for n in nominee.names()} - {""}
    for person in people:
        if keys & {name_key(n) for n in [person.name, *person.aliases]}:
            return person
    # "Ana" for the one known "Ana Costa": a first name alone, when it names exactly one person
    singles = {k for k in keys if " " not in k}
    if singles:
        matches = [p for p in people if singles & {name_key(n).split(" ")[0] for n in [p.name, *p.aliases]}]
        if len(matches) == 1:
            return matches[0]
    return None


def additions(nominee: Nominee, person: Known) -> dict[str, Any]:
    """What the nominee says that the known person lacks (empty: nothing new)."""
    have = {name_key(n) for n in [person.name, *person.aliases]}
    new: dict[str, Any] = {}
    aliases = [n for n in nominee.names() if name_key(n) not in have]
    if aliases:
        new["aliases"] = list(dict.fromkeys(aliases))
    phones = [p for p in nominee.phones if phone_key(p) not in {phone_key(x) for x in person.phones}]
    if phones:
        new["phones"] = phones
    emails = [e for e in nominee.emails if email_key(e) not in {email_key(x) for x in person.emails}]
    if emails:
        new["emails"] = emails
    dates = [d for d in nominee.dates if (d["label"], d["date"]) not in {(x["label"], x["date"]) for x in person.dates}]
    if dates:
        new["dates"] = dates
    if nominee.relation and not person.relation:
        new["relation"] = nominee.relation
    return new
