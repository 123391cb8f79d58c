"""What the gateway's JSON routes answer on success, for its OpenAPI document.

The handlers build their answers as dicts around contract models (``model_dump(mode="json")``),
so FastAPI documents each as "an object", and a fuzzer's response-schema check could never fail.
These are the shapes they send: the keys always present, their types, and the contract model of
each listed item in its serialization schema (component names prefixed ``Out`` so they never
replace a request body's model of the same name).
"""

from typing import Any

from pydantic import TypeAdapter

from delegate.contracts.memory import MemoryFact, MemoryResult
from delegate.contracts.people import Commitment, Person, PersonDetail
from delegate.contracts.reminders import Reminder

OUT = "Out"
REF = "#/components/schemas/" + OUT + "{model}"
COUNT = {"type": "integer", "minimum": 0}
TEXT = {"type": "string"}
FLAG = {"type": "boolean"}
OBJECTS = {"type": "array", "items": {"type": "object"}}
IMPORT_STATES = ["running", "done", "failed"]


def shape(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """An object with these keys always present (and these others sometimes); more may follow."""
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}}


def _model(adapter: TypeAdapter[Any], components: dict[str, Any]) -> dict[str, Any]:
    schema = adapter.json_schema(ref_template=REF, mode="serialization")
    for name, definition in schema.pop("$defs", {}).items():
        components[OUT + name] = definition
    return schema


def answers(components: dict[str, Any]) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    """(method, path) -> (status, schema of the JSON body)."""

    def items(model: type) -> dict[str, Any]:
        return _model(TypeAdapter(list[model]), components)  # type: ignore[valid-type]

    def one(model: type) -> dict[str, Any]:
        return _model(TypeAdapter(model), components)

    person = one(PersonDetail)
    return {
        ("get", "/api/timeline"): ("200", shape({"events": OBJECTS, "cursor": {"type": ["string", "null"]}})),
        ("post", "/api/messages"): ("202", shape({"event_id": TEXT, "duplicate": FLAG})),
        ("post", "/api/signals"): ("202", shape({"id": TEXT, "duplicate": FLAG})),
        ("get", "/api/memory/search"): (
            "200",
            shape({"results": items(MemoryResult), "indexed_through_seq": COUNT, "took_ms": {"type": "number"}}),
        ),
        ("get", "/api/memories"): ("200", shape({"facts": items(MemoryFact)})),
        ("get", "/api/people"): ("200", shape({"people": items(Person)})),
        ("get", "/api/people/{person_id}"): ("200", shape({"person": person})),
        ("get", "/api/commitments"): ("200", shape({"commitments": items(Commitment)})),
        ("get", "/api/reminders"): ("200", shape({"reminders": items(Reminder)})),
        ("post", "/api/import"): (
            "202",
            shape(
                {"import_id": TEXT, "status": {"type": "string", "enum": ["running"]}},
                # absent when the same import is posted again while it runs
                {
                    "format": {"type": "string", "enum": ["ndjson", "chatgpt"]},
                    "lines": COUNT,
                    "conversations": COUNT,
                    "events": COUNT,
                },
            ),
        ),
        ("get", "/api/import/{import_id}"): (
            "200",
            shape(
                {
                    "import_id": TEXT,
                    "status": {"type": "string", "enum": IMPORT_STATES},
                    "events": COUNT,
                    "total": COUNT,
                    "indexed": COUNT,
                    "conversations": COUNT,
                    "errors": OBJECTS,
                    "message": TEXT,
                }
            ),
        ),
        ("get", "/api/usage/calls"): ("200", shape({"calls": OBJECTS})),
        ("get", "/api/tools"): ("200", shape({"tools": OBJECTS, "refused": OBJECTS})),
    }
