"""OpenAI's own request schemas (a trimmed copy of its published OpenAPI spec, see
`spec/`), compiled once into JSON Schema 2020-12 validators.

Two validators per request body and Realtime client event: jsonschema-rs over the schemas
closed against unknown parameters (`closed`) decides, in well under a millisecond for the
agent's largest requests; only a refused request goes to jsonschema (Python), whose errors
(with their `anyOf` alternatives) and the `unknown_params` walk say why, in the API's words.
Each is made when first needed: jsonschema-rs's for a body or event on its first request (2-18
ms each), jsonschema (about 0.1 s of CPU to import) with the first request refused; none of it
is a start's work.

Two readings of the spec make it say what the API does rather than more:

- its `oneOf`s are not exclusive (`{"role": "user", "content": "hi", "type": "message"}`
  is both an `EasyInputMessage` and an `InputMessage`, and the API takes it), so they are
  read as `anyOf`;
- OpenAPI 3.0's `nullable: true`, and an object schema whose `default` is null
  (`noise_reduction`: "null to turn off"), accept null.

Where the API is known to take what the spec refuses, `RELAXED` says so, with why;
everything else is the spec's word.
"""

import json
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema_rs

from delegate.openai_standin.closed import close_all, close_place

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

Schema = dict[str, Any]

SPEC_FILE = Path(__file__).parent / "spec" / "openapi.trimmed.json"
_REF_PREFIX = "#/components/schemas/"
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")

# Component schema -> (properties added, names no longer required). The spec shares
# these schemas between requests and responses, where the fields are always present.
RELAXED: dict[str, tuple[dict[str, Any], frozenset[str]]] = {
    # The API defaults an omitted `strict` to true (widely relied on, e.g. by the
    # Vercel AI SDK and RubyLLM, which omit it).
    "FunctionTool": ({}, frozenset({"strict"})),
    # `/responses/compact` returns the window's user messages with `msg_` ids, and the
    # compaction guide says to send that output back as it is.
    "InputMessage": ({"id": {"type": "string"}}, frozenset()),
}


def _read(node: Any) -> Any:
    if isinstance(node, list):
        return [_read(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _read(schema) for name, schema in value.items()}
        elif key == "oneOf":
            out["anyOf"] = _read(value)
        elif key != "nullable":
            out[key] = _read(value)
    nullable = node.get("nullable") is True or ("default" in node and node["default"] is None and "type" in node)
    if nullable and node.get("type") != "null":
        return {"anyOf": [out, {"type": "null"}]}
    return out


class Spec:
    """The trimmed spec with a validator per request body and per Realtime client event."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.source: dict[str, Any] = document["x-source"]
        self.schemas: dict[str, Schema] = _read(document["components"]["schemas"])
        for name, (added, optional) in RELAXED.items():
            schema = self.schemas[name]
            schema["properties"] = {**schema.get("properties", {}), **added}
            schema["required"] = [key for key in schema.get("required", []) if key not in optional]
        self.bodies: dict[str, Schema] = {name: _read(s) for name, s in document["bodies"].items()}
        self.events: dict[str, Schema] = {kind: _read(s) for kind, s in document["realtime_client_events"].items()}
        self._validators: dict[int, Validator] = {}
        self._type_values: dict[int, frozenset[str]] = {}
        self._fast: dict[int, jsonschema_rs.Validator] = {}
        self._open: dict[int, jsonschema_rs.Validator] = {}

    @cached_property
    def _root(self) -> "Validator":
        """The root that sub-schemas are evolved from: they resolve `#/components/schemas/...` against it."""
        from jsonschema import Draft202012Validator

        return Draft202012Validator({"components": {"schemas": self.schemas}})

    @cached_property
    def _closed(self) -> Schema:
        """Every component closed against unknown keys, for the fast checks' `$ref`s."""
        return {"components": {"schemas": close_all(self.schemas)}}

    def deref(self, schema: Schema) -> Schema:
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            return self.schemas[ref.removeprefix(_REF_PREFIX)]
        raise ValueError(f"unresolvable $ref {ref!r}")

    def validator(self, schema: Schema) -> "Validator":
        # One per schema, kept: the schemas live as long as the spec.
        validator = self._validators.get(id(schema))
        if validator is None:
            validator = self._validators[id(schema)] = self._root.evolve(schema=schema)
        return validator

    def type_values(self, schema: Schema, fallback: str) -> frozenset[str]:
        """The values a schema's `type` property may take (`{fallback}` when it does not say)."""
        known = self._type_values.get(id(schema))
        if known is None:
            known = self._type_values[id(schema)] = frozenset(_type_values(self, schema, set()))
        return known or frozenset({fallback})

    def accepts(self, schema: Schema, instance: Any) -> bool:
        """Valid and no unknown parameter: the fast check of a body or event schema."""
        fast = self._fast.get(id(schema))
        if fast is None:  # one per body or event schema, kept: they live as long as the spec
            fast = self._fast[id(schema)] = jsonschema_rs.Draft202012Validator(
                {**close_place(schema, self.schemas), **self._closed}, validate_formats=False
            )
        return bool(fast.is_valid(instance))

    def first_error(self, schema: Schema, instance: Any) -> "ValidationError | None":
        return next(self.validator(schema).iter_errors(instance), None)

    def is_valid(self, schema: Schema, instance: Any) -> bool:
        """Whether `instance` fits a sub-schema (open: unknown keys allowed); for the walk."""
        validator = self._open.get(id(schema))
        if validator is None:  # a few ms each, once: the walk meets a few dozen sub-schemas
            validator = self._open[id(schema)] = jsonschema_rs.Draft202012Validator(
                {**schema, "components": {"schemas": self.schemas}}, validate_formats=False
            )
        return bool(validator.is_valid(instance))


def _type_values(spec: Spec, schema: Schema, seen: set[int]) -> set[str]:
    if id(schema) in seen:
        return set()
    seen.add(id(schema))
    prop = schema.get("properties", {}).get("type", {})
    values = {v for v in [*prop.get("enum", ()), prop.get("const")] if isinstance(v, str)}
    if "$ref" in schema:
        values |= _type_values(spec, spec.deref(schema), seen)
    for key in ("allOf", "anyOf"):
        for sub in schema.get(key, ()):
            values |= _type_values(spec, sub, seen)
    return values


@cache
def spec() -> Spec:
    """The spec, read once per process (when the app is built, see `app.py`); its validators
    are compiled as each is first needed."""
    return Spec(json.loads(SPEC_FILE.read_text(encoding="utf-8")))
