"""OpenAI's schemas closed against unknown parameters, for the fast check.

`unevaluatedProperties: false` is added at every place a value is described (a property's
schema, an array's items, an `anyOf` alternative, a request body), when the keys an object
may have there are all declared: JSON Schema 2020-12 then counts the keys declared through
`$ref`, every `allOf` member and every `anyOf` alternative the value satisfies, which is
exactly what `unknown_params` walks. Never on an `allOf` member (it would refuse its
siblings' keys) nor on a component itself (it may be one), and never where a free-form
object is among the alternatives (any key is fine there)."""

from collections.abc import Iterator
from typing import Any

Schema = dict[str, Any]

_REF_PREFIX = "#/components/schemas/"
_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_PLACES = ("items", "additionalProperties", "contains", "propertyNames", "unevaluatedItems")
_IN_PLACE = ("allOf", "not", "if", "then", "else")  # about the same value, at the same place
_DECLARING = ("properties", "additionalProperties", "patternProperties", "unevaluatedProperties", "enum", "const")


def close_all(schemas: dict[str, Schema]) -> dict[str, Schema]:
    """The components, with the places inside them closed (the components themselves open)."""
    return {name: _close(schema, schemas, place=False) for name, schema in schemas.items()}


def close_place(schema: Schema, schemas: dict[str, Schema]) -> Schema:
    """A request body's or event's schema, closed at its top too."""
    closed: Schema = _close(schema, schemas, place=True)
    return closed


def _close(node: Any, schemas: dict[str, Schema], *, place: bool) -> Any:
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    for key, value in node.items():
        if key in _MAPS and isinstance(value, dict):
            out[key] = {name: _close(sub, schemas, place=True) for name, sub in value.items()}
        elif key in ("anyOf", "oneOf", "prefixItems") and isinstance(value, list):
            out[key] = [_close(sub, schemas, place=True) for sub in value]
        elif key in _IN_PLACE and isinstance(value, list | dict):
            out[key] = [_close(s, schemas, place=False) for s in value] if isinstance(value, list) else value
        elif key in _PLACES and isinstance(value, dict):
            out[key] = _close(value, schemas, place=True)
        else:
            out[key] = value
    if place and _closable(node, schemas):
        out["unevaluatedProperties"] = False
    return out


def _closable(node: Schema, schemas: dict[str, Schema]) -> bool:
    reached = list(_in_place(node, schemas, set()))
    return any("properties" in s for s in reached) and not any(_free_object(s) for s in reached)


def _in_place(node: Schema, schemas: dict[str, Schema], seen: set[str]) -> Iterator[Schema]:
    yield node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX) and ref not in seen:
        seen.add(ref)
        yield from _in_place(schemas[ref.removeprefix(_REF_PREFIX)], schemas, seen)
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key, ()):
            yield from _in_place(sub, schemas, seen)


def _free_object(schema: Schema) -> bool:
    kind = schema.get("type")
    may_be_object = kind is None or kind == "object" or (isinstance(kind, list) and "object" in kind)
    composed = any(key in schema for key in ("$ref", "allOf", "anyOf", "oneOf"))
    return may_be_object and not composed and not any(key in schema for key in _DECLARING)
