"""Raw event bytes to the row the ledger inserts, validated as ``Event`` validates them.

``Event`` checks its payload against the kind's model in a Python validator after the
envelope is parsed; for the ledger, which validates every event it stores, that was a
third of the work. Here the same rules are one discriminated union (one envelope model
per kind, its ``kind`` a literal and its ``payload`` the kind's model), checked entirely
inside pydantic-core. The union is generated from ``Event``'s own fields and ``PAYLOADS``,
so it cannot drift from them; anything it does not accept (``task.*`` kinds, every
invalid event) goes through ``Event`` itself, which decides and words the error.

The stored payload is the validated one with only the fields that were sent, so a
payload keeps its shape ("as sent"), in the model's field order. The envelope's ``fence``
is validated too and handed back beside the row (``parse``): the writer judges it, and the
row does not keep it.
"""

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError, create_model

from delegate.contracts.events import PAYLOADS, Event, Fence, Message, Role

from .store.base import Row, insert_params

# The timestamp as producers write it (format_ts): kept as text, so it is neither parsed nor
# formatted again. Any other spelling of an aware time goes the Event way and is reformatted.
CANONICAL_TS = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"
_ENVELOPE: dict[str, Any] = {
    name: (info.annotation, info) for name, info in Event.model_fields.items() if name not in ("kind", "payload")
}
_ENVELOPE["ts"] = (Annotated[str, StringConstraints(pattern=CANONICAL_TS)], ...)


class _Strict(BaseModel):
    # Deferred: a member is only ever validated inside the union (_FAST), which builds its schema
    # there; built at its creation too, each member had a validator and serializer never used.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


# The envelope's fields are collected once, here, and inherited by every member, rather than
# each member's own copy processed again (a quarter of building these validators).
_Envelope = create_model("StoredEnvelope", __base__=_Strict, **_ENVELOPE)


def _member(kind: str, payload: type[BaseModel]) -> type[BaseModel]:
    fields: dict[str, Any] = {"kind": (Literal[kind], ...)}
    fields["payload"] = (payload, Field(default_factory=dict, validate_default=True))
    if payload is Message:  # Event's rule: a message has a role
        fields["role"] = (Role, ...)
    return create_model(f"Stored_{kind.replace('.', '_')}", __base__=_Envelope, **fields)


_KINDS = {kind: _member(kind, model) for kind, model in PAYLOADS.items()}
_FAST: TypeAdapter[Any] = TypeAdapter(
    Annotated[  # type: ignore[arg-type]  # a Union built at run time: mypy cannot see its members
        Union[tuple(_KINDS.values())],  # noqa: UP007
        Field(discriminator="kind"),
    ]
)
_VALIDATE = _FAST.validator.validate_json  # TypeAdapter.validate_json minus its Python wrapper (~8% of this)
# Event's own validator (what the ledger's topic adapter wraps), not the topics module: that
# imports every contract, which the writer process never uses.
_EVENT = Event.model_validate_json


def row_of(data: bytes) -> Row:
    """The row for one serialized event (``insert_params`` of it as an ``Event``); raises
    ``ValidationError`` as ``Event`` would."""
    return parse(data)[0]


def parse(data: bytes) -> tuple[Row, Fence | None]:
    """``row_of``, and the event's fence (None when it carries none)."""
    if (b"N" in data and b"NaN" in data) or (b"I" in data and b"Infinity" in data):
        # pydantic reads those bare words, and would write them back as null: insert_params
        # refuses them instead (strict JSON is stored). Rare, so the slow way decides. A capital
        # letter is found by memchr, a word by a slower search: most events need only the first.
        return _slow(data)
    try:
        event = _VALIDATE(data)
    except ValidationError:
        return _slow(data)
    try:
        datetime.fromisoformat(event.ts)  # the pattern admits month 13; the calendar does not
    except ValueError:
        return _slow(data)
    payload = event.payload
    text = payload.__pydantic_serializer__.to_json(payload, exclude_unset=True).decode()
    cmid = payload.client_msg_id if isinstance(payload, Message) else None
    row = (
        event.id, event.ts, event.conversation_id, event.span_id, event.kind, event.channel,
        event.role, event.parent_id, cmid, text,
    )
    return row, event.fence


def _slow(data: bytes) -> tuple[Row, Fence | None]:
    event = _EVENT(data)
    return insert_params(event), event.fence
