"""The typed event union (``contracts.ledger_events``) against a ledger written by today's code.

100,000 events of every kind (payloads drawn from each kind's own model, optional fields on and
off) are made with ``make_event``, decoded by the ledger writer's row decoder and committed by
the real SQLite store; every stored event read back loads as its kind's ``KindEvent``, dumps to
the very JSON that was stored, and gives back the same ``Event``. In process, no model.
"""

import json
import random
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import (
    PAYLOADS,
    Channel,
    Event,
    Message,
    Payload,
    ReminderChanged,
    ReminderDefined,
    TaskEvent,
    ToolCall,
    make_event,
)
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.ledger_events import GenericEvent, KindEvent, as_kind, load_event, typed_event
from delegate.ledger.rows import row_of
from delegate.ledger.store.sqlite import SqliteStore

from .event_samples import payload

EVENTS = 100_000
BATCH = 1000
VARIANTS = 24  # payloads drawn per kind; events pick among them
CHANNELS: tuple[Channel, ...] = ("text", "browser_voice", "phone", "sms", "email", "inner")
TASK_KINDS = ("task.created", "task.step.model", "task.step.tool", "task.finished", "task.failed")


def _ledger_of_today(rng: random.Random) -> list[Event]:
    pool: dict[str, list[Payload]] = {kind: [payload(m, rng) for _ in range(VARIANTS)] for kind, m in PAYLOADS.items()}
    pool.update({kind: [payload(TaskEvent, rng) for _ in range(VARIANTS)] for kind in TASK_KINDS})
    kinds = sorted(pool)
    start = utcnow()
    events = []
    conversation, span = new_id(), new_id()
    for n in range(EVENTS):
        kind = kinds[n] if n < len(kinds) else rng.choice(kinds)  # every kind at least once
        if rng.random() < 0.01:
            conversation, span = new_id(), new_id()
        elif rng.random() < 0.05:
            span = new_id()
        body = rng.choice(pool[kind])
        events.append(
            make_event(
                body,
                kind=kind if kind.startswith("task.") else None,
                conversation_id=conversation if rng.random() < 0.9 else None,
                span_id=span if rng.random() < 0.8 else None,
                channel=rng.choice(CHANNELS),
                role=rng.choice(("user", "assistant")) if kind == "message" or rng.random() < 0.1 else None,
                parent_id=new_id() if rng.random() < 0.3 else None,
                ts=start + timedelta(microseconds=n * 1000 + rng.randint(0, 999)),
            )
        )
    return events


async def _store(path: Path, events: list[Event]) -> list[str]:
    """Commit ``events`` as the ledger writer does; the stored events' JSON, in seq order."""
    store = SqliteStore(path)
    await store.open()
    try:
        for i in range(0, len(events), BATCH):
            await store.write([row_of(topics.LEDGER_APPEND_ANY.encode(e)) for e in events[i : i + BATCH]])
        stored: list[str] = []
        after = 0
        while True:
            page = await store.query(after_seq=after, limit=10_000)
            stored += [row.json() for row in page.rows]
            if not page.more:
                return stored
            after = page.rows[-1].seq
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~20 s of CPU; on two cores shared with a busy suite, minutes of wall time
async def test_every_event_of_a_100k_ledger_round_trips_through_the_typed_union(tmp_path: Path) -> None:
    written = _ledger_of_today(random.Random(28))
    stored = await _store(tmp_path / "ledger.sqlite", written)
    assert len(stored) == EVENTS

    kinds: Counter[str] = Counter()
    for n, text in enumerate(stored):
        typed = load_event(text)
        assert isinstance(typed, KindEvent), typed.kind
        expected = PAYLOADS.get(typed.kind, TaskEvent)
        assert type(typed.payload) is expected
        assert typed.model_dump_json() == text  # the stored JSON, byte for byte
        if n % 10 == 0:  # the plain Event back too (every tenth: the JSON above already is it)
            assert typed.to_event() == Event.model_validate_json(text)
        kinds[typed.kind] += 1
    assert set(kinds) == set(PAYLOADS) | set(TASK_KINDS)


def test_a_typed_event_reads_its_payload_as_its_model() -> None:
    event = make_event(Message(text="hi"), conversation_id="c", span_id="s", channel="sms", role="user")
    typed = as_kind(event, Message)
    assert typed.payload.text == "hi" and typed.channel == "sms"
    assert typed_event(event).model_dump_json() == event.model_dump_json()
    with pytest.raises(TypeError):
        as_kind(event, TaskEvent)


def test_an_event_answers_its_kind_by_model_and_gives_its_payload_only_as_that_model() -> None:
    event = make_event(Message(text="hi"), conversation_id="c", span_id="s", channel="sms", role="user")
    message = event.payload_as(Message)
    assert message is not None and message.text == "hi"
    assert event.is_kind(Message) and event.is_kind(ToolCall, Message) and not event.is_kind(ToolCall)
    assert event.payload_as(ToolCall) is None
    # A subclass's kind is not its base's: a reminder.changed is no reminder.set.
    changed = make_event(ReminderChanged(reminder_id="r", revision=2, spec={}), conversation_id=None,
                         span_id=None, channel="inner")
    assert changed.is_kind(ReminderChanged) and not changed.is_kind(ReminderDefined)
    task = make_event(TaskEvent(task_id="t"), kind="task.finished", conversation_id=None, span_id=None,
                      channel="inner")
    assert task.is_kind(TaskEvent) and task.payload_as(TaskEvent) == TaskEvent(task_id="t")
    # Built without validation from a newer writer's kind: no model claims it, nothing raises.
    newer = Event.model_construct(kind="weather.changed", payload={"sky": "grey"})
    assert not newer.is_kind(Message) and newer.payload_as(Message) is None


def test_an_unknown_kind_from_newer_code_loads_as_a_generic_event_and_keeps_its_json() -> None:
    doc: dict[str, Any] = {
        "id": "e1", "ts": "2026-12-06T09:30:00.000001Z", "seq": 7, "conversation_id": "c", "span_id": None,
        "kind": "weather.changed", "channel": "inner", "role": None, "parent_id": None,
        "payload": {"sky": "grey", "nested": {"n": [1, 2.5, None]}}, "fence": None,
    }
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    typed = load_event(text)
    assert isinstance(typed, GenericEvent)
    assert typed.payload == doc["payload"]
    assert typed.model_dump_json() == text


def test_a_known_kind_with_a_bad_payload_is_refused_not_loaded_as_generic() -> None:
    text = make_event(Message(text="hi"), conversation_id="c", span_id="s", channel="text", role="user")
    broken = text.model_dump_json().replace('"text":"hi"', '"text":7')
    with pytest.raises(ValueError):
        load_event(broken)
