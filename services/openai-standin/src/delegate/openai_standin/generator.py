"""The fake model: decides what a response contains, deterministically.

A scripted step wins, then a forced function call; in the offline demo its own
behaviours come next (`demo`); otherwise the answer is derived from the effective
input so tests get sensible, predictable text.
"""

import json
from typing import Any

from delegate.openai_standin import demo, websearch
from delegate.openai_standin.ids import new_call_id
from delegate.openai_standin.items import (
    Item,
    call_names,
    content_text,
    last_user_text,
    trailing_tool_outputs,
)
from delegate.openai_standin.planned import ModelInput, Planned, PlannedCall, PlannedSearch, PlannedText
from delegate.openai_standin.schema_fill import fill
from delegate.openai_standin.script import AnyStep, ToolCallStep, WebSearchStep
from delegate.openai_standin.websearch import SearchResult

__all__ = ["ModelInput", "Planned", "PlannedCall", "PlannedSearch", "PlannedText", "default_text", "plan"]

PREFIX = "Offline stand-in:"


def plan(request: ModelInput, step: AnyStep | None) -> list[Planned]:
    if isinstance(step, WebSearchStep):
        return _scripted_search(request, step)
    if isinstance(step, ToolCallStep):
        return [PlannedCall(c.name, c.arguments_json(), c.call_id or new_call_id()) for c in step.all_calls()]
    # text, slow, stall, drop_stream and stream_error steps may all carry the answer text.
    scripted = getattr(step, "text", None)
    if isinstance(scripted, str):
        return [PlannedText(scripted)]
    forced = _forced_function(request.tools, request.tool_choice)
    if forced is not None:
        seed = last_user_text(request.items) or ""
        arguments = fill(forced.get("parameters") or {"type": "object"}, seed)
        return [PlannedCall(str(forced["name"]), json.dumps(arguments, ensure_ascii=False), new_call_id())]
    if request.demo and (shown := demo.plan(request)) is not None:
        return shown
    searched = _default_search(request)
    if searched is not None:
        return searched
    return [PlannedText(_format_text(default_text(request.items), request.text_format))]


def default_text(items: list[Item]) -> str:
    outputs = trailing_tool_outputs(items)
    if outputs:
        names = call_names(items)
        results = [
            f"{names.get(str(o.get('call_id')), 'the tool')} returned “{_clip(content_text(o.get('output')), 120)}”"
            for o in outputs
        ]
        return f"{PREFIX} {'; '.join(results)}."
    heard = last_user_text(items)
    if heard:
        return f"{PREFIX} I heard “{_clip(heard, 200)}”."
    return f"{PREFIX} there is nothing to answer yet."


def _default_search(request: ModelInput) -> list[Planned] | None:
    """With a web search tool on offer the fake model searches for the user's last
    words, unless tool_choice rules it out or it is reacting to function results."""
    tool = websearch.find_tool(request.tools)
    if tool is None or not websearch.may_search(request.tool_choice, request.max_tool_calls):
        return None
    if trailing_tool_outputs(request.items) and not websearch.search_forced(request.tool_choice):
        return None
    query = websearch.query_from(last_user_text(request.items))
    if not query:
        return None
    return _search_then_answer(request, query, websearch.invent_results(query, tool), None, append=True)


def _scripted_search(request: ModelInput, step: WebSearchStep) -> list[Planned]:
    query = step.query or websearch.query_from(last_user_text(request.items)) or "web search"
    if step.results is None:
        results = websearch.invent_results(query, websearch.find_tool(request.tools))
    else:  # exactly what the script says, allowed_domains notwithstanding
        results = [SearchResult(r.url, r.title, r.snippet) for r in step.results]
    return _search_then_answer(request, query, results, step.text, append=step.append_citations)


def _search_then_answer(
    request: ModelInput, query: str, results: list[SearchResult], text: str | None, *, append: bool
) -> list[Planned]:
    if text is not None:  # scripted: verbatim, like any scripted answer
        text, annotations = websearch.cite(text, results, append=append)
    elif request.text_format and request.text_format.get("type") in ("json_schema", "json_object"):
        # Structured output has no room for inline citations.
        text, annotations = _format_text(websearch.answer(query, results, linked=False)[0], request.text_format), []
    else:
        text, annotations = websearch.answer(query, results)
    return [PlannedSearch(query, tuple(results)), PlannedText(text, tuple(annotations))]


def _forced_function(tools: list[dict[str, Any]], tool_choice: object) -> dict[str, Any] | None:
    functions = [t for t in tools if t.get("type") == "function" and t.get("name")]
    if not functions:
        return None
    if tool_choice == "required":
        return functions[0]
    if isinstance(tool_choice, dict):
        if tool_choice.get("type") == "function":
            return next((t for t in functions if t["name"] == tool_choice.get("name")), None)
        if tool_choice.get("type") == "allowed_tools" and tool_choice.get("mode") == "required":
            allowed = {t.get("name") for t in tool_choice.get("tools", []) if isinstance(t, dict)}
            return next((t for t in functions if t["name"] in allowed), None)
    return None


def _format_text(text: str, text_format: dict[str, Any] | None) -> str:
    kind = (text_format or {}).get("type")
    if kind == "json_schema":
        return json.dumps(fill((text_format or {}).get("schema") or {}, text), ensure_ascii=False)
    if kind == "json_object":
        return json.dumps({"answer": text}, ensure_ascii=False)
    return text


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
