"""One imported message, validated, and the list of what is wrong with a body (bounded)."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from delegate.contracts.events import MAX_EVENT_BYTES, Channel, ImportLineError, Role

MAX_TEXT = 64_000
# The text's share of one event: the rest of a message event (ids, the ``imported`` mark) is small.
MAX_TEXT_BYTES = MAX_EVENT_BYTES - 8 * 1024
MAX_LISTED = 100  # errors listed (ImportFinished holds at most this many); the rest are counted


class LineIn(BaseModel):
    """One line as the caller writes it (``POST /api/import``)."""

    model_config = ConfigDict(extra="forbid", strict=False)
    ts: AwareDatetime
    role: Role
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    channel: Channel = "text"
    speaker: str | None = Field(default=None, min_length=1, max_length=200)
    conversation: str | None = Field(default=None, min_length=1, max_length=500)
    ref: str | None = Field(default=None, min_length=1, max_length=500)

    @field_validator("ts", mode="before")
    @classmethod
    def _iso_text(cls, ts: Any) -> Any:
        # An ISO-8601 text with its zone; a bare number's unit and zone would be guesses.
        if not isinstance(ts, str):
            raise ValueError("ts must be an ISO-8601 text with a timezone")
        return ts

    @field_validator("text")
    @classmethod
    def _fits_an_event(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("text is blank")
        if len(text.encode()) > MAX_TEXT_BYTES:
            raise ValueError(f"text is over {MAX_TEXT_BYTES} bytes")
        return text


class ImportLine(NamedTuple):
    """A valid line: what it says, where it was (``line``, reported back) and its unique ``ordinal``.

    An NDJSON line's ordinal is its line number; an export's messages share their
    conversation's ``line`` (its 1-based index), so each gets its own running ordinal.

    A tuple of plain values, not the ``LineIn`` it was checked as: a 50 MB body is hundreds of
    thousands of lines held until the plan is made, and the garbage collector scans every model
    or dataclass instance alive on each full pass (seconds, with the GIL held), but leaves
    tuples of strings and times alone.
    """

    line: int
    ordinal: int
    ts: datetime
    role: Role
    text: str
    channel: Channel
    speaker: str | None
    conversation: str | None
    ref: str | None

    @classmethod
    def of(cls, line: int, ordinal: int, data: LineIn) -> "ImportLine":
        return cls(line, ordinal, data.ts, data.role, data.text, data.channel, data.speaker, data.conversation,
                   data.ref)


@dataclass
class Problems:
    """What is wrong with a body: the first ``MAX_LISTED`` by line, and how many in all."""

    listed: list[ImportLineError] = field(default_factory=list)
    count: int = 0

    def add(self, line: int, message: str) -> None:
        self.count += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append(ImportLineError(line=line, message=message[:500]))

    def __bool__(self) -> bool:
        return self.count > 0

    def summary(self) -> str:
        more = f" ({self.count - len(self.listed)} more not listed)" if self.count > len(self.listed) else ""
        return f"{self.count} bad line(s){more}; nothing was imported"


def first_problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "line"
    message = str(first.get("msg", "invalid"))
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    return f"{where}: {message}"


def validate_line(data: Any) -> LineIn | str:
    """The line as a ``LineIn``, or what is wrong with it (one sentence)."""
    if not isinstance(data, dict):
        return "a line must be a JSON object"
    try:
        return LineIn.model_validate(data)
    except ValidationError as exc:
        return first_problem(exc)
