"""Ledger events with typed payloads: a discriminated union by ``kind``.

``Event`` is the wire and storage envelope (``payload`` a dict, checked against its kind's
model). ``typed_event`` turns one into a ``KindEvent[P]`` whose ``payload`` is the ``P`` of its
kind (``KindEvent[Message]`` for a ``message``), so code reads fields, not dict keys, and mypy
checks them. A kind this code does not know (written by a newer version) loads as a
``GenericEvent`` with the dict payload, instead of failing.

Nothing about storage changes: ``to_event`` gives back the ``Event`` it came from, its payload
dumped with exactly the keys that were stored (``exclude_unset``), so a typed round trip leaves
every stored event's JSON as it was.
"""

from functools import cache
from typing import Annotated, Any, Generic, TypeVar, Union

from pydantic import Discriminator, Field, Tag, TypeAdapter, field_serializer

from .events import PAYLOADS, Event, EventFields, Fence, Payload, TaskEvent

P = TypeVar("P", bound=Payload)

# The union's tag of an event: its kind when known, one tag for every ``task.*`` kind.
TASK_TAG = "task.*"
UNKNOWN_TAG = "unknown"


class _Envelope(EventFields):
    """``EventFields``, built when the union is (``ledger_event_adapter``), with the way back to ``Event``."""

    def to_event(self) -> Event:
        """The plain ``Event``: the same fields, the payload as the dict that was stored."""
        return Event.model_validate(self.model_dump(mode="json"))


class KindEvent(_Envelope, Generic[P]):
    """An event of a known kind: ``payload`` is that kind's model."""

    payload: P
    fence: Fence | None = None

    @field_serializer("payload")
    def _payload_as_stored(self, payload: P) -> dict[str, Any]:
        # Only the keys the stored payload had: defaults added on load are not written back.
        return payload.model_dump(mode="json", exclude_unset=True)


class GenericEvent(_Envelope):
    """An event of a kind this code does not know (a newer writer's): its payload stays a dict."""

    payload: dict[str, Any] = Field(default_factory=dict)
    fence: Fence | None = None


def event_tag(value: Any) -> str:
    """The union member an event (a dict or a model) belongs to."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    if not isinstance(kind, str):
        return UNKNOWN_TAG
    if kind in PAYLOADS:
        return kind
    if kind.startswith("task.") and len(kind) > len("task."):
        return TASK_TAG
    return UNKNOWN_TAG


def _members() -> tuple[Any, ...]:
    known = [Annotated[KindEvent[model], Tag(kind)] for kind, model in PAYLOADS.items()]  # type: ignore[valid-type]
    return (*known, Annotated[KindEvent[TaskEvent], Tag(TASK_TAG)], Annotated[GenericEvent, Tag(UNKNOWN_TAG)])


# Written out for the type checker as what it is to a reader: a typed event of some kind, or a
# generic one. The runtime union has one member per kind (``PAYLOADS``), chosen by ``event_tag``.
AnyLedgerEvent = KindEvent[Any] | GenericEvent


@cache
def ledger_event_adapter() -> TypeAdapter[AnyLedgerEvent]:
    """The union's validator, built on first use: its ~60 models cost most of a second to make,
    which importing ``contracts`` (every service, at start) must not pay."""
    union = Annotated[Union[_members()], Discriminator(event_tag)]  # type: ignore[valid-type]  # noqa: UP007
    return TypeAdapter(union)  # type: ignore[arg-type]


def typed_event(event: Event) -> AnyLedgerEvent:
    """``event`` with its payload as its kind's model (a ``GenericEvent`` for an unknown kind)."""
    return ledger_event_adapter().validate_python(event.model_dump(mode="json"))


def load_event(data: bytes | str) -> AnyLedgerEvent:
    """A stored or published event's JSON, typed; an unknown kind loads as a ``GenericEvent``."""
    return ledger_event_adapter().validate_json(data)


def as_kind(event: Event | AnyLedgerEvent, model: type[P]) -> KindEvent[P]:
    """``event`` as a ``KindEvent[model]``; raises ``TypeError`` when its kind has another payload."""
    typed = typed_event(event) if isinstance(event, Event) else event
    if not isinstance(typed, KindEvent) or not isinstance(typed.payload, model):
        raise TypeError(f"{event.kind} event has no {model.__name__} payload")
    return typed
