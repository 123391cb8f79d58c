"""One vCard (RFC 6350, or a 3.0 card) to the parts a person keeps: the name (FN, else N), the
aliases (NICKNAME, and N when it differs from FN), phones (TEL), emails (EMAIL) and the
birthday (BDAY, ``YYYY-MM-DD`` or ``--MM-DD`` without a year).

Parsed with ``vobject`` (the maintained vCard parser; it is already here as Radicale's own, and
reads the 3.0 and 4.0 cards phones and servers write), not by hand: folded lines, escapes,
parameters and encodings are its job.
"""

import io
import re
from dataclasses import dataclass, field
from typing import Any

import vobject
from vobject.base import getLogicalLines, parseLine
from vobject.icalendar import stringToTextValues

MAX_LIST = 20
MAX_NAME = 200
_BDAY = re.compile(r"^(?:(\d{4})-?|--)(\d{2})-?(\d{2})")


class BadCard(ValueError):
    """Not a vCard we can read (no UID, no name, or not parseable)."""


@dataclass(frozen=True)
class Card:
    uid: str
    name: str
    aliases: list[str] = field(default_factory=list)
    phones: list[str] = field(default_factory=list)
    emails: list[str] = field(default_factory=list)
    dates: list[dict[str, str]] = field(default_factory=list)


def _clean(value: Any, limit: int = MAX_NAME) -> str:
    return " ".join(str(value or "").split())[:limit]


def _values(card: Any, name: str) -> list[Any]:
    return [line.value for line in card.contents.get(name, [])]


def birthday(raw: str) -> str | None:
    """``1990-04-12``, ``19900412``, ``--0412`` or ``--04-12`` (a time after it is ignored)."""
    m = _BDAY.match(raw.strip())
    if not m:
        return None
    year, month, day = m.groups()
    if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31):
        return None
    return f"{year}-{month}-{day}" if year else f"{month}-{day}"


def nicknames(text: str) -> list[str]:
    """NICKNAME is a list ("Nana,Aninha"), but vobject decodes text properties as single values
    (the first item only); its own line reader and list splitter read every item."""
    found: list[str] = []
    try:
        for line, number in getLogicalLines(io.StringIO(text)):
            name, _, value, _ = parseLine(line, number)
            if name.upper() == "NICKNAME":
                found.extend(stringToTextValues(value))
    except Exception:  # readOne already read the card; a line it tolerated is not worth failing on
        return found
    return found


def parse(text: str) -> Card:
    try:
        card = vobject.readOne(text)
    except Exception as exc:  # vobject raises its own ParseError and plain ValueErrors alike
        raise BadCard(f"not a vCard: {exc}") from None
    if card.name.upper() != "VCARD":
        raise BadCard(f"a {card.name}, not a VCARD")
    uid = _clean(next(iter(_values(card, "uid")), ""), 500)
    if not uid:
        raise BadCard("the card has no UID")
    names: list[str] = [_clean(v) for v in _values(card, "fn")]
    for n in _values(card, "n"):
        # vobject's Name: given, additional, family
        whole = _clean(" ".join(p for p in (getattr(n, "given", ""), getattr(n, "additional", ""),
                                              getattr(n, "family", "")) if isinstance(p, str) and p))
        names.append(whole)
    names.extend(_clean(n) for n in nicknames(text))
    names = list(dict.fromkeys(n for n in names if n))
    if not names:
        raise BadCard(f"card {uid[:80]!r} has no name")
    phones = [_clean(v, 40) for v in _values(card, "tel")]
    emails = [_clean(v, 254).lower() for v in _values(card, "email")]
    dates = [{"label": "birthday", "date": d} for v in _values(card, "bday") if (d := birthday(str(v)))]
    return Card(
        uid=uid, name=names[0], aliases=names[1:MAX_LIST + 1],
        phones=list(dict.fromkeys(p for p in phones if p))[:MAX_LIST],
        emails=list(dict.fromkeys(e for e in emails if "@" in e))[:MAX_LIST], dates=dates[:1],
    )
