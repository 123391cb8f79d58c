"""``GET /api/reminders`` (upcoming, soonest first) and ``DELETE /api/reminders/{id}`` (cancel).

The inner plane owns reminders; the gateway asks it on ``inner.cmd.reminders`` and passes its
answer on. A cancel is a ``reminder.cancelled`` event the inner plane writes, so the timeline
shows it like every other change.
"""

from typing import Any

from fastapi import APIRouter, Depends

from delegate.contracts import topics
from delegate.contracts.reminders import Reminder, ReminderCommand, ReminderReply
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from .deps import BusDep, require_owner
from .errors import ApiError

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

MAX_ID = 64
# What the inner plane's error codes mean at the HTTP edge; anything else is its failure (502).
STATUS = {"bad_request": 400, "not_found": 404, "conflict": 409, "unavailable": 503}


async def ask(bus: Bus, cmd: ReminderCommand) -> ReminderReply:
    try:
        return await bus.request(topics.INNER_REMINDERS, cmd)
    except BusUnavailable as exc:
        raise ApiError(503, "inner_plane_unavailable", "the inner plane (reminders) is not answering") from exc
    except RemoteError as exc:
        raise ApiError(STATUS.get(exc.code, 502), exc.code, exc.message) from exc


def public(reminder: Reminder) -> dict[str, Any]:
    return reminder.model_dump(mode="json")


def parse_bool(value: str | None, name: str) -> bool:
    if value is None:
        return False
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no", ""):
        return False
    raise ApiError(400, "bad_request", f"{name} must be true or false")


@router.get("/reminders")
async def list_reminders(bus: BusDep, include_done: str | None = None) -> dict[str, Any]:
    """Active ones by next due time; with ``include_done=true`` also fired and cancelled ones."""
    reply = await ask(bus, ReminderCommand(op="list", include_done=parse_bool(include_done, "include_done")))
    return {"reminders": [public(r) for r in reply.reminders]}


@router.delete("/reminders/{reminder_id}")
async def cancel_reminder(reminder_id: str, bus: BusDep) -> dict[str, Any]:
    """404: no such reminder; 409: it is already done or cancelled."""
    if not 1 <= len(reminder_id) <= MAX_ID:
        raise ApiError(404, "not_found", f"there is no reminder {reminder_id[:MAX_ID]!r}")
    reply = await ask(bus, ReminderCommand(op="cancel", reminder_id=reminder_id, reason="cancelled by the owner"))
    if not reply.reminders:
        raise ApiError(502, "failed", "the inner plane answered without the reminder")
    return {"reminder": public(reply.reminders[0])}
