"""Time expressions in a question ("last May", "in 2023", "yesterday", "on 8 May"), read
relative to ``now`` into the windows whose items search boosts."""

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

MONTHS = {
    name: number
    for number, names in enumerate(
        (("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
         ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"),
         ("november", "nov"), ("december", "dec")),
        start=1,
    )
    for name in names
}
WEEKDAYS = {
    name: n for n, name in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))
}
# Month words that are also ordinary words: only a month when written with a capital or led
# by a time word ("in may", "last march").
AMBIGUOUS = frozenset({"may", "march", "mar", "jan", "jun", "sep", "oct", "dec", "aug", "nov"})
UNITS = {"day": 1, "days": 1, "week": 7, "weeks": 7, "month": 30, "months": 30, "year": 365, "years": 365}

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]?\d)-(?P<day>[0-3]?\d)\b")),
    ("day_month", re.compile(rf"\b{_DAY}(?: of)? {_MONTH}(?:,? {_YEAR})?\b", re.I)),
    ("month_day", re.compile(rf"\b{_MONTH} {_DAY}(?!\d)(?:,? {_YEAR})?\b", re.I)),
    ("relative_month",
     re.compile(rf"\b(?P<lead>last|this|in|during|since|of|early|late|mid) {_MONTH}(?: {_YEAR})?\b", re.I)),
    ("month_year", re.compile(rf"\b{_MONTH},? {_YEAR}\b", re.I)),
    ("bare_month", re.compile(rf"\b{_MONTH}\b", re.I)),
    ("year", re.compile(rf"\b(?:in|during|of|since|from)? ?{_YEAR}\b", re.I)),
    ("ago", re.compile(
        r"\b(?P<n>\d+|a|an|one|two|three|four|five|six) (?P<unit>days?|weeks?|months?|years?) ago\b", re.I)),
    ("named", re.compile(r"\b(?P<name>yesterday|today|tonight|last night|this morning|"
                         r"(?:last|this|past) (?:week|month|year|weekend))\b", re.I)),
    ("weekday", re.compile(r"\b(?:(?P<lead>last|on|this) )?(?P<weekday>" + "|".join(WEEKDAYS) + r")\b", re.I)),
]
SMALL = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


@dataclass(frozen=True)
class Window:
    start: datetime  # inclusive
    end: datetime  # exclusive
    label: str  # for ``why``: "time:2023-05"

    def contains(self, ts: datetime) -> bool:
        return self.start <= ts < self.end


def _day_start(d: date) -> datetime:
    return datetime.combine(d, time.min, UTC)


def _days(first: date, count: int, label: str) -> Window:
    return Window(_day_start(first), _day_start(first + timedelta(days=count)), label)


def _month(year: int, month: int) -> Window:
    end = date(year + (month == 12), month % 12 + 1, 1)
    return Window(_day_start(date(year, month, 1)), _day_start(end), f"time:{year:04d}-{month:02d}")


def _year(year: int) -> Window:
    return Window(_day_start(date(year, 1, 1)), _day_start(date(year + 1, 1, 1)), f"time:{year:04d}")


def _latest_month(month: int, today: date, *, strictly_before: bool) -> int:
    """The year of the most recent ``month`` (not the current one when ``strictly_before``)."""
    if month < today.month or (month == today.month and not strictly_before):
        return today.year
    return today.year - 1


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _is_month(word: str, lead: str | None) -> bool:
    return word.lower() not in AMBIGUOUS or word[0].isupper() or lead is not None


def windows(text: str, now: datetime) -> list[Window]:
    """Every time window the text names, read relative to ``now`` (UTC)."""
    today = now.astimezone(UTC).date()
    found: list[Window] = []
    taken: list[tuple[int, int]] = []  # character spans already read, so "8 May 2023" is one window
    for kind, pattern in PATTERNS:
        for m in pattern.finditer(text):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            window = _read(kind, m, today)
            if window is not None:
                found.append(window)
                taken.append(m.span())
    return found


def _read(kind: str, m: re.Match[str], today: date) -> Window | None:  # one case per pattern
    g = m.groupdict()
    if kind == "iso":
        d = _safe_date(int(g["year"]), int(g["month"]), int(g["day"]))
        return _days(d, 1, f"time:{d.isoformat()}") if d else None
    if kind in ("day_month", "month_day"):
        month = MONTHS[g["month"].lower()]
        if not _is_month(g["month"], "on"):
            return None
        year = int(g["year"]) if g.get("year") else _latest_month(month, today, strictly_before=False)
        d = _safe_date(year, month, int(g["day"]))
        if d and not g.get("year") and d > today:
            d = _safe_date(year - 1, month, int(g["day"]))
        return _days(d, 1, f"time:{d.isoformat()}") if d else None
    if kind in ("relative_month", "month_year", "bare_month"):
        lead = (g.get("lead") or "").lower() or None
        if not _is_month(g["month"], lead if kind != "bare_month" else None):
            return None
        month = MONTHS[g["month"].lower()]
        if g.get("year"):
            return _month(int(g["year"]), month)
        if lead == "this":
            return _month(today.year, month)
        return _month(_latest_month(month, today, strictly_before=lead == "last"), month)
    if kind == "year":
        return _year(int(g["year"]))
    if kind == "ago":
        n = SMALL.get(g["n"].lower()) or int(g["n"])
        span = UNITS[g["unit"].lower()]
        centre = today - timedelta(days=n * span)
        # "three weeks ago" is about then, give or take half a unit
        half = max(1, span // 2)
        return _days(centre - timedelta(days=half), 2 * half + 1, f"time:{centre.isoformat()}~")
    if kind == "named":
        return _named(g["name"].lower(), today)
    if kind == "weekday":
        target = WEEKDAYS[g["weekday"].lower()]
        back = (today.weekday() - target) % 7 or (7 if (g.get("lead") or "").lower() == "last" else 0)
        d = today - timedelta(days=back)
        return _days(d, 1, f"time:{d.isoformat()}")
    return None


def _named(name: str, today: date) -> Window | None:
    if name in ("today", "tonight", "this morning"):
        return _days(today, 1, "time:today")
    if name in ("yesterday", "last night"):
        return _days(today - timedelta(days=1), 1, "time:yesterday")
    which, unit = name.split()
    monday = today - timedelta(days=today.weekday())
    if unit == "week":
        if which == "this":
            return _days(monday, 7, "time:this-week")
        if which == "past":
            return _days(today - timedelta(days=7), 8, "time:past-week")
        return _days(monday - timedelta(days=7), 7, "time:last-week")
    if unit == "weekend":
        saturday = monday + timedelta(days=5)
        if saturday > today or which == "last":
            saturday -= timedelta(days=7)
        return _days(saturday, 2, f"time:weekend-{saturday.isoformat()}")
    if unit == "month":
        if which == "this":
            return _month(today.year, today.month)
        if which == "past":
            return _days(today - timedelta(days=30), 31, "time:past-month")
        last = today.replace(day=1) - timedelta(days=1)
        return _month(last.year, last.month)
    if which == "this":
        return _year(today.year)
    if which == "past":
        return _days(today - timedelta(days=365), 366, "time:past-year")
    return _year(today.year - 1)
