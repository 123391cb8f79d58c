"""Parameters the API does not know, in a request its schemas otherwise accept.

The spec rarely says `additionalProperties: false`, yet the API refuses what it does not
know (`Unknown parameter: 'input[0].foo'.`). So a valid request is walked along its
schema: at each object, the properties the applicable schemas declare (through `$ref`,
every `allOf` member, and the `anyOf` alternatives the value satisfies) are known; a key
outside all of them is unknown. An object schema that declares no properties at all
(a function's `parameters`, `metadata`) is free-form. With several satisfied
alternatives, the request is fine if any one of them knows every key.
"""

from itertools import product
from typing import Any

from delegate.openai_standin.openapi import Schema, Spec
from delegate.openai_standin.refusals import param_path

Path = tuple[str | int, ...]


def first_unknown(spec: Spec, schema: Schema, value: object, path: Path = ()) -> Path | None:
    """The path of the first unknown parameter in `value`, or None."""
    if not isinstance(value, dict | list):
        return None
    found: Path | None = None
    for conjunction in _conjunctions(spec, schema, value):
        unknown = _unknown_in(spec, conjunction, value, path)
        if unknown is None:
            return None
        found = found or unknown
    return found


def _conjunctions(spec: Spec, schema: Schema, value: object) -> list[list[Schema]]:
    """Every way the schema applies to `value`, each as the plain schemas that all apply."""
    plain = {k: v for k, v in schema.items() if k not in ("$ref", "allOf", "anyOf")}
    result: list[list[Schema]] = [[plain]]
    parts: list[list[list[Schema]]] = []
    if "$ref" in schema:
        parts.append(_conjunctions(spec, spec.deref(schema), value))
    for member in schema.get("allOf", ()):
        parts.append(_conjunctions(spec, member, value))
    if "anyOf" in schema:
        fitting = _same_kind(spec, schema["anyOf"], value)
        options = [option for option in fitting if spec.is_valid(option, value)] or schema["anyOf"]
        parts.append([c for option in options for c in _conjunctions(spec, option, value)])
    for part in parts:
        result = [left + right for left, right in product(result, part)]
    return result


def _same_kind(spec: Spec, options: list[Schema], value: object) -> list[Schema]:
    """The alternatives whose `type` discriminator admits the value's (all if unsure):
    validating 30 item schemas against every input item is what makes this slow."""
    kind = value.get("type") if isinstance(value, dict) else None
    if not isinstance(kind, str):
        return options
    return [option for option in options if kind in spec.type_values(option, kind)]


def _unknown_in(spec: Spec, schemas: list[Schema], value: dict[str, Any] | list[Any], path: Path) -> Path | None:
    if isinstance(value, list):
        items = [s["items"] for s in schemas if isinstance(s.get("items"), dict)]
        for index, item in enumerate(value):
            for schema in items:
                unknown = first_unknown(spec, schema, item, (*path, index))
                if unknown is not None:
                    return unknown
        return None
    declared: dict[str, list[Schema]] = {}
    for schema in schemas:
        for name, sub in schema.get("properties", {}).items():
            declared.setdefault(name, []).append(sub)
    extra = [s["additionalProperties"] for s in schemas if isinstance(s.get("additionalProperties"), dict)]
    closed = any(s.get("additionalProperties") is False for s in schemas)
    free = not declared and not extra and not closed
    for key, item in value.items():
        subs = declared.get(key) or extra
        if not subs and not free:
            return (*path, key)
        for sub in subs:
            unknown = first_unknown(spec, sub, item, (*path, key))
            if unknown is not None:
                return unknown
    return None


def unknown_param(spec: Spec, schema: Schema, value: object, prefix: str = "") -> str | None:
    unknown = first_unknown(spec, schema, value)
    return None if unknown is None else param_path(unknown, prefix)
