"""The function-tool rules a tool must pass to be offered (OpenAI's, for strict: false)."""

import pytest

from delegate.agent.tools.function_rules import refusal

OK = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}


def test_a_sound_schema_passes() -> None:
    assert refusal("kit__tag_notes", OK) is None
    assert refusal("a" * 64, {"type": "object"}) is None


@pytest.mark.parametrize(("name", "parameters", "why"), [
    ("bad name", OK, "the name 'bad name' is not 1 to 64 letters"),
    ("a" * 65, OK, "is not 1 to 64 letters"),
    ("t", {"type": "string"}, "must be of type 'object', not 'string'"),
    ("t", {"type": "object", "oneOf": [{}]}, "has 'oneOf' at the top level"),
    ("t", {"type": "object", "properties": {"n": {"type": "integr"}}}, "not a valid JSON schema"),
    ("t", {"type": "object", "properties": {"tags": {"type": "array"}}}, "at properties.tags does not say"),
    ("t", {"type": "object", "properties": {"rows": {"type": "array", "items": {
        "type": "object", "properties": {"cells": {"type": ["array", "null"]}}}}}},
     "at properties.rows.items.properties.cells"),
    ("t", {"type": "object", "$defs": {"x": {"type": "array"}}}, "at $defs.x"),
])
def test_what_openai_refuses_is_named(name: str, parameters: dict[str, object], why: str) -> None:
    said = refusal(name, parameters)
    assert said is not None and why in said
