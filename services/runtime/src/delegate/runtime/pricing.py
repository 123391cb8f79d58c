"""What a model call cost: OpenAI's price table per model and token class, shipped as data.

``prices.json`` next to this module carries the table with its date and source. An owner whose
prices differ (a newer list, a negotiated rate, another model) puts the models they want to
change in ``<RUNTIME_DATA_DIR>/prices.json`` (same shape; a model given there replaces the
shipped one whole), read when a service starts. A model in neither is
*unpriced*: its cost is None, never $0, so a missing price can never pass for a free call.
"""

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SHIPPED = Path(__file__).with_name("prices.json")
OVERRIDE_NAME = "prices.json"
PER_MILLION = 1_000_000
# A dated snapshot (gpt-5.5-2026-04-23) is priced as its model.
SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Usage:
    """One call's billed figures, as OpenAI reports them (input and output include audio)."""

    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    audio_input_tokens: int = 0
    audio_output_tokens: int = 0
    web_search_calls: int = 0


@dataclass(frozen=True)
class ModelPrice:
    """USD per 1M tokens; None where OpenAI lists no price for the class."""

    input: float
    output: float
    cached_input: float | None = None
    audio_input: float | None = None
    audio_cached_input: float | None = None
    audio_output: float | None = None


class PriceTable:
    def __init__(self, models: dict[str, ModelPrice], tools: dict[str, float], date: str, source: str) -> None:
        self.models = models
        self.tools = tools
        self.date = date
        self.source = source

    def price(self, model: str) -> ModelPrice | None:
        return self.models.get(model) or self.models.get(SNAPSHOT.sub("", model))

    def cost(self, model: str, usage: Usage) -> float | None:
        """USD, or None when the model (or a token class or tool it used) has no price."""
        price = self.price(model)
        if price is None:
            return None
        cached = min(usage.cached_tokens, usage.input_tokens)
        uncached = usage.input_tokens - cached
        # Which cached tokens were audio is not always reported: count the uncached ones as
        # audio first (audio costs more), so an estimate errs towards the budget, not past it.
        audio_in = min(usage.audio_input_tokens, uncached)
        audio_cached = min(usage.audio_input_tokens - audio_in, cached)
        audio_out = min(usage.audio_output_tokens, usage.output_tokens)
        cached_rate = price.cached_input if price.cached_input is not None else price.input
        total = (
            (uncached - audio_in) * price.input
            + (cached - audio_cached) * cached_rate
            + (usage.output_tokens - audio_out) * price.output
        )
        if audio_in or audio_cached or audio_out:
            if price.audio_input is None or price.audio_output is None:
                return None
            audio_cached_rate = price.audio_cached_input if price.audio_cached_input is not None else price.audio_input
            total += audio_in * price.audio_input + audio_cached * audio_cached_rate + audio_out * price.audio_output
        usd = total / PER_MILLION
        if usage.web_search_calls:
            per_call = self.tools.get("web_search")
            if per_call is None:
                return None
            usd += usage.web_search_calls * per_call
        return round(usd, 9)


def _models(raw: dict[str, Any]) -> dict[str, ModelPrice]:
    return {name: ModelPrice(**fields) for name, fields in (raw.get("models") or {}).items()}


def load_prices(runtime_data_dir: Path | None = None) -> PriceTable:
    """The shipped table, with the owner's ``prices.json`` in the runtime-data directory over it."""
    shipped = json.loads(SHIPPED.read_text())
    models, tools = _models(shipped), dict(shipped.get("tools") or {})
    date, source = str(shipped["date"]), str(shipped["source"])
    override = runtime_data_dir / OVERRIDE_NAME if runtime_data_dir else None
    if override is not None and override.is_file():
        try:
            own = json.loads(override.read_text())
            models.update(_models(own))
            tools.update(own.get("tools") or {})
            date = str(own.get("date") or date)
            source = f"{override.name} over the shipped table" if not own.get("source") else str(own["source"])
        except (OSError, ValueError, TypeError) as exc:
            # A broken override must not stop the model calls: the shipped prices stand.
            log.error("price file %s not used: %s", override, exc)
    return PriceTable(models, tools, date, source)
