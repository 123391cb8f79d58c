"""Input items: normalising what clients send, and reading text out of items.

Clients may send a plain string, "easy" messages (`{"role", "content"}`) or full
items. Everything is normalised to the full item shape the real API lists under
`GET /v1/responses/{id}/input_items` (typed, with ids). Shapes were checked against
OpenAI's schema before (`strict`); what is checked here, the schema cannot say.
"""

import json
from typing import Any

from delegate.openai_standin.errors import missing_parameter
from delegate.openai_standin.ids import new_id
from delegate.openai_standin.sealed import unseal

Item = dict[str, Any]


def user_message(text: str) -> Item:
    return message("user", [{"type": "input_text", "text": text}])


def message(role: str, content: list[dict[str, Any]], item_id: str | None = None) -> Item:
    return {
        "type": "message",
        "id": item_id or new_id("msg"),
        "status": "completed",
        "role": role,
        "content": content,
    }


def normalize_input(raw: object, param: str = "input") -> list[Item]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [user_message(raw)]
    assert isinstance(raw, list)
    return [_normalize_item(item, f"{param}[{i}]") for i, item in enumerate(raw)]


def _normalize_item(item: Item, param: str) -> Item:
    kind = item.get("type") or "message"  # an easy message may leave `type` out
    if kind == "message":
        return _normalize_message(item)
    if kind == "function_call":
        return {"id": new_id("fc"), "status": "completed", **item}
    if kind == "function_call_output":
        # Optional in the spec and the SDK types, yet nothing can be matched without it.
        if item.get("call_id") is None:
            raise missing_parameter(f"{param}.call_id")
        return {"id": new_id("fco"), "status": "completed", **item}
    # Reasoning, web search calls, compaction items, references...: kept as sent.
    return dict(item)


def _normalize_message(item: Item) -> Item:
    role = item["role"]
    content = item["content"]
    if isinstance(content, str):
        part_type = "output_text" if role == "assistant" else "input_text"
        part: dict[str, Any] = {"type": part_type, "text": content}
        if part_type == "output_text":
            part["annotations"] = []
        parts = [part]
    else:
        parts = content
    normalized = message(role, parts, item.get("id"))
    if "phase" in item:
        normalized["phase"] = item["phase"]
    return normalized


def content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        text = part.get("text", part.get("refusal"))
        if isinstance(text, str):
            texts.append(text)
        elif part.get("type") in ("input_image", "input_file"):
            texts.append("[attachment]")
    return "\n".join(texts)


def compaction_summary(item: Item) -> str | None:
    try:
        summary = unseal(str(item.get("encrypted_content", ""))).get("summary")
    except ValueError:
        return None
    return summary if isinstance(summary, str) else None


def item_text(item: Item) -> str:
    """The text the fake model 'reads' from an item (tokens, matching, summaries)."""
    kind = item.get("type")
    if kind == "message":
        return content_text(item.get("content"))
    if kind == "function_call":
        return f"{item.get('name', '')} {item.get('arguments', '')}"
    if kind == "function_call_output":
        return content_text(item.get("output"))
    if kind == "compaction":
        return compaction_summary(item) or ""
    if kind == "reasoning":
        return content_text(item.get("summary"))
    if kind == "web_search_call":
        raw_action = item.get("action")
        action: dict[str, Any] = raw_action if isinstance(raw_action, dict) else {}
        return f"web search {action.get('query') or action.get('url') or ''}".strip()
    return json.dumps(item, separators=(",", ":"))


def is_user_message(item: Item) -> bool:
    return item.get("type") == "message" and item.get("role") == "user"


def last_user_text(items: list[Item]) -> str | None:
    for item in reversed(items):
        if is_user_message(item):
            return content_text(item.get("content"))
    return None


def trailing_tool_outputs(items: list[Item]) -> list[Item]:
    """The function_call_output items answering the latest round of calls, if the
    conversation currently ends with tool results (so the model must react to them)."""
    outputs: list[Item] = []
    for item in reversed(items):
        kind = item.get("type")
        if kind == "function_call_output":
            outputs.append(item)
        elif kind in ("function_call", "reasoning"):
            continue
        else:
            break
    return list(reversed(outputs))


def call_names(items: list[Item]) -> dict[str, str]:
    return {
        str(item["call_id"]): str(item.get("name", ""))
        for item in items
        if item.get("type") == "function_call" and "call_id" in item
    }
