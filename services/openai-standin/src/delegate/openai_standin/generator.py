"""The fake model: decides what a response contains, deterministically.

A scripted step wins; otherwise the answer is derived from the effective input
so tests and the offline demo get sensible, predictable text.
"""

import json
from dataclasses import dataclass
from typing import Any

from delegate.openai_standin.ids import new_call_id
from delegate.openai_standin.items import (
    Item,
    call_names,
    content_text,
    last_user_text,
    trailing_tool_outputs,
)
from delegate.openai_standin.schema_fill import fill
from delegate.openai_standin.script import AnyStep, ToolCallStep

PREFIX = "Offline stand-in:"


@dataclass(frozen=True)
class PlannedText:
    text: str


@dataclass(frozen=True)
class PlannedCall:
    name: str
    arguments: str
    call_id: str


Planned = PlannedText | PlannedCall


@dataclass(frozen=True)
class ModelInput:
    """The parts of a create request the fake model looks at."""

    items: list[Item]
    tools: list[dict[str, Any]]
    tool_choice: object
    text_format: dict[str, Any] | None


def plan(request: ModelInput, step: AnyStep | None) -> list[Planned]:
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
