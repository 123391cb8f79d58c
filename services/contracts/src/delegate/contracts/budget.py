"""The spend lines as the inner plane sees them: ``inner.cmd.budget`` (GET /api/usage/budget)."""

from .messages import BusModel, Reply


class BudgetRequest(BusModel):
    pass


class BudgetLine(BusModel):
    limit_usd: float | None = None  # None: no line set
    spent_usd: float = 0.0
    left_usd: float | None = None  # None when there is no limit; never below 0


class BudgetReply(Reply):
    daily: BudgetLine = BudgetLine()
    monthly: BudgetLine = BudgetLine()
    timezone: str = "UTC"
    background_held: bool = False
    held_reason: str | None = None  # budget_usd | runaway, while held
    held_until: str | None = None  # ISO time the hold ends
    hard_stop_owner: bool = False
