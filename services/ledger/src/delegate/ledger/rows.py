"""Raw event bytes to the row the ledger inserts, validated as ``Event`` validates them.

``Event`` checks its payload against the kind's model in a Python validator after the
envelope is parsed; for the ledger, which validates every event it stores, that was a
third of the work. Here the same rules are one discriminated union (one envelope model
per kind, its ``kind`` a literal and its ``payload`` the kind's model), checked entirely
inside pydantic-core. The members are generated from ``Event``'s own fields and ``PAYLOADS``,
so they cannot drift from them; anything they do not accept (``task.*`` kinds, every
invalid event) goes through ``Event`` itself, which decides and words the error.

Each kind's validator is built the first time an event of that kind comes, not all of them
when the module is imported: building the union of every kind took ~90 ms of a writer
process's start (a third of it), and a writer meets a handful of kinds. The kind is read from
the bytes as our producers write it (``"kind":"message"``); a guess that is wrong (the words
inside a payload, a spelling with spaces) only fails that member's literal ``kind``, and the
event goes the ``Event`` way.

The stored payload is the validated one with only the fields that were sent, so a
payload keeps its shape ("as sent"), in the model's field order. The envelope's ``fence``
is validated too and handed back beside the row (``parse``): the writer judges it, and the
row does not keep it.
"""

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

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
    # Deferred: a member is only ever validated through its TypeAdapter (_validator), which
    # builds its schema; built at its creation too, each had a validator and serializer never used.
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


_KIND = b'"kind":"'
_VALIDATORS: dict[bytes, Callable[[bytes], Any]] = {}  # one per kind met, never more than PAYLOADS


def _validator(data: bytes) -> Callable[[bytes], Any] | None:
    """The validator of the kind ``data`` names, built at its first event; None for a kind
    without one here (``task.*``, unknown, unreadable)."""
    start = data.find(_KIND)
    if start < 0:
        return None
    start += len(_KIND)
    kind = data[start:data.find(b'"', start)]
    found = _VALIDATORS.get(kind)
    if found is None:
        model = PAYLOADS.get(kind.decode("utf-8", "replace"))
        if model is None:
            return None
        # TypeAdapter.validate_json minus its Python wrapper (~8% of the validation)
        found = _VALIDATORS[kind] = TypeAdapter(_member(kind.decode(), model)).validator.validate_json
    return found


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
    validate = _validator(data)
    if validate is None:
        return _slow(data)
    try:
        event = validate(data)
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
