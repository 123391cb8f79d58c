"""Producer-made, time-ordered identifiers and UTC timestamps."""

from datetime import UTC, datetime

import uuid6


def new_id() -> str:
    """A UUIDv7 string: sorts by creation time, doubles as event id and Nats-Msg-Id."""
    return str(uuid6.uuid7())


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_ts(ts: datetime) -> str:
    """Fixed-width ISO-8601 with microseconds and a Z, so text order is time order."""
    if ts.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return ts.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_ts(text: str) -> datetime:
    ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if ts.tzinfo is None:
        raise ValueError(f"timestamp without a timezone: {text!r}")
    return ts.astimezone(UTC)
