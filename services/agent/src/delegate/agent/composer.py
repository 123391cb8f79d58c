"""The Context Composer: how a claimed batch of signals is put before the model.

The signals are inner context, never the owner's words, so they travel as one developer-role
input item (never role "user"): each signal rendered readably by kind, then what an activation
is, where an answer would go, and how to say nothing (the ``nothing_to_do`` tool). Signals the
contracts cannot decode (raised before signals were typed, or by a newer producer) are still
shown, as their JSON, rather than hidden from the model.
"""

import json
import logging
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from delegate.contracts.messages import ActivationInput
from delegate.contracts.signals import (
    SIGNAL_ADAPTER,
    AnySignal,
    CommitmentDueSignal,
    EmailReceived,
    MemoryRelevant,
    PersonDateSignal,
    PersonDatesSignal,
    ReminderDue,
    ScriptSignal,
    TaskFailed,
    TaskFinished,
)

from .silence import NOTHING_TO_DO

log = logging.getLogger(__name__)

MAX_SIGNAL_CHARS = 4000  # of one undecodable signal's JSON
MAX_DATA_CHARS = 2000  # of a script signal's data
MAX_TITLE = 80

# What the model is told about where its answer goes, by route (activation_reply.Route.via).
ROUTE_NOTES = {
    None: "If you answer, the answer is shown in the owner's timeline (the chat they use last).",
    "sms": "If you answer, the answer is sent to the owner's phone as an SMS: plain text, short, no Markdown.",
    "email": "If you answer, the answer is sent to the owner as the body of an email (no subject line).",
    "call": (
        "If you answer, the owner is phoned and a voice assistant tells them your answer: write one or "
        "two plain sentences saying why you are calling."
    ),
}

ACTIVATION_NOTE = (
    "Nobody wrote to you: you were woken by the signals above (inner activity, not the owner's words). "
    "Decide whether anything needs doing or saying now; act with your tools if something needs doing. "
    "{route} If nothing needs saying (already handled, no longer relevant, not worth an interruption), "
    f"call the {NOTHING_TO_DO} tool with a short reason instead of answering: then nothing is sent."
)


def owner_zone(name: str) -> ZoneInfo:
    """The owner's timezone, or UTC when the name is not a known IANA zone (logged)."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("OWNER_TIMEZONE=%r is not a known timezone; showing times in UTC", name)
        return ZoneInfo("UTC")


def decode(raw: dict[str, Any]) -> AnySignal | None:
    try:
        return SIGNAL_ADAPTER.validate_python(raw)
    except ValidationError:
        return None


def duration(seconds: float) -> str:
    """``45 s``, ``3 min``, ``2 h 5 min``, ``3 d 4 h``: how late, at a glance."""
    total = round(seconds)
    if total < 60:
        return f"{total} s"
    minutes, hours, days = total // 60, total // 3600, total // 86400
    if hours == 0:
        return f"{minutes} min"
    if days == 0:
        rest = minutes - hours * 60
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    rest = hours - days * 24
    return f"{days} d {rest} h" if rest else f"{days} d"


def local_time(when: datetime, zone: ZoneInfo) -> str:
    return when.astimezone(zone).strftime(f"%a %d %b %Y %H:%M ({zone.key})")


def render_signal(signal: AnySignal, zone: ZoneInfo) -> str:
    """One signal as a readable line or two."""
    if isinstance(signal, ReminderDue):
        r = signal.payload
        line = f"Reminder{' (recurring)' if r.recurring else ''}: {r.text} — due {local_time(r.due_at, zone)}"
        if r.late_by_s > r.grace_s:
            line += f", late by {duration(r.late_by_s)}"
    elif isinstance(signal, EmailReceived):
        e = signal.payload
        line = f"Email from {e.sender}, subject “{e.subject or '(no subject)'}”"
        if e.preview:
            line += f"\n   {_indent(e.preview)}"
    elif isinstance(signal, TaskFinished):
        done = signal.payload
        line = f"Task finished: {done.goal or done.task_id}"
        if done.summary:
            line += f"\n   Result: {_indent(done.summary)}"
    elif isinstance(signal, TaskFailed):
        failed = signal.payload
        line = f"Task failed: {failed.goal or failed.task_id}"
        if failed.error:
            line += f"\n   Error: {_indent(failed.error)}"
    elif isinstance(signal, MemoryRelevant):
        line = f"From memory: {signal.payload.text}"
    elif isinstance(signal, ScriptSignal):
        line = f"From the owner's script ({signal.source}): {signal.payload.text}"
        if signal.payload.data:
            line += "\n   Data: " + json.dumps(signal.payload.data, ensure_ascii=False, default=str)[:MAX_DATA_CHARS]
    elif isinstance(signal, CommitmentDueSignal):
        line = _commitment_due(signal, zone)
    elif isinstance(signal, PersonDateSignal):
        d = signal.payload
        line = (f"Learned {d.name}'s {d.label}: {d.date}. Offer the owner a yearly reminder for it; set one "
                "(set_reminder) only when they say yes.")
    elif isinstance(signal, PersonDatesSignal):
        line = _imported_dates(signal)
    else:  # a kind added to the contracts but not rendered here yet
        payload = json.dumps(signal.payload.model_dump(mode="json"), ensure_ascii=False)
        line = f"{signal.kind}: {payload[:MAX_SIGNAL_CHARS]}"
    marks = [m for m in ("urgent" if signal.urgency == "urgent" else "",
                         f"reply by {signal.reply_via}" if signal.reply_via else "") if m]
    return f"{line} [{', '.join(marks)}]" if marks else line


def _commitment_due(signal: CommitmentDueSignal, zone: ZoneInfo) -> str:
    c = signal.payload
    to = f" to {c.to}" if c.to else ""
    when = f"due {local_time(c.due, zone)}" + (f" (“{c.due_text}”)" if c.due_text else "")
    if c.by == "assistant":
        # Delegate's own promise is work: this activation does it, or says why it cannot.
        return (f"Your own commitment{to} is {when}: {c.what} (id {c.commitment_id}). Do it now with your tools, "
                "tell the owner the result, and mark it kept with commitment_update; if you cannot, tell the "
                "owner why and what you need.")
    return (f"The owner's commitment{to} is {when}: {c.what} (id {c.commitment_id}). Nudge the owner about it, "
            "briefly; when they say it is done or off, use commitment_update.")


def _imported_dates(signal: PersonDatesSignal) -> str:
    d = signal.payload
    named = "; ".join(f"{x.name}: {x.label} {x.date}" for x in d.dates)
    more = f" (and {d.count - len(d.dates)} more not listed)" if d.count > len(d.dates) else ""
    # one question for the whole import: an address book must not ask once per person
    return (f"The owner's address book brought {d.count} key date(s) never offered as reminders: {named}{more}. "
            "In one short message, say how many came in and ask whether to set yearly reminders for them: all, "
            "or the ones they name. Set none now; only after their yes, set one yearly reminder per person with "
            "set_reminder.")


def batch(activation: ActivationInput) -> list[dict[str, Any]]:
    """The claimed signals as raised; only their ids when the producer attached no details."""
    return activation.signals or [{"id": sid} for sid in activation.signal_ids]


def render_batch(activation: ActivationInput, zone: ZoneInfo) -> list[str]:
    lines: list[str] = []
    for raw in batch(activation):
        signal = decode(raw)
        if signal is not None:
            lines.append(render_signal(signal, zone))
        else:
            lines.append("Signal: " + json.dumps(raw, ensure_ascii=False, default=str)[:MAX_SIGNAL_CHARS])
    return lines or ["(no details were attached)"]


def activation_item(activation: ActivationInput, *, route: str | None, zone: ZoneInfo) -> dict[str, Any]:
    """The developer-role input item of one activation: the signals and what to do with them."""
    lines = ["[inner activity] You were woken by these signals:"]
    lines += [f"{n}. {text}" for n, text in enumerate(render_batch(activation, zone), 1)]
    lines += ["", ACTIVATION_NOTE.format(route=ROUTE_NOTES.get(route, ROUTE_NOTES[None]))]
    return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "\n".join(lines)}]}


def signals_query(activation: ActivationInput, zone: ZoneInfo) -> str:
    """What memory is searched for before an activation's request: the signals' own text."""
    return "\n".join(render_batch(activation, zone))


def batch_title(activation: ActivationInput) -> str:
    """A subject line for an activation's email that is not a reply on a thread."""
    signals = [s for s in (decode(raw) for raw in batch(activation)) if s is not None]
    if len(signals) != 1:
        return "Updates from your assistant" if signals else "A note from your assistant"
    signal = signals[0]
    if isinstance(signal, ReminderDue):
        title = f"Reminder: {signal.payload.text}"
    elif isinstance(signal, EmailReceived):
        title = f"About: {signal.payload.subject or signal.payload.sender}"
    elif isinstance(signal, TaskFinished):
        title = f"Task finished: {signal.payload.goal or signal.payload.task_id}"
    elif isinstance(signal, TaskFailed):
        title = f"Task failed: {signal.payload.goal or signal.payload.task_id}"
    elif isinstance(signal, ScriptSignal | MemoryRelevant):
        title = signal.payload.text
    elif isinstance(signal, PersonDatesSignal):
        title = "Birthdays from your contacts"
    else:
        title = "A note from your assistant"
    title = " ".join(title.split())
    return title if len(title) <= MAX_TITLE else title[: MAX_TITLE - 1] + "…"


def fallback_text(activation: ActivationInput, zone: ZoneInfo) -> str:
    """What reaches the owner when the model could not answer: the signals themselves.

    A reminder must not vanish because the model was down when it fired.
    """
    return "\n".join(render_batch(activation, zone))


def _indent(text: str) -> str:
    return text.strip().replace("\n", "\n   ")
