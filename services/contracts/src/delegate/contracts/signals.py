"""Typed inner-plane signals: what memory, tasks, reminders, inbound mail and the owner's own
scripts raise for the attention broker to weigh.

Every signal shares one envelope (``SignalBase``): who raised it, how urgent it is, a dedup
key, an expiry, and how the answer should reach the owner. Each kind adds its own payload
model; ``SignalIn`` is the discriminated union that travels on ``inner.evt.signal`` (stream
INNER, ``Nats-Msg-Id`` = the signal id). A message of an unknown kind or with a bad payload
cannot be decoded and is dead-lettered with the reason by the consumer, never dropped.
"""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from .ids import new_id, utcnow
from .limits import JsonObject

# ``urgent`` bypasses quiet hours and the interruption budget (and may place a call).
Urgency = Literal["low", "normal", "urgent"]
# How an activation's answer should reach the owner; None: the channel the owner used last.
ReplyVia = Literal["sms", "email", "call"]

MAX_TEXT = 4000
MAX_KEY = 200


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built on first use (see events.Payload)


class SignalBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built on first use (see events.Payload)

    id: str = Field(default_factory=new_id, min_length=1, max_length=64)
    ts: datetime = Field(default_factory=utcnow)
    source: str = Field(min_length=1, max_length=100)
    urgency: Urgency = "normal"
    # Signals with the same key inside INNER_DEDUP_WINDOW_S are one signal (the first one wins).
    dedup_key: str | None = Field(default=None, min_length=1, max_length=MAX_KEY)
    expires_at: datetime | None = None  # past it, the signal is dropped (recorded, never acted on)
    reply_via: ReplyVia | None = None

    @field_validator("ts", "expires_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("times must carry a timezone (e.g. 2026-12-01T09:00:00Z)")
        return value


class ReminderDuePayload(_Payload):
    reminder_id: str = Field(min_length=1, max_length=64)
    text: str = Field(max_length=MAX_TEXT)
    due_at: datetime  # the occurrence that fired
    late_by_s: float = Field(default=0.0, ge=0)  # > grace_s: shown as "late by X", or skipped
    grace_s: float = Field(default=60.0, ge=0)
    late_policy: Literal["fire", "skip"] = "fire"  # skip: the broker drops it with reason "late"
    recurring: bool = False


class ReminderDue(SignalBase):
    kind: Literal["reminder.due"] = "reminder.due"
    payload: ReminderDuePayload


class EmailReceivedPayload(_Payload):
    event_id: str = Field(min_length=1, max_length=64)  # the user message the email became
    sender: str = Field(max_length=998)
    subject: str = Field(default="", max_length=998)
    preview: str = Field(default="", max_length=MAX_TEXT)


class EmailReceived(SignalBase):
    """An email that came while the owner was not in a conversation (EMAIL_WHEN_AWAY=signal)."""

    kind: Literal["email.received"] = "email.received"
    payload: EmailReceivedPayload


# TaskFinished and TaskFailed share a shape, not a meaning (a summary, an error): two kinds, two models.
class TaskFinishedPayload(_Payload):
    task_id: str = Field(min_length=1, max_length=64)
    goal: str = Field(default="", max_length=MAX_TEXT)
    summary: str = Field(default="", max_length=MAX_TEXT)


class TaskFinished(SignalBase):
    kind: Literal["task.finished"] = "task.finished"
    payload: TaskFinishedPayload


class TaskFailedPayload(_Payload):
    task_id: str = Field(min_length=1, max_length=64)
    goal: str = Field(default="", max_length=MAX_TEXT)
    error: str = Field(default="", max_length=MAX_TEXT)


class TaskFailed(SignalBase):
    kind: Literal["task.failed"] = "task.failed"
    payload: TaskFailedPayload


class MemoryRelevantPayload(_Payload):
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    memory_ids: list[str] = Field(default_factory=list, max_length=50)


class MemoryRelevant(SignalBase):
    kind: Literal["memory.relevant"] = "memory.relevant"
    payload: MemoryRelevantPayload


class ScriptPayload(_Payload):
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    data: JsonObject = Field(default_factory=dict)  # bounded: every consumer can decode it


class ScriptSignal(SignalBase):
    """Raised by the owner's own scripts (``POST /api/signals``): cron, Home Assistant, CI."""

    kind: Literal["script"] = "script"
    payload: ScriptPayload


class CalendarEventRef(_Payload):
    """One event occurrence as a signal carries it (the projection has the rest)."""

    uid: str = Field(min_length=1, max_length=500)
    summary: str = Field(default="", max_length=500)
    start: datetime
    end: datetime | None = None
    location: str = Field(default="", max_length=1000)
    attendees: list[str] = Field(default_factory=list, max_length=50)


class CalendarChangedPayload(_Payload):
    change: Literal["moved", "cancelled"]
    event: CalendarEventRef  # as it is now (moved), or as it was (cancelled)
    old_start: datetime | None = None


class CalendarChangedSignal(SignalBase):
    """Someone else moved or cancelled one of the owner's events."""

    kind: Literal["calendar.changed"] = "calendar.changed"
    payload: CalendarChangedPayload


class CalendarUpcomingPayload(_Payload):
    event: CalendarEventRef
    lead_s: float = Field(ge=0)  # how long before its start this was raised


class CalendarUpcoming(SignalBase):
    """An event with a place or other people starts soon: time to leave, or to prepare."""

    kind: Literal["calendar.upcoming"] = "calendar.upcoming"
    payload: CalendarUpcomingPayload


class CalendarAgendaPayload(_Payload):
    day: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")  # the owner's local date
    events: list[CalendarEventRef] = Field(default_factory=list, max_length=50)
    more: int = Field(default=0, ge=0)  # beyond the 50 listed


class CalendarAgenda(SignalBase):
    """The morning agenda (AGENDA_AT), raised once per day."""

    kind: Literal["calendar.agenda"] = "calendar.agenda"
    payload: CalendarAgendaPayload


class CommitmentDuePayload(_Payload):
    commitment_id: str = Field(min_length=1, max_length=64)
    by: Literal["owner", "assistant"]
    what: str = Field(min_length=1, max_length=MAX_TEXT)
    to: str | None = Field(default=None, max_length=200)
    due: datetime
    due_text: str | None = Field(default=None, max_length=200)
    event_ids: list[str] = Field(default_factory=list, max_length=50)  # where it was promised


class CommitmentDueSignal(SignalBase):
    """A promise fell due (issue #30): the owner's is a nudge for the broker to time; the
    assistant's own is work, done by the activation (or it says why it could not)."""

    kind: Literal["commitment.due"] = "commitment.due"
    payload: CommitmentDuePayload


class PersonDatePayload(_Payload):
    person_id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=200)
    label: str = Field(min_length=1, max_length=100)  # birthday, anniversary
    date: str = Field(min_length=5, max_length=10)  # MM-DD or YYYY-MM-DD
    next: datetime | None = None


class PersonDateSignal(SignalBase):
    """A person's key date was learned: the assistant offers a yearly reminder (never sets one
    without the owner's yes)."""

    kind: Literal["person.date"] = "person.date"
    payload: PersonDatePayload


class ImportedDate(_Payload):
    person_id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=200)
    label: str = Field(min_length=1, max_length=100)
    date: str = Field(min_length=5, max_length=10)  # MM-DD or YYYY-MM-DD


class PersonDatesPayload(_Payload):
    count: int = Field(ge=1)  # every date this import brought that was never offered
    dates: list[ImportedDate] = Field(max_length=1000)  # the first 1000 of them, by name


class PersonDatesSignal(SignalBase):
    """An address book import brought key dates never offered (issue #30): one offer for all of
    them, so a whole address book asks once, not once per person; reminders only on the yes."""

    kind: Literal["person.dates"] = "person.dates"
    payload: PersonDatesPayload


AnySignal = (
    ReminderDue | EmailReceived | TaskFinished | TaskFailed | MemoryRelevant | ScriptSignal
    | CalendarChangedSignal | CalendarUpcoming | CalendarAgenda | CommitmentDueSignal | PersonDateSignal
    | PersonDatesSignal
)
SignalIn = Annotated[AnySignal, Field(discriminator="kind")]
SIGNAL_ADAPTER: TypeAdapter[AnySignal] = TypeAdapter(SignalIn, config=ConfigDict(defer_build=True))
# What the owner's scripts may raise through ``POST /api/signals`` (a CI job reports its task);
# reminders and inbound mail are the services' own claims about the timeline.
OWNER_SIGNAL_KINDS: tuple[str, ...] = ("script", "task.finished", "task.failed")
