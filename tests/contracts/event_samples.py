"""Random, valid payloads for every event kind, read off each payload model's JSON Schema.

Valid by construction for what a schema can say (types, enums, lengths, bounds); a model's own
validators (a cross-field rule, a pattern) may still refuse a draw, so ``payload`` draws again,
and every optional field is present in some draws and left out in others, so both shapes of
each kind are written. No hand-kept table: a kind added tomorrow is sampled too.
"""

import random
import string
from functools import cache
from typing import Any

from pydantic import ValidationError

from delegate.contracts.events import Payload

ALPHABET = string.ascii_letters + string.digits + " é✓-_"
TS = "2026-12-06T09:30:00Z"
# Fields whose rule is a validator the schema cannot show (a path under thoughtflow/).
BY_NAME = {"d2_path": "thoughtflow/r1/flow.d2", "svg_path": "thoughtflow/r1/flow.svg"}


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return dict(node)


def _string(schema: dict[str, Any], rng: random.Random) -> str:
    if "pattern" in schema:  # ids: letters and digits fit every id pattern of the contracts
        return rng.choice(string.ascii_letters) + "".join(rng.choice(string.digits) for _ in range(8))
    fmt = schema.get("format")
    if fmt == "date-time":
        return TS
    if fmt == "date":
        return TS[:10]
    low = int(schema.get("minLength", 0))
    high = min(int(schema.get("maxLength", 24)), low + 24)
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(max(low, 1), max(high, low, 1))))


def _number(schema: dict[str, Any], rng: random.Random, integer: bool) -> float | int:
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
    high = schema.get("maximum", schema.get("exclusiveMaximum", low + 1000))
    if "exclusiveMinimum" in schema:
        low += 1
    if "exclusiveMaximum" in schema:
        high -= 1
    return rng.randint(int(low), int(max(low, high))) if integer else round(rng.uniform(low, max(low, high)), 3)


def value(schema: dict[str, Any], root: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    if "$ref" in schema:
        return value(_resolve(schema["$ref"], root), root, rng, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return value(rng.choice(schema[key]), root, rng, depth + 1)
    if "allOf" in schema:
        return value(schema["allOf"][0], root, rng, depth + 1)
    kind = schema.get("type")
    if kind == "null":
        return None
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "integer":
        return _number(schema, rng, integer=True)
    if kind == "number":
        return _number(schema, rng, integer=False)
    if kind == "string":
        return _string(schema, rng)
    if kind == "array":
        low = int(schema.get("minItems", 0))
        count = rng.randint(low, max(low, min(int(schema.get("maxItems", 3)), 3))) if depth < 4 else low
        return [value(schema.get("items", {}), root, rng, depth + 1) for _ in range(count)]
    if kind == "object" or "properties" in schema:
        return _object(schema, root, rng, depth)
    # Any JSON (``dict[str, Any]`` values): a small mixed value.
    return rng.choice([1, 2.5, "x", None, True, [1, "a"], {"k": "v"}])


def _object(schema: dict[str, Any], root: dict[str, Any], rng: random.Random, depth: int) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    out = {
        name: BY_NAME[name] if name in BY_NAME else value(sub, root, rng, depth + 1)
        for name, sub in props.items()
        if name in required or (depth < 4 and rng.random() < 0.6)
    }
    extra = schema.get("additionalProperties")
    if not props and isinstance(extra, dict) and depth < 4:
        out.update({f"k{i}": value(extra, root, rng, depth + 1) for i in range(rng.randint(0, 2))})
    elif not props and extra is not False and depth < 4:
        out.update({f"k{i}": value({}, root, rng, depth + 1) for i in range(rng.randint(0, 2))})
    return out


@cache
def _schema(model: type[Payload]) -> dict[str, Any]:
    return model.model_json_schema()


def payload(model: type[Payload], rng: random.Random, tries: int = 200) -> Payload:
    """A valid ``model`` drawn at random (the model's own validators have the last word)."""
    schema = _schema(model)
    last: Exception | None = None
    for _ in range(tries):
        try:
            return model.model_validate(value(schema, schema, rng))
        except (ValidationError, ValueError) as exc:
            last = exc
    raise AssertionError(f"no valid {model.__name__} in {tries} draws: {last}")
