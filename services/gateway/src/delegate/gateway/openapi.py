"""The gateway's OpenAPI document, made true: ``GET /api/openapi.json`` (owner only).

FastAPI's own document knows the routes and their query and path parameters, but not what the
handlers read themselves (bodies go through ``read_json`` and ``parse_body`` so a size, depth and
strictness rule holds before pydantic sees them), nor the edge's error shape (``errors.py``: every
refusal is ``{"error": {"code", "message"}}``, never FastAPI's 422), nor the media types of the
answers that are not JSON. This module adds those to the generated document, from the same
models the handlers parse with, so the fuzzer in CI (schemathesis) checks the gateway against
what it says, not against what FastAPI guessed.
"""

from typing import Any, get_args

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from delegate.contracts import ws
from delegate.contracts.events import RUN_ID_PATTERN
from delegate.contracts.push import SubscriptionIn
from delegate.contracts.signals import OWNER_SIGNAL_KINDS, SIGNAL_ADAPTER
from delegate.contracts.tasks import TaskCreate
from delegate.contracts.usage import UsageGroup

from .deps import require_owner
from .http import MAX_PAGE, SignIn
from .memory_api import MAX_FACTS, MAX_LIMIT, MAX_QUERY, FactEdit
from .openapi_answers import answers
from .people_api import STATES, PersonEdit
from .signals_api import SERVER_FIELDS

REF = "#/components/schemas/{model}"
# Set by the gateway, never by the caller: left out of the documented task body.
SERVER_SET_TASK_FIELDS = ("source", "idempotency_key")
FORM = "application/x-www-form-urlencoded"

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}

# Answers that are not JSON (the default FastAPI assumes).
MEDIA: dict[tuple[str, str], tuple[str, str]] = {
    ("get", "/api/tasks/{task_id}/events"): ("200", "text/event-stream"),
    ("get", "/api/tasks/{task_id}/files/{name}"): ("200", "image/png"),
    ("get", "/api/runs/{run_id}/diagram"): ("200", "image/svg+xml"),
    ("post", "/twiml"): ("200", "text/xml"),
    ("post", "/sms"): ("200", "text/xml"),
    ("post", "/sms/status"): ("200", "text/xml"),
}
# Answered 204 with no body (Twilio reads nothing from a status callback).
EMPTY = frozenset({("post", "/call/status"), ("post", "/call/amd")})
SIGN_IN = "/api/session"  # the one /api route without the owner's token


def _whole(low: int, high: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high}


# Query parameters as the handlers check them. They take them as text (to answer with their own
# error, not FastAPI's 422), so FastAPI documents any string; the bounds are said here, from the
# same constants, and a required one is marked so.
BOOLEAN = {"type": "boolean"}  # also 1/0/yes/no (params.parse_bool)
QUERY: dict[tuple[str, str], dict[str, tuple[dict[str, Any], bool]]] = {
    ("get", "/api/timeline"): {"limit": (_whole(1, MAX_PAGE), False)},
    ("get", "/api/memory/search"): {
        "q": ({"type": "string", "minLength": 1, "maxLength": MAX_QUERY, "pattern": r"\S"}, True),
        "limit": (_whole(1, MAX_LIMIT), False),
    },
    ("get", "/api/memories"): {"include_retired": (BOOLEAN, False), "limit": (_whole(1, MAX_FACTS), False)},
    ("get", "/api/reminders"): {"include_done": (BOOLEAN, False)},
    ("get", "/api/commitments"): {"state": ({"type": "string", "enum": list(STATES)}, False)},
    ("get", "/api/usage"): {"group": ({"type": "string", "enum": list(get_args(UsageGroup))}, False)},
    ("get", "/api/usage/calls"): {"span_id": ({"type": "string", "minLength": 1, "maxLength": 64}, True)},
}


# Path ids the handlers refuse (400) or cannot know (404) past these.
TURN_ID = {"type": "string", "minLength": 1, "maxLength": 64}
PATH: dict[tuple[str, str], dict[str, tuple[dict[str, Any], bool]]] = {
    ("get", "/api/runs/{run_id}/diagram"): {"run_id": ({"type": "string", "pattern": RUN_ID_PATTERN}, True)},
    ("post", "/api/turns/{turn_id}/stop"): {"turn_id": (TURN_ID, True)},
    ("post", "/api/turns/{turn_id}/regenerate"): {"turn_id": (TURN_ID, True)},
}


def _parameters(op: dict[str, Any], where: str, declared: dict[str, tuple[dict[str, Any], bool]]) -> None:
    for parameter in op.get("parameters", []):
        if parameter.get("in") == where and parameter["name"] in declared:
            schema, required = declared[parameter["name"]]
            default = parameter["schema"].get("default")
            parameter["schema"] = schema if default is None else {**schema, "default": default}
            parameter["required"] = required


def _owners(path: str) -> bool:
    return path.startswith("/api/") and path != SIGN_IN


def _twilio_form(method: str, path: str) -> bool:
    """Twilio's webhooks (/twiml, /sms, /call/status, ...): signed form posts, outside /api."""
    return method == "post" and not path.startswith("/api/")


def _schema(adapter: TypeAdapter[Any], components: dict[str, Any]) -> dict[str, Any]:
    schema = adapter.json_schema(ref_template=REF, mode="validation")
    components.update(schema.pop("$defs", {}))
    return schema


def _task_body(components: dict[str, Any]) -> dict[str, Any]:
    schema = _schema(TypeAdapter(TaskCreate), components)
    for name in SERVER_SET_TASK_FIELDS:
        schema.get("properties", {}).pop(name, None)
    return schema


def _signal_body(components: dict[str, Any]) -> dict[str, Any]:
    """The signals the owner may raise, without the fields the gateway sets (``parse_signal``)."""
    schema = _schema(SIGNAL_ADAPTER, components)
    mapping = {kind: ref for kind, ref in schema["discriminator"]["mapping"].items() if kind in OWNER_SIGNAL_KINDS}
    for ref in mapping.values():
        name = ref.rsplit("/", 1)[-1]
        model = components[name] = {**components[name]}
        model["properties"] = {k: v for k, v in model["properties"].items() if k not in SERVER_FIELDS}
        model["required"] = [k for k in model.get("required", []) if k not in SERVER_FIELDS]
    return {"oneOf": [{"$ref": ref} for ref in mapping.values()],
            "discriminator": {"propertyName": "kind", "mapping": mapping}}


def _json_bodies(components: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        ("post", SIGN_IN): _schema(TypeAdapter(SignIn), components),
        ("post", "/api/messages"): _schema(TypeAdapter(ws.MessageBody), components),
        ("post", "/api/signals"): _signal_body(components),
        ("post", "/api/tasks"): _task_body(components),
        ("patch", "/api/memories/{fact_id}"): _schema(TypeAdapter(FactEdit), components),
        ("patch", "/api/people/{person_id}"): _schema(TypeAdapter(PersonEdit), components),
        ("post", "/api/push/subscriptions"): _schema(TypeAdapter(SubscriptionIn), components),
    }


def _import_body() -> dict[str, Any]:
    return {
        "required": True,
        "content": {
            # one {"ts","role","text",...} a line
            "application/x-ndjson": {"schema": {"type": "string"}},
            # ChatGPT's conversations.json export
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
        },
    }


def document(app: FastAPI) -> dict[str, Any]:
    doc = get_openapi(title=app.title, version="1", routes=app.routes)
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas["Error"] = ERROR
    components["securitySchemes"] = {"owner": {"type": "http", "scheme": "bearer"}}
    bodies = _json_bodies(schemas)
    answered = answers(schemas)
    error = {"description": "refused or failed: the gateway's error JSON",
             "content": {"application/json": {"schema": {"$ref": REF.format(model="Error")}}}}
    for path, operations in doc.get("paths", {}).items():
        for method, op in operations.items():
            responses = op.setdefault("responses", {})
            responses.pop("422", None)  # FastAPI's validation shape is never sent: every refusal is Error
            responses["default"] = error
            if (method, path) in bodies:
                body = {"application/json": {"schema": bodies[method, path]}}
                op["requestBody"] = {"required": True, "content": body}
            elif (method, path) == ("post", "/api/import"):
                op["requestBody"] = _import_body()
            elif _twilio_form(method, path):
                op["requestBody"] = {"required": True, "content": {FORM: {"schema": {"type": "object"}}}}
            if (method, path) in QUERY:
                _parameters(op, "query", QUERY[method, path])
            if (method, path) in PATH:
                _parameters(op, "path", PATH[method, path])
            if (method, path) in answered:
                status, schema = answered[method, path]
                responses[status] = {"description": "OK", "content": {"application/json": {"schema": schema}}}
            if (method, path) in MEDIA:
                status, media = MEDIA[method, path]
                responses[status] = {"description": "OK", "content": {media: {"schema": {"type": "string"}}}}
            if (method, path) in EMPTY:
                responses.pop("200", None)
                responses["204"] = {"description": "No Content"}
            if _owners(path):
                op["security"] = [{"owner": []}]
    return doc


def install_openapi(app: FastAPI) -> None:
    """``GET /api/openapi.json`` for the owner's scripts and the fuzzer; built once, on first use."""
    built: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not built:
            built.update(document(app))
        return built

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/api/openapi.json", include_in_schema=False, dependencies=[Depends(require_owner)])
    async def openapi_json() -> dict[str, Any]:
        return openapi()
