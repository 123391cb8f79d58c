"""Requests and Realtime client events checked against OpenAI's spec, as strictly as the API:
a schema error first (wrong type, out of range, missing, not a supported value), then any
parameter the API does not know. `None` means the API would take it."""

import logging
from typing import Any

from delegate.openai_standin.openapi import Schema, Spec, spec
from delegate.openai_standin.refusals import Refusal, refusal, unknown_parameter
from delegate.openai_standin.unknown_params import unknown_param

log = logging.getLogger(__name__)


def check_body(operation: str, body: Any, schemas: Spec | None = None) -> Refusal | None:
    """`operation` is one of `Spec.bodies` (`responses.create`, `responses.compact`, ...)."""
    schemas = schemas or spec()
    return _check(schemas, schemas.bodies[operation], body)


def check_event(event: dict[str, Any], schemas: Spec | None = None) -> Refusal | None:
    """A client event whose `type` the spec lists; other types are the caller's to refuse."""
    schemas = schemas or spec()
    schema = schemas.events.get(str(event.get("type")))
    return None if schema is None else _check(schemas, schema, event)


def _check(schemas: Spec, schema: Schema, value: Any) -> Refusal | None:
    if schemas.accepts(schema, value):
        return None
    error = schemas.first_error(schema, value)
    if error is not None:
        return refusal(error)
    unknown = unknown_param(schemas, schema, value)
    if unknown is None:  # the two readings disagree: a bug here, not the client's
        log.error("the closed schema refused what the walk accepts: %.500s", value)
        return None
    return unknown_parameter(unknown)
