"""Deterministic token estimates (about four characters per token, like the rule
of thumb OpenAI gives), so usage grows with a chain and drops after compaction."""

import json
import math
from typing import Any

from delegate.openai_standin.items import Item, item_text

# Real tokenisation adds a few tokens of framing per item.
ITEM_OVERHEAD = 4


def estimate_text(text: str) -> int:
    return math.ceil(len(text) / 4)


def estimate_item(item: Item) -> int:
    return ITEM_OVERHEAD + estimate_text(item_text(item))


def estimate_items(items: list[Item]) -> int:
    return sum(estimate_item(item) for item in items)


def estimate_prompt(instructions: str | None, tools: list[Any] | None, items: list[Item]) -> int:
    total = estimate_text(instructions or "") + estimate_items(items)
    if tools:
        total += estimate_text(json.dumps(tools, separators=(",", ":")))
    return total


def cached_prefix(tokens: int) -> int:
    """Prompt caching only applies from 1024 tokens and in 128-token steps."""
    return 0 if tokens < 1024 else tokens - tokens % 128
