"""What the offline demo recognises in the user's words: "note that …" and
"remind me to … in/at …", and the function tools on offer that can do them.

Only tools the request offers are called, with arguments built from the tool's own
JSON schema: known property names get the user's words, a computed time or a count
of minutes; other required properties get the smallest value that fits."""

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from delegate.openai_standin.clip import shorten
from delegate.openai_standin.schema_fill import fill

# "please", "can you", "ok," ... in front of the request itself.
_LEAD = r"^\s*(?:(?:ok(?:ay)?|hey|hi|hello|so|and|also|please|pls|can you|could you|would you|will you)[\s,]+)*"
_NOTE = re.compile(
    _LEAD + r"(?:(?:take|make|save|add|write|create|keep)\s+(?:me\s+)?(?:a\s+)?note(?:\s+(?:that|of|about))?"
    r"|note(?:\s+that|\s+down(?:\s+that)?|\s*:)"
    r"|(?:please\s+)?remember(?:\s+that|\s*:)"
    r"|(?:write|jot)\s+down(?:\s+that)?)"
    r"\s*[:,\-–—]?\s*(?P<what>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_REMIND = re.compile(
    _LEAD + r"(?:set\s+(?:me\s+)?(?:a\s+)?reminder(?:\s+(?:to|for|that|about))?"
    # "remind me to …", or "remind me in 10 minutes to …"; not "remind me what we said".
    r"|remind\s+me(?:\s+(?:to|about|that|of)\b|(?=\s+(?:in|at|on|tomorrow|tonight|this|next)\b)))"
    r"\s*[:,\-–—]?\s*(?P<what>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_YES = re.compile(
    r"^\s*(?:yes|yeah|yep|yup|sure|ok(?:ay)?|please|please do|do it|go ahead|yes,? please|sounds good)"
    r"(?:[\s,]+(?:please|thanks|thank you|do it|save it))*[\s.!]*$",
    re.IGNORECASE,
)

_MARKER = re.compile(r"^\s*\[[^\]\n]*·[^\]\n]*\]\s*")
_UNITS = {"min": 1, "minute": 1, "hour": 60, "hr": 60, "h": 60, "day": 24 * 60, "week": 7 * 24 * 60}
_IN = re.compile(r"\bin\s+(?P<n>\d{1,4}|an?|one)\s*(?P<unit>min(?:ute)?s?|hours?|hrs?|h|days?|weeks?)\b", re.I)
_AT = re.compile(r"\bat\s+(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?(?=\W|$)", re.I)
_DAY = re.compile(r"\b(?P<day>tomorrow|tonight|this evening|this afternoon|this morning)\b", re.I)

# Property names the demo knows how to fill, by what they hold.
TEXT_NAMES = ("text", "body", "content", "note", "message", "what", "task", "description", "details", "reminder")
TITLE_NAMES = ("title", "name", "subject", "summary")
TIME_NAMES = (
    "at",
    "when",
    "time",
    "due",
    "due_at",
    "fire_at",
    "remind_at",
    "datetime",
    "scheduled_for",
    "run_at",
    "start",
    "starts_at",
    "trigger_at",
)
MINUTE_NAMES = ("in_minutes", "delay_minutes", "minutes", "after_minutes")
TITLE_CHARS = 80
NOTE, REMINDER = "note", "remind"
_VERBS = {
    NOTE: ("create", "add", "save", "take", "new", "write"),
    REMINDER: ("create", "add", "set", "schedule", "new"),
}


@dataclass(frozen=True)
class Reminder:
    task: str  # what to be reminded of, the time words taken out
    when: str  # the time words as said ("in 10 minutes"), or ""
    due: datetime | None  # when that is, if the words say


def note_request(text: str) -> str | None:
    """What to note, if the user asks for a note to be taken."""
    found = _NOTE.match(_unmark(text))
    return _clean(found.group("what")) if found else None


def reminder_request(text: str, now: datetime | None = None) -> Reminder | None:
    found = _REMIND.match(_unmark(text))
    if not found or not (what := _clean(found.group("what"))):
        return None
    now = now or datetime.now(UTC)
    due: datetime | None = None
    spans: list[re.Match[str]] = []
    if m := _IN.search(what):
        count = 1 if m.group("n").lower() in ("a", "an", "one") else int(m.group("n"))
        unit = m.group("unit").lower().rstrip("s")
        due = now + timedelta(minutes=count * _UNITS.get(unit, _UNITS.get(unit[:3], 1)))
        spans.append(m)
    if m := _AT.search(what):
        due = _clock(now, m, _DAY.search(what))
        spans.append(m)
    if m := _DAY.search(what):
        if due is None:
            day = m.group("day").lower()
            hour = {"tonight": 20, "this evening": 19, "this afternoon": 15, "this morning": 9}.get(day, 9)
            due = now.replace(hour=hour, minute=0, second=0, microsecond=0)
            if day == "tomorrow" or due <= now:
                due += timedelta(days=1)
        spans.append(m)
    when = " ".join(m.group(0) for m in sorted(spans, key=lambda m: m.start()))
    task = what
    for m in sorted(spans, key=lambda m: m.start(), reverse=True):
        task = task[: m.start()] + task[m.end() :]
    task = re.sub(r"^(?:to|about|that)\s+", "", _clean(task), flags=re.IGNORECASE)  # "in 10 minutes to …"
    return Reminder(task=task or what, when=when, due=due)


def is_yes(text: str) -> bool:
    return bool(_YES.match(_unmark(text)))


def creates(name: str, topic: str) -> bool:
    """Whether a function named `name` creates a `topic` ("note", "remind"): `notes_create`."""
    lowered = name.lower()
    return topic in lowered and any(verb in lowered for verb in _VERBS[topic])


def find_tool(
    tools: list[dict[str, Any]], topic: str, tool_choice: object = "auto", max_tool_calls: object = None
) -> dict[str, Any] | None:
    """The offered function tool that creates a `topic`, if the request lets the model call it."""
    if tool_choice == "none" or max_tool_calls == 0:
        return None
    allowed: set[str] | None = None
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "allowed_tools":
        allowed = {str(t.get("name")) for t in tool_choice.get("tools", []) if isinstance(t, dict)}
    for tool in tools:
        name = str(tool.get("name", ""))
        if tool.get("type") == "function" and creates(name, topic) and (allowed is None or name in allowed):
            return tool
    return None


def note_arguments(tool: dict[str, Any], what: str) -> str:
    return _arguments(tool, text=what, title=_title(what, tool), due=None)


def reminder_arguments(tool: dict[str, Any], reminder: Reminder) -> str:
    return _arguments(tool, text=reminder.task, title=_title(reminder.task, tool), due=reminder.due)


def _arguments(tool: dict[str, Any], *, text: str, title: str, due: datetime | None) -> str:
    schema = tool.get("parameters") or {"type": "object"}
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    arguments: dict[str, Any] = {}
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        key = name.lower()
        value: Any = None
        if key in TITLE_NAMES:
            value = title
        elif key in TEXT_NAMES:
            value = text
        elif key in TIME_NAMES and due is not None:
            value = due.strftime("%Y-%m-%dT%H:%M:%SZ") if spec.get("type", "string") == "string" else None
        elif key in MINUTE_NAMES and due is not None and spec.get("type") in ("integer", "number"):
            value = max(1, round((due - datetime.now(UTC)).total_seconds() / 60))
        if isinstance(value, str):
            value = _fit_string(value, spec)
        if value is None and name in required:
            value = fill(spec, text)
        if value is not None:
            arguments[name] = value
    return json.dumps(arguments, ensure_ascii=False)


def note_title(text: str, limit: int = TITLE_CHARS) -> str:
    """The first sentence, capitalised, within `limit` characters (cut between words)."""
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".")
    return shorten(first[:1].upper() + first[1:], limit, markdown=False)


def _title(text: str, tool: dict[str, Any]) -> str:
    spec = ((tool.get("parameters") or {}).get("properties") or {}).get("title") or {}
    limit = spec.get("maxLength", TITLE_CHARS) if isinstance(spec, dict) else TITLE_CHARS
    return note_title(text, min(TITLE_CHARS, limit) if isinstance(limit, int) else TITLE_CHARS)


def _fit_string(value: str, spec: dict[str, Any]) -> str | None:
    if isinstance(limit := spec.get("maxLength"), int):
        value = shorten(value, limit, markdown=False) or value[:limit]
    if isinstance(least := spec.get("minLength"), int) and len(value) < least:
        return None  # leave it to `fill` (if required) rather than send what the schema refuses
    return value


def _clock(now: datetime, m: re.Match[str], day: re.Match[str] | None) -> datetime:
    hour, minute = int(m.group("h")) % 24, int(m.group("m") or 0) % 60
    ampm = (m.group("ampm") or "").lower().replace(".", "")
    if ampm == "pm" and hour < 12:
        hour += 12
    elif ampm == "am" and hour == 12:
        hour = 0
    due = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if (day is not None and day.group("day").lower() == "tomorrow") or due <= now:
        due += timedelta(days=1)
    return due


def _unmark(text: str) -> str:
    """Without the "[text chat · 2026-05-01 14:03 UTC]" marker a fresh working context puts
    in front of earlier turns."""
    return _MARKER.sub("", text, count=1)


def _clean(text: str) -> str:
    return " ".join(text.split()).strip(" ,;:-–—").rstrip(".!")
