"""What the model calls cost, as the ledger's usage projection answers it (``GET /api/usage``).

The ledger keeps ``model.usage`` totals per UTC hour, purpose, channel and model (and per span),
written in the same transaction as the events; a question about 30 days reads at most 720 hours
of rows, however many calls they hold.
"""

from datetime import datetime
from typing import Literal

from pydantic import Field

from .events import UsagePurpose
from .messages import BusModel, Reply

UsageGroup = Literal["day", "purpose", "channel", "model"]
# The runs the Usage panel ranks by cost: work nobody asked for just then.
RANKED: tuple[UsagePurpose, ...] = ("activation", "task_step")


class UsageRequest(BusModel):
    """Totals of the calls made in ``[from_ts, to_ts)`` (whole UTC hours), grouped by ``group``;
    days are the owner's (``timezone``)."""

    from_ts: datetime
    to_ts: datetime
    group: UsageGroup = "day"
    timezone: str = Field(default="UTC", max_length=64)
    top: int = Field(default=10, ge=0, le=100)  # the most expensive activations and tasks


# The sums over many calls; runtime.pricing.Usage is one call's figures: the same token names, another thing.
class UsageTotals(BusModel):
    calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    audio_input_tokens: int = 0
    audio_output_tokens: int = 0
    web_search_calls: int = 0
    cost_usd: float = 0.0  # of the priced calls
    unpriced_calls: int = 0  # calls of a model without a price: their cost is unknown, not 0


class UsageRow(UsageTotals):
    key: str  # the day (YYYY-MM-DD, the owner's), purpose, channel or model
    by_purpose: dict[str, float] | None = None  # a day's cost per purpose (group=day)


class UsageSpan(BusModel):
    """One activation or task run and what its calls cost (web searches it made included)."""

    span_id: str
    purpose: str
    conversation_id: str | None = None
    first_ts: str
    last_ts: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    unpriced_calls: int = 0


class UsageReply(Reply):
    rows: list[UsageRow] = Field(default_factory=list)
    unpriced_models: list[str] = Field(default_factory=list)
    top: list[UsageSpan] = Field(default_factory=list)
