"""The calendar on the bus: what the agent's calendar tools, its working context and voice ask
the pollers, which own the CalDAV projection (``pollers.cmd.calendar``).

Reads (``agenda``, ``free``) answer from the projection. Writes (``create``, ``move``,
``cancel``) are keyed by the tool call id (``request_id``): the new event's UID derives from it
and a ``calendar.written`` event with an id derived from it records the outcome, so a retried
call writes once. With CALENDAR_CONFIRM_WRITES a write only becomes a ``calendar.proposed``
event, and ``confirm`` (the owner said yes, in a later turn) performs it.
"""

from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .messages import BusModel, Reply

CalendarOpName = Literal["agenda", "free", "create", "move", "cancel", "confirm"]
MAX_SPAN_DAYS = 92  # the projection's window: 30 days back, 60 ahead (and a little slack)


class CalendarCommand(BusModel):
    op: CalendarOpName
    # agenda: [start, end); free: the window searched; create: the new event's times
    start: datetime | None = None
    end: datetime | None = None
    duration_s: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)  # free: the slot wanted
    limit: int = Field(default=200, ge=1, le=1000)  # agenda: at most this many occurrences
    # create
    summary: str | None = Field(default=None, min_length=1, max_length=500)
    location: str | None = Field(default=None, max_length=1000)
    description: str | None = Field(default=None, max_length=4000)
    attendees: list[str] = Field(default_factory=list, max_length=50)
    # move / cancel: the event (its UID from the agenda) and, for one occurrence of a series, its
    # original start (RECURRENCE-ID); without it the whole event moves or goes
    uid: str | None = Field(default=None, min_length=1, max_length=500)
    occurrence: datetime | None = None
    # confirm: the ``calendar.proposed`` event's id
    proposal_id: str | None = Field(default=None, min_length=1, max_length=64)
    # who asks: the tool call (the idempotency key of a write), the event it answers, its channel
    request_id: str | None = Field(default=None, min_length=1, max_length=200)
    parent_id: str | None = Field(default=None, max_length=64)  # the tool.call event
    turn_id: str | None = Field(default=None, max_length=64)  # the owner's message (or activation) it answers
    channel: str | None = Field(default=None, max_length=32)

    @field_validator("start", "end", "occurrence")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("times must carry a timezone offset")
        return value

    @model_validator(mode="after")
    def _fits_op(self) -> "CalendarCommand":
        if self.start is not None and self.end is not None:
            if self.end <= self.start:
                raise ValueError("end must be after start")
            if self.op in ("agenda", "free") and (self.end - self.start).days > MAX_SPAN_DAYS:
                raise ValueError(f"ask for at most {MAX_SPAN_DAYS} days at a time")
        needs: dict[str, tuple[str, ...]] = {
            "agenda": ("start", "end"),
            "free": ("start", "end", "duration_s"),
            "create": ("start", "end", "summary", "request_id"),
            "move": ("uid", "start", "request_id"),
            "cancel": ("uid", "request_id"),
            "confirm": ("proposal_id", "request_id"),
        }
        missing = [name for name in needs[self.op] if getattr(self, name) is None]
        if missing:
            raise ValueError(f"{self.op} needs {', '.join(missing)}")
        return self


class CalendarEntry(BusModel):
    """One occurrence in the projection (a recurring event expanded, its exceptions applied)."""

    uid: str
    summary: str = ""
    start: datetime
    end: datetime
    all_day: bool = False
    location: str = ""
    attendees: list[str] = Field(default_factory=list)
    recurring: bool = False
    occurrence: datetime | None = None  # RECURRENCE-ID of a series' occurrence (its original start)
    calendar: str = ""


class FreeSlot(BusModel):
    start: datetime
    end: datetime


class CalendarReply(Reply):
    events: list[CalendarEntry] = Field(default_factory=list)
    more: bool = False  # the agenda had more than ``limit``
    free: list[FreeSlot] = Field(default_factory=list)
    # writes: done now, done by an earlier try of the same call, or only proposed
    status: Literal["read", "done", "already_done", "proposed"] = "read"
    proposal_id: str | None = None
    text: str = ""  # what happened, as the model should read it
    synced_at: datetime | None = None  # the projection's last successful sync
