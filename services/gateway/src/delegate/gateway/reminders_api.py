"""``GET /api/reminders`` (upcoming, soonest first) and ``DELETE /api/reminders/{id}`` (cancel).

The inner plane owns reminders; the gateway asks it on ``inner.cmd.reminders`` and passes its
answer on. A cancel is a ``reminder.cancelled`` event the inner plane writes, so the timeline
shows it like every other change.
"""

from typing import Any

from fastapi import APIRouter, Depends

from delegate.contracts import topics
from delegate.contracts.reminders import Reminder, ReminderCommand, ReminderReply
from delegate.runtime.bus import Bus

from .ask import ask
from .deps import BusDep, require_owner
from .errors import ApiError
from .params import parse_bool

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

MAX_ID = 64
# What the inner plane's error codes mean at the HTTP edge; anything else is its failure (502).
SILENT = ("inner_plane_unavailable", "the inner plane (reminders) is not answering")


async def ask_reminders(bus: Bus, cmd: ReminderCommand) -> ReminderReply:
    return await ask(bus, topics.INNER_REMINDERS, cmd, silent=SILENT)


def public(reminder: Reminder) -> dict[str, Any]:
    return reminder.model_dump(mode="json")


@router.get("/reminders")
async def list_reminders(bus: BusDep, include_done: str | None = None) -> dict[str, Any]:
    """Active ones by next due time; with ``include_done=true`` also fired and cancelled ones."""
    reply = await ask_reminders(bus, ReminderCommand(op="list", include_done=parse_bool(include_done, "include_done")))
    return {"reminders": [public(r) for r in reply.reminders]}


@router.delete("/reminders/{reminder_id}")
async def cancel_reminder(reminder_id: str, bus: BusDep) -> dict[str, Any]:
    """404: no such reminder; 409: it is already done or cancelled."""
    if not 1 <= len(reminder_id) <= MAX_ID:
        raise ApiError(404, "not_found", f"there is no reminder {reminder_id[:MAX_ID]!r}")
    cancel = ReminderCommand(op="cancel", reminder_id=reminder_id, reason="cancelled by the owner")
    reply = await ask_reminders(bus, cancel)
    if not reply.reminders:
        raise ApiError(502, "failed", "the inner plane answered without the reminder")
    return {"reminder": public(reply.reminders[0])}
