"""Compaction: the server-side pass (`context_management`), the explicit
`compaction_trigger`, and the standalone `/v1/responses/compact` window.

A compaction item replaces the items it covers with a short summary. Two kinds:
- "auto" (server-side pass or trigger) covers everything before it;
- "standalone" (the compact endpoint) covers everything except the user messages,
  which the endpoint returns verbatim in front of the item.
"""

from typing import Any

from delegate.openai_standin.errors import invalid_request
from delegate.openai_standin.ids import new_id
from delegate.openai_standin.items import (
    Item,
    compaction_summary,
    content_text,
    is_user_message,
    item_text,
    message,
)
from delegate.openai_standin.sealed import seal, unseal
from delegate.openai_standin.tokens import estimate_items

KIND_AUTO = "auto"
KIND_STANDALONE = "standalone"

_SUMMARY_LIMIT = 400  # about 100 tokens, whatever the window held


def compact_threshold(context_management: object) -> int | None:
    """The lowest `compact_threshold` of the request's compaction entries, if any.
    Shapes and bounds are the spec's (`strict`); it types `type` as any string."""
    if context_management is None:
        return None
    assert isinstance(context_management, list)
    thresholds: list[int] = []
    for i, entry in enumerate(context_management):
        if entry.get("type") != "compaction":
            raise invalid_request(
                f"Invalid value: '{entry.get('type')}'. Supported values are: 'compaction'.",
                param=f"context_management[{i}].type",
                code="invalid_value",
            )
        if entry.get("compact_threshold") is not None:
            thresholds.append(entry["compact_threshold"])
    return min(thresholds) if thresholds else None


def check_compaction_items(items: list[Item]) -> None:
    """Blobs we did not make cannot be 'decrypted': OpenAI rejects them with 400."""
    for i, item in enumerate(items):
        if item.get("type") == "compaction" and compaction_summary(item) is None:
            raise invalid_request(
                f"The encrypted content for item {item.get('id') or f'input[{i}]'} could not be verified.",
                param="input",
                code="invalid_encrypted_content",
            )


def prune(items: list[Item]) -> list[Item]:
    """Drop what the latest compaction item supersedes."""
    latest = max((i for i, item in enumerate(items) if item.get("type") == "compaction"), default=None)
    if latest is None:
        return items
    if _kind(items[latest]) == KIND_STANDALONE:
        kept = [item for item in items[:latest] if is_user_message(item)]
        return kept + items[latest:]
    return items[latest:]


def make_item(covered: list[Item], kind: str, summary: str | None = None) -> Item:
    payload = {
        "v": 1,
        "kind": kind,
        "summary": summary if summary is not None else summarize(covered),
        "items": len(covered),
        "tokens": estimate_items(covered),
    }
    return {"type": "compaction", "id": new_id("cmp"), "encrypted_content": seal(payload)}


def compact_window(items: list[Item], summary: str | None = None) -> list[Item]:
    """The standalone endpoint's `output`: every user message, then one compaction item."""
    users = [message("user", _as_input_parts(item)) for item in items if is_user_message(item)]
    rest = [item for item in items if not is_user_message(item)]
    return [*users, make_item(rest, KIND_STANDALONE, summary)]


def summarize(items: list[Item]) -> str:
    """A short, deterministic account of the covered items."""
    earlier = [s for item in items if item.get("type") == "compaction" if (s := compaction_summary(item))]
    said = [_clip(content_text(i.get("content")), 60) for i in items if is_user_message(i)]
    answered = [
        _clip(content_text(i.get("content")), 60)
        for i in items
        if i.get("type") == "message" and i.get("role") == "assistant"
    ]
    tools = sorted(
        {str(i.get("name")) for i in items if i.get("type") == "function_call"}
        | {"web_search" for i in items if i.get("type") == "web_search_call"}
    )
    parts = [f"Compacted summary of {len(items)} earlier items."]
    if earlier:
        parts.append("Before that: " + _clip(earlier[-1], 120))
    if said:
        parts.append("The user said: " + "; ".join(f"“{s}”" for s in said[-4:]) + ".")
    if answered:
        parts.append(f"The assistant last answered: “{answered[-1]}”.")
    if tools:
        parts.append("Tools used: " + ", ".join(tools) + ".")
    return _clip(" ".join(parts), _SUMMARY_LIMIT)


def _kind(item: Item) -> str:
    try:
        return str(unseal(str(item.get("encrypted_content", ""))).get("kind", KIND_AUTO))
    except ValueError:
        return KIND_AUTO


def _as_input_parts(item: Item) -> list[dict[str, Any]]:
    content = item.get("content")
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return [dict(p) for p in content]
    return [{"type": "input_text", "text": item_text(item)}]


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
