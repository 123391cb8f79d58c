"""``GET /api/usage``: what the model calls cost, from the ledger's usage projection.

``from`` and ``to`` are days (``YYYY-MM-DD``, the owner's, both included) or instants (ISO 8601
with an offset); by default the last 30 days through today. ``group`` is ``day`` (the owner's
days in OWNER_TIMEZONE; each row also splits its cost by purpose), ``purpose``, ``channel`` or
``model``. ``GET /api/usage/calls?span_id=`` lists one run's calls (the panel's per-call detail).
"""

from datetime import date, datetime, time, timedelta
from typing import Any, get_args
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends, Query

from delegate.contracts import topics
from delegate.contracts.events import ModelUsage
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import QueryRequest
from delegate.contracts.usage import UsageGroup, UsageRequest

from .ask import ask
from .deps import BusDep, SettingsDep, require_owner
from .errors import ApiError

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

DEFAULT_DAYS = 30
MAX_DAYS = 366 * 2
MAX_CALLS = 500


def _bound(text: str, zone: ZoneInfo, *, end: bool) -> datetime:
    """A day (its start, or for ``end`` the next day's start) or an instant."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text) + timedelta(days=1 if end else 0)
            return datetime.combine(day, time(), zone)
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ApiError(400, "bad_request", f"not a day (YYYY-MM-DD) or an ISO 8601 instant: {text!r}") from exc
    if at.tzinfo is None:
        raise ApiError(400, "bad_request", f"an instant needs its offset (Z or +hh:mm): {text!r}")
    return at


SILENT = ("ledger_unavailable", "the ledger is not answering")
STATUS = {"unavailable": 503, "bad_request": 400}  # the ledger's other refusals are its failure here


@router.get("/usage")
async def usage(
    bus: BusDep, settings: SettingsDep, group: str = "day",
    from_: str | None = Query(default=None, alias="from"), to: str | None = None,
) -> dict[str, Any]:
    """``{"rows": [{"key", "input_tokens", "cached_tokens", "output_tokens", "audio_input_tokens",
    "audio_output_tokens", "web_search_calls", "cost_usd", "calls", "unpriced_calls"}], "currency",
    "unpriced_models", "top"}``: ``top`` are the most expensive activations and tasks of the range."""
    if group not in get_args(UsageGroup):
        raise ApiError(400, "bad_request", f"group is one of {', '.join(get_args(UsageGroup))}")
    zone = ZoneInfo(settings.owner_timezone)
    today = utcnow().astimezone(zone).date()
    high = _bound(to, zone, end=True) if to else datetime.combine(today + timedelta(days=1), time(), zone)
    low = _bound(from_, zone, end=False) if from_ else datetime.combine(
        today - timedelta(days=DEFAULT_DAYS - 1), time(), zone)
    if high <= low:
        raise ApiError(400, "bad_request", "to must be after from")
    if high - low > timedelta(days=MAX_DAYS):
        raise ApiError(400, "bad_request", f"at most {MAX_DAYS} days at a time")
    req = UsageRequest(from_ts=low, to_ts=high, group=group, timezone=settings.owner_timezone)
    reply = await ask(bus, topics.LEDGER_USAGE, req, silent=SILENT, status=STATUS)
    return {
        "rows": [row.model_dump(mode="json", exclude_none=True) for row in reply.rows],
        "currency": "USD",
        "unpriced_models": reply.unpriced_models,
        "top": [span.model_dump(mode="json") for span in reply.top],
        "from": low.isoformat(), "to": high.isoformat(), "group": group, "timezone": settings.owner_timezone,
    }


@router.get("/usage/calls")
async def usage_calls(bus: BusDep, span_id: str | None = None) -> dict[str, Any]:
    """The ``model.usage`` events of one span (a run's calls, oldest first), for the panel's hover."""
    if not span_id or len(span_id) > 64:
        raise ApiError(400, "bad_request", "give the span_id of a run")
    query = QueryRequest(span_id=span_id, kinds=[ModelUsage.KIND], limit=MAX_CALLS)
    reply = await ask(bus, topics.LEDGER_QUERY, query, silent=SILENT, status=STATUS)
    return {"calls": [
        {"id": e.id, "ts": e.ts.isoformat(), "channel": e.channel, **e.payload} for e in reply.events
    ]}
