"""`POST /v1/responses/compact`: compact a whole window in one call."""

import time
from typing import Any

from delegate.openai_standin import chain, compaction
from delegate.openai_standin.ids import new_id
from delegate.openai_standin.items import Item
from delegate.openai_standin.script import AnyStep, TextStep
from delegate.openai_standin.shapes import usage
from delegate.openai_standin.store import ResponseStore
from delegate.openai_standin.tokens import estimate_items, estimate_prompt


def compact(
    store: ResponseStore, body: dict[str, Any], items: list[Item], step: AnyStep | None
) -> tuple[dict[str, Any], int]:
    """The `response.compaction` object, and the window's token estimate."""
    effective, _ = chain.resolve(store, body.get("previous_response_id"), items)
    summary = step.text if isinstance(step, TextStep) else None
    output = compaction.compact_window(effective, summary)
    input_tokens = estimate_prompt(body.get("instructions"), None, effective)
    reply = {
        "id": new_id("resp"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": usage(input_tokens, 0, estimate_items(output[-1:])),
    }
    return reply, input_tokens
