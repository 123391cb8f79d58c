"""Reminders as the committed ledger says they are: every change is a ``reminder.*`` event.

``apply`` folds one committed event into the reminders map (kept in the inner plane's state
file), in seq order, and is idempotent: the follower may apply an event twice after a partial
failure. ``reminder.set`` / ``reminder.changed`` define a revision and its first occurrence,
``reminder.cancelled`` ends it, and a committed ``inner.signal`` of kind ``reminder.due`` is a
fire that happened: the reminder moves on to its next occurrence, or is done.
"""

import logging
from datetime import datetime

from pydantic import ValidationError

from delegate.contracts.events import Event, InnerSignal, ReminderCancelled, ReminderChanged, ReminderDefined
from delegate.contracts.reminders import Reminder, ReminderSpec
from delegate.contracts.signals import ReminderDuePayload

from .recurrence import BadSchedule, first_due, next_due

log = logging.getLogger(__name__)

DUE_KIND = "reminder.due"
KINDS = frozenset({ReminderDefined.KIND, ReminderChanged.KIND, ReminderCancelled.KIND})


def defined(reminder_id: str, revision: int, spec: ReminderSpec, at: datetime, created_at: datetime) -> Reminder:
    """A revision as it stands right after its event at ``at``: active, waiting for its first occurrence."""
    due = _first(spec, at)
    return Reminder(
        id=reminder_id, spec=spec, revision=revision, status="active" if due is not None else "done",
        next_due=due, created_at=created_at,
    )


def apply(reminders: dict[str, Reminder], event: Event) -> str | None:
    """Fold ``event`` in; returns the id of the reminder it changed (None: not ours, or no change)."""
    if (body := event.payload_as(ReminderDefined) or event.payload_as(ReminderChanged)) is not None:
        old = reminders.get(body.reminder_id)
        if old is not None and old.revision >= body.revision:
            return None  # applied already
        spec = ReminderSpec.model_validate(body.spec)
        created = old.created_at if old is not None else event.ts
        new = defined(body.reminder_id, body.revision, spec, event.ts, created)
        if old is not None:
            new = new.model_copy(update={"fired": old.fired, "last_fired_at": old.last_fired_at})
        reminders[body.reminder_id] = new
        return new.id
    if (cancelled := event.payload_as(ReminderCancelled)) is not None:
        old = reminders.get(cancelled.reminder_id)
        if old is None or old.status == "cancelled":
            return None
        reminders[old.id] = old.model_copy(update={"status": "cancelled", "next_due": None})
        return old.id
    if (signal := event.payload_as(InnerSignal)) is not None:
        return _fired(reminders, event, signal)
    return None


def _fired(reminders: dict[str, Reminder], event: Event, signal: InnerSignal) -> str | None:
    if signal.signal_kind != DUE_KIND:
        return None
    try:
        due = ReminderDuePayload.model_validate(signal.signal.get("payload", {}))
    except ValidationError as exc:
        log.warning("reminder.due signal %s has an unreadable payload: %s", event.id, exc)
        return None
    old = reminders.get(due.reminder_id)
    if old is None or (old.last_fired_at is not None and due.due_at <= old.last_fired_at):
        return None  # someone else's reminder, or applied already
    update: dict[str, object] = {"fired": old.fired + 1, "last_fired_at": due.due_at}
    # Only the pending occurrence moves the reminder on: a fire claimed for a revision that a
    # change replaced meanwhile must not skip the new revision's first occurrence.
    if old.status == "active" and old.next_due == due.due_at:
        following = _next(old.spec, due.due_at)
        update["next_due"] = following
        if following is None:
            update["status"] = "done"
    reminders[old.id] = old.model_copy(update=update)
    return old.id


def _first(spec: ReminderSpec, at: datetime) -> datetime | None:
    try:
        return first_due(spec, since=at)
    except BadSchedule as exc:  # checked when it was set; a library upgrade may still disagree
        log.error("reminder spec can no longer be scheduled: %s", exc)
        return None


def _next(spec: ReminderSpec, after: datetime) -> datetime | None:
    try:
        return next_due(spec, after=after)
    except BadSchedule as exc:
        log.error("reminder spec can no longer be scheduled: %s", exc)
        return None


def upcoming(reminders: dict[str, Reminder], *, include_done: bool) -> list[Reminder]:
    """Soonest first; done and cancelled ones (if asked for) after, newest first."""
    active = sorted(
        (r for r in reminders.values() if r.status == "active"),
        key=lambda r: (r.next_due is None, r.next_due or r.created_at, r.created_at),
    )
    if not include_done:
        return active
    ended = sorted((r for r in reminders.values() if r.status != "active"), key=lambda r: r.created_at, reverse=True)
    return active + ended
