"""Smallest JSON value that fits a JSON Schema, seeded with some text.

Used where the real model would be forced to produce structured output: a
forced tool call (`tool_choice: "required"` or a named function) and a
`text.format` of type `json_schema`. Strict schemas parse, so the SDK's
`responses.parse` and strict-tool argument parsing keep working offline.
"""

from typing import Any

_MAX_DEPTH = 8


def fill(schema: object, text: str, root: dict[str, Any] | None = None, depth: int = 0) -> Any:
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None
    root = root if root is not None else schema
    if isinstance(ref := schema.get("$ref"), str):
        return fill(_resolve(ref, root), text, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(enum := schema.get("enum"), list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(options := schema.get(key), list) and options:
            non_null = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return fill((non_null or options)[0], text, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        return _fill_object(schema, text, root, depth)
    if kind == "array":
        count = int(schema.get("minItems", 0))
        return [fill(schema.get("items", {}), text, root, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum")
        if not isinstance(low, int | float):
            above = schema.get("exclusiveMinimum")
            low = above + 1 if isinstance(above, int | float) else 0
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return _fill_string(schema, text)


def _fill_object(schema: dict[str, Any], text: str, root: dict[str, Any], depth: int) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    required = schema.get("required")
    names = [n for n in properties if required is None or n in required]
    return {name: fill(properties[name], text, root, depth + 1) for name in names}


def _fill_string(schema: dict[str, Any], text: str) -> str:
    fmt = schema.get("format")
    if fmt == "date-time":
        return "2026-01-01T09:00:00Z"
    if fmt == "date":
        return "2026-01-01"
    value = text
    if isinstance(max_length := schema.get("maxLength"), int):
        value = value[:max_length]
    return value


def _resolve(ref: str, root: dict[str, Any]) -> object:
    node: object = root
    for part in ref.removeprefix("#/").split("/"):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node
