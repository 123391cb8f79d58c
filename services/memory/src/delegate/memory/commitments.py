"""Commitments the model nominated, read by code: who made it, what, to whom, and when it is due.

The model is shown the owner's local time of the turn and asked for the due date in that
zone (``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM``); code turns it into an instant. A date without a
time is due at ``DUE_HOUR`` local that day (the morning of the day: a nudge on Friday, not at
midnight before it). When the model gives no usable date, the words it quoted are read
forward from the turn ("friday", "tomorrow", "tonight"); otherwise the commitment has no due.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from .dedup import similarity

DUE_HOUR = 9
TONIGHT_HOUR = 20
MAX_WHAT = 2000
_ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2}))?")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


@dataclass(frozen=True)
class Promise:
    index: int
    by: str  # owner or assistant
    what: str
    to: str | None
    due: datetime | None
    due_text: str | None


def _local(day: date, hour: int, minute: int, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, time(hour, minute), zone)


def due_from(raw: object, words: str | None, said_at: datetime, zone: ZoneInfo) -> datetime | None:
    """The due instant (aware, in the owner's zone) of a nominated commitment, or None."""
    if isinstance(raw, str) and (m := _ISO.match(raw.strip())):
        try:
            day = date(int(m[1]), int(m[2]), int(m[3]))
            if m[4] is not None:
                return _local(day, int(m[4]), int(m[5]), zone)
            return _local(day, DUE_HOUR, 0, zone)
        except ValueError:
            pass
    return due_from_words(" ".join(x for x in (raw if isinstance(raw, str) else "", words or "") if x), said_at, zone)


def due_from_words(text: str, said_at: datetime, zone: ZoneInfo) -> datetime | None:
    """"on Friday" (the next Friday, today excluded), "tomorrow", "today", "tonight"."""
    lowered = text.lower()
    today = said_at.astimezone(zone).date()
    if "tonight" in lowered:
        return _local(today, TONIGHT_HOUR, 0, zone)
    if "tomorrow" in lowered:
        return _local(today + timedelta(days=1), DUE_HOUR, 0, zone)
    for n, name in enumerate(WEEKDAYS):
        if re.search(rf"\b{name}\b", lowered):
            ahead = (n - today.weekday()) % 7 or 7
            return _local(today + timedelta(days=ahead), DUE_HOUR, 0, zone)
    if "today" in lowered:
        return _local(today, max(said_at.astimezone(zone).hour + 1, DUE_HOUR), 0, zone)
    return None


def promises(raw: Sequence[Mapping[str, Any]] | None, said_at: datetime, zone: ZoneInfo) -> list[Promise]:
    """The usable commitments of a model answer, in order (index: the position in the raw list)."""
    found: list[Promise] = []
    for index, entry in enumerate(raw or []):
        if not isinstance(entry, Mapping):
            continue
        what = " ".join(str(entry.get("what") or entry.get("text") or "").split())[:MAX_WHAT]
        if not what:
            continue
        by = str(entry.get("by") or "owner").strip().lower()
        by = "assistant" if by in ("assistant", "delegate", "ai", "me") else "owner"
        to = " ".join(str(entry.get("to") or "").split())[:200] or None
        words = " ".join(str(entry.get("due_text") or "").split())[:200] or None
        due = due_from(entry.get("due"), words, said_at, zone)
        found.append(Promise(index, by, what, to, due, words))
    return found


def same_promise(a_what: str, a_by: str, b_what: str, b_by: str, threshold: float) -> bool:
    """The same promise said again (an open one is not made twice)."""
    return a_by == b_by and similarity(a_what, b_what) >= threshold
