"""What OpenAI refuses in a function tool, checked before a tool is offered.

One tool the API refuses fails the whole request it is in (HTTP 400 ``invalid_function_parameters``),
and every request offers every tool: one bad MCP tool would fail every turn. The rules are the
API's for non-strict function tools (we send ``strict: false``):

- the name matches ``^[a-zA-Z0-9_-]{1,64}$``;
- the parameters are a JSON Schema of ``type: "object"``, without ``oneOf``, ``anyOf``, ``allOf``,
  ``enum`` or ``not`` at the top level;
- the schema is valid against its JSON Schema meta-schema;
- every array schema in it says what its ``items`` are.
"""

import re
from collections.abc import Iterator
from typing import Any

NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
TOP_LEVEL_REFUSED = ("oneOf", "anyOf", "allOf", "enum", "not")
# Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
        "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def refusal(name: str, parameters: Any) -> str | None:
    """Why OpenAI would refuse a function tool of this name and parameters; None if it would not."""
    if not NAME.fullmatch(name):
        return f"the name {name!r} is not 1 to 64 letters, digits, '_' or '-'"
    if not isinstance(parameters, dict):
        return "its parameters are not a JSON schema object"
    if parameters.get("type") != "object":
        return f"its parameters schema must be of type 'object', not {parameters.get('type')!r}"
    top = [key for key in TOP_LEVEL_REFUSED if key in parameters]
    if top:
        return f"its parameters schema has {', '.join(repr(k) for k in top)} at the top level"
    # jsonschema (~50 ms of CPU to import) loads with the first MCP tool, not with the agent.
    from jsonschema import validators
    from jsonschema.exceptions import SchemaError

    try:
        validators.validator_for(parameters).check_schema(parameters)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return f"its parameters are not a valid JSON schema: {exc.message}" + (f" (at {where})" if where else "")
    for path, schema in _subschemas(parameters, ()):
        if _is_array(schema) and "items" not in schema:
            return f"the array schema at {'.'.join(path) or 'the top level'} does not say what its items are"
    return None


def _is_array(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "array" or (isinstance(kind, list) and "array" in kind)


def _subschemas(schema: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every schema inside ``schema`` (itself first), with the keyword path to it."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key in _ONE:
        yield from _subschemas(schema.get(key), (*path, key))
    for key in _MANY:
        value = schema.get(key)
        if isinstance(value, list):
            for i, sub in enumerate(value):
                yield from _subschemas(sub, (*path, key, str(i)))
    if isinstance(schema.get("items"), list):  # draft 4-7 tuple form
        for i, sub in enumerate(schema["items"]):
            yield from _subschemas(sub, (*path, "items", str(i)))
    for key in _NAMED:
        value = schema.get(key)
        if isinstance(value, dict):
            for name, sub in value.items():
                yield from _subschemas(sub, (*path, key, str(name)))
