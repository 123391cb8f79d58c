"""The checks OpenAI runs on a function tool's parameters (non-strict), with its own messages.

The published spec types ``parameters`` as any object, so the schema check (`strict`) cannot see
these; the API refuses them with HTTP 400 ``invalid_function_parameters``, failing the whole
request, whichever tool it was.
"""

from collections.abc import Iterator
from typing import Any

from delegate.openai_standin.errors import invalid_request

TOP_LEVEL = ("oneOf", "anyOf", "allOf", "enum", "not")
# Schema-valued keywords the API's check descends into (as far as we know it).
_NESTED = ("properties", "items", "additionalProperties", "anyOf", "oneOf", "allOf", "$defs", "definitions")


def check(tools: object) -> None:
    if not isinstance(tools, list):
        return
    for i, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("parameters"), dict):
            _check_parameters(str(tool.get("name")), tool["parameters"], f"tools[{i}].parameters")


def _check_parameters(name: str, schema: dict[str, Any], param: str) -> None:
    def refuse(why: str) -> None:
        raise invalid_request(f"Invalid schema for function '{name}': {why}", param=param,
                              code="invalid_function_parameters")

    if schema.get("type") != "object":
        refuse(f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{schema.get('type')}\"'.")
    if any(key in schema for key in TOP_LEVEL):
        refuse("schema must have type 'object' and not have 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top level.")
    for context, sub in _walk(schema, ()):
        kind = sub.get("type")
        if (kind == "array" or (isinstance(kind, list) and "array" in kind)) and "items" not in sub:
            refuse(f"In context={context!r}, array schema missing items.")


def _walk(schema: Any, context: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    if not isinstance(schema, dict):
        return
    yield context, schema
    for key in _NESTED:
        value = schema.get(key)
        if isinstance(value, list):
            for i, sub in enumerate(value):
                yield from _walk(sub, (*context, key, str(i)))
        elif isinstance(value, dict) and key in ("properties", "$defs", "definitions"):
            for prop, sub in value.items():
                yield from _walk(sub, (*context, key, str(prop)))
        else:
            yield from _walk(value, (*context, key))
