"""Reminders and timers on the bus: what the agent's tools and the gateway ask the inner plane.

The inner plane owns reminders: it writes their ``reminder.*`` events (the ledger stays the
authority), schedules each next occurrence with a JetStream message schedule
(``Nats-Schedule: @at …`` on ``reminders.evt.at.<reminder id>``, fired into
``reminders.evt.fire``), and claims every fire in the ledger by writing its ``reminder.due``
signal under an id derived from (reminder, occurrence): a second delivery is the same event.
"""

from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .messages import BusModel, Reply
from .signals import MAX_TEXT, ReplyVia

# What happens to an occurrence that fires later than its grace allows (the inner plane was
# down, NATS was down): ``fire`` anyway, showing "late by X", or ``skip`` it with the reason.
LatePolicy = Literal["fire", "skip"]
ReminderStatus = Literal["active", "done", "cancelled"]


class ReminderSpec(BusModel):
    """What the owner asked for. Exactly one of ``at``/``rrule``/``cron`` says when."""

    text: str = Field(min_length=1, max_length=MAX_TEXT)
    at: datetime | None = None  # one-shot (a delay is turned into ``at`` by whoever asks)
    # Recurring: an RFC 5545 RRULE ("FREQ=DAILY;BYHOUR=9") from ``start`` (default: now), or a
    # five- or six-field cron expression; both read in ``timezone``.
    rrule: str | None = Field(default=None, max_length=500)
    cron: str | None = Field(default=None, max_length=200)
    start: datetime | None = None
    timezone: str = Field(default="", max_length=64)  # empty: OWNER_TIMEZONE
    late: LatePolicy = "fire"
    grace_s: float = Field(default=60.0, ge=0, le=7 * 24 * 3600)
    urgency: Literal["low", "normal", "urgent"] = "normal"
    reply_via: ReplyVia | None = None

    @field_validator("at", "start")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("times must carry a timezone (e.g. 2026-12-01T09:00:00Z)")
        return value

    @model_validator(mode="after")
    def _one_when(self) -> "ReminderSpec":
        given = [name for name in ("at", "rrule", "cron") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of at, rrule, cron")
        return self


class Reminder(BusModel):
    """A reminder as the inner plane knows it (from its ``reminder.*`` events)."""

    id: str
    spec: ReminderSpec
    revision: int = Field(ge=1)  # raised by every change; a fire of an older revision is stale
    status: ReminderStatus = "active"
    next_due: datetime | None = None  # None: no occurrence left
    fired: int = 0  # occurrences fired so far
    last_fired_at: datetime | None = None
    created_at: datetime


class ReminderCommand(BusModel):
    """One request shape for every operation (the bus serves one model per subject)."""

    op: Literal["set", "list", "change", "cancel"]
    reminder_id: str | None = Field(default=None, max_length=64)  # change, cancel
    spec: ReminderSpec | None = None  # set, change
    include_done: bool = False  # list
    reason: str = Field(default="", max_length=500)  # cancel
    # The asker's own id for this request (the agent's tool call id): a request asked again is
    # answered with what the first one did, never a second reminder.
    request_id: str | None = Field(default=None, min_length=1, max_length=200)
    parent_id: str | None = Field(default=None, max_length=64)  # the event that asked (a tool.call)

    @model_validator(mode="after")
    def _fits_op(self) -> "ReminderCommand":
        if self.op in ("change", "cancel") and not self.reminder_id:
            raise ValueError(f"{self.op} needs reminder_id")
        if self.op in ("set", "change") and self.spec is None:
            raise ValueError(f"{self.op} needs spec")
        return self


class ReminderReply(Reply):
    reminders: list[Reminder] = Field(default_factory=list)


class ReminderFire(BusModel):
    """The body of a schedule message; JetStream publishes it on ``reminders.evt.fire`` when due."""

    reminder_id: str = Field(min_length=1, max_length=64)
    revision: int = Field(ge=1)
    due_at: datetime
