"""Builders for the JSON objects the Responses API returns (openai-wire.md 3.x)."""

import time
from typing import Any

from delegate.openai_standin import websearch
from delegate.openai_standin.items import Item
from delegate.openai_standin.planned import PlannedCall, PlannedSearch


def usage(input_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def tool_usage(web_searches: int) -> dict[str, Any]:
    # When present, every tool family is there, with zeros for the unused ones.
    image_gen = {
        "input_tokens": 0,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": 0},
        "output_tokens": 0,
        "total_tokens": 0,
    }
    return {"image_gen": image_gen, "web_search": {"num_requests": web_searches}}


def output_text_part(text: str, annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "annotations": list(annotations or []), "logprobs": [], "text": text}


def message_item(
    item_id: str, text: str | None, status: str = "completed", annotations: list[dict[str, Any]] | None = None
) -> Item:
    content = [] if text is None else [output_text_part(text, annotations)]
    return {"id": item_id, "type": "message", "status": status, "content": content, "role": "assistant"}


def function_call_item(item_id: str, call: PlannedCall, status: str = "completed") -> Item:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "arguments": call.arguments if status == "completed" else "",
        "call_id": call.call_id,
        "name": call.name,
    }


def web_search_call_item(item_id: str, search: PlannedSearch, with_sources: bool) -> Item:
    action: dict[str, Any] = {"type": "search", "query": search.query}
    if with_sources:  # only with include: ["web_search_call.action.sources"]
        action["sources"] = websearch.sources(list(search.results))
    return {"id": item_id, "type": "web_search_call", "status": "completed", "action": action}


def compaction_added(item: Item) -> Item:
    # The encrypted content only arrives with output_item.done (streaming-events docs).
    return {"id": item["id"], "type": "compaction"}


def response_object(
    *,
    response_id: str,
    created_at: int,
    body: dict[str, Any],
    status: str,
    output: list[Item],
    usage_: dict[str, Any] | None,
    error: dict[str, Any] | None = None,
    previous_response_id: str | None = None,
    tool_usage_: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `Response` echoing the request's settings the way the real API does."""
    text = {"format": {"type": "text"}, "verbosity": "medium"}
    if isinstance(body.get("text"), dict):
        text = {**text, **body["text"]}
    reasoning = {"effort": None, "summary": None}
    if isinstance(body.get("reasoning"), dict):
        reasoning = {**reasoning, **body["reasoning"]}
    obj: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": bool(body.get("background", False)),
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": body.get("model"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": previous_response_id,
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": reasoning,
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": body.get("service_tier") or "default",
        "store": body.get("store") is not False,
        "temperature": body.get("temperature", 1.0),
        "text": text,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [websearch.echo_tool(tool) for tool in body.get("tools") or []],
        "top_logprobs": body.get("top_logprobs", 0),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation") or "disabled",
        "usage": usage_,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }
    if body.get("context_management") is not None:
        obj["context_management"] = body["context_management"]
    if tool_usage_ is not None:
        obj["tool_usage"] = tool_usage_
    return obj
