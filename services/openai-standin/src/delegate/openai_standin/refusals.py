"""A jsonschema error, said the way the OpenAI API says it: its message, `param` and `code`.

The wording follows real API replies (`Invalid type for 'tools[0].strict': expected a
boolean, but got a string instead.`, `Invalid 'temperature': decimal above maximum value.
Expected a value <= 2, but got 3 instead.`, `Missing required parameter: 'input[0].content'.`,
`Invalid value: 'x'. Supported values are: 'a', 'b', and 'c'.`). Where the spec offers
alternatives (`anyOf`), the error is the one of the alternative the request evidently meant:
the one whose JSON type and `type` discriminator fit, and among those the one that got
furthest into the request.
"""

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # jsonschema itself loads with the first refused request (`openapi`)
    from jsonschema.exceptions import ValidationError

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a decimal",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


@dataclass(frozen=True)
class Refusal:
    message: str
    param: str | None
    code: str


def param_path(path: Iterable[str | int], prefix: str = "") -> str:
    """`input[0].content[1].text`, the API's way of naming a place in a request."""
    out = prefix
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def unknown_parameter(param: str) -> Refusal:
    return Refusal(f"Unknown parameter: '{param}'.", param, "unknown_parameter")


def supported(values: Sequence[object]) -> str:
    quoted = [f"'{v}'" if isinstance(v, str) else json.dumps(v) for v in values]
    if len(quoted) <= 1:
        return "".join(quoted)
    if len(quoted) == 2:
        return f"{quoted[0]} and {quoted[1]}"
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}"


def invalid_value(value: object, values: Sequence[object], param: str | None) -> Refusal:
    shown = value if isinstance(value, str) else json.dumps(value)
    return Refusal(f"Invalid value: '{shown}'. Supported values are: {supported(values)}.", param, "invalid_value")


def refusal(error: "ValidationError", prefix: str = "") -> Refusal:
    """The API's answer to `error` (the first one jsonschema found)."""
    error = _settle(error)
    param = param_path(error.absolute_path, prefix) or None
    if error.validator == "anyOf":
        return _no_alternative(error, param)
    return _leaf(error, param, prefix)


def _branches(error: "ValidationError") -> "list[list[ValidationError]]":
    groups: dict[object, list[ValidationError]] = {}
    for sub in error.context or []:
        groups.setdefault(sub.relative_schema_path[0], []).append(sub)
    return list(groups.values())


def _wrong_kind(errors: "list[ValidationError]") -> bool:
    """Whether an alternative is plainly not what was meant: another JSON type, another
    value of the `type` discriminator, or of a property only one value fits (a Realtime
    item's `role`)."""
    for error in errors:
        path = list(error.relative_path)
        if not path and error.validator == "type":
            return True
        if path == ["type"] and error.validator in ("enum", "const", "anyOf"):
            return True
        single = error.validator == "const" or (error.validator == "enum" and len(_any(error.validator_value)) == 1)
        if len(path) == 1 and single:
            return True
        if not path and error.validator == "anyOf" and all(_wrong_kind(b) for b in _branches(error)):
            return True
    return False


def _settle(error: "ValidationError") -> "ValidationError":
    while error.validator == "anyOf" and error.context:
        meant = [branch for branch in _branches(error) if not _wrong_kind(branch)]
        if not meant:
            return error
        error = max(meant, key=lambda branch: max(len(e.absolute_path) for e in branch))[0]
    return error


def _alternatives(error: "ValidationError", types: list[str], kinds: list[object]) -> None:
    """The JSON types and `type` values the alternatives of an `anyOf` accept."""
    for branch in _branches(error):
        for sub in branch:
            path = list(sub.relative_path)
            if not path and sub.validator == "type":
                wanted: Any = sub.validator_value
                types.extend(t for t in ([wanted] if isinstance(wanted, str) else wanted) if t not in types)
            elif path == ["type"] and sub.validator in ("enum", "const", "anyOf"):
                kinds.extend(v for v in _allowed(sub) if v not in kinds)
            elif not path and sub.validator == "anyOf":
                _alternatives(sub, types, kinds)


def _allowed(error: "ValidationError") -> list[object]:
    """The values an `enum` / `const` (or an `anyOf` of them) accepts."""
    limit: Any = error.validator_value
    if error.validator == "enum":
        return list(limit)
    if error.validator == "const":
        return [limit]
    return [value for sub in error.context or [] for value in _allowed(sub)]


def _no_alternative(error: "ValidationError", param: str | None) -> Refusal:
    types: list[str] = []
    kinds: list[object] = []
    _alternatives(error, types, kinds)
    instance = error.instance
    if isinstance(instance, dict) and "type" in instance and kinds:
        return invalid_value(instance["type"], kinds, f"{param}.type" if param else "type")
    if types:
        return _invalid_type(param, types, instance)
    return Refusal(f"Invalid '{param}': {error.message}.", param, "invalid_value")


def _invalid_type(param: str | None, types: Sequence[str], instance: object) -> Refusal:
    named = [_TYPE_NAMES.get(t, t) for t in types if t != "null"] or ["null"]
    expected = named[0] if len(named) == 1 else "one of " + " or ".join(named)
    return Refusal(
        f"Invalid type for '{param or 'body'}': expected {expected}, but got {json_type(instance)} instead.",
        param or "body",
        "invalid_type",
    )


def _leaf(error: "ValidationError", param: str | None, prefix: str) -> Refusal:
    kind, limit, value, schema = error.validator, _any(error.validator_value), _any(error.instance), _any(error.schema)
    if kind == "type":
        return _invalid_type(param, [limit] if isinstance(limit, str) else list(limit), value)
    if kind == "enum":
        return invalid_value(value, list(limit), param)
    if kind == "const":
        return invalid_value(value, [limit], param)
    if kind == "required":
        missing = next(name for name in limit if name not in value)
        where = param_path([*error.absolute_path, missing], prefix)
        return Refusal(f"Missing required parameter: '{where}'.", where, "missing_required_parameter")
    if kind == "additionalProperties" and limit is False:
        known = set(schema.get("properties", {}))
        extra = next(name for name in value if name not in known)
        return unknown_parameter(param_path([*error.absolute_path, extra], prefix))
    bounds = _bounds(kind, limit, value, param, integer=schema.get("type") == "integer")
    if bounds is not None:
        return bounds
    return Refusal(f"Invalid '{param}': {error.message}.", param, "invalid_value")


def _any(value: object) -> Any:
    # jsonschema types these loosely (`Unset` included); here they come from a real error.
    return value


def _bounds(kind: object, limit: object, value: object, param: str | None, *, integer: bool) -> Refusal | None:
    # The API names the parameter's type, not the value's: 3 for `temperature` is a decimal.
    number = "integer" if integer else "decimal"
    sides = {
        "minimum": ("below minimum", ">=", "below_min"),
        "exclusiveMinimum": ("below minimum", ">", "below_min"),
        "maximum": ("above maximum", "<=", "above_max"),
        "exclusiveMaximum": ("above maximum", "<", "above_max"),
    }
    if kind in sides:
        words, sign, code = sides[str(kind)]
        return Refusal(
            f"Invalid '{param}': {number} {words} value. Expected a value {sign} {limit}, but got {value} instead.",
            param,
            f"{number}_{code}_value",
        )
    if kind in ("minLength", "maxLength") and isinstance(value, str):
        return _size(param, "string", kind == "minLength", limit, len(value))
    if kind in ("minItems", "maxItems") and isinstance(value, list):
        return _size(param, "array", kind == "minItems", limit, len(value))
    if kind in ("minProperties", "maxProperties") and isinstance(value, dict):
        return _size(param, "object", kind == "minProperties", limit, len(value))
    if kind == "pattern":
        return Refusal(
            f"Invalid '{param}': string does not match pattern. Expected a string that matches the pattern '{limit}'.",
            param,
            "invalid_value",
        )
    return None


def _size(param: str | None, what: str, minimum: bool, limit: object, size: int) -> Refusal:
    article = "an" if what[0] in "aeiou" else "a"
    unit = "properties" if what == "object" else "length"
    if minimum and size == 0:
        return Refusal(
            f"Invalid '{param}': empty {what}. Expected {article} {what} with minimum {unit} {limit}, "
            f"but got an empty {what} instead.",
            param,
            f"empty_{what}",
        )
    direction, code = ("too short", "below_min") if minimum else ("too long", "above_max")
    bound = "minimum" if minimum else "maximum"
    return Refusal(
        f"Invalid '{param}': {what} {direction}. Expected {article} {what} with {bound} {unit} {limit}, "
        f"but got {article} {what} with {unit} {size} instead.",
        param,
        f"{what}_{code}_{unit if what == 'object' else 'length'}",
    )
