"""``GET /api/usage/budget``: the spend lines, what is spent and what is left, in the owner's zone.

The inner plane keeps the one projection of committed ``model.usage`` events that holds
background work at the line; the gateway asks it on ``inner.cmd.budget`` and passes its
answer on (the same figures the broker decides by).
"""

from typing import Any

from fastapi import APIRouter, Depends

from delegate.contracts import topics
from delegate.contracts.budget import BudgetRequest

from .ask import ask
from .deps import BusDep, require_owner

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

SILENT = ("inner_plane_unavailable", "the inner plane (budgets) is not answering")
STATUS: dict[str, int] = {}  # every refusal is the service failing: 502


@router.get("/usage/budget")
async def usage_budget(bus: BusDep) -> dict[str, Any]:
    """``{"daily": {"limit_usd", "spent_usd", "left_usd"}, "monthly": {…}, "timezone", "background_held"}``
    (a limit is null when unset), plus why and until when background work is held."""
    reply = await ask(bus, topics.INNER_BUDGET, BudgetRequest(), silent=SILENT, status=STATUS)
    body: dict[str, Any] = reply.model_dump(mode="json", exclude={"error"})
    return body
