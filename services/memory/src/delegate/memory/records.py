"""What the index hands out: plain frozen rows, independent of SQLite."""

from dataclasses import dataclass
from datetime import UTC, datetime


def from_epoch(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


@dataclass(frozen=True)
class FactRow:
    id: str
    type: str
    text: str
    status: str  # active, superseded, forgotten
    valid_at: datetime
    invalid_at: datetime | None
    event_ids: tuple[str, ...]
    subject: str | None


@dataclass(frozen=True)
class PendingTurn:
    """A user turn not yet read by per-turn extraction (and its answer, once given)."""

    turn_id: str  # the user message's event id
    seq: int
    ts: datetime
    conversation_id: str | None
    span_id: str | None
    channel: str
    text: str
    answer_text: str | None

    @property
    def answered(self) -> bool:
        return self.answer_text is not None
