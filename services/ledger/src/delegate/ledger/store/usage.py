"""The usage projection: ``model.usage`` totals per UTC hour and per span, kept with the events.

``usage_hours`` holds one row per (hour, purpose, channel, model), ``usage_spans`` one per span
that made calls; both are added to in the same transaction that stores the events (only events
stored for the first time count, so a redelivered batch adds nothing). ``GET /api/usage`` over
30 days then reads at most 720 hours of rows instead of every call. The SQL is the same for both
backends but for the placeholder (``Dialect.sql`` renders it).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from delegate.contracts.events import ModelUsage
from delegate.contracts.ids import format_ts
from delegate.contracts.usage import RANKED, UsageReply, UsageRequest, UsageRow, UsageSpan

from .base import StoredEvent

KIND = ModelUsage.KIND
TOKENS = ("input_tokens", "cached_tokens", "output_tokens", "audio_input_tokens", "audio_output_tokens",
          "web_search_calls")
SUMS = ("calls", *TOKENS, "cost_usd", "unpriced_calls")

UPSERT_HOUR = f"""
INSERT INTO usage_hours (hour, purpose, channel, model, {", ".join(SUMS)})
VALUES (?, ?, ?, ?, {", ".join("?" for _ in SUMS)})
ON CONFLICT (hour, purpose, channel, model) DO UPDATE SET
    {", ".join(f"{c} = usage_hours.{c} + excluded.{c}" for c in SUMS)}
"""
UPSERT_SPAN = """
INSERT INTO usage_spans (span_id, purpose, conversation_id, first_ts, last_ts, calls, input_tokens, output_tokens,
                         cost_usd, unpriced_calls)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (span_id) DO UPDATE SET
    last_ts = CASE WHEN excluded.last_ts > usage_spans.last_ts THEN excluded.last_ts ELSE usage_spans.last_ts END,
    calls = usage_spans.calls + excluded.calls,
    input_tokens = usage_spans.input_tokens + excluded.input_tokens,
    output_tokens = usage_spans.output_tokens + excluded.output_tokens,
    cost_usd = usage_spans.cost_usd + excluded.cost_usd,
    unpriced_calls = usage_spans.unpriced_calls + excluded.unpriced_calls
"""
# The owner's days as ranges of UTC hours (a VALUES list the planner joins on the primary key):
# the database folds the hours, 30 days answer 30 x 8 rows, not 720 x 8.
SELECT_DAYS = (
    "WITH days(day, lo, hi) AS (VALUES {days}) SELECT days.day, usage_hours.purpose, "
    + ", ".join(f"SUM(usage_hours.{c})" for c in SUMS)
    + " FROM days JOIN usage_hours ON usage_hours.hour >= days.lo AND usage_hours.hour < days.hi"
    " GROUP BY days.day, usage_hours.purpose"
)
SELECT_GROUPED = (
    "SELECT {column}, " + ", ".join(f"SUM({c})" for c in SUMS)
    + " FROM usage_hours WHERE hour >= ? AND hour < ? GROUP BY {column}"
)
SELECT_UNPRICED = (
    "SELECT DISTINCT model FROM usage_hours WHERE hour >= ? AND hour < ? AND unpriced_calls > 0 ORDER BY model"
)
SELECT_TOP = (
    "SELECT span_id, purpose, conversation_id, first_ts, last_ts, calls, input_tokens, output_tokens, cost_usd,"
    " unpriced_calls FROM usage_spans WHERE last_ts >= ? AND first_ts < ? AND purpose IN ({marks})"
    " ORDER BY cost_usd DESC, span_id LIMIT ?"
)
COLUMNS = {"day": "purpose", "purpose": "purpose", "channel": "channel", "model": "model"}


def hour_key(ts: datetime) -> str:
    """The UTC hour an instant falls in, as the projection keys it: ``YYYY-MM-DDTHH``."""
    return format_ts(ts)[:13]


@dataclass
class Totals:
    values: list[float] = field(default_factory=lambda: [0] * len(SUMS))

    def add(self, u: ModelUsage) -> None:
        v = self.values
        v[0] += 1
        for i, name in enumerate(TOKENS, start=1):
            v[i] += getattr(u, name)
        if u.cost_usd is None:
            v[-1] += 1
        else:
            v[-2] += u.cost_usd


@dataclass
class SpanTotals:
    purpose: str
    conversation_id: str | None
    first_ts: str
    last_ts: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0


# A plain record; alike in shape to the agent's model records, nothing shared.
@dataclass
class UsageChanges:
    hours: list[tuple[Any, ...]]
    spans: list[tuple[Any, ...]]


def usage_changes(committed: Sequence[StoredEvent]) -> UsageChanges:
    """What newly stored ``model.usage`` events add to the projection, summed within the batch."""
    hours: dict[tuple[str, str, str, str], Totals] = {}
    spans: dict[str, SpanTotals] = {}
    for event in committed:
        if event.kind != KIND:
            continue
        u = ModelUsage.model_validate_json(event.payload_json)
        hours.setdefault((event.ts_text[:13], u.purpose, event.channel, u.model), Totals()).add(u)
        if event.span_id is None:
            continue
        ts = event.ts_text
        span = spans.setdefault(event.span_id, SpanTotals(u.purpose, event.conversation_id, ts, ts))
        span.last_ts = max(span.last_ts, ts)
        span.calls += 1
        span.input_tokens += u.input_tokens
        span.output_tokens += u.output_tokens
        if u.cost_usd is None:
            span.unpriced_calls += 1
        else:
            span.cost_usd += u.cost_usd
    return UsageChanges(
        [(*key, *totals.values) for key, totals in hours.items()],
        [(span_id, s.purpose, s.conversation_id, s.first_ts, s.last_ts, s.calls, s.input_tokens, s.output_tokens,
          s.cost_usd, s.unpriced_calls) for span_id, s in spans.items()],
    )


# ---- answering ---------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageQuery:
    """The statements and parameters one ``UsageRequest`` runs (the store runs them, in one read)."""

    grouped: str
    grouped_params: tuple[Any, ...]
    unpriced: str
    unpriced_params: tuple[Any, ...]
    top: str
    top_params: tuple[Any, ...]


def day_ranges(req: UsageRequest) -> list[tuple[str, str, str]]:
    """(day, first hour, hour after) of each of the owner's days in the range. A zone whose
    offset is not whole hours counts the boundary hour to the day it starts in."""
    zone = ZoneInfo(req.timezone)
    day = req.from_ts.astimezone(zone).date()
    last = (req.to_ts - timedelta(microseconds=1)).astimezone(zone).date()
    ranges = []
    while day <= last:
        start = datetime.combine(day, time(), zone)
        end = datetime.combine(day + timedelta(days=1), time(), zone)
        ranges.append((day.isoformat(), hour_key(max(start, req.from_ts)), hour_key(min(end, req.to_ts)
                                                                                    - timedelta(microseconds=1)
                                                                                    + timedelta(hours=1))))
        day += timedelta(days=1)
    return ranges


def plan(req: UsageRequest) -> UsageQuery:
    low, high = hour_key(req.from_ts), hour_key(req.to_ts - timedelta(microseconds=1) + timedelta(hours=1))
    top = SELECT_TOP.format(marks=", ".join("?" for _ in RANKED))
    if req.group == "day":
        ranges = day_ranges(req)
        grouped = SELECT_DAYS.format(days=", ".join("(?, ?, ?)" for _ in ranges))
        grouped_params: tuple[Any, ...] = tuple(value for r in ranges for value in r)
    else:
        grouped, grouped_params = SELECT_GROUPED.format(column=COLUMNS[req.group]), (low, high)
    return UsageQuery(
        grouped, grouped_params, SELECT_UNPRICED, (low, high),
        top, (format_ts(req.from_ts), format_ts(req.to_ts), *RANKED, req.top),
    )


def answer(req: UsageRequest, grouped: Iterable[Sequence[Any]], unpriced: Iterable[Sequence[Any]],
           top: Iterable[Sequence[Any]]) -> UsageReply:
    """The reply from the rows the store read: days folded from hours in the owner's timezone."""
    rows: dict[str, list[float]] = {}
    by_purpose: dict[str, dict[str, float]] = {}
    if req.group == "day":
        for day, purpose, *sums in grouped:
            total = rows.setdefault(str(day), [0] * len(SUMS))
            for i, value in enumerate(sums):
                total[i] += value or 0
            by_purpose.setdefault(str(day), {})[str(purpose)] = float(sums[-2] or 0)
    else:
        for key, *sums in grouped:
            rows[str(key)] = [value or 0 for value in sums]
    return UsageReply(
        rows=[
            UsageRow(key=key, **{name: (float(v) if name == "cost_usd" else int(v)) for name, v in zip(SUMS, sums,
                                                                                                        strict=True)},
                     by_purpose={p: round(c, 9) for p, c in by_purpose[key].items()} if key in by_purpose else None)
            for key, sums in sorted(rows.items())
        ],
        unpriced_models=[str(r[0]) for r in unpriced],
        top=[UsageSpan(span_id=r[0], purpose=r[1], conversation_id=r[2], first_ts=r[3], last_ts=r[4], calls=r[5],
                       input_tokens=r[6], output_tokens=r[7], cost_usd=float(r[8]), unpriced_calls=r[9]) for r in top],
    )
