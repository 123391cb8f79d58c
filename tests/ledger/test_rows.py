"""The writer's row decoder against the contract: it must accept, reject and store exactly as
``Event`` + ``insert_params`` do, only faster."""

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from delegate.contracts import topics
from delegate.contracts.events import (
    ContextUsage,
    ConversationOpened,
    Event,
    Fence,
    InnerSignal,
    Message,
    SpanClosed,
    SpanOpened,
    TaskEvent,
    TermStarted,
    ToolCall,
    make_event,
)
from delegate.ledger.rows import parse, row_of
from delegate.ledger.store.base import insert_params


def _reference(data: bytes) -> tuple[Any, ...]:
    return insert_params(topics.LEDGER_APPEND_ANY.decode(data))


def _wire(event: Event) -> dict[str, Any]:
    wire: dict[str, Any] = json.loads(topics.LEDGER_APPEND_ANY.encode(event))
    return wire


def _same(doc: dict[str, Any] | bytes) -> None:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    try:
        expected = _reference(data)
    except (ValidationError, ValueError) as exc:
        with pytest.raises(type(exc)):
            row_of(data)
        return
    _equal(row_of(data), expected)


def _equal(row: tuple[Any, ...], expected: tuple[Any, ...]) -> None:
    """Equal rows; the payload as JSON (its keys come in the model's order, not the sender's)."""
    assert row[:-1] == expected[:-1]
    assert json.loads(row[-1]) == json.loads(expected[-1])


SAMPLES = [
    make_event(ConversationOpened(), conversation_id="c", span_id=None, channel="text"),
    make_event(SpanOpened(type="interaction"), conversation_id="c", span_id="s", channel="text"),
    make_event(SpanClosed(reason="idle", summary="done"), conversation_id="c", span_id="s", channel="text"),
    make_event(Message(text="hi", client_msg_id="k1"), conversation_id="c", span_id="s", channel="text", role="user"),
    make_event(Message(text="yo", response_id="r", meta={"a": [1, 2.5, None]}), conversation_id="c",
               span_id="s", channel="sms", role="assistant", parent_id="p"),
    make_event(ToolCall(call_id="x", name="notes", arguments={"q": "é ✓"}), conversation_id="c", span_id="s",
               channel="text"),
    make_event(ContextUsage(input_tokens=5, total_tokens=9), conversation_id="c", span_id=None, channel="text"),
    make_event(InnerSignal(source="s", type="t", priority=2), conversation_id=None, span_id=None, channel="inner"),
    make_event(TermStarted(term_id="a", type="agent", holder="h"), conversation_id=None, span_id=None,
               channel="inner"),
    make_event(TaskEvent(task_id="t1", data={"x": 1}), kind="task.created", conversation_id=None, span_id=None,
               channel="inner"),
]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.kind)
def test_valid_events_give_the_same_row(event: Event) -> None:
    data = topics.LEDGER_APPEND_ANY.encode(event)
    assert row_of(data) == _reference(data)


def _variants(event: Event) -> list[dict[str, Any]]:
    base = _wire(event)
    out = []
    for change in (
        {"ts": "2026-13-01T00:00:00.000000Z"},  # canonical pattern, impossible month
        {"ts": "2026-01-01T02:00:00.000001+02:00"},  # another offset: stored as UTC
        {"ts": "2026-01-01T00:00:00Z"},  # no microseconds
        {"ts": "2026-01-01T00:00:00.000000"},  # naive
        {"kind": "nope"},
        {"kind": "task."},
        {"role": None},
        {"role": "system"},
        {"channel": "fax"},
        {"id": ""},
        {"id": "x" * 65},
        {"surprise": 1},
        {"seq": "seven"},
        {"conversation_id": 5},
    ):
        out.append({**base, **change})
    payload = dict(base.get("payload", {}))
    out.append({**base, "payload": {**payload, "surprise": True}})
    out.append({k: v for k, v in base.items() if k != "payload"})
    out.append({**base, "payload": {k: v for k, v in payload.items() if k != "text"}})
    return out


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.kind)
def test_altered_events_are_accepted_or_refused_alike(event: Event) -> None:
    for doc in _variants(event):
        _same(doc)


def test_payload_keys_in_any_order_store_the_same_payload() -> None:
    _same(b'{"id":"o1","ts":"2026-01-01T00:00:00.000000Z","kind":"message","role":"user",'
          b'"payload":{"meta":{"z":1,"a":2},"text":"x"}}')


def test_a_kind_read_from_the_wrong_place_still_stores_the_events_own() -> None:
    """The kind is read from the bytes before validation (each kind's validator is built at its
    first event): a payload's own "kind" ahead of the envelope's, a spelling with spaces, a
    kind with no validator here, and a kind that is no kind at all decide as Event does."""
    _same(b'{"payload":{"text":"x","meta":{"kind":"span.opened"}},"id":"k1",'
          b'"ts":"2026-01-01T00:00:00.000000Z","kind":"message","role":"user"}')
    _same(b'{"id":"k2", "ts": "2026-01-01T00:00:00.000000Z", "kind": "message", "role": "user",'
          b' "payload": {"text": "x"}}')
    _same(b'{"id":"k3","ts":"2026-01-01T00:00:00.000000Z","kind":"task.created","payload":{}}')
    _same(b'{"id":"k4","ts":"2026-01-01T00:00:00.000000Z","kind":"no.such\\"kind","payload":{}}')
    _same(b'{"id":"k5","ts":"2026-01-01T00:00:00.000000Z","kind":"\xff\xfe","payload":{}}')


def test_a_nan_in_a_payload_is_refused_alike() -> None:
    _same(b'{"id":"n1","ts":"2026-01-01T00:00:00.000000Z","kind":"message","role":"user",'
          b'"payload":{"text":"x","meta":{"v":NaN}}}')


def test_broken_json_is_refused() -> None:
    for data in (b"", b"{", b"[]", b"null", b'{"id": "a"', b"\xff\xfe"):
        with pytest.raises(ValidationError):
            row_of(data)


texts = st.text(max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from([e.kind for e in SAMPLES] + ["task.done", "unknown"]),
    role=st.sampled_from([None, "user", "assistant", "robot"]),
    channel=st.sampled_from(["text", "inner", "sms", "fax"]),
    payload=st.dictionaries(
        st.sampled_from(["text", "type", "reason", "task_id", "input_tokens", "call_id", "name", "meta",
                         "term_id", "holder", "source", "extra"]),
        json_values, max_size=4,
    ),
    shift=st.integers(-14 * 60, 14 * 60),
    micro=st.integers(0, 999_999),
)
def test_random_events_are_accepted_or_refused_alike(
    kind: str, role: str | None, channel: str, payload: dict[str, Any], shift: int, micro: int
) -> None:
    ts = datetime(2026, 3, 1, 12, 0, 0, micro, tzinfo=UTC).astimezone(timezone(timedelta(minutes=shift)))
    doc = {"id": "e1", "ts": ts.isoformat(), "kind": kind, "channel": channel, "role": role, "payload": payload}
    _same(doc)
    if shift == 0:
        _same({**doc, "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")})


def test_the_fence_is_validated_and_handed_back_beside_the_row() -> None:
    event = SAMPLES[0].model_copy(update={"fence": Fence(singleton="agent", token=7)})
    data = topics.LEDGER_APPEND_ANY.encode(event)
    assert parse(data) == (_reference(data), Fence(singleton="agent", token=7))
    assert parse(topics.LEDGER_APPEND_ANY.encode(SAMPLES[0]))[1] is None
    # The slow path (a task kind) keeps it too.
    task = SAMPLES[-1].model_copy(update={"fence": Fence(singleton="voice", token=1)})
    assert parse(topics.LEDGER_APPEND_ANY.encode(task))[1] == Fence(singleton="voice", token=1)
    for bad in ({"singleton": "agent", "token": 0}, {"singleton": "gateway", "token": 1},
                {"singleton": "agent", "token": 2**63}, {"singleton": "agent", "token": 1, "extra": 1}):
        doc = _wire(SAMPLES[0]) | {"fence": bad}
        with pytest.raises(ValidationError):
            parse(json.dumps(doc).encode())
