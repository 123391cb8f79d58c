"""People and commitments on the bus (issue #30): the memory service answers both from its index,
a projection of the ``person.*`` and ``commitment.*`` ledger events; every change it makes is an
event through the ledger, committed before the reply."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .events import CommitmentBy
from .messages import BusModel, Reply

CommitmentState = Literal["open", "kept", "dropped"]


class KeyDate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built on first use (see events.Payload)
    label: str = Field(min_length=1, max_length=100)  # "birthday", "anniversary"
    date: str = Field(min_length=5, max_length=10)  # "MM-DD" or "YYYY-MM-DD"
    next: datetime | None = None  # the next occurrence, at midnight in the owner's timezone


class PersonFact(BusModel):
    id: str
    text: str
    type: str
    event_ids: list[str] = Field(default_factory=list)


class Mention(BusModel):
    event_id: str
    ts: datetime
    channel: str | None = None
    text: str | None = None  # the turn's words (the owner's own; empty when not indexed)


class Person(BusModel):
    id: str
    name: str
    aliases: list[str] = Field(default_factory=list)
    relation: str | None = None
    phones: list[str] = Field(default_factory=list)
    emails: list[str] = Field(default_factory=list)
    dates: list[KeyDate] = Field(default_factory=list)
    facts: int = 0  # how many linked facts (the detail lists them)
    mentions: int = 0
    last_mentioned: datetime | None = None
    created_at: datetime
    updated_at: datetime
    # from the owner's address book: "listed" while a card of theirs is there, "unlisted" once
    # every card of theirs was deleted; None: never from it
    contacts: Literal["listed", "unlisted"] | None = None


class PersonDetail(Person):
    linked_facts: list[PersonFact] = Field(default_factory=list)
    recent_mentions: list[Mention] = Field(default_factory=list)
    upcoming: list[KeyDate] = Field(default_factory=list)  # key dates in the next 60 days, soonest first


class PeopleCommand(BusModel):
    """``list``, ``get``, ``edit`` (the owner's PATCH: the lists given replace the person's), ``forget``,
    ``match`` (the active person with one of ``phones`` or ``emails``, or none: who a refused
    sender is). ``request_id`` makes a change idempotent."""

    op: Literal["list", "get", "edit", "forget", "match"]
    person_id: str | None = Field(default=None, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=200)
    aliases: list[str] | None = Field(default=None, max_length=20)
    relation: str | None = Field(default=None, max_length=200)
    phones: list[str] | None = Field(default=None, max_length=20)
    emails: list[str] | None = Field(default=None, max_length=20)
    dates: list[KeyDate] | None = Field(default=None, max_length=20)
    limit: int = Field(default=200, ge=1, le=1000)
    request_id: str | None = Field(default=None, max_length=200)
    reason: str = Field(default="", max_length=500)


class PeopleReply(Reply):
    people: list[Person] = Field(default_factory=list)
    person: PersonDetail | None = None
    event_id: str | None = None


class Commitment(BusModel):
    id: str
    by: CommitmentBy
    what: str
    to: str | None = None
    person_id: str | None = None
    due: datetime | None = None
    due_text: str | None = None
    state: CommitmentState
    event_ids: list[str] = Field(default_factory=list)  # what it cites: the turn(s) it was made in
    made_at: datetime
    closed_at: datetime | None = None
    reason: str | None = None  # why it was kept or dropped
    due_fired: bool = False  # commitment.due written


class CommitmentsCommand(BusModel):
    """``list`` (by state; ``all``), ``get``, ``update`` (``state`` kept or dropped: the agent's
    commitment_update tool, on the owner's word)."""

    op: Literal["list", "get", "update"]
    state: Literal["open", "kept", "dropped", "all"] = "open"
    commitment_id: str | None = Field(default=None, max_length=64)
    new_state: Literal["kept", "dropped"] | None = None
    # update without an id: the one open commitment these words describe best (the agent's words)
    what: str | None = Field(default=None, min_length=1, max_length=2000)
    reason: str = Field(default="", max_length=500)
    event_ids: list[str] = Field(default_factory=list, max_length=50)
    limit: int = Field(default=200, ge=1, le=1000)
    request_id: str | None = Field(default=None, max_length=200)
    conversation_id: str | None = None
    span_id: str | None = None


class CommitmentsReply(Reply):
    commitments: list[Commitment] = Field(default_factory=list)
    commitment: Commitment | None = None
    event_id: str | None = None
